"""A daemon's pause (:mod:`kubeturn.k8s.pauses`) leaves kopf's stop nothing to re-raise.

When the operator stops, kopf gathers every task still running, waits for them, and calls
``result()`` on each that finished: a task that ended in ``TimeoutError`` fails the
operator's stop. Each case pauses a daemon on kopf's own stopper, gathers the tasks as kopf
does while the pause runs, lets the time run out, and reads every gathered task's result:

- kopf's ``stopped.wait(seconds)`` leaves a task that ended in ``TimeoutError`` (the flake
  this module exists for, kept here so the proof cannot pass vacuously);
- ``pause`` and ``pause_or_wake`` leave none, and each returns once its time is up;
- both return at once when the daemon is to stop, and ``pause_or_wake`` when woken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import kopf

# The object kopf hands every daemon as ``stopped``; kopf does not export its maker.
from kopf._cogs.aiokits.aioenums import FlagSetter

from kubeturn.k8s import pauses

PAUSE_S = 0.05


def _stopper() -> tuple[FlagSetter[kopf.DaemonStoppingReason], kopf.DaemonStopped]:
    setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
    return setter, setter.async_waiter


async def _timed_out_tasks(pausing: Awaitable[object]) -> list[asyncio.Task[object]]:
    """The tasks begun by ``pausing`` that kopf's stop would re-raise a ``TimeoutError`` of."""
    before = asyncio.all_tasks()
    daemon = asyncio.ensure_future(pausing)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    gathered = asyncio.all_tasks() - before
    assert daemon in gathered
    await asyncio.wait_for(daemon, PAUSE_S * 40)
    await asyncio.wait(gathered, timeout=PAUSE_S * 40)
    timed_out = []
    for task in gathered:
        assert task.done()
        if not task.cancelled() and isinstance(task.exception(), TimeoutError):
            timed_out.append(task)
    return timed_out


async def test_kopf_s_own_timed_wait_leaves_a_task_that_timed_out() -> None:
    _, stopped = _stopper()

    async def kopf_wait() -> None:
        await stopped.wait(PAUSE_S)

    assert len(await _timed_out_tasks(kopf_wait())) == 1


async def test_a_pause_leaves_no_task_that_timed_out() -> None:
    _, stopped = _stopper()
    assert await _timed_out_tasks(pauses.pause(stopped, PAUSE_S)) == []


async def test_a_pause_or_wake_leaves_no_task_that_timed_out() -> None:
    _, stopped = _stopper()
    wake = asyncio.Event()
    assert await _timed_out_tasks(pauses.pause_or_wake(stopped, wake, PAUSE_S)) == []


async def test_a_pause_ends_when_the_daemon_is_to_stop() -> None:
    setter, stopped = _stopper()
    pausing = asyncio.ensure_future(pauses.pause(stopped, 3600))
    await asyncio.sleep(0)
    setter.set(kopf.DaemonStoppingReason.OPERATOR_EXITING)
    await asyncio.wait_for(pausing, 5)
    assert stopped


async def test_a_pause_or_wake_ends_when_woken_and_clears_the_wake() -> None:
    _, stopped = _stopper()
    wake = asyncio.Event()
    pausing = asyncio.ensure_future(pauses.pause_or_wake(stopped, wake, 3600))
    await asyncio.sleep(0)
    wake.set()
    await asyncio.wait_for(pausing, 5)
    assert not wake.is_set()
    assert not stopped
