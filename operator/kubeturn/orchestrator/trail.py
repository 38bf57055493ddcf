"""A Run's trail: the transitions that moved its Machine, newest kept (ADR 0109).

The console draws the states a Run visited and the transitions it took from it; a Run
restored from its status keeps drawing them, since the trail is saved with it. Pure: no
IO, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubeturn.api.status import TrailEntry
from kubeturn.machine.interpreter import Move

TRAIL_LIMIT = 100
"""Transitions kept in ``Run.status.trail`` at most (about 80 bytes each): a Run that
loops longer shows its recent moves, and counts the others in ``droppedTrail``."""


def extend(trail: Sequence[TrailEntry], moves: Sequence[Move], now: float) -> list[TrailEntry]:
    """``trail`` with ``moves``, taken at ``now``, added; the oldest dropped past the limit."""
    added = [
        TrailEntry.model_validate(
            {"from": move.source, "event": move.event, "to": move.target, "at": now}
        )
        for move in moves
    ]
    return [*trail, *added][-TRAIL_LIMIT:]
