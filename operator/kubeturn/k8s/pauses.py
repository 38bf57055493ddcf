"""A daemon's pause that ends early when kopf stops the daemon.

kopf's ``await stopped.wait(seconds)`` waits in a task of its own that ends in
``TimeoutError`` when the time is up. When the operator stops, kopf gathers every task
still running, waits for them, and re-raises what each raised: a timed wait that runs out
in that window fails the operator's whole stop. Here kopf's wait is untimed and
``asyncio.timeout`` ends it by cancelling it, and a cancelled task is one kopf ignores.
(Not ``asyncio.wait_for``: on Python 3.11 it drops a cancellation of the daemon that
lands as the wait ends, see ``Hub.sweep_result``.)
"""

from __future__ import annotations

import asyncio
import contextlib

import kopf


async def pause(stopped: kopf.DaemonStopped, seconds: float) -> None:
    """Until ``seconds`` pass or the daemon is to stop."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopped.wait()


async def pause_or_wake(
    stopped: kopf.DaemonStopped, wake: asyncio.Event, seconds: float | None
) -> None:
    """Until ``seconds`` pass, the daemon is to stop, or something sets ``wake`` (cleared);
    with ``seconds`` None, no timer: nothing runs until one of the two."""
    waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stopped.wait())]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    wake.clear()
