"""Every state a Run was ever saved in restores; one that cannot says why.

Cases:
- every golden snapshot in ``tests/unit/snapshots/`` (a Run's status as an operator of
  that format wrote it, the API server's nulls dropped) restores: a golden of the current
  version gives back the very status it was (the restored core writes it again, field
  for field, besides fields added since it was written: ``acceptedEvents``,
  ``waitingFor``, ``ignoredSignals``); an older one gives back every field that core had
  (version 0: its history from the snapshot's own copy, a shared ``seq`` going on as both
  counters; version 1: no delivery under way; before version 3: the one leaf is the list
  of active leaves, ``endedIn`` a list too); every restored core resumes and its
  status fits the models;
- there is a golden of the current version for every scenario of ``tests.snapshots``;
- ``migrate``: version 1 takes its history from ``status.turns`` and ignores the keys a
  merge patch left of a version 0 snapshot; version 0 without ``execs`` restores with
  none; migrating a migrated snapshot changes nothing;
- unreadable: a newer version, a version that is not a number, a snapshot that is not an
  object, turns that are not a list, a missing or wrong field: ``SnapshotUnreadable``
  saying which, never another exception.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api.status import RunStatus
from kubeturn.errors import SnapshotUnreadable
from kubeturn.orchestrator import snapshots, statuses
from kubeturn.orchestrator.core import RunCore
from tests.snapshots import GOLDEN, SCENARIOS, loaded, stored_status
from tests.statuses import unfit, without_nulls

GOLDENS = sorted(GOLDEN.glob("v*.json"))
LEAF_KEYS = ("leaf", "endedIn")
"""A Machine's leaf before version 3: its one active leaf; from 3 a list of them."""


def read(path: Path) -> dict[str, Any]:
    golden: dict[str, Any] = json.loads(path.read_text())
    return golden


def restore(machine: str, status: dict[str, Any]) -> RunCore:
    return RunCore(
        loaded(machine),
        workspace=None,
        new_id=lambda: "r",
        snapshot=statuses.resume_point(status),
    )


def _as_in(written: dict[str, Any], golden: dict[str, Any]) -> dict[str, Any]:
    """``written`` with only the keys ``golden`` has, at the top and in its snapshot."""
    kept = {key: written[key] for key in golden if key in written}
    if isinstance(golden.get("snapshot"), dict) and isinstance(kept.get("snapshot"), dict):
        kept["snapshot"] = {
            k: kept["snapshot"][k] for k in golden["snapshot"] if k in kept["snapshot"]
        }
    return kept


def test_the_goldens_are_there() -> None:
    names = {path.name for path in GOLDENS}
    for scenario in SCENARIOS:
        assert f"v{snapshots.VERSION}-{scenario}.json" in names
    assert any(name.startswith("v0-") for name in names)


@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_a_golden_snapshot_restores(path: Path) -> None:
    golden = read(path)
    status = golden["status"]
    core = restore(golden["machine"], copy.deepcopy(status))
    again = stored_status(core)
    assert unfit(RunStatus, again) == []
    if golden["version"] == snapshots.VERSION:
        # Field for field; a field added to the status since the golden was written (what
        # the Run accepts, which signals it ignored) is new, and the only difference.
        assert _as_in(again, status) == status
    else:
        old = status["snapshot"]
        new = without_nulls(json.loads(json.dumps(core.snapshot())))
        for key, value in old.items():
            if key == "version":
                assert new[key] == snapshots.VERSION
            elif key == "seq":
                assert new["turnSeq"] == new["deliverySeq"] == value
            elif key == "machine" and value is not None:
                assert {k: new["machine"][k] for k in value if k not in LEAF_KEYS} == {
                    k: v for k, v in value.items() if k not in LEAF_KEYS
                }
                assert new["machine"]["active"] == ([value["leaf"]] if value["leaf"] else [])
                ended = value.get("endedIn")
                assert new["machine"]["endedIn"] == ([ended] if ended else [])
            else:
                assert new[key] == value, key
        assert new["history"] == old.get("history", status.get("turns", []))
    core.resume()


def test_version_1_reads_its_history_from_turns_and_ignores_what_a_patch_left() -> None:
    _, core = SCENARIOS["finished-with-history"]()
    status = stored_status(core)
    stale = {**status, "snapshot": {**status["snapshot"], "history": [], "seq": 99}}
    restored = restore("handoff", stale)
    assert restored.snapshot() == core.snapshot()


def test_a_version_0_snapshot_without_execs_restores_with_none() -> None:
    _, core = SCENARIOS["running-live-turn"]()
    old = {k: v for k, v in core.snapshot().items() if k not in ("version", "execs")}
    restored = restore("handoff", {"snapshot": old})
    assert restored.execs == {}
    assert restored.snapshot() == core.snapshot()


def test_migrating_again_changes_nothing() -> None:
    for path in GOLDENS:
        status = read(path)["status"]
        once = statuses.resume_point(status)
        assert once is not None
        assert snapshots.migrate(once, status.get("turns", [])) == once


def test_no_snapshot_no_resume() -> None:
    assert statuses.resume_point({"conditions": []}) is None


def unreadable(status: dict[str, Any], machine: str = "handoff") -> str:
    with pytest.raises(SnapshotUnreadable) as raised:
        restore(machine, status)
    return str(raised.value)


def test_a_newer_version_is_refused_saying_so() -> None:
    status = stored_status(SCENARIOS["running-live-turn"]()[1])
    status["snapshot"]["version"] = snapshots.VERSION + 1
    said = unreadable(status)
    assert f"version {snapshots.VERSION + 1}" in said
    assert "newer kubeturn" in said


@pytest.mark.parametrize("version", ["1", -1, 1.5, True, None])
def test_a_version_that_is_not_one_is_refused(version: Any) -> None:
    status = stored_status(SCENARIOS["pending"]()[1])
    status["snapshot"]["version"] = version
    assert "version" in unreadable(status)


def test_a_snapshot_that_is_not_an_object_is_refused() -> None:
    assert "not an object" in unreadable({"snapshot": ["phase"]})
    assert "not a list" in unreadable({"snapshot": {"version": 1}, "turns": {}})


@pytest.mark.parametrize("field", ["phase", "machine", "turns", "execs", "turnSeq", "epochs"])
def test_a_damaged_snapshot_is_refused_naming_what(field: str) -> None:
    status = stored_status(SCENARIOS["running-live-turn"]()[1])
    missing = copy.deepcopy(status)
    del missing["snapshot"][field]
    assert f"lacks the field {field!r}" in unreadable(missing)
    wrong = copy.deepcopy(status)
    wrong["snapshot"][field] = {"not": ["what", "it", "was"]} if field != "machine" else 7
    assert "a field is wrong" in unreadable(wrong) or "lacks the field" in unreadable(wrong)


def test_a_damaged_record_is_refused() -> None:
    status = stored_status(SCENARIOS["finished-with-history"]()[1])
    status["turns"][0]["outcome"] = "exploded"
    assert "a field is wrong" in unreadable(status)
