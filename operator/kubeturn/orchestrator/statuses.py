"""A Run's status, projected from its core; and the snapshot a core resumes from, read back
from that status.

The core keeps its state as one snapshot (``RunCore.snapshot``), its settled Turns'
records among it. The status holds each thing once: the records are ``status.turns``,
where kubectl shows them, and ``status.snapshot`` is the rest; ``resume_point`` joins
them again, so a core restored from a status it wrote continues exactly as it would have
(``tests/unit/test_statuses.py`` restores one after every input). A status any earlier
kubeturn wrote resumes too: ``snapshots.migrate`` brings its snapshot to the current
version, and the golden snapshots in ``tests/unit/snapshots/`` are restored in every
test run. A final phase is shown only in the status that also holds the records of
every Turn (``RunView.phase``): one patch writes both. The status is a
``RunStatus``: the model its CRD is generated from. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kubeturn.api.status import (
    CHILDREN_LIMIT,
    ChildPhase,
    FanOutChild,
    ProcessedSignal,
    RunStatus,
    SignalResult,
)
from kubeturn.errors import SnapshotUnreadable
from kubeturn.machine import interpreter
from kubeturn.machine.interpreter import ChildStatus
from kubeturn.machine.model import StatePath, parent_of, within
from kubeturn.orchestrator import signals, snapshots, usages
from kubeturn.orchestrator.core import RunView
from kubeturn.orchestrator.snapshots import DELIVERED_KEY, HISTORY_KEY, TRAIL_KEY

PROGRESS_ORDER = (ChildPhase.SUCCEEDED, ChildPhase.FAILED, ChildPhase.RUNNING, ChildPhase.PENDING)
"""The order ``childProgress`` counts a fan-out's children in: done, then under way."""


def run_status(view: RunView, snapshot: Mapping[str, Any]) -> RunStatus:
    """What ``Run.status`` says of a core, seen as ``view``, whose snapshot is
    ``snapshot``: every field but ``conditions`` and ``observedGeneration``, which are the
    shell's. The records are the snapshot's, dumped once."""
    records = list(snapshot[HISTORY_KEY])
    accepted = signals.accepted_events(list(view.accepted))
    return RunStatus(
        phase=view.phase,
        state=view.state,
        turnCount=view.recorded,
        turns=records,
        droppedTurns=view.recorded - len(records),
        usage=usages.run_usage(view.usage, view.limits),
        output=view.output,
        message=view.message,
        trail=list(view.trail),
        droppedTrail=view.moves - len(view.trail),
        deliveries=[record.model_dump(mode="json", exclude_none=True) for record in view.delivered],
        snapshot={
            key: value
            for key, value in snapshot.items()
            if key not in (HISTORY_KEY, DELIVERED_KEY, TRAIL_KEY)
        },
        processedSignals=[
            ProcessedSignal(id=signal_id, result=SignalResult.IGNORED, message=why)
            if (why := view.ignored.get(signal_id)) is not None
            else ProcessedSignal(id=signal_id, result=SignalResult.HANDLED)
            for signal_id in view.signals
        ],
        acceptedEvents=accepted,
        waitingFor=signals.waiting_for(
            [item.model_dump(mode="json", by_alias=True) for item in accepted]
        ),
        cancelProcessed=view.cancelled,
        **fan_out_children(view.children, view.active),
    )


def fan_out_children(
    children: Sequence[interpreter.Child], active: Sequence[StatePath]
) -> dict[str, Any]:
    """The status fields that show the running fan-outs' children (``children``,
    ``droppedChildren``, ``childProgress``): each child's key, status, active states (of
    ``active``, its own Machine's and its children's) and why it failed. A Run holds no
    other object per child, so this is where kubectl finds them."""
    shown = [
        FanOutChild(
            fanOut=parent_of(child.scope) or "",
            key=child.key,
            status=ChildPhase(child.status.value),
            state=", ".join(leaf for leaf in active if within(leaf, child.scope)) or None,
            message=child.message if child.status is ChildStatus.FAILED else None,
        )
        for child in children
    ]
    fan_outs: dict[str, Counter[ChildPhase]] = {}
    for child in shown:
        fan_outs.setdefault(child.fanOut, Counter())[child.status] += 1
    progress = [
        ", ".join(f"{counts[phase]} {phase.value}" for phase in PROGRESS_ORDER if counts[phase])
        for counts in fan_outs.values()
    ]
    if len(progress) > 1:
        progress = [f"{state}: {said}" for state, said in zip(fan_outs, progress, strict=True)]
    return {
        "children": shown[:CHILDREN_LIMIT],
        "droppedChildren": max(0, len(shown) - CHILDREN_LIMIT),
        "childProgress": "; ".join(progress) or None,
    }


def resume_point(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The snapshot a core is restored from, in the current version, out of a Run's status
    as it was stored (its ``snapshot``, with ``turns`` as the history); None when no
    snapshot was written yet. Raises ``SnapshotUnreadable`` for one of an unknown version
    or shape."""
    snapshot = status.get("snapshot")
    if snapshot is None:
        return None
    turns = status.get("turns")
    if turns is None:
        turns = []
    if not isinstance(turns, list):
        raise SnapshotUnreadable(f"its turns are a {type(turns).__name__}, not a list")
    current = snapshots.migrate(snapshot, turns)
    deliveries = status.get("deliveries")
    if deliveries is None:
        deliveries = []
    if not isinstance(deliveries, list):
        raise SnapshotUnreadable(f"its deliveries are a {type(deliveries).__name__}, not a list")
    trail = status.get(TRAIL_KEY)
    if trail is None:
        trail = current.get(TRAIL_KEY) or []
    if not isinstance(trail, list):
        raise SnapshotUnreadable(f"its trail is a {type(trail).__name__}, not a list")
    return {**current, DELIVERED_KEY: deliveries, TRAIL_KEY: trail}
