"""Stalls (ADR 0115; ``kubeturn.orchestrator.stalls``), as ``RunCore`` decides them.

The fixture ``stalls`` gives the coder ``stallAfter: 1m`` and the reviewer none. Cases:
a live Turn with no progress for 1m is swept (no cause, naming its running Submission)
and routed as the Agent's fault, reason ``stalled``, recorded once ``aborted`` saying
so; progress moves the deadline; a stall no state routes fails the Run saying so; the
clock stops while a pick's work runs below the Agent's state and starts again at its
answer; a slot without ``stallAfter`` never stalls; a restore starts every clock again.
"""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.effects import Finished, StartExec, Sweep
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn_harness.wire import Outcome, Receipt
from tests.unit.cores import kinds, only, restored, settle_sweep, started

IID = "default.stalls/root/coder/t-n1"
STALLED = (
    "stalled: no progress (no model request, output streamed, answer, tool call or pick) for 1m"
)


def test_a_turn_without_progress_for_its_stall_after_is_swept_and_routed() -> None:
    core, _ = started("stalls", coder="s1")
    assert core.next_fire() == 60.5
    assert core.fire_due(60.0).items == []
    assert core.progressed("t1", "s1", 30.0).items == []
    assert core.next_fire() == 90.0
    assert core.fire_due(89.0).items == []
    effects = core.fire_due(90.0)
    assert kinds(effects) == ["Sweep", "Finished"]
    assert only(effects, Sweep) == Sweep("t1", "coder", IID, None, "s1")
    assert only(effects, Finished) == Finished(
        "Failed", "stalled", "reached the failed final 'stuck'"
    )
    record = settle_sweep(core, only(effects, Sweep), "s1", 91.0)
    assert (record.outcome, record.cause) == (Outcome.ABORTED, None)
    assert record.message is not None
    assert record.message.startswith(STALLED)
    assert [r.name for r in core.history] == ["t1"]
    assert core.next_fire() is None


def test_a_stall_no_state_routes_fails_the_run_saying_so() -> None:
    core, _ = started("stalls", coder="s1")
    core.pick(IID, "submit", {}, 1.0)
    core.admitted("t2", "s2", 2.0)
    effects = core.fire_due(62.0)
    assert [(s.turn, s.submission) for s in effects.of(Sweep) if isinstance(s, Sweep)] == [
        ("t2", "s2")
    ]
    assert core.phase is RunPhase.FAILED
    assert core.message is not None
    assert "the invoke of state 'again' failed and no onError handles it" in core.message
    assert STALLED in core.message


def test_the_clock_stops_while_a_picks_work_runs_and_starts_again_at_its_answer() -> None:
    core, _ = started("stalls", coder="s1")
    answer, effects = core.pick(IID, "test", {}, 10.0)
    assert isinstance(answer, Receipt)
    assert answer.outstanding
    exec_ = only(effects, StartExec)
    assert core.next_fire() is None
    assert core.fire_due(500.0).items == []
    effects = core.exec_done(exec_.invocation, ExecResult(0, "ok"), 600.0)
    assert kinds(effects) == ["Answer"]
    assert core.next_fire() == 660.0


def test_a_progress_of_a_submission_that_does_not_run_changes_nothing() -> None:
    core, _ = started("stalls", coder="s1")
    core.progressed("t1", "s9", 30.0)
    core.progressed("t9", "s1", 30.0)
    assert core.next_fire() == 60.5


def test_a_slot_without_stall_after_never_stalls() -> None:
    core, _ = started("stalls", coder="s1")
    core.pick(IID, "submit", {}, 1.0)
    core.admitted("t2", "s2", 2.0)
    core.pick(core.turns["t2"].instanceId, "submit", {}, 3.0)
    core.admitted("t3", "s3", 4.0)
    assert core.watches_progress("t3") is False
    assert core.watches_progress("t2") is True
    assert core.fire_due(10_000.0).of(Sweep) == []
    assert core.turns["t3"].agent == "reviewer"


def test_a_restore_starts_every_clock_again() -> None:
    core, _ = started("stalls", coder="s1")
    again = restored(core)
    assert again.next_fire() == 60.5
    assert again.resume(300.0).items == []
    assert again.next_fire() == 360.0
    assert kinds(again.fire_due(360.0)) == ["Sweep", "Finished"]


def test_a_turn_that_settled_completed_waits_for_its_nudge_not_its_clock() -> None:
    core, _ = started("stalls", coder="s1")
    nudge = core.settled("t1", "s1", Outcome.COMPLETED, 5.0)
    assert kinds(nudge) == ["Admit"]
    assert core.next_fire() is None
    core.admitted("t1", "s2", 6.0)
    assert core.next_fire() == 66.0
