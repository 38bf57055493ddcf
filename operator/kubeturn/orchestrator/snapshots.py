"""The versions of a Run's snapshot, and the one migration from any of them to the current.

A Run's core is restored from what was saved of it (``Run.status``, or a local Run's
``snapshot.json``), possibly by an older kubeturn. The snapshot says which format it is
in (``version``); ``migrate`` turns every version this kubeturn has written into the
current one, and refuses any other with ``SnapshotUnreadable`` saying why, never a
guess (ADR 0052). Pure: no IO, no clock.

Versions:

- **0** (no ``version`` key): written until snapshots carried one. The settled Turns'
  records are inside the snapshot (``history``) as well as in ``status.turns``; the
  earliest also number Turns and deliveries from one shared ``seq``, and the first
  drafts kept no ``execs``.
- **1**: the records are ``status.turns`` only (ADR 0045); Turns and deliveries are
  numbered apart (``turnSeq``, ``deliverySeq``; ADR 0021); ``execs`` lists the commands
  started and not yet answered.
- **2**: ``delivering`` lists the deliveries (``deliver`` invokes) started and not yet
  ended; their records are ``status.deliveries`` (ADR 0063). A version 1 snapshot had
  none under way.
- **3**: the Machine's configuration is a set of active leaves (``machine.active``, a
  list; ``machine.endedIn`` too), for parallel states, with fan-out children
  (``machine.children``) and the outputs of finals inside regions (``machine.finals``)
  (ADR 0112). A version 2 Machine had one leaf (``machine.leaf``), ``""`` once ended.
- Any version may hold ``ignoredSignals`` (id → why): the signals no state took (ADR
  0067); one without it (every snapshot written before) had none.
- Any version may hold ``worktrees``: the fan-out children's own worktrees (each child's
  root, branch, base, repos once made, error, whether asked, the invokes waiting for
  them; ADR 0113); one without it (every snapshot written before) had no child asking.
- Any version may hold ``usage`` (Agent slot → the tokens and cost of its recorded
  Turns, ADR 0114); one without it (every snapshot written before) counted none.
- Any version may hold ``retries``: the retries of faulted Turns waiting for their backoff
  (ADR 0115); one without it (every snapshot written before) had none waiting.
- Any version may hold ``moves`` (transitions that moved the Machine) and, as the core
  keeps it, ``trail`` (the last of them; a status holds it as ``trail``, ADR 0109); one
  without them (every snapshot written before) shows no trail.

A new version gets a step here, a golden snapshot in ``tests/unit/snapshots/`` and a
line above; a golden is never changed once written. ``write`` and ``read`` are the
current version's format: what a core keeps (``Saved``) as JSON, and back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeturn.api.status import DeliveryRecord, TrailEntry
from kubeturn.errors import SnapshotUnreadable
from kubeturn.machine import interpreter
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator import worktrees as child_worktrees
from kubeturn.orchestrator.effects import StartDeliver, StartExec
from kubeturn.orchestrator.retries import Retry
from kubeturn.orchestrator.turns import Delivery, Turn, TurnRecord
from kubeturn_harness.wire import Notice, Usage

VERSION = 3
"""The version this kubeturn writes."""
VERSION_KEY = "version"
HISTORY_KEY = "history"
"""The core's snapshot's key of the history; a Run's status holds it as ``turns``."""
TRAIL_KEY = "trail"
"""The core's snapshot's key of the trail; a Run's status holds it as ``trail``."""
DELIVERED_KEY = "delivered"
"""The core's snapshot's key of the delivery records; a Run's status holds them as
``deliveries``."""
USAGE_KEY = "usage"
"""The core's snapshot's key of each Agent slot's summed usage (ADR 0114)."""
WORKTREES_KEY = "worktrees"
"""The core's snapshot's key of the per-child worktrees (a list: a merge patch replaces
it whole)."""
RETRIES_KEY = "retries"
"""The core's snapshot's key of the retries waiting for their backoff (ADR 0115)."""
STARTED_KEY = "startedAt"
"""The core's snapshot's key of when the Run started (ADR 0117)."""
LEGACY_KEYS = (HISTORY_KEY, "seq")
"""Keys of a version 0 snapshot that version 1 has not. A status is written by merge
patch, which keeps a key the new snapshot lacks, so a writer names these to remove them,
and a reader of version 1 ignores them."""


@dataclass(frozen=True)
class Saved:
    """What a Run's core keeps, as its snapshot holds it (``RunCore`` has each field)."""

    phase: str
    message: str | None
    machine: interpreter.Config | None
    """None until the Run starts."""
    turns: Sequence[Turn]
    deliveries: Sequence[Delivery]
    epochs: Mapping[str, int]
    notices: Mapping[str, Sequence[Notice]]
    history: Sequence[TurnRecord]
    recorded: int
    signals: Sequence[str]
    ignored: Mapping[str, str]
    execs: Sequence[StartExec]
    delivering: Sequence[StartDeliver]
    delivered: Sequence[DeliveryRecord]
    cancelled: bool
    trail: Sequence[TrailEntry]
    moves: int
    turn_seq: int
    delivery_seq: int
    worktrees: Mapping[StatePath, child_worktrees.ChildWorktrees] = field(default_factory=dict)
    usage: Mapping[str, Usage] = field(default_factory=dict)
    """Tokens (and cost) of each Agent slot's recorded Turns over the Run's life."""
    retries: Sequence[Retry] = ()
    started: float | None = None
    """When the Run started (ADR 0117); absent from a snapshot written before limits."""


def write(saved: Saved) -> dict[str, Any]:
    """``saved`` as JSON, in the current version."""
    return {
        VERSION_KEY: VERSION,
        "phase": saved.phase,
        "message": saved.message,
        "machine": interpreter.snapshot(saved.machine) if saved.machine else None,
        "turns": [t.model_dump(mode="json", by_alias=True) for t in saved.turns],
        "deliveries": [d.model_dump(mode="json") for d in saved.deliveries],
        "epochs": dict(saved.epochs),
        "notices": {k: [n.model_dump(mode="json") for n in v] for k, v in saved.notices.items()},
        HISTORY_KEY: [r.model_dump(mode="json") for r in saved.history],
        "recorded": saved.recorded,
        "signals": list(saved.signals),
        "ignoredSignals": dict(saved.ignored),
        "execs": [
            {
                "invocation": e.invocation,
                "command": e.command,
                "cwd": e.cwd,
                "timeout": e.timeout_s,
            }
            for e in saved.execs
        ],
        "delivering": [
            {
                "invocation": d.invocation,
                "state": d.state,
                "slot": d.slot,
                "message": d.message,
                "push": d.push,
                "author": {"name": d.author_name, "email": d.author_email},
            }
            for d in saved.delivering
        ],
        DELIVERED_KEY: [r.model_dump(mode="json", exclude_none=True) for r in saved.delivered],
        "cancelled": saved.cancelled,
        TRAIL_KEY: [e.model_dump(mode="json", by_alias=True) for e in saved.trail],
        "moves": saved.moves,
        "turnSeq": saved.turn_seq,
        "deliverySeq": saved.delivery_seq,
        WORKTREES_KEY: child_worktrees.write(saved.worktrees),
        USAGE_KEY: {
            agent: usage.model_dump(mode="json", exclude_none=True)
            for agent, usage in saved.usage.items()
        },
        RETRIES_KEY: [r.model_dump(mode="json", by_alias=True) for r in saved.retries],
        STARTED_KEY: saved.started,
    }


def read(data: Mapping[str, Any]) -> Saved:
    """A snapshot of the current version (``migrate`` makes one of any older), read; a
    missing or wrong field raises ``KeyError``, ``TypeError``, ``ValueError`` or
    ``AttributeError``, for the core to report."""
    if data.get(VERSION_KEY) != VERSION:
        raise ValueError(f"version {data.get(VERSION_KEY)!r} where {VERSION} was expected")
    machine = data.get("machine")  # null, so absent once stored, until the Run starts
    return Saved(
        phase=str(data["phase"]),
        message=data.get("message"),
        machine=interpreter.restore(machine) if machine is not None else None,
        turns=[Turn.model_validate(t) for t in data["turns"]],
        deliveries=[Delivery.model_validate(d) for d in data["deliveries"]],
        epochs={str(key): int(epoch) for key, epoch in data["epochs"].items()},
        notices={k: [Notice.model_validate(n) for n in v] for k, v in data["notices"].items()},
        history=[TurnRecord.model_validate(r) for r in data[HISTORY_KEY]],
        recorded=int(data["recorded"]),
        signals=list(data["signals"]),
        # Absent from a snapshot written before signals could be ignored: none was.
        ignored={str(k): str(v) for k, v in dict(data.get("ignoredSignals") or {}).items()},
        execs=[
            StartExec(e["invocation"], e["command"], e["cwd"], float(e["timeout"]))
            for e in data["execs"]
        ],
        delivering=[
            StartDeliver(
                d["invocation"],
                d["state"],
                d["slot"],
                d["message"],
                bool(d["push"]),
                d["author"]["name"],
                d["author"]["email"],
            )
            for d in data["delivering"]
        ],
        delivered=[DeliveryRecord.model_validate(r) for r in data[DELIVERED_KEY]],
        cancelled=bool(data["cancelled"]),
        # Absent from a snapshot written before the trail was kept: none shows.
        trail=[TrailEntry.model_validate(e) for e in data.get(TRAIL_KEY) or []],
        moves=int(data.get("moves") or 0),
        turn_seq=int(data["turnSeq"]),
        delivery_seq=int(data["deliverySeq"]),
        # Absent from a snapshot written before children had worktrees of their own.
        worktrees=child_worktrees.read(data.get(WORKTREES_KEY) or []),
        # Absent from a snapshot written before usage was summed: none was counted.
        usage={
            str(agent): Usage.model_validate(usage)
            for agent, usage in dict(data.get(USAGE_KEY) or {}).items()
        },
        # Absent from a snapshot written before retries were declared: none was waiting.
        retries=[Retry.model_validate(r) for r in data.get(RETRIES_KEY) or []],
        # Absent from a snapshot written before limits: its Run's wall time is unknown.
        started=float(data[STARTED_KEY]) if data.get(STARTED_KEY) is not None else None,
    )


def version_of(snapshot: Mapping[str, Any]) -> int:
    """The snapshot's version; 0 when it has none. Refuses one that is not a version this
    kubeturn knows."""
    version = snapshot.get(VERSION_KEY, 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SnapshotUnreadable(f"its version is {version!r}, not a number of a version")
    if version > VERSION:
        raise SnapshotUnreadable(
            f"it is version {version}, written by a newer kubeturn; this one reads versions "
            f"0 to {VERSION}: run a kubeturn that reads it"
        )
    return version


def migrate(snapshot: Any, turns: Sequence[Any]) -> dict[str, Any]:
    """The core's snapshot in the current version, its history under ``HISTORY_KEY``, from
    ``snapshot`` as a status of any version holds it and that status's ``turns``.

    Only the shape changes; whether the values restore is the core's to find out.
    """
    if not isinstance(snapshot, Mapping):
        raise SnapshotUnreadable(f"it is a {type(snapshot).__name__}, not an object")
    version = version_of(snapshot)
    if version == 0:
        return _from_2(_from_1(_from_0(snapshot, turns)))
    current = {k: v for k, v in snapshot.items() if k not in LEGACY_KEYS}
    current = {**current, HISTORY_KEY: list(turns)}
    if version == 1:
        return _from_2(_from_1(current))
    return _from_2(current) if version == 2 else current


def _from_2(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """Version 2 → 3: the Machine's one leaf is its set of active leaves (none once it
    ended, where ``endedIn`` keeps the one it ended in)."""
    data = dict(snapshot)
    machine = data.get("machine")
    if isinstance(machine, Mapping) and "leaf" in machine:
        moved = {k: v for k, v in machine.items() if k != "leaf"}
        moved["active"] = [machine["leaf"]] if machine["leaf"] else []
        ended = machine.get("endedIn")
        moved["endedIn"] = [ended] if ended else []
        data["machine"] = moved
    data[VERSION_KEY] = VERSION
    return data


def _from_1(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 → 2: a kubeturn that wrote version 1 had no deliveries, so none runs."""
    data = dict(snapshot)
    data.setdefault("delivering", [])
    data[VERSION_KEY] = 2
    return data


def _from_0(snapshot: Mapping[str, Any], turns: Sequence[Any]) -> dict[str, Any]:
    """Version 0 → 1: the history is the snapshot's own (exactly what that core kept);
    a shared ``seq`` goes on as both counters, so no Turn name or delivery id is used twice
    (ADR 0021); a snapshot without ``execs`` had no command it could restart."""
    data = {k: v for k, v in snapshot.items() if k != "seq"}
    shared = snapshot.get("seq", 0)
    data.setdefault("turnSeq", shared)
    data.setdefault("deliverySeq", shared)
    data.setdefault("execs", [])
    data.setdefault(HISTORY_KEY, list(turns))
    data[VERSION_KEY] = 1
    return data
