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
- Any version may hold ``ignoredSignals`` (id → why): the signals no state took (ADR
  0067); one without it (every snapshot written before) had none.

A new version gets a step here, a golden snapshot in ``tests/unit/snapshots/`` and a
line above; a golden is never changed once written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubeturn.errors import SnapshotUnreadable

VERSION = 2
"""The version this kubeturn writes."""
VERSION_KEY = "version"
HISTORY_KEY = "history"
"""The core's snapshot's key of the history; a Run's status holds it as ``turns``."""
LEGACY_KEYS = (HISTORY_KEY, "seq")
"""Keys of a version 0 snapshot that version 1 has not. A status is written by merge
patch, which keeps a key the new snapshot lacks, so a writer names these to remove them,
and a reader of version 1 ignores them."""


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
        return _from_1(_from_0(snapshot, turns))
    current = {k: v for k, v in snapshot.items() if k not in LEGACY_KEYS}
    current = {**current, HISTORY_KEY: list(turns)}
    return _from_1(current) if version == 1 else current


def _from_1(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """Version 1 → 2: a kubeturn that wrote version 1 had no deliveries, so none runs."""
    data = dict(snapshot)
    data.setdefault("delivering", [])
    data[VERSION_KEY] = VERSION
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
