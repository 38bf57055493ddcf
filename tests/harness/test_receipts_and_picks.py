"""Receipts and picks (rule 6), one named test each (docs/turn-semantics.md §3).

Cases:
- a pick is POSTed to ``{orchestrator}/agents/{iid}/events`` as ``{type, ...payload}``
  and never retried: a 500 leaves exactly one pick at the Orchestrator, the model reads
  that it may not have been delivered, and the run goes on to settle ``completed``;
- a receipt that leaves the Turn open lists the Allowed picks and ends with exactly
  "Your turn is not over.";
- ``409 {refused: "outstanding"}`` is rendered as a refusal, and nothing else happens:
  no poll, no end of the run;
- an outstanding pick is answered by long-polling its delivery inside the one tool
  call: the model's next request carries the answer, in the call's only tool result;
- an answer with ``stopped`` says the pick's work was stopped and the Turn is over; the
  run ends there and waits for the sweep;
- a ``straightBack`` receipt says the workflow came straight back and nothing ran;
- a pick whose payload breaks its schema is not sent and is not the answer's first
  pick: a valid pick after it in the same answer is sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.harness.support import StartWorld, World, menu_surface, script

IID = "iid-1"
PROMPT = "Review the change"
TURN_NOT_OVER = "Your turn is not over."


def verdict(value: Any = "approve", **extra: Any) -> dict[str, Any]:
    return {"name": "review_verdict", "arguments": {"verdict": value, **extra}}


RUN_TESTS = {"name": "run_tests", "arguments": {}}


def surface(iid: str) -> dict[str, Any]:
    """``review_verdict`` ({verdict, notes?}) and ``run_tests`` (no payload), both allowed."""
    offered = menu_surface(iid, "review_verdict")
    offered["menu"].append(
        {"name": "run_tests", "description": "Run the tests.", "input": {"type": "object"}}
    )
    offered["allowed"] = ["review_verdict", "run_tests"]
    return offered


def answer_picks(world: World, status: int, body: dict[str, Any]) -> None:
    """The stub answers every pick with ``status`` and ``body`` (a 200's ``event`` filled in)."""

    async def on_pick(iid: str, pick: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return status, ({"event": pick["type"], **body} if status == 200 else body)

    world.orchestrator.on_pick = on_pick


def open_receipt(**extra: Any) -> dict[str, Any]:
    return {"delivered": True, "turnComplete": False, "deliveryId": "d-1", **extra}


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


async def start(world: StartWorld, *steps: dict[str, Any], **overrides: Any) -> World:
    w = await world(script(PROMPT, *steps), **overrides)
    w.orchestrator.surfaces[IID] = surface(IID)
    return w


class TestRule6Receipts:
    async def test_a_pick_is_posted_as_its_event_and_never_retried(self, world: StartWorld) -> None:
        w = await start(world, {"toolCalls": [verdict(notes="LGTM")]}, {"text": "Done."})
        answer_picks(w, 500, {"error": "the Orchestrator broke"})
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        assert w.orchestrator.picks == [
            (IID, {"type": "review_verdict", "verdict": "approve", "notes": "LGTM"})
        ]
        _, second = await w.model.requests()
        (result,) = tool_messages(second)
        assert result["content"] == (
            "Your pick `review_verdict` may not have been delivered (the Orchestrator "
            "answered HTTP 500: the Orchestrator broke). It was not sent again. "
            "Your turn is not over."
        )
        assert result["tool_call_id"] == "call_0_0"

    async def test_an_open_receipt_lists_the_allowed_picks_and_ends_turn_not_over(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [verdict()]}, {"text": "Done."})
        answer_picks(w, 200, open_receipt(allowed=["review_verdict", "run_tests"]))
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == (
            "Your pick `review_verdict` was delivered, and the workflow took it. "
            "You may pick next: `review_verdict`, `run_tests`. Your turn is not over."
        )
        assert result["content"].endswith(TURN_NOT_OVER)
        assert len(await w.model.requests()) == 2

    async def test_an_outstanding_refusal_is_rendered_and_nothing_else_happens(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [verdict()]}, {"text": "I will wait."})
        answer_picks(w, 409, {"refused": "outstanding", "outstanding": "run_tests", "allowed": []})
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == (
            "Your pick `review_verdict` was refused, and nothing was delivered: your pick "
            "`run_tests` is still being worked on. No pick is allowed until it is answered. "
            "Your turn is not over."
        )
        assert len(w.orchestrator.picks) == 1
        assert w.orchestrator.delivery_polls == []
        assert len(await w.model.requests()) == 2
        _, _, events = await w.harness.stream(IID)
        assert [e["data"] for e in events if e["type"] == "pick-sent"] == [
            {
                "submissionId": sid,
                "event": "review_verdict",
                "result": "refused",
                "deliveryId": None,
                "turnComplete": False,
            }
        ]
        assert "run-ended" not in [e["type"] for e in events]

    async def test_an_outstanding_pick_is_answered_by_a_long_poll_inside_the_one_call(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [RUN_TESTS]}, {"text": "Tests pass."})
        answer_picks(w, 200, open_receipt(outstanding=True, deliveryId="d1"))
        delivery: asyncio.Future[tuple[int, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        w.orchestrator.deliveries["d1"] = delivery
        sid = await w.harness.admit(IID, PROMPT)
        async with asyncio.timeout(5):
            while not w.orchestrator.delivery_polls:
                await asyncio.sleep(0.01)
        assert len(await w.model.requests()) == 1
        assert await w.harness.tool_results(IID) == []
        delivery.set_result(
            (200, open_receipt(event="run_tests", answer="12 passed.", allowed=["review_verdict"]))
        )
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        expected = (
            "Your pick `run_tests` was delivered, and the workflow took it. The answer: "
            "12 passed. You may pick next: `review_verdict`. Your turn is not over."
        )
        _, second = await w.model.requests()
        assert tool_messages(second) == [
            {"role": "tool", "tool_call_id": "call_0_0", "content": expected}
        ]
        assert [m["content"] for m in await w.harness.tool_results(IID)] == [expected]
        assert w.orchestrator.picks == [(IID, {"type": "run_tests"})]
        assert w.orchestrator.delivery_polls == ["d1"]

    async def test_a_stopped_answer_says_the_work_was_stopped_and_the_turn_is_over(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [RUN_TESTS]}, {"text": "never asked"})
        answer_picks(w, 200, open_receipt(outstanding=True, deliveryId="d1"))
        delivery: asyncio.Future[tuple[int, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        delivery.set_result(
            (200, {"delivered": True, "event": "run_tests", "stopped": True, "answer": "2 ran."})
        )
        w.orchestrator.deliveries["d1"] = delivery
        sid = await w.harness.admit(IID, PROMPT)
        await w.harness.wait_state(IID, sid, "waiting-for-sweep")
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == (
            "Your pick `run_tests` was delivered, and the workflow took it. The workflow "
            "left the state that asked for this turn while it ran your pick, and that "
            "stopped the pick's work before it finished: your turn is over. Before that, "
            "the last reply was: 2 ran."
        )
        assert await w.harness.abort(IID) == {"aborted": True}
        settled = await w.harness.settlement(IID, sid)
        assert settled["outcome"] == "aborted"
        assert settled.get("message") is None
        assert len(await w.model.requests()) == 1

    async def test_a_straight_back_receipt_says_nothing_ran(self, world: StartWorld) -> None:
        w = await start(world, {"toolCalls": [verdict()]}, {"text": "Done."})
        answer_picks(w, 200, open_receipt(straightBack=True, allowed=["review_verdict"]))
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == (
            "Your pick `review_verdict` was delivered, and the workflow took it. It moved "
            "the workflow, which came straight back: nothing ran. You may pick next: "
            "`review_verdict`. Your turn is not over."
        )
        assert w.orchestrator.delivery_polls == []

    async def test_an_invalid_pick_is_not_sent_and_is_not_the_first_pick(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [verdict(5), verdict("approve")]}, {"text": "Done."})
        answer_picks(w, 200, open_receipt(allowed=["review_verdict"]))
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        assert w.orchestrator.picks == [(IID, {"type": "review_verdict", "verdict": "approve"})]
        invalid, valid = await w.harness.tool_results(IID)
        assert invalid["content"] == (
            "Your pick `review_verdict` was not sent: verdict: 5 is not of type 'string'"
        )
        assert valid["content"] == (
            "Your pick `review_verdict` was delivered, and the workflow took it. "
            "You may pick next: `review_verdict`. Your turn is not over."
        )
