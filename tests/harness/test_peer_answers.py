"""The Harness reading its peers' answers when they are not what the wire says: nested
200,000 deep, or holding numbers JSON does not have. Each is translated where the
Harness translates that peer's errors (``OrchestratorClient``, ``OpenAIModels``), never
``RecursionError``.

Cases, for answers nested 200,000 deep (arrays and objects):
- a surface read answered so: ``MenuUnreadable`` (the Submission fails saying the Menu
  did not parse);
- a pick answered so: 200 and 409 are ``Lost`` (the receipt or refusal did not parse:
  whether the pick arrived is unknown), 5xx ``Lost`` with the start of its text, another
  4xx ``Rejected`` with the start of its text (and an error body holding ``NaN`` too);
- a delivery poll answered so: ``PollFailed`` (it is polled again);
- a model provider streaming a chunk so: ``ProviderFailure`` naming the provider (the
  Submission settles ``failed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from kubeturn_harness.errors import MenuUnreadable, PollFailed, ProviderFailure
from kubeturn_harness.models import ModelRequest, Partial
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.orchestrator import Lost, OrchestratorClient, Rejected
from kubeturn_harness.providers import ModelName, Provider, ProviderSpec
from kubeturn_harness.wire import DeliveryId
from tests.harness.support import streamed_completions

DEEP = 200_000
NESTED = [b"[" * DEEP + b"]" * DEEP, b'{"a":' * DEEP + b"1" + b"}" * DEEP]
IDS = ["arrays", "objects"]
IID = "default.review-1/review/reviewer"


@contextlib.asynccontextmanager
async def orchestrator(status: int, body: bytes) -> AsyncIterator[OrchestratorClient]:
    """A client of a server on 127.0.0.1 answering every request with ``status``, ``body``."""

    async def handler(_: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = OrchestratorClient(f"http://127.0.0.1:{runner.addresses[0][1]}", "token")
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


@pytest.mark.parametrize("body", NESTED, ids=IDS)
async def test_a_surface_it_cannot_read_makes_the_menu_unreadable(body: bytes) -> None:
    async with orchestrator(200, body) as client:
        with pytest.raises(MenuUnreadable, match=r"^the Menu did not parse: "):
            await client.surface(IID)


@pytest.mark.parametrize("body", NESTED, ids=IDS)
@pytest.mark.parametrize("status", [200, 409, 503])
async def test_a_pick_answer_it_cannot_read_is_lost(status: int, body: bytes) -> None:
    async with orchestrator(status, body) as client:
        answer = await client.pick(IID, "review_verdict", {"verdict": "ok"}, "k1")
    assert isinstance(answer, Lost)


@pytest.mark.parametrize(
    "body", [*NESTED, b'{"error": "invalid", "message": NaN}'], ids=[*IDS, "NaN"]
)
async def test_a_refusal_it_cannot_read_is_rejected_with_its_text(body: bytes) -> None:
    async with orchestrator(400, body) as client:
        answer = await client.pick(IID, "review_verdict", {"verdict": "ok"}, "k1")
    assert answer == Rejected(body.decode()[:500])


@pytest.mark.parametrize("body", NESTED, ids=IDS)
async def test_a_delivery_answer_it_cannot_read_fails_the_poll(body: bytes) -> None:
    async with orchestrator(200, body) as client:
        with pytest.raises(PollFailed):
            await client.poll(IID, DeliveryId("d1"))


@pytest.mark.parametrize("body", NESTED, ids=IDS)
async def test_a_model_chunk_it_cannot_read_is_a_provider_failure(body: bytes) -> None:
    models = OpenAIModels()
    async with streamed_completions(body) as url:
        model = ModelName(Provider("deep", ProviderSpec(baseUrl=url)), "any")
        request = ModelRequest(model, [{"role": "user", "content": "Hi."}], [], None)
        try:
            with pytest.raises(ProviderFailure) as failed:
                await models.complete(request, Partial())
        finally:
            await models.close()
    assert failed.value.message == (
        f"provider 'deep' ({url}), model 'any' answered JSON nested too deep to read"
    )
