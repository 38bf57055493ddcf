"""Closing a Run's actor stops its effects cleanly, whenever it comes.

Cases:
- closed right after the start, before its first admission's task ever ran: the
  admission is never started, and no coroutine is left unawaited (a warning, which this
  suite turns into a failure);
- closed while a sweep waits for the admission before it on the same conversation: the
  same for the sweep.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from kubeturn.orchestrator.actor import RunActor, Settled
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.invokes import ExecResult
from tests.unit.test_core_outcomes import new_core


class Never:
    """Ports that never answer: every effect stays under way until it is cancelled."""

    def __init__(self) -> None:
        self.admitted: list[str] = []

    async def admit(self, effect: Admit) -> str:
        self.admitted.append(effect.key)
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def sweep(self, effect: Sweep) -> list[Settled]:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def run(self, effect: StartExec) -> ExecResult:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def save(self, snapshot: dict[str, Any]) -> None:
        return None


def actor(ports: Never) -> RunActor:
    return RunActor(new_core("handoff"), turns=ports, execs=ports, store=ports, clock=lambda: 1.0)


async def test_closed_before_its_first_admission_ran() -> None:
    ports = Never()
    closing = actor(ports)
    await closing.start()  # the admission's task is made, and has not run yet
    await closing.close()
    gc.collect()
    assert ports.admitted == []


async def test_closed_while_a_sweep_waits_for_the_admission_before_it() -> None:
    ports = Never()
    closing = actor(ports)
    await closing.start()
    await asyncio.sleep(0)  # the admission runs, and waits for its Harness
    await closing.cancel()  # the Turn's sweep waits for that admission
    await closing.close()
    gc.collect()
    assert len(ports.admitted) == 1
