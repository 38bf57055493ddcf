"""A Run's trail: the transitions that moved its Machine, in its status (ADR 0109).

Cases:
- eventless transitions and a signal's: each move recorded once, in order, with its
  event (None for ``always``) and the time of the event that caused it; a transition
  that moves nothing (an unhandled signal) adds nothing;
- the status shows the trail in ``trail`` (not in ``snapshot``) and counts what it
  dropped: past ``TRAIL_LIMIT`` the oldest go first, ``droppedTrail`` counts them;
- a core restored from its status as the API server keeps it continues the same trail
  (its snapshot equal to the one never restored), and keeps adding to it;
- a status written before the trail was kept resumes with none.
"""

from __future__ import annotations

from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.snapshots import TRAIL_KEY
from kubeturn.orchestrator.trail import TRAIL_LIMIT
from tests.unit.cores import new_core, restored_from_status


def moves(core: RunCore) -> list[tuple[str, str | None, str, float]]:
    return [(e.from_, e.event, e.to, e.at) for e in core.trail]


def test_every_move_is_recorded_once_in_order() -> None:
    core = new_core("always")
    core.start(1.0)
    core.signal("go", None, 2.0)
    assert moves(core) == [
        ("idle", "go", "a", 2.0),
        ("a", None, "b", 2.0),
        ("b", None, "c", 2.0),
        ("c", None, "b", 2.0),
        ("b", None, "c", 2.0),
        ("c", None, "b", 2.0),
        ("b", None, "c", 2.0),
        ("c", None, "b", 2.0),
        ("b", None, "settled", 2.0),
    ]
    core.signal("go", None, 3.0)
    assert len(core.trail) == core.moves == 9


def test_the_status_holds_the_newest_moves_and_counts_the_dropped() -> None:
    core = new_core("toggle")
    core.start(0.0)
    for n in range(TRAIL_LIMIT + 30):
        core.signal("flip", None, float(n))
    status = statuses.run_status(core.view(), core.snapshot())
    assert len(status.trail) == TRAIL_LIMIT
    assert status.droppedTrail == 30
    assert status.trail[0].at == 30.0
    assert status.trail[-1].at == float(TRAIL_LIMIT + 29)
    assert status.snapshot is not None
    assert TRAIL_KEY not in status.snapshot.model_dump()
    dumped = status.model_dump(mode="json", by_alias=True)["trail"][-1]
    assert dumped == {"from": "down", "event": "flip", "to": "up", "at": 129.0}


def test_a_core_restored_from_its_status_keeps_its_trail() -> None:
    plain = new_core("always")
    plain.start(1.0)
    plain.signal("go", None, 2.0)
    restarted = restored_from_status(plain)
    assert restarted.snapshot() == plain.snapshot()
    assert moves(restarted) == moves(plain)
    flipped = new_core("toggle")
    flipped.start(0.0)
    flipped.signal("flip", None, 1.0)
    again = restored_from_status(flipped)
    again.signal("flip", None, 2.0)
    assert moves(again) == [("up", "flip", "down", 1.0), ("down", "flip", "up", 2.0)]
    assert again.moves == 2


def test_a_status_written_before_the_trail_resumes_with_none() -> None:
    core = new_core("toggle")
    core.start(0.0)
    core.signal("flip", None, 1.0)
    status = statuses.run_status(core.view(), core.snapshot()).model_dump(
        mode="json", by_alias=True
    )
    del status["trail"]
    del status["snapshot"]["moves"]
    resumed = statuses.resume_point(status)
    assert resumed is not None
    assert resumed[TRAIL_KEY] == []
    assert new_core("toggle", snapshot=resumed).trail == []
