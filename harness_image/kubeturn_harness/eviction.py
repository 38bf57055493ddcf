"""Which conversations the Harness drops from memory: the policy alone.

A conversation's log on disk is its record (``store``), so one that nothing waits on can
leave memory and be read back, answering the same, when it is asked for again. This
module only chooses which ones leave: it holds no conversation, reads no clock (time
comes in as an argument) and does no IO.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Resident(Generic[K]):
    """What the policy needs to know of one conversation in memory."""

    key: K
    busy: bool
    """Something waits on it: a Submission unsettled, a run (and any pick it has
    outstanding) not yet finished, or a reader parked on its stream. Never dropped."""
    touched: float
    """Monotonic seconds of its last request or the end of its last run."""


def evictions(
    residents: Iterable[Resident[K]], *, now: float, idle_s: float, keep_idle: int
) -> list[K]:
    """The conversations to drop: every idle one untouched for more than ``idle_s``
    seconds, and the least recently touched idle ones beyond the ``keep_idle`` newest."""
    idle = sorted((r for r in residents if not r.busy), key=lambda r: r.touched, reverse=True)
    return [r.key for rank, r in enumerate(idle) if rank >= keep_idle or now - r.touched > idle_s]
