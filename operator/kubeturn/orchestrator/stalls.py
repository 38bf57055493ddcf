"""Stalls: a live Turn that makes no progress for its Agent slot's ``stallAfter`` is
swept, reason ``stalled`` (ADR 0115).

Progress is what the Turn's conversation stream shows the shell that follows it: a
Submission admitted, a model request started, output streamed (``model-streamed``), a
message appended (the model's answer, which carries its tool calls, or a tool's result),
a pick sent; and a pick of the Turn
answered at Rest. The clock runs only while a Submission runs and no pick of the Turn is
out: an idle Turn waits for its nudge, and a pick's work below the Agent's state is the
Machine's, not the Agent's. The deadline is a time, like the Machine's own timers, so a
restored core keeps it; the shell restarts every clock on a restore (``restart``), since
the time its operator was down was no Agent's. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeturn.api.durations import parse_duration
from kubeturn.machine.load import LoadedRun
from kubeturn.orchestrator.turns import Turn, TurnPhase

REASON = "stalled"
"""The fault reason of a stalled Turn (``agent.fault``'s ``event.reason``)."""


def after(run: LoadedRun, turn: Turn) -> float | None:
    """The Turn's slot's ``stallAfter`` in seconds; None: its Turns never stall."""
    slot = run.agents.get(turn.agent)
    if slot is None or slot.stallAfter is None:
        return None
    return parse_duration(slot.stallAfter)


def watched(run: LoadedRun, turn: Turn) -> bool:
    """Whether the Turn's progress counts now: its slot says ``stallAfter``, it is live
    with a Submission running, and none of its picks is out."""
    return (
        turn.phase is TurnPhase.LIVE
        and not turn.faulted
        and turn.running is not None
        and turn.outstanding is None
        and after(run, turn) is not None
    )


def deadline(run: LoadedRun, turn: Turn) -> float | None:
    """When the Turn stalls if nothing moves before: None when it is not watched."""
    seconds = after(run, turn)
    if seconds is None or turn.progressAt is None or not watched(run, turn):
        return None
    return turn.progressAt + seconds


def due(run: LoadedRun, turns: Iterable[Turn], now: float) -> list[Turn]:
    """The Turns stalled at ``now``, in their start's order."""
    return [
        turn
        for turn in sorted(turns, key=lambda t: t.startedAt)
        if (at := deadline(run, turn)) is not None and at <= now
    ]


def next_at(run: LoadedRun, turns: Iterable[Turn]) -> float | None:
    """The earliest deadline of ``turns``; None when none is watched."""
    found = [at for turn in turns if (at := deadline(run, turn)) is not None]
    return min(found, default=None)


def message(run: LoadedRun, turn: Turn) -> str:
    """What the fault and the Turn's record say of a stall."""
    slot = run.agents[turn.agent]
    return (
        f"stalled: no progress (no model request, output streamed, answer, tool call or pick) for "
        f"{slot.stallAfter} (spec.agents.{turn.agent}.stallAfter)"
    )


def restart(turns: Iterable[Turn], now: float) -> None:
    """Every live Turn's clock starts again at ``now`` (after a restore)."""
    for turn in turns:
        if turn.progressAt is not None:
            turn.progressAt = now
