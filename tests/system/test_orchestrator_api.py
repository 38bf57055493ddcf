"""The Orchestrator API as Harnesses call it, against a live Run.

Cases:
- auth: no token or an unknown token is 401; a token of another Workspace may not
  address this Run's Instance IDs (403); ``/openapi.json`` and ``/healthz`` are open;
- ``GET …/surface`` of a live Turn: its Menu (names, descriptions, schemas), the allowed
  picks and its cwd; an Instance ID with no live Turn is 404;
- ``POST …/events``: a payload that does not fit the schema is 422 naming ``payload``;
  an event the Turn's state does not handle is 409 ``not-allowed`` with the allowed list;
  a body without a string ``type`` is 400;
- ``GET …/deliveries/{id}``: an outstanding pick's poll parks and answers 204, then the
  answer once the work is done, and the same answer again (a repeated poll is safe); an
  unknown delivery is 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from aiohttp import web

from kubeturn.orchestrator import api
from tests.harness.support import script
from tests.system.conftest import StartSystem
from tests.system.support import MACHINES, WORKSPACE_TOKEN, System

HELD = "Make the tests pass."


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
