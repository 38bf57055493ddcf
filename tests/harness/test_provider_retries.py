"""The Harness's retry policy and timeouts against a real provider on 127.0.0.1 that fails
as told (aiohttp, below): each case asserts the requests the provider received and the
settlement the Turn got.

Cases (the default policy unless said: 3 attempts, back-off 1 s doubling, Retry-After up
to 30 s; waits take no time, on a ``NoWaitClock``, except where a sweep must cut one):
- 500 to every request: 3 requests, ``failed``, the message counting them;
- 500, 502, then an answer: 3 requests, ``completed`` with the answer's text;
- 429 with ``Retry-After: 1``, then an answer: 2 requests, the wait is the 1 s asked;
- 429 with ``Retry-After: 120`` (beyond the 30 s ceiling): 1 request, ``failed`` at once,
  saying what was asked and what kubeturn waits; a provider whose ceiling is higher
  waits it;
- 400: 1 request, ``failed``, not retried;
- a stream that stalls (headers, then nothing; or one chunk, then nothing) with
  ``idleSeconds: 0.2``: 3 requests, ``failed`` saying the provider sent nothing;
- a provider nobody listens on: ``failed`` after 3 attempts, saying it was not reached;
- a sweep during a 20 s back-off (a real wait): the Turn settles at once, and the
  provider gets no further request.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from kubeturn_harness.clock import SystemClock
from tests.harness.support import NoWaitClock, StartWorld, World, script

Fault = Callable[[web.Request], Awaitable[web.StreamResponse]]
RELEASED = web.AppKey("released", asyncio.Event)
"""Set when the test ends: a stalled answer ends then, leaving no task behind."""


def status(code: int, **headers: str) -> Fault:
    async def answer(request: web.Request) -> web.StreamResponse:
        body = {"error": {"message": f"fault {code}", "type": "test", "param": None}}
        return web.json_response(body, status=code, headers=headers)

    return answer


def stall(*, first: str | None = None) -> Fault:
    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if first is not None:
            await response.write(_sse(_chunk({"role": "assistant", "content": first})))
        await request.app[RELEASED].wait()
        return response

    return answer


async def ok(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(_sse(_chunk({"role": "assistant", "content": "all good"})))
    await response.write(_sse(_chunk({}, finish="stop")))
    usage = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    await response.write(_sse({**_chunk({}), "choices": [], "usage": usage}))
    await response.write(b"data: [DONE]\n\n")
    return response


def _chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"} | {
        "choices": [choice]
    }


def _sse(data: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


@dataclass
class Provider:
    """Answers the n-th request with the n-th fault (the last one again after that)."""

    faults: list[Fault]
    received: int = 0
    url: str = ""
    runner: web.AppRunner | None = field(default=None, repr=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        fault = self.faults[min(self.received, len(self.faults) - 1)]
        self.received += 1
        return await fault(request)


@pytest.fixture
async def provider() -> AsyncIterator[Callable[..., Awaitable[Provider]]]:
    runners: list[web.AppRunner] = []
    released = asyncio.Event()

    async def start(*faults: Fault) -> Provider:
        served = Provider(list(faults))
        app = web.Application()
        app[RELEASED] = released
        app.router.add_post("/v1/chat/completions", served.chat)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        served.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        return served

    yield start
    released.set()
    for runner in runners:
        await runner.cleanup()


IID = "iid-1"


async def turn(w: World) -> dict[str, object]:
    sid = await w.harness.admit(IID, "review")
    return await w.harness.settlement(IID, sid)


def where(url: str) -> str:
    return f"provider 'scripted' ({url}), model 'any'"


def message(settled: dict[str, object]) -> str:
    error = settled["error"]
    assert isinstance(error, dict)
    return str(error["message"])


UNUSED = script("never", {"text": "unused"})


async def test_500_every_time_fails_after_3_requests(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(500))
    clock = NoWaitClock()
    w = await world(UNUSED, orchestrated=False, provider_url=p.url, model_clock=clock)
    settled = await turn(w)
    assert (settled["outcome"], p.received) == ("failed", 3)
    assert re.fullmatch(
        re.escape(f"{where(p.url)} answered HTTP 500 (server error) to 3 requests over ")
        + r"\d+\.\d s; "
        + re.escape("kubeturn makes 3 attempts (retry.attempts): fault 500"),
        message(settled),
    ), message(settled)
    assert len(clock.slept) == 2
    assert 0.5 <= clock.slept[0] <= 1
    assert 1 <= clock.slept[1] <= 2


async def test_5xx_then_an_answer_completes(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(500), status(502), ok)
    w = await world(UNUSED, orchestrated=False, provider_url=p.url)
    settled = await turn(w)
    assert (settled["outcome"], p.received) == ("completed", 3)
    assert settled["usage"] == {
        "promptTokens": 7,
        "completionTokens": 2,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
        "cost": None,
    }


async def test_429_with_a_short_retry_after_waits_it(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(429, **{"Retry-After": "1"}), ok)
    clock = NoWaitClock()
    w = await world(UNUSED, orchestrated=False, provider_url=p.url, model_clock=clock)
    settled = await turn(w)
    assert (settled["outcome"], p.received, clock.slept) == ("completed", 2, [1.0])


async def test_429_with_a_retry_after_beyond_the_ceiling_fails_at_once(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(429, **{"Retry-After": "120"}), ok)
    clock = NoWaitClock()
    w = await world(UNUSED, orchestrated=False, provider_url=p.url, model_clock=clock)
    settled = await turn(w)
    assert (settled["outcome"], p.received, clock.slept) == ("failed", 1, [])
    assert message(settled) == (
        f"{where(p.url)} answered HTTP 429 (rate limited) to 1 request; it asked to wait "
        "120 s, more than the 30 s kubeturn waits (retry.maxRetryAfterSeconds): fault 429"
    )


async def test_a_higher_ceiling_waits_a_long_retry_after(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(429, **{"retry-after-ms": "120000"}), ok)
    clock = NoWaitClock()
    w = await world(
        UNUSED,
        orchestrated=False,
        provider_url=p.url,
        provider="retry: {maxRetryAfterSeconds: 150}",
        model_clock=clock,
    )
    settled = await turn(w)
    assert (settled["outcome"], p.received, clock.slept) == ("completed", 2, [120.0])


async def test_400_is_not_retried(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(400), ok)
    w = await world(UNUSED, orchestrated=False, provider_url=p.url)
    settled = await turn(w)
    assert (settled["outcome"], p.received) == ("failed", 1)
    assert message(settled) == (
        f"{where(p.url)} answered HTTP 400 (bad request) to 1 request, which kubeturn does "
        "not retry: fault 400"
    )


@pytest.mark.parametrize("first", [None, "thinking"], ids=["before-any-chunk", "after-one"])
async def test_a_stalled_stream_fails_within_the_idle_timeout_per_attempt(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]], first: str | None
) -> None:
    p = await provider(stall(first=first))
    w = await world(
        UNUSED, orchestrated=False, provider_url=p.url, provider="timeouts: {idleSeconds: 0.2}"
    )
    settled = await turn(w)
    assert (settled["outcome"], p.received) == ("failed", 3)
    assert re.fullmatch(
        re.escape(f"{where(p.url)} sent nothing for 0.2 s (timeouts.idleSeconds) in 3 requests")
        + r" over \d+\.\d s; kubeturn makes 3 attempts \(retry\.attempts\)",
        message(settled),
    ), message(settled)


async def test_a_provider_nobody_listens_on_is_not_reached(world: StartWorld) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    w = await world(UNUSED, orchestrated=False, provider_url=url)
    settled = await turn(w)
    assert settled["outcome"] == "failed"
    assert message(settled).startswith(
        f"{where(url)} could not be reached or dropped the connection in 3 requests over "
    ), message(settled)


async def test_a_sweep_cuts_a_back_off_and_no_further_request_is_made(
    world: StartWorld, provider: Callable[..., Awaitable[Provider]]
) -> None:
    p = await provider(status(503, **{"Retry-After": "20"}), ok)
    w = await world(UNUSED, orchestrated=False, provider_url=p.url, model_clock=SystemClock())
    sid = await w.harness.admit(IID, "review")
    async with asyncio.timeout(10):
        while p.received < 1:
            await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    swept_at = loop.time()
    await w.harness.abort(IID, {"cause": "pick", "submissionId": sid})
    settled = await w.harness.settlement(IID, sid, timeout=5)
    assert loop.time() - swept_at < 5  # not the 20 s the provider asked for
    assert settled["outcome"] == "ended"
    await asyncio.sleep(0.2)
    assert p.received == 1
