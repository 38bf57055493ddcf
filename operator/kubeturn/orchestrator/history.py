"""A Run's history: the one record each Turn gets, and the bounds the kept records stay in.

A Turn is recorded once, when it is over (its sweep came back, or it was refused before
its admission); the record is the Turn from then on. The history keeps the newest
records within ``HISTORY_LIMIT`` and ``HISTORY_BYTES``; every record is also handed to
the shell as it is written (``effects.Recorded``). Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubeturn.orchestrator import turns
from kubeturn.orchestrator.turns import Turn, TurnPhase, TurnRecord
from kubeturn_harness.wire import Outcome

HISTORY_LIMIT = 200
"""Turn records kept in the history (``Run.status.turns``) at most: enough to read a Run's
recent work with kubectl; every record is also handed to the shell as it is written
(``Recorded``), which posts it as an Event."""
HISTORY_BYTES = 128 * 1024
"""The history's budget, in bytes of its records' JSON: the oldest records go first once
it is spent (the newest is always kept). 200 records of Turns that simply ended take
about 100 KiB; failed Turns carry their messages (up to 2 KiB each,
``kubeturn.api.status.MESSAGE_LIMIT``), and this keeps tens of them. With it the whole
Run stays far below etcd's 1.5 MiB per object: the spec (at most 128 KiB,
``kubeturn.k8s.runs.MAX_SPEC_BYTES``), kubectl's copy of it in an annotation, the
history, and the snapshot of what is live."""


def settle(
    turn: Turn, now: float, *, outcome: Outcome | None = None, message: str | None = None
) -> TurnRecord:
    """Settle ``turn`` and give its record: as ``turns.outcome`` judges its exit, unless
    ``outcome`` (and ``message``) is given; a Submission not settled yet is aborted."""
    exit_ = turn.exit
    if outcome is None:
        outcome, message = (
            turns.outcome(exit_, turn.submissions) if exit_ else (Outcome.ABORTED, None)
        )
    for entry in turn.submissions:
        if entry.outcome is None:
            entry.outcome, entry.settledAt = Outcome.ABORTED, now
        entry.spent = None  # its usage says it now
    turn.phase = TurnPhase.SETTLED
    return TurnRecord(
        name=turn.id,
        agent=turn.agent,
        state=turn.state,
        instanceId=turn.instanceId,
        outcome=outcome,
        cause=exit_.cause if exit_ else None,
        message=message,
        submissions=list(turn.submissions),
        startedAt=turn.startedAt,
        settledAt=now,
        tokens=turns.total_usage(turn.submissions),
    )


def keep(
    history: Sequence[TurnRecord], sizes: Sequence[int], record: TurnRecord
) -> tuple[list[TurnRecord], list[int]]:
    """``history`` (each record's ``size`` in ``sizes``) with ``record`` added, the oldest
    records dropped past the bounds."""
    kept, kept_sizes = [*history, record], [*sizes, size(record)]
    total = sum(kept_sizes)
    dropped = 0
    while len(kept) - dropped > 1 and (
        len(kept) - dropped > HISTORY_LIMIT or total > HISTORY_BYTES
    ):
        total -= kept_sizes[dropped]
        dropped += 1
    return kept[dropped:], kept_sizes[dropped:]


def size(record: TurnRecord) -> int:
    """A record's size in the history's budget: the bytes of its JSON."""
    return len(record.model_dump_json().encode())
