"""Conversations leave memory when idle and come back from their logs the same (ADR 0027).

The Harness runs in this process with a clock only the test moves, and each test runs the
pass that drops idle conversations itself (``Harness.evict_idle``), so what is dropped
depends on nothing but the test's steps.

Cases:
- a settled conversation stays for its idle period, counted from its last request; the
  Harness's own periodic pass drops it after that;
- a settled conversation dropped from memory answers a stream read from offset 0 and
  from a middle offset, and its history view, exactly as before, and is read back once;
- a continued conversation dropped from memory continues: the model sees its earlier
  messages;
- a sweep of a dropped conversation answers ``aborted: false`` and settles nothing
  again;
- a conversation with a running Submission and one queued, with an outstanding pick, with
  a swept run still waiting for its pick's receipt, or with a reader parked on its stream,
  is never dropped; once nothing waits on it, it is (and reads back the same);
- at most ``idle_conversations_kept`` idle conversations stay, the least recently used
  dropped first;
- a Harness restarted after a drop recovers: the dropped conversation reads and continues
  as before, and the one cut by the restart settles ``failed`` and runs its queued one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kubeturn_harness.service import Harness
from tests.harness.support import (
    AGENT,
    HarnessClient,
    StartWorld,
    SteppedClock,
    World,
    menu_surface,
    script,
    scripts,
    start_harness,
)

IID = "default.review-1/review/reviewer"
PROMPT = "Review the change"
FOLLOW_UP = "Look at the tests"
IN_MEMORY = "kubeturn_harness_conversations_in_memory"
LOADED = "kubeturn_harness_conversations_loaded_total"
IDLE_S = 60.0
"""The default idle period (``Settings.idle_eviction_s``)."""
LONG_AFTER = 10 * IDLE_S
"""Far past any idle period: only being busy keeps a conversation then."""
PARKED_S = 30.0
"""A long-poll that outlasts the test's wait for its answer (10 s): it answers only
with an event, never with an empty 204."""

PICK_AND_TEXT = (
    {
        "text": "Approving.",
        "toolCalls": [{"name": "review_verdict", "arguments": {"verdict": "ok"}}],
    },
    {"text": "Done."},
)


def in_process(w: World) -> Harness:
    harness = w.harness.harness
    assert harness is not None
    return harness


def open_picks(w: World) -> None:
    """The stub answers every pick with a receipt that leaves the Turn open."""

    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {"delivered": True, "event": body["type"], "turnComplete": False}

    w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
    w.orchestrator.on_pick = on_pick


async def wait_idle(w: World) -> None:
    """Wait until the conversation's worker is done (a cut run records after its sweep)."""
    async with asyncio.timeout(10):
        while not in_process(w).conversation(AGENT, IID).idle:
            await asyncio.sleep(0.01)


async def everything(client: HarnessClient, iid: str = IID) -> list[Any]:
    """Every reading of a conversation a client can make: the stream from its start and
    from its middle (headers and events), and the history view."""
    status, headers, events = await client.stream(iid, 0)
    assert status == 200
    middle = len(events) // 2
    assert middle > 0
    return [(status, headers, events), await client.stream(iid, middle), await client.history(iid)]


class TestIdlePeriod:
    async def test_a_settled_conversation_stays_for_its_idle_period_from_its_last_request(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(script(PROMPT, {"text": "Reply."}), orchestrated=False, clock=clock)
        sid = await w.harness.admit(IID, PROMPT)
        await w.harness.settlement(IID, sid)
        harness = in_process(w)
        clock.advance(IDLE_S - 1)
        assert harness.evict_idle() == 0
        await w.harness.history(IID)
        clock.advance(IDLE_S - 1)
        assert harness.evict_idle() == 0
        assert await w.harness.metric(IN_MEMORY) == 1
        clock.advance(2)
        assert harness.evict_idle() == 1
        assert await w.harness.metric(IN_MEMORY) == 0

    async def test_the_harness_drops_idle_conversations_on_its_own(self, world: StartWorld) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"text": "Reply."}),
            orchestrated=False,
            clock=clock,
            eviction_interval_s=0.01,
        )
        sid = await w.harness.admit(IID, PROMPT)
        await w.harness.settlement(IID, sid)
        clock.advance(LONG_AFTER)
        async with asyncio.timeout(10):
            while await w.harness.metric(IN_MEMORY) != 0:
                await asyncio.sleep(0.01)
        assert await w.harness.metric("kubeturn_harness_conversations_evicted_total") == 1


class TestReadBack:
    async def test_a_dropped_conversation_reads_exactly_as_before(self, world: StartWorld) -> None:
        clock = SteppedClock()
        w = await world(script(PROMPT, *PICK_AND_TEXT), clock=clock)
        open_picks(w)
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        before = await everything(w.harness)
        assert await w.harness.metric(LOADED) == 0

        clock.advance(LONG_AFTER)
        assert in_process(w).evict_idle() == 1
        assert await w.harness.metric(IN_MEMORY) == 0

        assert await everything(w.harness) == before
        assert await w.harness.metric(IN_MEMORY) == 1
        assert await w.harness.metric(LOADED) == 1

    async def test_a_dropped_continued_conversation_continues(self, world: StartWorld) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"text": "First reply."}, {"text": "Second reply."}),
            orchestrated=False,
            clock=clock,
        )
        first = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, first))["outcome"] == "completed"
        clock.advance(LONG_AFTER)
        assert in_process(w).evict_idle() == 1

        second = await w.harness.admit(IID, FOLLOW_UP, **{"continue": True})
        assert (await w.harness.settlement(IID, second))["outcome"] == "completed"
        _, request = await w.model.requests()
        messages = request["body"]["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[1]["content"].startswith(f"{PROMPT}\n\n<turn>")
        assert messages[2] == {"role": "assistant", "content": "First reply."}
        assert messages[3]["content"].startswith(f"{FOLLOW_UP}\n\n<turn>")
        assert request["step"] == 1
        history = await w.harness.history(IID)
        assert [s["submissionId"] for s in history["settlements"]] == [first, second]
        assert [(m["submissionId"], m["role"]) for m in history["messages"]] == [
            (first, "user"),
            (first, "assistant"),
            (second, "user"),
            (second, "assistant"),
        ]

    async def test_a_sweep_of_a_dropped_conversation_settles_nothing_again(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(script(PROMPT, *PICK_AND_TEXT), clock=clock)
        open_picks(w)
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        before = await everything(w.harness)
        clock.advance(LONG_AFTER)
        assert in_process(w).evict_idle() == 1

        assert await w.harness.abort(IID, {"cause": "pick", "submissionId": sid}) == {
            "aborted": False
        }
        assert await w.harness.abort(IID) == {"aborted": False}
        assert await everything(w.harness) == before


class TestBusyConversationsStay:
    async def test_running_and_queued_submissions_keep_their_conversation(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"text": "Partial", "hold": True}, repeat=True),
            orchestrated=False,
            clock=clock,
        )
        running = await w.harness.admit(IID, PROMPT)
        queued = await w.harness.admit(IID, PROMPT)
        await w.model.wait_requests(1, held=True)
        harness = in_process(w)
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 0
        assert await w.harness.metric(IN_MEMORY) == 1

        assert await w.harness.abort(IID) == {"aborted": True}
        assert (await w.harness.settlement(IID, running))["outcome"] == "aborted"
        assert (await w.harness.settlement(IID, queued))["outcome"] == "aborted"
        await wait_idle(w)
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 1

    async def test_an_outstanding_pick_keeps_its_conversation(self, world: StartWorld) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"toolCalls": [{"name": "run_tests", "arguments": {}}]}, {"text": "ok"}),
            clock=clock,
        )
        offered = menu_surface(IID, "run_tests")
        offered["menu"][0]["input"] = {"type": "object"}
        w.orchestrator.surfaces[IID] = offered

        async def outstanding(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            receipt = {"delivered": True, "event": body["type"], "turnComplete": False}
            return 200, {**receipt, "outstanding": True, "deliveryId": "d1"}

        w.orchestrator.on_pick = outstanding
        answer: asyncio.Future[tuple[int, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        w.orchestrator.deliveries["d1"] = answer
        sid = await w.harness.admit(IID, PROMPT)
        async with asyncio.timeout(10):
            while not w.orchestrator.delivery_polls:
                await asyncio.sleep(0.01)
        harness = in_process(w)
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 0

        answer.set_result(
            (200, {"delivered": True, "event": "run_tests", "turnComplete": False, "answer": "ok"})
        )
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 1

    async def test_a_swept_run_whose_pick_awaits_its_receipt_keeps_its_conversation(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(script(PROMPT, *PICK_AND_TEXT), clock=clock)
        w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
        receipt: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def after_the_sweep(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            await receipt
            return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

        w.orchestrator.on_pick = after_the_sweep
        sid = await w.harness.admit(IID, PROMPT)
        async with asyncio.timeout(10):
            while not w.orchestrator.picks:
                await asyncio.sleep(0.01)
        assert await w.harness.abort(IID, {"cause": "pick", "submissionId": sid}) == {
            "aborted": True
        }
        assert (await w.harness.settlement(IID, sid))["outcome"] == "ended"
        harness = in_process(w)
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 0

        receipt.set_result(None)
        await wait_idle(w)
        before = await everything(w.harness)
        assert "the workflow took it" in (await w.harness.tool_results(IID))[0]["content"]
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 1
        assert await everything(w.harness) == before

    async def test_a_parked_reader_keeps_its_conversation_and_sees_the_next_admission(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"text": "First reply."}, {"text": "Second reply."}),
            orchestrated=False,
            clock=clock,
            long_poll_s=PARKED_S,
        )
        first = await w.harness.admit(IID, PROMPT)
        await w.harness.settlement(IID, first)
        _, headers, _ = await w.harness.stream(IID)
        end = int(headers["stream-next-offset"])
        reader = asyncio.create_task(w.harness.stream(IID, end, live="long-poll"))
        harness = in_process(w)
        async with asyncio.timeout(10):
            while harness.conversation(AGENT, IID).log.readers == 0:
                await asyncio.sleep(0.01)
        clock.advance(LONG_AFTER)
        assert harness.evict_idle() == 0

        second = await w.harness.admit(IID, FOLLOW_UP, **{"continue": True})
        status, _, events = await asyncio.wait_for(reader, 10)
        assert status == 200
        assert events[0]["offset"] == end
        assert events[0]["type"] == "submission-admitted"
        assert events[0]["data"]["submissionId"] == second
        assert (await w.harness.settlement(IID, second))["outcome"] == "completed"


class TestCap:
    async def test_the_least_recently_used_idle_conversations_go_beyond_the_cap(
        self, world: StartWorld
    ) -> None:
        clock = SteppedClock()
        w = await world(
            script(PROMPT, {"text": "Reply."}, repeat=True),
            orchestrated=False,
            clock=clock,
            idle_conversations_kept=2,
        )
        iids = [f"iid-{n}" for n in range(4)]
        histories = {}
        for iid in iids:
            sid = await w.harness.admit(iid, PROMPT)
            await w.harness.settlement(iid, sid)
            histories[iid] = await w.harness.history(iid)
            assert await w.harness.metric(IN_MEMORY) <= 3
            clock.advance(1)
        harness = in_process(w)
        assert harness.evict_idle() == 1
        assert await w.harness.metric(IN_MEMORY) == 2

        kept, dropped = iids[2:], iids[:2]
        for iid in kept:
            assert await w.harness.history(iid) == histories[iid]
        assert await w.harness.metric(LOADED) == 0
        for iid in dropped:
            assert await w.harness.history(iid) == histories[iid]
        assert await w.harness.metric(LOADED) == 2
        assert await w.harness.metric(IN_MEMORY) == 3


class TestRestart:
    async def test_a_harness_restarted_after_a_drop_recovers(self, world: StartWorld) -> None:
        dropped, cut = "iid-dropped", "iid-cut"
        clock = SteppedClock()
        w = await world(
            scripts(
                {
                    PROMPT: [{"text": "First reply."}, {"text": "Second reply."}],
                    "Write the fix": [{"text": "Words before the restart", "hold": True}],
                    "Then the docs": [{"text": "Done after the restart."}],
                }
            ),
            orchestrated=False,
            clock=clock,
        )
        first = await w.harness.admit(dropped, PROMPT)
        await w.harness.settlement(dropped, first)
        before = await w.harness.history(dropped)
        clock.advance(LONG_AFTER)
        assert in_process(w).evict_idle() == 1
        running = await w.harness.admit(cut, "Write the fix")
        queued = await w.harness.admit(cut, "Then the docs")
        await w.model.wait_requests(1, held=True)
        await in_process(w).close()

        cleanups: list[Callable[[], Awaitable[Any]]] = []
        try:
            harness, url = await start_harness(
                in_process(w).settings, cleanups, toolbox=in_process(w).toolbox.socket, clock=clock
            )
            client = HarnessClient(
                url, w.harness.session, harness, w.harness.data_dir, w.harness.workdir
            )
            settled = await client.settlement(cut, running)
            assert settled["outcome"] == "failed"
            assert settled["error"]["type"] == "harness_restarted"
            assert (await client.settlement(cut, queued))["outcome"] == "completed"
            assert await client.history(dropped) == before

            second = await client.admit(dropped, FOLLOW_UP, **{"continue": True})
            assert (await client.settlement(dropped, second))["outcome"] == "completed"
            last = (await w.model.requests())[-1]
            assert last["conversation"] == PROMPT
            assert [m["role"] for m in last["body"]["messages"]] == [
                "system",
                "user",
                "assistant",
                "user",
            ]
        finally:
            for cleanup in reversed(cleanups):
                await cleanup()
