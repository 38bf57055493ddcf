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

from kubeturn.orchestrator.actor import RunActor
from tests.unit.cores import new_core
from tests.unit.ports import Never


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
