"""The outcome table (docs/turn-semantics.md §2), row by row, as ``RunCore`` makes it.

Each test drives the core by hand (no IO; ids from a counter; time as an argument),
asserts the Sweep it decides (cause and the Submission it names), then plays the
Harness: it settles the running Submission by the sweep's body with the Harness's own
rule (``kubeturn_harness.settlements.running_outcome``: ``ended`` exactly for cause
``pick`` naming it, ``aborted`` for every other body) and asserts the Turn's one record.
Every record is checked against ``RunCore.verdict`` (what the AgentTurn's finalizer
writes), asked before the sweep's report and after the record: the same outcome and
message each time.

Cases, by row:
- the Turn's own pick ended it (``ended``): the pick itself; the nested Agent's pick is
  the cause for both Agents when the outer one's pick is out; a timer the pick's route
  armed, after the nudge admitted Submission 2 (the sweep names Submission 2); an exec
  the pick's route started below the Agent's state, whose onDone leaves it (the
  outstanding pick answered ``turnComplete`` with the exec's output, not stopped);
- something else ended it (``aborted``): a Turn timeout armed before the pick; an outside
  signal; another Agent's pick (the outer Agent's Turn); CANCEL (every live Turn swept,
  the Run cancelled), also before a Turn's first admission was answered (its record says
  so); a Turn timeout while the pick's exec runs (answered ``stopped``);
- the pick routed to a failed final (``ended``, the Run Failed);
- a throw in the Machine or a defect no state catches (``aborted``): an expression
  error; an exec error nothing handles;
- no sweep came within the Harness's wait (the Orchestrator was down): the re-issued
  sweep finds the Submission settled ``aborted``, and the record says so;
- over before it started: the surface read is gone (404), the late admission settles
  ``aborted``;
- queued behind a swept Submission: the core orders the sweep before the next admission
  on the same conversation;
- the run returned with the Turn open (``completed``): the Turn stays live and is nudged;
- the run threw (``failed``): a fault for the Machine, the conversation's epoch bumps;
  the Turn is recorded ``failed`` with its Submission's words when the fault's route
  (``agent.fault`` or ``onError``) leaves its state (a Harness restart, a provider
  failure), and when nothing catches the fault and the Run fails; a person's deletion
  of a running Turn is the Agent's fault too, but its Submission was ``aborted``, and
  so is the Turn; the verdict of a Turn this core does not hold is None;
- an exit by the Turn's own pick while its nudge is being admitted: the record
  should follow the Submission that ran (``aborted``), not the exit.
"""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.effects import (
    Admit,
    Answer,
    Finished,
    StartExec,
    StopExec,
    Sweep,
)
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.turns import TurnPhase, TurnRecord
from kubeturn_harness.wire import Outcome, Receipt
from tests.unit.cores import (
    HANDOFF_IID,
    kinds,
    new_core,
    only,
    record_of,
    restored,
    settle_sweep,
    started,
)


def outcomes(record: TurnRecord) -> dict[str, Outcome | None]:
    return {s.id: s.outcome for s in record.submissions}


class TestTheTurnsOwnPickEndedIt:
    """Row: the Turn's own pick ended the Turn, and the sweep says ``cause: "pick"``."""

    def test_the_pick_itself_leaves_the_state(self) -> None:
        core, _ = started("handoff", coder="s1")
        answer, effects = core.pick(HANDOFF_IID, "submit", {"summary": "did it"}, 1.0)
        assert answer == Receipt(
            delivered=True, event="submit", turnComplete=True, deliveryId="d1-n2"
        )
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, "pick", "s1"),
            Finished("Succeeded", "did it", None),
        ]
        record = settle_sweep(core, only(effects, Sweep), "s1", 2.0)
        assert (record.outcome, record.cause, record.message) == (Outcome.ENDED, "pick", None)
        assert outcomes(record) == {"s1": Outcome.ENDED}
        assert (record.agent, record.state, record.instanceId) == ("coder", "work", HANDOFF_IID)
        assert (record.startedAt, record.settledAt) == (0.0, 2.0)

    def test_a_timer_the_picks_route_armed_names_the_running_submission(self) -> None:
        # Submission 1 picks, its route arms a timer, Submission 1 completes,
        # the nudge admits Submission 2, the timer leaves the state: Submission 2 ends.
        core, admits = started("timer_route", coder="s1")
        iid = admits["coder"].instance_id
        answer, effects = core.pick(iid, "ship", {}, 1.0)
        assert answer == Receipt(delivered=True, event="ship", deliveryId="d1-n2", allowed=["note"])
        assert effects.items == []
        nudged = core.settled("t1", "s1", Outcome.COMPLETED, 2.0)
        nudge = only(nudged, Admit)
        assert (nudge.turn, nudge.instance_id, nudge.nudge, nudge.continue_) == (
            "t1",
            iid,
            True,
            True,
        )
        core.admitted("t1", "s2", 3.0)
        assert core.fire_due(59.0).items == []
        effects = core.fire_due(61.0)
        sweep = only(effects, Sweep)
        assert (sweep.turn, sweep.cause, sweep.submission) == ("t1", "pick", "s2")
        record = settle_sweep(core, sweep, "s2", 62.0)
        assert record.outcome is Outcome.ENDED
        assert outcomes(record) == {"s1": Outcome.COMPLETED, "s2": Outcome.ENDED}
        assert core.phase is RunPhase.SUCCEEDED

    def test_an_exec_the_pick_started_below_whose_done_leaves_the_state(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        answer, effects = core.pick(iid, "test", {}, 1.0)
        assert answer == Receipt(delivered=True, event="test", deliveryId="d1-n2", outstanding=True)
        assert effects.items == [StartExec("work.testing#3", "make test", "/work", 300.0)]
        assert core.delivery("d1-n2") is None
        effects = core.exec_done("work.testing#3", ExecResult(0, "4 passed"), 5.0)
        output = {"exitCode": 0, "output": "4 passed", "timedOut": False}
        answered = Receipt(
            delivered=True,
            event="test",
            deliveryId="d1-n2",
            turnComplete=True,
            answer=output,
            stopped=False,
        )
        assert effects.items == [
            Answer("d1-n2", answered),
            Sweep("t1", "coder", iid, "pick", "s1"),
            Finished("Succeeded", None, None),
        ]
        assert core.delivery("d1-n2") == answered
        assert settle_sweep(core, only(effects, Sweep), "s1", 6.0).outcome is Outcome.ENDED

    def test_a_nested_agents_pick_is_the_cause_for_both_agents(self) -> None:
        core, admits = started("nested", lead="s1", helper="s2")
        helper_iid = admits["helper"].instance_id
        _, effects = core.pick(helper_iid, "reply", {"text": "found it"}, 1.0)
        assert [(s.turn, s.cause) for s in effects.of(Sweep) if isinstance(s, Sweep)] == [
            ("t2", "pick")
        ]
        lead_iid = admits["lead"].instance_id
        asked, effects = core.pick(lead_iid, "ask", {}, 2.0)
        assert isinstance(asked, Receipt)
        assert asked.outstanding
        helper2 = only(effects, Admit)
        core.admitted(helper2.turn, "s3", 2.5)
        _, effects = core.pick(helper2.instance_id, "escalate", {}, 3.0)
        sweeps = [s for s in effects.of(Sweep) if isinstance(s, Sweep)]
        assert [(s.turn, s.cause, s.submission) for s in sweeps] == [
            (helper2.turn, "pick", "s3"),
            ("t1", "pick", "s1"),
        ]
        answer = only(effects, Answer).receipt
        assert (answer.event, answer.turnComplete, answer.answer) == (
            "ask",
            True,
            {"event": "escalate"},
        )
        for sweep, running in zip(sweeps, ("s3", "s1"), strict=True):
            assert settle_sweep(core, sweep, running, 4.0).outcome is Outcome.ENDED


class TestAnExitWhileTheNextAdmissionIsInFlight:
    """The limits of the one judge: a Turn its own pick ends while its nudge is
    being admitted names the Submission before it, which no longer runs, so the running
    Submission settles ``aborted`` ("conservative"); ADR 0015 takes the exit as the
    judgment only when "no nudge was out"."""

    def test_the_record_follows_the_submission_that_ran(self) -> None:
        core, _ = started("handoff", coder="s1")
        assert only(core.settled("t1", "s1", Outcome.COMPLETED, 1.0), Admit).nudge
        _, effects = core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 2.0)
        sweep = only(effects, Sweep)
        assert (sweep.cause, sweep.submission) == ("pick", None)
        core.admitted("t1", "s2", 2.5)
        record = settle_sweep(core, sweep, "s2", 3.0)
        assert outcomes(record) == {"s1": Outcome.COMPLETED, "s2": Outcome.ABORTED}
        assert record.outcome is Outcome.ABORTED


class TestSomethingElseEndedIt:
    """Row: a timer, an outside event, another party's event, the run's CANCEL."""

    def test_a_turn_timeout_armed_before_the_pick(self) -> None:
        core, _ = started("handoff", coder="s1")
        answer, effects = core.pick(HANDOFF_IID, "note", {}, 1.0)
        assert answer == Receipt(
            delivered=True,
            event="note",
            deliveryId="d1-n2",
            allowed=["submit", "note", "giveUp", "check"],
        )
        assert effects.items == []
        effects = core.fire_due(1800.0)
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, None, "s1"),
            Finished("Failed", None, "reached the failed final 'timedOut'"),
        ]
        record = settle_sweep(core, only(effects, Sweep), "s1", 1801.0)
        assert (record.outcome, record.cause) == (Outcome.ABORTED, None)
        assert outcomes(record) == {"s1": Outcome.ABORTED}

    def test_an_outside_signal(self) -> None:
        core, _ = started("handoff", coder="s1")
        effects = core.signal("stop", None, 1.0)
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, None, "s1"),
            Finished("Succeeded", "", None),
        ]
        assert settle_sweep(core, only(effects, Sweep), "s1", 2.0).outcome is Outcome.ABORTED

    def test_another_agents_pick(self) -> None:
        # The helper's pick leaves the lead's state too; the lead had no pick out, so
        # for the lead it is another party's event.
        core, admits = started("nested", lead="s1", helper="s2")
        _, effects = core.pick(admits["helper"].instance_id, "escalate", {}, 1.0)
        assert kinds(effects) == ["Sweep", "Sweep", "Finished"]
        helper, lead = effects.of(Sweep)
        assert isinstance(helper, Sweep)
        assert isinstance(lead, Sweep)
        assert (helper.turn, helper.cause, helper.submission) == ("t2", "pick", "s2")
        assert (lead.turn, lead.cause, lead.submission) == ("t1", None, "s1")
        assert settle_sweep(core, helper, "s2", 2.0).outcome is Outcome.ENDED
        assert settle_sweep(core, lead, "s1", 2.0).outcome is Outcome.ABORTED

    def test_the_runs_cancel_sweeps_every_live_turn(self) -> None:
        core, admits = started("nested", lead="s1", helper="s2")
        effects = core.cancel(1.0)
        assert effects.items == [
            Sweep("t2", "helper", admits["helper"].instance_id, None, "s2"),
            Sweep("t1", "lead", admits["lead"].instance_id, None, "s1"),
            Finished("Cancelled", None, "cancelled"),
        ]
        assert core.phase is RunPhase.CANCELLED
        assert core.live_turns() == []
        for sweep, running in zip(effects.of(Sweep), ("s2", "s1"), strict=True):
            assert isinstance(sweep, Sweep)
            assert settle_sweep(core, sweep, running, 2.0).outcome is Outcome.ABORTED

    def test_a_cancel_before_the_first_admission_is_answered(self) -> None:
        core, _ = started("handoff")  # a cap on live Turns may hold it back so
        effects = core.cancel(1.0)
        sweeps = [s for s in effects.of(Sweep) if isinstance(s, Sweep)]
        assert [(s.cause, s.submission) for s in sweeps] == [(None, None)]
        record = settle_sweep(core, sweeps[0], None, 2.0)
        assert (record.outcome, record.message) == (
            Outcome.ABORTED,
            "the Turn ended before its first Submission was admitted (it may have waited "
            "for a slot under a cap on live Turns)",
        )

    def test_a_turn_timeout_while_the_picks_exec_runs(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        core.pick(iid, "test", {}, 1.0)
        effects = core.fire_due(1800.0)
        stopped = Receipt(
            delivered=True, event="test", deliveryId="d1-n2", turnComplete=True, stopped=True
        )
        assert effects.items == [
            StopExec("work.testing#3"),
            Answer("d1-n2", stopped),
            Sweep("t1", "coder", iid, None, "s1"),
            Finished("Failed", None, "reached the failed final 'timedOut'"),
        ]
        assert settle_sweep(core, only(effects, Sweep), "s1", 1801.0).outcome is Outcome.ABORTED
        # The exec's late result finds nothing running.
        assert core.exec_done("work.testing#3", ExecResult(0, "late"), 1802.0).items == []


class TestThePickRoutedToAFailure:
    """Row: the Turn's own pick routed to a state that fails the Run."""

    def test_a_pick_routed_to_a_failed_final_ends_its_turn(self) -> None:
        core, _ = started("handoff", coder="s1")
        _, effects = core.pick(HANDOFF_IID, "giveUp", {}, 1.0)
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, "pick", "s1"),
            Finished("Failed", None, "reached the failed final 'failed'"),
        ]
        assert core.phase is RunPhase.FAILED
        assert core.message == "reached the failed final 'failed'"
        assert settle_sweep(core, only(effects, Sweep), "s1", 2.0).outcome is Outcome.ENDED


class TestAThrowOrADefectNoStateCatches:
    """Row: a throw in the Machine, or a defect that no state catches."""

    def test_an_expression_error_on_the_picks_route(self) -> None:
        core, _ = started("handoff", coder="s1")
        _, effects = core.pick(HANDOFF_IID, "check", {}, 1.0)
        message = (
            "the Machine faulted in state 'work': CEL expression 'event.level > 1' failed: "
            "no key 'level' (spec.machine.states.work.on.check.guard); no state handles "
            "error.expression"
        )
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, None, "s1"),
            Finished("Failed", None, message),
        ]
        assert settle_sweep(core, only(effects, Sweep), "s1", 2.0).outcome is Outcome.ABORTED

    def test_an_exec_error_nothing_handles(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        core.pick(iid, "test", {}, 1.0)
        failed = ExecResult(None, "", error="the Harness is unreachable")
        effects = core.exec_done("work.testing#3", failed, 2.0)
        message = (
            "the invoke of state 'work.testing' failed and no onError handles it: "
            "the Harness is unreachable"
        )
        assert kinds(effects) == ["Answer", "Sweep", "Finished"]
        assert only(effects, Sweep) == Sweep("t1", "coder", iid, None, "s1")
        assert only(effects, Finished) == Finished("Failed", None, message)
        assert settle_sweep(core, only(effects, Sweep), "s1", 3.0).outcome is Outcome.ABORTED


class TestNoSweepCameWithinTheWait:
    """Row: a pick found the Turn over, and no sweep came within the Harness's wait."""

    def test_a_sweep_lost_to_a_restart_is_sent_again_and_the_settlement_recorded(self) -> None:
        core, _ = started("handoff", coder="s1")
        _, effects = core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0)
        sweep = only(effects, Sweep)
        # The Orchestrator went down before the sweep left; the Harness's wait ran out.
        again = restored(core)
        assert again.resume().items == [sweep]
        late = "the Turn was over and no sweep came from the Orchestrator within 10 s"
        again.swept("t1", {"s1": (Outcome.ABORTED, None, late)}, 15.0)
        record = record_of(again, "t1")
        assert (record.outcome, record.cause, record.message) == (Outcome.ABORTED, "pick", late)


class TestOverBeforeItStarted:
    """Row: it was over before it started: the surface read answered 404."""

    def test_a_turn_whose_state_exits_before_admission_has_no_surface(self) -> None:
        core = new_core("handoff")
        admit = only(core.start(0.0), Admit)
        assert core.surface(admit.instance_id) is not None
        effects = core.signal("stop", None, 0.1)
        assert only(effects, Sweep) == Sweep("t1", "coder", HANDOFF_IID, None, None)
        assert core.surface(admit.instance_id) is None
        core.admitted("t1", "s1", 0.2)
        assert core.turns["t1"].phase is TurnPhase.SWEEPING
        core.swept("t1", {"s1": (Outcome.ABORTED, None, None)}, 0.3)
        record = record_of(core, "t1")
        assert record.outcome is Outcome.ABORTED
        assert outcomes(record) == {"s1": Outcome.ABORTED}


class TestQueuedBehindASweptSubmission:
    """Row: it was queued behind a swept Submission. The core orders every sweep before
    the next admission on the same conversation, so no new Turn queues behind one."""

    def test_the_sweep_comes_before_the_next_admission_on_the_conversation(self) -> None:
        core, admits = started("continued", coder="s1")
        iid = admits["coder"].instance_id
        assert iid == "default.continued/root/coder"
        _, effects = core.pick(iid, "submit", {}, 1.0)
        assert kinds(effects) == ["Sweep", "Admit"]
        sweep, admit = effects.items
        assert isinstance(sweep, Sweep)
        assert isinstance(admit, Admit)
        assert (sweep.instance_id, sweep.cause, sweep.submission) == (iid, "pick", "s1")
        assert (admit.turn, admit.instance_id, admit.continue_) == ("t2", iid, True)


class TestTheRunReturnedWithTheTurnOpen:
    """Row: the run returned, and the Turn is still open: ``completed``, and a nudge."""

    def test_a_completed_submission_keeps_the_turn_and_is_nudged(self) -> None:
        core, _ = started("handoff", coder="s1")
        effects = core.settled("t1", "s1", Outcome.COMPLETED, 1.0)
        nudge = only(effects, Admit)
        assert nudge.nudge
        assert core.turns["t1"].phase is TurnPhase.LIVE
        assert core.turns["t1"].submissions[0].outcome is Outcome.COMPLETED
        assert core.history == []


class TestTheRunThrew:
    """Row: the run threw: ``failed``; the Machine gets the Agent's fault."""

    def test_a_failed_submission_is_a_fault_and_burns_the_conversation(self) -> None:
        core, _ = started("continued", coder="s1")
        effects = core.settled(
            "t1", "s1", Outcome.FAILED, 1.0, message="provider down", reason="submission_failed"
        )
        assert kinds(effects) == ["Sweep", "Admit"]
        fixing = only(effects, Admit)
        assert fixing.instance_id == "default.continued/root/coder/1"
        assert fixing.prompt == "Fix it: provider down"
        assert core.epochs == {"coder": 1}
        assert core.turns["t1"].faulted

    def test_a_turn_cut_by_a_harness_restart_and_caught_above_is_recorded_failed(self) -> None:
        restarted = "the Harness restarted while this Submission ran"
        core, _ = started("continued", coder="s1")
        effects = core.settled(
            "t1", "s1", Outcome.FAILED, 1.0, message=restarted, reason="harness_restarted"
        )
        sweep = only(effects, Sweep)
        assert (sweep.turn, sweep.cause, sweep.submission) == ("t1", None, None)
        assert core.config is not None
        assert core.config.active == ("fixing",)
        record = settle_sweep(core, sweep, None, 2.0)
        assert (record.outcome, record.cause, record.message) == (Outcome.FAILED, None, restarted)
        assert outcomes(record) == {"s1": Outcome.FAILED}

    def test_a_failed_nudge_takes_its_words_to_the_record(self) -> None:
        core, _ = started("continued", coder="s1")
        assert only(core.settled("t1", "s1", Outcome.COMPLETED, 1.0), Admit).nudge
        core.admitted("t1", "s2", 1.5)
        effects = core.settled("t1", "s2", Outcome.FAILED, 2.0, message="provider down")
        record = settle_sweep(core, only(effects, Sweep), None, 3.0)
        assert (record.outcome, record.message) == (Outcome.FAILED, "provider down")
        assert outcomes(record) == {"s1": Outcome.COMPLETED, "s2": Outcome.FAILED}

    def test_a_fault_nothing_catches_fails_the_run_and_the_turn(self) -> None:
        core, _ = started("handoff", coder="s1")
        effects = core.settled("t1", "s1", Outcome.FAILED, 1.0, message="provider down")
        assert kinds(effects) == ["Sweep", "Finished"]
        assert core.phase is RunPhase.FAILED
        record = settle_sweep(core, only(effects, Sweep), None, 2.0)
        assert (record.outcome, record.message) == (Outcome.FAILED, "provider down")

    def test_a_running_turn_a_person_deleted_is_aborted(self) -> None:
        core, _ = started("continued", coder="s1")
        effects = core.deleted("t1", 1.0)
        sweep = only(effects, Sweep)
        assert (sweep.cause, sweep.submission) == (None, None)
        record = settle_sweep(core, sweep, None, 2.0)
        assert (record.outcome, record.message) == (Outcome.ABORTED, None)
        assert outcomes(record) == {"s1": Outcome.ABORTED}

    def test_no_verdict_of_a_turn_the_core_does_not_hold_exited(self) -> None:
        core, _ = started("continued", coder="s1")
        assert core.verdict("t1", {"s1": (Outcome.ABORTED, None, None)}) is None
        assert core.verdict("t9", {}) is None
