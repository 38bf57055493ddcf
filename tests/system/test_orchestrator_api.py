"""The Orchestrator API as Harnesses call it, against a live Run.

Cases:
- auth: no token or an unknown token is 401; a token of another Workspace may not
  address this Run's Instance IDs (403); ``/openapi.json`` and ``/healthz`` are open;
- a Workspace has one token: one set anew (its Secret made anew) is the only one from the
  next request on, the old one 401 (ADR 0038);
- ``GET …/surface`` of a live Turn: its Menu (names, descriptions, schemas), the allowed
  picks and its cwd; an Instance ID with no live Turn is 404;
- ``POST …/events``: a payload that does not fit the schema is 422 naming ``payload``;
  an event the Turn's state does not handle is 409 ``not-allowed`` with the allowed list;
  a body without a string ``type`` is 400;
- bodies it cannot read, on a live Turn's pick: arrays or objects nested 200,000 deep
  (within 1 MiB),
  ``NaN``, ``Infinity``, ``-Infinity``, a number beyond a double, text that is not JSON
  (400, naming the field or the body) and a body over 1 MiB (413) are answered with a
  JSON error body and deliver nothing (the Machine stays where it was); the routes that
  take no body (surface, deliveries) answer as they do without one;
- ``GET …/deliveries/{id}``: an outstanding pick's poll parks and answers 204, then the
  answer once the work is done, and the same answer again (a repeated poll is safe); an
  unknown delivery is 404;
- a pick sent again with its ``Idempotency-Key`` is answered with the first receipt (the
  same delivery id) and delivers nothing more; a key over 200 characters is 400 naming
  the header; a closed Run actor (its operator stopping) answers 503, never 404.
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web

from kubeturn.orchestrator import api
from tests.harness.support import script
from tests.system.conftest import StartSystem
from tests.system.support import MACHINES, WORKSPACE, WORKSPACE_TOKEN, System, token_digest

HELD = "Make the tests pass."
DEEP = 200_000
NOT_FINITE = "is not a finite number: JSON has no NaN or Infinity, and a number must fit a double"
TOO_DEEP = {"error": "invalid", "message": "the body nests deeper than 64 levels"}


async def _get(
    world: System, path: str, token: str | None = WORKSPACE_TOKEN, *, base: str | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with world.session.get(f"{base or world.api_url}{path}", headers=headers) as response:
        body = await response.json() if response.status != 204 else None
        return response.status, body


async def _live(world: System) -> str:
    await world.wait_held(HELD)
    (turn,) = world.core.live_turns()
    return turn.instanceId


async def _held_run(system: StartSystem) -> System:
    world = await system(script(HELD, {"text": "Working", "hold": True}))
    await world.start_run(MACHINES / "exec-pick.yaml")
    return world


def _agents(iid: str, *rest: str) -> str:
    return "/".join(["/agents", quote(iid, safe=""), *rest])


async def test_a_request_without_a_known_token_is_401(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    assert (await _get(world, _agents(iid, "surface"), None))[0] == 401
    assert (await _get(world, _agents(iid, "surface"), "not-a-token"))[0] == 401
    assert (await _get(world, "/healthz", None))[0] == 200
    status, document = await _get(world, "/openapi.json", None)
    assert status == 200
    assert {"Surface", "Receipt", "Refusal"} <= set(document["components"]["schemas"])


async def test_another_workspaces_token_is_403(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    world.registry.set_token("another-workspace", "another-token")
    status, body = await _get(world, _agents(iid, "surface"), "another-token")
    assert status == 403
    assert iid in body["message"]


async def test_a_token_set_anew_is_the_workspaces_only_one(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    assert (await _get(world, _agents(iid, "surface")))[0] == 200

    world.registry.set_token(WORKSPACE, "rotated-token")
    status, body = await _get(world, _agents(iid, "surface"))
    assert (status, body["error"]) == (401, "unauthorized")
    assert (await _get(world, _agents(iid, "surface"), "rotated-token"))[0] == 200
    assert world.registry.tokens == {WORKSPACE: token_digest("rotated-token")}


async def test_the_surface_of_a_live_turn_and_of_none(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    status, surface = await _get(world, _agents(iid, "surface"))
    assert status == 200
    assert [item["name"] for item in surface["menu"]] == ["run_tests", "finish"]
    assert surface["menu"][0]["description"] == "Run the test suite; the answer is its output."
    assert surface["allowed"] == ["run_tests", "finish"]
    assert surface["cwd"] == str(world.worktree("target"))
    assert (await _get(world, _agents("default.nobody/root/coder", "surface")))[0] == 404


async def test_picks_that_do_not_fit_are_refused_naming_why(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    status, refused = await world.pick(iid, "deploy")
    assert status == 409
    assert refused["refused"] == "not-allowed"
    assert refused["allowed"] == ["run_tests", "finish"]
    headers = {"Authorization": f"Bearer {WORKSPACE_TOKEN}"}
    async with world.session.post(
        f"{world.api_url}{_agents(iid, 'events')}", json={"verdict": 1}, headers=headers
    ) as response:
        assert response.status == 400
        assert (await response.json())["field"] == "type"
    assert world.state == "coding.editing"


def _not_finite(field: str) -> dict[str, str]:
    return {"error": "invalid", "field": field, "message": f"{field} {NOT_FINITE}"}


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        pytest.param(b"[" * DEEP + b"]" * DEEP, 400, TOO_DEEP, id="arrays-200000-deep"),
        pytest.param(b'{"":' * DEEP + b"1" + b"}" * DEEP, 400, TOO_DEEP, id="objects-200000-deep"),
        pytest.param(b'{"type": "run_tests", "n": NaN}', 400, _not_finite("n"), id="NaN"),
        pytest.param(b'{"type": "run_tests", "n": Infinity}', 400, _not_finite("n"), id="Infinity"),
        pytest.param(
            b'{"type": "run_tests", "n": [-Infinity]}', 400, _not_finite("n.0"), id="-Infinity"
        ),
        pytest.param(b'{"type": "run_tests", "n": 1e999}', 400, _not_finite("n"), id="1e999"),
        pytest.param(
            b'{"type": "run_tests",',
            400,
            {
                "error": "invalid",
                "message": "the body is not JSON: EOF while parsing a value at line 1 column 21",
            },
            id="not-json",
        ),
        pytest.param(
            b'{"type": "run_tests", "pad": "' + b"x" * 2**20 + b'"}',
            413,
            {"error": "invalid", "message": f"the body is larger than {2**20} bytes"},
            id="over-1MiB",
        ),
    ],
)
async def test_a_pick_body_it_cannot_read_is_a_4xx_naming_why(
    system: StartSystem, body: bytes, status: int, said: dict[str, str]
) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    headers = {"Authorization": f"Bearer {WORKSPACE_TOKEN}", "Content-Type": "application/json"}
    url = f"{world.api_url}{_agents(iid, 'events')}"
    async with world.session.post(url, data=io.BytesIO(body), headers=headers) as response:
        assert response.status == status
        assert response.content_type == "application/json"
        assert await response.json() == said
    assert world.state == "coding.editing"
    assert (await _get(world, _agents(iid, "surface")))[0] == 200


async def test_routes_that_take_no_body_answer_as_without_one(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    headers = {"Authorization": f"Bearer {WORKSPACE_TOKEN}"}
    plain = {
        path: await _get(world, path)
        for path in (_agents(iid, "surface"), _agents(iid, "deliveries", "nope"))
    }
    assert [status for status, _ in plain.values()] == [200, 404]
    for body in (b"[" * DEEP + b"]" * DEEP, b'{"n": NaN}'):
        for path, answer in plain.items():
            async with world.session.get(
                f"{world.api_url}{path}", data=body, headers=headers
            ) as response:
                assert (response.status, await response.json()) == answer


async def test_an_invalid_payload_is_422_naming_payload(system: StartSystem) -> None:
    world = await system(script(HELD, {"text": "Working", "hold": True}))
    manifest = (
        (MACHINES / "exec-pick.yaml")
        .read_text()
        .replace(
            "description: Run the test suite; the answer is its output.",
            "description: Run the test suite; the answer is its output.\n"
            "            schema: {type: object, required: [suite],\n"
            "                     properties: {suite: {type: string}}}",
        )
    )
    await world.start_run(manifest)
    iid = await _live(world)
    status, body = await world.pick(iid, "run_tests", {"suite": 3})
    assert status == 422
    assert body["field"] == "payload"
    assert "suite" in body["message"]


async def test_an_outstanding_picks_poll_parks_then_answers_the_same_twice(
    system: StartSystem,
) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    runner = web.AppRunner(api.make_app(world.registry, long_poll_s=0.2))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        status, receipt = await world.pick(iid, "run_tests")
        assert status == 200
        assert receipt["outstanding"] is True
        delivery = receipt["deliveryId"]
        assert (await _get(world, _agents(iid, "deliveries", "nope"), base=base))[0] == 404
        assert (await _get(world, _agents(iid, "deliveries", delivery), base=base)) == (204, None)
        status, answer = await _get(world, _agents(iid, "deliveries", delivery))
        assert status == 200
        assert answer["answer"]["output"] == "3 passed"
        assert answer["allowed"] == ["run_tests", "finish"]
        assert answer["turnComplete"] is False
        assert await _get(world, _agents(iid, "deliveries", delivery)) == (200, answer)
    finally:
        await runner.cleanup()


async def test_a_pick_repeating_its_key_is_answered_as_the_first(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    status, first = await world.pick(iid, "run_tests", key="k-1")
    assert status == 200
    assert first["outstanding"] is True
    assert await world.pick(iid, "run_tests", key="k-1") == (200, first)
    status, refused = await world.pick(iid, "run_tests", key="k-2")
    assert (status, refused["refused"]) == (409, "outstanding")
    status, body = await world.pick(iid, "run_tests", key="k" * 201)
    assert (status, body["field"]) == (400, "Idempotency-Key")


async def test_a_closed_actor_answers_503(system: StartSystem) -> None:
    world = await _held_run(system)
    iid = await _live(world)
    found = world.registry.owner(iid)
    assert found is not None
    await found[1].close()
    status, body = await world.pick(iid, "run_tests", key="k-1")
    assert (status, body["error"]) == (503, "unavailable")
    assert (await _get(world, _agents(iid, "surface")))[0] == 503
