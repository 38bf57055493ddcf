"""A pick while the Orchestrator is not there (ADR 0047): sent again with its key.

The Harness under test against a stub Orchestrator on 127.0.0.1 and the scripted model.

Cases:
- 503 three times, then a receipt: the pick reached the Orchestrator four times, each
  with the same ``Idempotency-Key``; the model reads one delivered receipt, made one
  tool call (the Runaway watch saw one), and the Submission settles ``completed``;
- a pick whose connection is cut before an answer (a process killed mid-request) is
  sent again with the key it was first sent with, and delivered;
- 503 for longer than the window (``pick_retry_s``): the model reads that the pick may
  not have been delivered, saying for how long the Orchestrator was not reached;
- a 500 is final: sent once (``test_receipts_and_picks``);
- a sweep while the pick waits ends the wait at once: the Submission settles
  ``aborted`` within seconds, far inside the window, and no further model request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from tests.harness.support import StartWorld, World, menu_surface, script

IID = "iid-1"
PROMPT = "Review the change"


def verdict() -> dict[str, Any]:
    return {"name": "review_verdict", "arguments": {"verdict": "approve"}}


async def start(world: StartWorld, **overrides: Any) -> World:
    w = await world(script(PROMPT, {"toolCalls": [verdict()]}, {"text": "Done."}), **overrides)
    w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
    return w


def unavailable_then_receipt(w: World, failures: int) -> None:
    async def on_pick(iid: str, pick: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if len(w.orchestrator.picks) <= failures:
            return 503, {"error": "unavailable", "message": "the Orchestrator is stopping"}
        receipt = {"delivered": True, "event": pick["type"], "turnComplete": False}
        return 200, {**receipt, "deliveryId": "d-1", "allowed": []}

    w.orchestrator.on_pick = on_pick


async def test_a_pick_answered_503_is_sent_again_with_its_key(world: StartWorld) -> None:
    w = await start(world)
    unavailable_then_receipt(w, 3)
    sid = await w.harness.admit(IID, PROMPT)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    assert len(w.orchestrator.picks) == 4
    assert len(set(w.orchestrator.keys)) == 1
    assert w.orchestrator.keys[0]
    (result,) = await w.harness.tool_results(IID)
    assert result["content"].startswith("Your pick `review_verdict` was delivered")
    assert len(await w.model.requests()) == 2


async def test_a_pick_whose_connection_is_cut_is_sent_again(world: StartWorld) -> None:
    w = await start(world)

    async def cut(request: web.Request) -> web.StreamResponse:
        w.orchestrator.picks.append((request.match_info["iid"], await request.json()))
        w.orchestrator.keys.append(request.headers.get("Idempotency-Key"))
        if len(w.orchestrator.picks) <= 2:
            assert request.transport is not None
            request.transport.close()  # as a process killed mid-request
            return web.Response()  # never sent: the connection is gone
        receipt = {"delivered": True, "event": "review_verdict", "turnComplete": False}
        return web.json_response({**receipt, "deliveryId": "d-1", "allowed": []})

    w.orchestrator.cut = cut
    sid = await w.harness.admit(IID, PROMPT)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    assert len(w.orchestrator.picks) == 3
    assert len(set(w.orchestrator.keys)) == 1
    (result,) = await w.harness.tool_results(IID)
    assert result["content"].startswith("Your pick `review_verdict` was delivered")


async def test_past_the_window_the_model_reads_that_the_pick_may_be_lost(
    world: StartWorld,
) -> None:
    w = await start(world, pick_retry_s=1.0)
    unavailable_then_receipt(w, 10_000)
    sid = await w.harness.admit(IID, PROMPT)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    assert len(w.orchestrator.picks) >= 2
    assert len(set(w.orchestrator.keys)) == 1
    (result,) = await w.harness.tool_results(IID)
    assert result["content"].startswith(
        "Your pick `review_verdict` may not have been delivered (the Orchestrator was not "
        "reached for 1 s: the Orchestrator answered HTTP 503: the Orchestrator is stopping)."
    )


async def test_a_sweep_ends_the_wait(world: StartWorld) -> None:
    w = await start(world)
    unavailable_then_receipt(w, 10_000)
    sid = await w.harness.admit(IID, PROMPT)
    while len(w.orchestrator.picks) < 2:
        await asyncio.sleep(0.05)
    began = time.monotonic()
    assert await w.harness.abort(IID) == {"aborted": True}
    settled = await w.harness.settlement(IID, sid)
    assert settled["outcome"] == "aborted"
    assert time.monotonic() - began < 30  # the cut's receipt wait (5 s), not the window
    assert len(await w.model.requests()) == 1
