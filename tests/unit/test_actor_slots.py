"""A Run's actor and its slots under a cap on live Turns (ADR 0116).

Cases:
- a Turn waiting for a slot when its Run is cancelled is withdrawn at once (its sweep
  is chained behind the admission, so it cannot wait for it): it is never admitted, its
  sweep runs, it is recorded ``aborted``, and it waits no more;
- an admitted Turn holds its slot; a closed actor leaves nothing of its Run in the
  queue (an actor that resumes the Run holds its live Turns' slots again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubeturn.orchestrator import caps
from kubeturn.orchestrator.actor import RunActor, Settled
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.ids import TurnId
from kubeturn_harness.wire import Outcome
from tests.unit.cores import new_core
from tests.unit.ports import Never

WORKSPACE = caps.Scope(caps.WORKSPACE, "ns/w")


class Gated(Never):
    """Ports whose admissions wait for a slot first; a sweep settles nothing at once."""

    def __init__(self, slots: caps.RunSlots) -> None:
        super().__init__()
        self.slots = slots
        self.swept: list[str] = []

    async def admit(self, effect: Admit) -> str:
        await self.slots.enter(effect.turn)
        return await super().admit(effect)

    async def sweep(self, effect: Sweep) -> list[Settled]:
        self.swept.append(effect.turn)
        return []


def gated(queue: caps.Caps) -> tuple[RunActor, Gated]:
    core = new_core("handoff")
    slots = caps.RunSlots(queue, "ns/r", (WORKSPACE,), lambda turn: 1.0)
    ports = Gated(slots)
    actor = RunActor(core, turns=ports, execs=ports, store=ports, clock=lambda: 1.0, slots=slots)
    return actor, ports


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):  # a hang guard, not a timed assertion
        while not check():
            await asyncio.sleep(0)


async def test_a_turn_swept_while_it_waits_is_never_admitted() -> None:
    queue = caps.Caps()
    queue.limit(WORKSPACE, 1)
    queue.hold(caps.Ticket("ns/other", TurnId("t1"), 0.0, (WORKSPACE,)))
    actor, ports = gated(queue)
    await actor.start()
    await until(lambda: [t.run for t in queue.waiting()] == ["ns/r"])

    await actor.cancel()
    await until(lambda: not actor.core.turns)

    assert ports.admitted == []
    assert ports.swept == ["t1"]
    assert [(r.name, r.outcome) for r in actor.core.history] == [("t1", Outcome.ABORTED)]
    assert queue.waiting() == []
    assert queue.live() == {WORKSPACE: 1}  # the other Run's
    await actor.close()


async def test_an_admitted_turn_holds_its_slot_until_its_actor_closes() -> None:
    queue = caps.Caps()
    queue.limit(WORKSPACE, 1)
    actor, ports = gated(queue)
    await actor.start()
    await until(lambda: ports.admitted == ["t1.1"])
    assert queue.live() == {WORKSPACE: 1}

    await actor.close()
    assert (queue.live(), queue.waiting()) == ({}, [])
