"""The caps on live Turns (``orchestrator.caps``, ADR 0116).

Cases:
- ``admissible``: in the order of the Turns' start (then Run, then Turn number), each
  whose every scope has room goes; one held back by its Workspace does not hold back a
  Turn of another Workspace; ``held`` names the first full scope;
- ``Caps``: a Turn waits while its Workspace is full, hears why once, and goes when a
  live one leaves; two waiting go in the order they started, whatever order they came
  in (a restart); a withdrawn Turn raises ``Withdrawn`` and never goes; a Turn that
  holds a slot enters at once; a raised cap lets the next go; the namespace default
  caps every namespace; held back, nothing goes until ``open``; a Run forgotten frees
  its slots; a cancelled wait leaves nothing behind;
- the ``waiting`` hook: hears the Turns that wait by reason (WorkspaceFull, NamespaceFull,
  Resuming while held back) each time the counts change, and only then, as Turns queue,
  are granted, are withdrawn and have their wait cancelled; ``metrics.turns_waiting``
  shows every reason, at 0 when none waits for it.
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Gauge

from kubeturn.api.agentturn import PendingReason
from kubeturn.errors import AdmitFailed, Withdrawn
from kubeturn.k8s import metrics
from kubeturn.orchestrator import caps
from kubeturn.orchestrator.ids import TurnId

WS_A = caps.Scope(caps.WORKSPACE, "ns/a")
WS_B = caps.Scope(caps.WORKSPACE, "ns/b")
NS = caps.Scope(caps.NAMESPACE, "ns")


def ticket(run: str, turn: int, at: float, *scopes: caps.Scope) -> caps.Ticket:
    return caps.Ticket(f"ns/{run}", TurnId(f"t{turn}"), at, scopes or (WS_A, NS))


def limits(**given: int) -> caps.Limits:
    by_scope = {WS_A: given.get("a"), WS_B: given.get("b"), NS: given.get("ns")}
    return lambda scope: by_scope.get(scope)


class TestAdmissible:
    def test_in_order_of_start_while_there_is_room(self) -> None:
        waiting = [ticket("r2", 1, 2.0), ticket("r1", 2, 1.0), ticket("r3", 1, 3.0)]
        going = caps.admissible(waiting, {WS_A: 1}, limits(a=3))
        assert [t.run for t in going] == ["ns/r1", "ns/r2"]

    def test_a_tie_goes_by_run_then_turn_number(self) -> None:
        waiting = [ticket("r2", 1, 1.0), ticket("r1", 10, 1.0), ticket("r1", 9, 1.0)]
        going = caps.admissible(waiting, {}, limits(a=2))
        assert [(t.run, t.turn) for t in going] == [("ns/r1", "t9"), ("ns/r1", "t10")]

    def test_a_full_workspace_holds_back_no_other_workspace(self) -> None:
        first = ticket("r1", 1, 1.0, WS_A, NS)
        other = ticket("r2", 1, 2.0, WS_B, NS)
        going = caps.admissible([first, other], {WS_A: 1, NS: 1}, limits(a=1, ns=3))
        assert going == [other]
        assert caps.held(first, {WS_A: 1}, limits(a=1)) == caps.Held(WS_A, 1, 1)
        assert caps.held(other, {WS_A: 1}, limits(a=1)) is None

    def test_the_namespace_caps_every_workspace_in_it(self) -> None:
        waiting = [ticket("r1", 1, 1.0, WS_A, NS), ticket("r2", 1, 2.0, WS_B, NS)]
        going = caps.admissible(waiting, {NS: 1}, limits(ns=2))
        assert [t.run for t in going] == ["ns/r1"]


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


class TestCaps:
    async def test_a_turn_waits_for_a_live_one_to_leave(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        live = ticket("r1", 1, 1.0)
        await queue.enter(live)
        heard: list[caps.Held] = []

        async def queued(held: caps.Held) -> None:
            heard.append(held)

        second = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0), queued))
        await settle()
        assert not second.done()
        assert heard == [caps.Held(WS_A, 1, 1)]
        assert caps.describe(heard[0], where={caps.WORKSPACE: "spec.maxLiveTurns"}) == (
            "waits for a live Turn to end: Workspace ns/a has 1 live of at most 1 "
            "(spec.maxLiveTurns); earlier Turns go first"
        )
        queue.leave("ns/r1", TurnId("t1"))
        await second
        assert queue.live() == {WS_A: 1, NS: 1}
        assert heard == [caps.Held(WS_A, 1, 1)]

    async def test_waiting_turns_go_in_the_order_they_started(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        await queue.enter(ticket("r0", 1, 0.5))
        went: list[str] = []

        async def enter(run: str, at: float) -> None:
            await queue.enter(ticket(run, 1, at))
            went.append(run)

        later = asyncio.create_task(enter("late", 3.0))
        await settle()
        earlier = asyncio.create_task(enter("early", 2.0))  # came second, started first
        await settle()
        assert [t.run for t in queue.waiting()] == ["ns/early", "ns/late"]
        queue.leave("ns/r0", TurnId("t1"))
        await earlier
        assert went == ["early"]
        queue.leave("ns/early", TurnId("t1"))
        await later
        assert went == ["early", "late"]

    async def test_a_withdrawn_turn_never_goes(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        await queue.enter(ticket("r1", 1, 1.0))
        waiting = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0)))
        await settle()
        queue.withdraw("ns/r2", TurnId("t1"))
        with pytest.raises(Withdrawn):
            await waiting
        assert issubclass(Withdrawn, AdmitFailed)
        queue.leave("ns/r1", TurnId("t1"))
        assert (queue.live(), queue.waiting()) == ({}, [])

    async def test_a_turn_that_holds_a_slot_enters_at_once(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        queue.hold(ticket("r1", 1, 1.0))
        await queue.enter(ticket("r1", 1, 1.0))  # a nudge, or a resumed admission
        assert queue.live() == {WS_A: 1, NS: 1}

    async def test_a_raised_cap_lets_the_next_go(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        await queue.enter(ticket("r1", 1, 1.0))
        waiting = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0)))
        await settle()
        queue.limit(WS_A, 2)
        await waiting
        queue.limit(WS_A, None)
        assert queue.limit_of(WS_A) is None

    async def test_the_namespace_default_caps_each_namespace(self) -> None:
        queue = caps.Caps({caps.NAMESPACE: 1})
        await queue.enter(ticket("r1", 1, 1.0, WS_A, NS))
        other = caps.Scope(caps.NAMESPACE, "other")
        await queue.enter(ticket("r2", 1, 2.0, WS_B, other))
        waiting = asyncio.create_task(queue.enter(ticket("r3", 1, 3.0, WS_B, NS)))
        await settle()
        assert queue.why(queue.waiting()[0]) == caps.Held(NS, 1, 1)
        queue.forget("ns/r1")
        await waiting

    async def test_held_back_nothing_goes_until_open(self) -> None:
        queue = caps.Caps()
        queue.hold_back()
        waiting = asyncio.create_task(queue.enter(ticket("r1", 1, 1.0)))
        await settle()
        assert queue.why(queue.waiting()[0]) == caps.Held()
        assert "restart" in caps.describe(caps.Held(), where={})
        queue.open()
        await waiting

    async def test_a_turn_held_back_is_told_again_why_it_waits_once_open(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        queue.hold_back()
        queue.hold(ticket("r1", 1, 1.0))  # live before the restart
        heard: list[caps.Held] = []

        async def queued(held: caps.Held) -> None:
            heard.append(held)

        waiting = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0), queued))
        await settle()
        queue.open()
        await settle()
        assert heard == [caps.Held(), caps.Held(WS_A, 1, 1)]
        queue.leave("ns/r1", TurnId("t1"))
        await waiting

    async def test_a_cancelled_wait_leaves_nothing_behind(self) -> None:
        queue = caps.Caps()
        queue.limit(WS_A, 1)
        await queue.enter(ticket("r1", 1, 1.0))
        waiting = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0)))
        await settle()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        queue.leave("ns/r1", TurnId("t1"))
        assert (queue.live(), queue.waiting()) == ({}, [])

    async def test_a_run_slots_ticket_takes_the_start_its_core_recorded(self) -> None:
        queue = caps.Caps()
        slots = caps.RunSlots(queue, "ns/r1", (WS_A,), lambda turn: 7.0)
        assert slots.ticket(TurnId("t1")).started_at == 7.0
        await slots.enter(TurnId("t1"))
        assert queue.live() == {WS_A: 1}
        slots.leave(TurnId("t1"))
        slots.hold(TurnId("t2"))
        slots.close()
        assert queue.live() == {}


WS_FULL, NS_FULL, RESUMING = (
    PendingReason.WORKSPACE_FULL,
    PendingReason.NAMESPACE_FULL,
    PendingReason.RESUMING,
)


class TestWaitingHook:
    async def test_counts_follow_turns_queued_granted_and_withdrawn(self) -> None:
        heard: list[dict[PendingReason, int]] = []
        queue = caps.Caps({caps.NAMESPACE: 2}, waiting=lambda counts: heard.append(dict(counts)))
        queue.limit(WS_A, 1)
        await queue.enter(ticket("r1", 1, 1.0, WS_A, NS))
        await queue.enter(ticket("r2", 1, 2.0, WS_B, NS))
        assert heard == []  # none waited: nothing to tell
        second_a = asyncio.create_task(queue.enter(ticket("r3", 1, 3.0, WS_A, NS)))
        await settle()
        third_b = asyncio.create_task(queue.enter(ticket("r4", 1, 4.0, WS_B, NS)))
        await settle()
        # r3: its Workspace a is full (checked first); r4: Workspace b has room, the
        # namespace has none.
        assert heard == [{WS_FULL: 1}, {WS_FULL: 1, NS_FULL: 1}]
        assert queue.waiting_by_reason() == {WS_FULL: 1, NS_FULL: 1}

        queue.withdraw("ns/r4", TurnId("t1"))
        with pytest.raises(Withdrawn):
            await third_b
        assert heard[-1] == {WS_FULL: 1}
        queue.leave("ns/r1", TurnId("t1"))  # r3 is granted
        await second_a
        assert heard[-1] == {}
        queue.leave("ns/r2", TurnId("t1"))  # a change in which no count changes
        assert heard == [{WS_FULL: 1}, {WS_FULL: 1, NS_FULL: 1}, {WS_FULL: 1}, {}]

    async def test_held_back_every_waiting_turn_is_resuming_until_open(self) -> None:
        heard: list[dict[PendingReason, int]] = []
        queue = caps.Caps(waiting=lambda counts: heard.append(dict(counts)))
        queue.limit(WS_A, 1)
        queue.hold_back()
        queue.hold(ticket("r1", 1, 1.0))  # live before the restart
        waiting = asyncio.create_task(queue.enter(ticket("r2", 1, 2.0)))
        await settle()
        queue.open()
        assert heard == [{RESUMING: 1}, {WS_FULL: 1}]
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert heard[-1] == {}

    def test_the_gauge_shows_every_reason(self) -> None:
        registry = CollectorRegistry()
        gauge = Gauge("waiting", "", ["reason"], registry=registry)
        metrics.turns_waiting({NS_FULL: 2}, gauge)
        shown = {
            sample.labels["reason"]: sample.value
            for family in registry.collect()
            for sample in family.samples
        }
        assert shown == {"WorkspaceFull": 0, "NamespaceFull": 2, "Resuming": 0}
