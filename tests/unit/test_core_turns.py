"""A Turn's life in the Run core (``RunCore``): nudges and faults, picks and their
answers, Frames at admission, the one history record, and restores.

The core is driven by hand, as in ``test_core_outcomes`` (its helpers are reused).

Cases:
- nudges: a Submission settled ``completed`` with picks allowed is nudged (the exact
  Admit: same Turn and Instance ID, ``continue``, the nudge's words); none while no pick
  is allowed, then the wake once picks open; after the budget (2) the Machine gets the
  Agent's fault (its ``agent.fault`` route), the continued slot's epoch bumps and the
  next Turn's Instance ID ends in ``/1``; a failed Submission is a fault too (epoch
  again; ``onError``); a fault nothing handles fails the Run; a failed admission is a
  fault;
- picks: refused ``outstanding`` while a pick is out (naming it) and while work runs
  below with no pick out; ``not-allowed`` for a Menu event not handled at or below now,
  and for a name on no Menu; ``Invalid`` for a payload against the schema (nothing is
  delivered); ``Gone`` after the Turn's state exited and for an unknown Instance ID;
  ``straightBack`` for a pick that enters a state and leaves it in its own send (and
  the command of the state it passed through never starts); an outstanding pick is
  answered at Rest with the last reply and the Allowed picks (``Answer``; the delivery
  poll returns it, twice; an unknown delivery is ``Gone``);
- Frames: a relative cwd refuses the Turn before admission (no Admit, one ``failed``
  record naming the path, the Machine's ``onError``); two repo slots and no cwd refuse
  it naming both and the line to add (the Machine's ``agent.fault``); one slot gives
  its worktree; no Workspace gives ``/work``; two live Turns of one continued
  conversation: the second is refused;
- macrosteps: an Agent state entered and left in one macrostep (an ``always``, or a
  fault in the same step) starts no Turn and admits nothing;
- history: one record per Turn when ``swept`` comes twice; a restore while one Turn is
  being swept and the next admitted re-issues exactly that sweep and that admission,
  and records nothing twice; a restore after the record re-sweeps nothing; a Turn swept
  while its admission was out is never admitted again after a restore; the example
  manifest's golden history (Turns ``t1``..``t4`` in order: picks do not take Turn
  numbers), with and without a restart after every input, from the core's snapshot and
  from the ``Run.status`` the operator writes of it; a restore while a command
  runs starts it again, with the command it started with; a snapshot with the one
  counter Turns and deliveries once shared goes on past it (no Turn name twice);
- the Run's state to show: none before the start, the active leaf, and once it ended
  the final state (or where CANCEL found it), also after a restore.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api.status import RunPhase
from kubeturn.machine.load import load_run_yaml
from kubeturn.orchestrator import snapshots
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import (
    Admit,
    Answer,
    Finished,
    Recorded,
    StartExec,
    Sweep,
)
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.picks import Gone, Invalid
from kubeturn.orchestrator.turns import Exit, TurnPhase
from kubeturn_harness.wire import Outcome, Receipt, Refusal
from tests.unit.cores import (
    HANDOFF_IID,
    kinds,
    new_core,
    only,
    record_of,
    restored,
    restored_from_status,
    settle_sweep,
    started,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task-with-review.yaml"
CONTINUED_IID = "default.continued/root/coder"


def nudge_words(*picks: str) -> str:
    listed = ", ".join(f"`{p}`" for p in picks)
    return (
        f"Your turn is not over: the workflow is waiting for one of your picks ({listed}). "
        "Finish what the task needs, then call one of them, once."
    )


class TestNudges:
    def test_a_completed_submission_with_picks_allowed_is_nudged(self) -> None:
        core, _ = started("handoff", coder="s1")
        effects = core.settled("t1", "s1", Outcome.COMPLETED, 1.0)
        assert effects.items == [
            Admit(
                turn="t1",
                agent="coder",
                state="work",
                instance_id=HANDOFF_IID,
                prompt=nudge_words("submit", "note", "giveUp", "check"),
                cwd="/work",
                continue_=True,
                model=None,
                thinking_level=None,
                instructions="Code.",
                workspace="write",
                key="t1.2",
                notices=(),
                nudge=True,
            )
        ]
        turn = core.turns["t1"]
        assert (turn.nudges, turn.admitting, turn.phase) == (1, True, TurnPhase.LIVE)

    def test_no_nudge_while_no_pick_is_allowed_then_the_wake(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        core.pick(admits["coder"].instance_id, "test", {}, 1.0)
        assert core.settled("t1", "s1", Outcome.COMPLETED, 2.0).items == []
        effects = core.exec_done("work.testing#3", ExecResult(1, "1 failed"), 3.0)
        assert kinds(effects) == ["Answer", "Admit"]
        nudge = only(effects, Admit)
        assert nudge.nudge
        assert nudge.prompt == nudge_words("test", "lint", "run", "note")

    def test_after_the_budget_the_machine_gets_the_agents_fault(self) -> None:
        core, _ = started("continued", coder="s1")
        for nudge, submission in enumerate(("s1", "s2"), start=1):
            effects = core.settled("t1", submission, Outcome.COMPLETED, float(nudge))
            assert only(effects, Admit).nudge
            assert core.turns["t1"].nudges == nudge
            core.admitted("t1", f"s{nudge + 1}", float(nudge) + 0.5)
        effects = core.settled("t1", "s3", Outcome.COMPLETED, 3.0)
        why = "the Agent stopped 3 times without a pick while submit were allowed"
        assert kinds(effects) == ["Sweep", "Admit"]
        assert only(effects, Sweep) == Sweep("t1", "coder", CONTINUED_IID, None, None)
        fixing = only(effects, Admit)
        assert (fixing.turn, fixing.state, fixing.instance_id, fixing.continue_) == (
            "t2",
            "fixing",
            f"{CONTINUED_IID}/1",
            True,
        )
        assert fixing.prompt == f"Fix it: {why}"
        assert core.epochs == {"coder": 1}
        record = settle_sweep(core, only(effects, Sweep), None, 4.0)
        assert record.outcome is Outcome.ABORTED
        assert {s.id: s.outcome for s in record.submissions} == {
            "s1": Outcome.COMPLETED,
            "s2": Outcome.COMPLETED,
            "s3": Outcome.COMPLETED,
        }

    def test_a_failed_submission_faults_and_bumps_the_epoch_again(self) -> None:
        core, _ = started("continued", coder="s1")
        core.settled("t1", "s1", Outcome.FAILED, 1.0, message="provider down")
        core.admitted("t2", "s2", 1.5)
        effects = core.settled("t2", "s2", Outcome.FAILED, 2.0, message="runaway", reason="runaway")
        assert only(effects, Sweep) == Sweep("t2", "coder", f"{CONTINUED_IID}/1", None, None)
        assert only(effects, Finished) == Finished(
            "Failed", "runaway", "reached the failed final 'failed'"
        )
        assert core.epochs == {"coder": 2}

    def test_a_fault_nothing_handles_fails_the_run(self) -> None:
        core, _ = started("handoff", coder="s1")
        effects = core.settled("t1", "s1", Outcome.FAILED, 1.0, message="provider down")
        assert effects.items == [
            Sweep("t1", "coder", HANDOFF_IID, None, None),
            Finished(
                "Failed",
                None,
                "the invoke of state 'work' failed and no onError handles it: provider down",
            ),
        ]
        assert core.epochs == {}

    def test_a_failed_admission_is_a_fault(self) -> None:
        core = new_core("continued")
        admit = only(core.start(0.0), Admit)
        effects = core.admit_failed(admit.turn, "the Harness is unreachable", 1.0)
        assert only(effects, Sweep) == Sweep("t1", "coder", CONTINUED_IID, None, None)
        assert only(effects, Admit).prompt == "Fix it: the Harness is unreachable"


class TestPicks:
    def test_a_pick_while_one_is_outstanding_is_refused_naming_it(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        core.pick(iid, "test", {}, 1.0)
        before = core.config
        answer, effects = core.pick(iid, "note", {}, 2.0)
        assert answer == Refusal(refused="outstanding", outstanding="test", allowed=[])
        assert effects.items == []
        assert core.config == before
        surface = core.surface(iid)
        assert surface is not None
        assert surface.allowed == []

    def test_a_pick_while_work_runs_below_is_refused_with_no_pick_out(self) -> None:
        core, admits = started("nested", lead="s1", helper="s2")
        answer, effects = core.pick(admits["lead"].instance_id, "finish", {}, 1.0)
        assert answer == Refusal(refused="outstanding", outstanding=None, allowed=[])
        assert effects.items == []

    def test_an_event_not_handled_at_or_below_now_is_not_allowed(self) -> None:
        core, admits = started("nested", lead="s1", helper="s2")
        core.pick(admits["helper"].instance_id, "reply", {}, 1.0)
        lead = admits["lead"].instance_id
        for event in ("reply", "deploy"):
            answer, effects = core.pick(lead, event, {}, 2.0)
            assert answer == Refusal(
                refused="not-allowed",
                allowed=["ask", "finish"],
                message=f"`{event}` is not a pick the workflow takes now (allowed: ask, finish)",
            )
            assert effects.items == []

    @pytest.mark.parametrize(
        ("payload", "message"),
        [
            pytest.param({}, "the payload: 'summary' is a required property", id="missing"),
            pytest.param({"summary": 3}, "summary: 3 is not of type 'string'", id="wrong-type"),
        ],
    )
    def test_a_payload_against_the_schema_is_invalid(
        self, payload: dict[str, Any], message: str
    ) -> None:
        core, _ = started("handoff", coder="s1")
        before = core.config
        answer, effects = core.pick(HANDOFF_IID, "submit", payload, 1.0)
        assert answer == Invalid(message)
        assert effects.items == []
        assert core.config == before
        assert core.turns["t1"].phase is TurnPhase.LIVE

    def test_a_pick_after_the_turns_state_exited_is_gone(self) -> None:
        core, _ = started("handoff", coder="s1")
        core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0)
        answer, effects = core.pick(HANDOFF_IID, "note", {}, 2.0)
        assert answer == Gone()
        assert effects.items == []
        assert core.surface(HANDOFF_IID) is None
        assert core.pick("default.handoff/root/coder/t-nobody", "note", {}, 2.0)[0] == Gone()

    def test_a_pick_straight_back_is_answered_so_and_starts_nothing(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        before = core.config
        answer, effects = core.pick(admits["coder"].instance_id, "lint", {}, 1.0)
        assert answer == Receipt(
            delivered=True,
            event="lint",
            deliveryId="d1-n2",
            allowed=["test", "lint", "run", "note"],
            straightBack=True,
        )
        # linting was entered and left in the pick's own send: its command never runs.
        assert effects.items == []
        assert core.config is not None
        assert before is not None
        assert (core.config.active, core.config.invokes) == (before.active, before.invokes)

    def test_an_outstanding_pick_is_answered_at_rest_with_the_last_reply(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        core.pick(iid, "test", {}, 1.0)
        assert core.delivery("d1-n2") is None
        effects = core.exec_done("work.testing#3", ExecResult(1, "1 failed"), 2.0)
        answered = Receipt(
            delivered=True,
            event="test",
            deliveryId="d1-n2",
            answer={"exitCode": 1, "output": "1 failed", "timedOut": False},
            allowed=["test", "lint", "run", "note"],
        )
        assert effects.items == [Answer("d1-n2", answered)]
        assert core.delivery("d1-n2") == answered
        assert core.delivery("d1-n2") == answered
        assert core.delivery("d9-nowhere") == Gone()
        surface = core.surface(iid)
        assert surface is not None
        assert surface.allowed == ["test", "lint", "run", "note"]
        again, _ = core.pick(iid, "note", {}, 3.0)
        assert isinstance(again, Receipt)
        assert not again.outstanding


class TestFrames:
    def test_a_relative_cwd_refuses_the_turn_before_admission(self) -> None:
        core = new_core("frames_relative")
        effects = core.start(0.0)
        refused = (
            "spec.machine.states.work.invoke.agent.cwd: the Frame's cwd must be an absolute "
            "path, got 'src/app' (from 'src/app')"
        )
        record = record_of(core, "t1")
        assert effects.items == [Recorded(record, Exit(cause=None, submission=None, at=0.0))]
        assert (record.outcome, record.cause, record.message) == (
            Outcome.FAILED,
            None,
            f"refused before admission: {refused}",
        )
        assert record.submissions == []
        assert core.config is not None
        assert core.config.active == ("refused",)
        assert core.config.context == {"why": refused}
        assert core.live_turns() == []

    def test_two_repo_slots_and_no_cwd_refuse_the_turn_naming_both(self) -> None:
        workspace = WorkspaceView({"target": "/work/target/r1", "docs": "/work/docs/r1"})
        core = new_core("frames_default", workspace=workspace)
        effects = core.start(0.0)
        where = "spec.machine.states.work.invoke.agent"
        refused = (
            f"{where}: no cwd, and the Workspace has 2 repo slots ('docs', 'target'); say "
            f'which: add cwd: "{{{{ workspace.repos.docs }}}}" to {where}'
        )
        assert kinds(effects) == ["Recorded"]
        assert record_of(core, "t1").message == f"refused before admission: {refused}"
        assert core.config is not None
        assert (core.config.active, core.config.context) == (("refused",), {"why": refused})

    def test_one_repo_slot_gives_its_worktree(self) -> None:
        core = new_core("frames_default", workspace=WorkspaceView({"target": "/work/target/r1"}))
        admit = only(core.start(0.0), Admit)
        assert admit.cwd == "/work/target/r1"
        surface = core.surface(admit.instance_id)
        assert surface is not None
        assert surface.cwd == "/work/target/r1"

    def test_no_workspace_gives_slash_work(self) -> None:
        core = new_core("frames_default")
        assert only(core.start(0.0), Admit).cwd == "/work"

    def test_two_live_turns_of_one_continued_conversation_refuse_the_second(self) -> None:
        core = new_core("frames_twice")
        effects = core.start(0.0)
        iid = "default.frames-twice/root/coder"
        refused = (
            "spec.machine.states.outer.states.inner.invoke.agent: the conversation "
            f"'{iid}' already has a live Turn; two states cannot continue one Agent's "
            "conversation at once"
        )
        assert kinds(effects) == ["Admit", "Recorded"]
        outer = only(effects, Admit)
        assert (outer.turn, outer.state, outer.instance_id) == ("t1", "outer", iid)
        record = record_of(core, "t2")
        assert (record.state, record.outcome) == ("outer.inner", Outcome.FAILED)
        assert record.message == f"refused before admission: {refused}"
        assert core.config is not None
        assert core.config.active == ("outer.alone",)
        assert [t.id for t in core.live_turns()] == ["t1"]


class TestMacrosteps:
    def test_an_agent_state_left_in_the_step_that_entered_it_starts_no_turn(self) -> None:
        core = new_core("skipped")
        core.start(0.0)
        effects = core.signal("go", None, 1.0)
        assert effects.items == []
        assert core.config is not None
        assert core.config.active == ("skippedIt",)
        assert (core.turns, core.history) == ({}, [])

    def test_an_agent_state_entered_in_a_step_that_faults_starts_no_turn(self) -> None:
        core = new_core("skipped")
        core.start(0.0)
        effects = core.signal("break", None, 1.0)
        assert effects.items == [
            Finished(
                "Failed",
                None,
                "the Machine faulted in state 'broken': CEL expression 'context.nope == 1' "
                "failed: no key 'nope' (spec.machine.states.broken.always.guard); no state "
                "handles error.expression",
            )
        ]
        assert (core.turns, core.history) == ({}, [])


class TestHistory:
    def test_a_second_sweep_answer_records_nothing(self) -> None:
        core, _ = started("handoff", coder="s1")
        _, effects = core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0)
        sweep = only(effects, Sweep)
        settle_sweep(core, sweep, "s1", 2.0)
        assert core.swept("t1", {"s1": (Outcome.ABORTED, None, None)}, 3.0).items == []
        assert record_of(core, "t1").outcome is Outcome.ENDED
        assert core.recorded == 1

    def test_a_restore_mid_sweep_re_issues_the_sweep_and_the_admission_once(self) -> None:
        core, _ = started("continued", coder="s1")
        _, effects = core.pick(CONTINUED_IID, "submit", {}, 1.0)
        sweep, admit = only(effects, Sweep), only(effects, Admit)
        again = restored(core)
        assert again.resume().items == [sweep, admit]
        settle_sweep(again, sweep, "s1", 2.0)
        assert again.swept(sweep.turn, {"s1": (Outcome.ENDED, None, None)}, 2.5).items == []
        again.admitted(admit.turn, "s2", 3.0)
        later = restored(again)
        assert later.resume().items == []
        _, effects = later.pick(CONTINUED_IID, "submit", {}, 4.0)
        settle_sweep(later, only(effects, Sweep), "s2", 5.0)
        assert [(r.name, r.outcome) for r in later.history] == [
            ("t1", Outcome.ENDED),
            ("t2", Outcome.ENDED),
        ]
        assert later.recorded == 2
        assert later.phase is RunPhase.SUCCEEDED

    def test_a_turn_swept_while_its_admission_was_out_is_never_admitted_again(self) -> None:
        core = new_core("handoff")
        admit = only(core.start(0.0), Admit)
        sweep = only(core.signal("stop", None, 1.0), Sweep)
        assert sweep == Sweep("t1", "coder", HANDOFF_IID, None, None)
        assert restored(core).resume().items == [sweep]
        core.swept(admit.turn, {}, 2.0)
        assert record_of(core, "t1").outcome is Outcome.ABORTED
        assert restored(core).resume().items == []

    def test_a_snapshot_with_one_shared_counter_goes_on_past_it(self) -> None:
        core, _ = started("continued", coder="s1")
        data = core.snapshot()
        assert (data["turnSeq"], data["deliverySeq"]) == (1, 0)
        # As written when Turns and picks took numbers from one counter: t1, then d2, ...
        del data["turnSeq"], data["deliverySeq"], data["version"]
        data["seq"] = 7
        again = new_core("continued", snapshot=snapshots.migrate(data, []))
        answer, effects = again.pick(CONTINUED_IID, "submit", {}, 1.0)
        assert isinstance(answer, Receipt)
        assert answer.deliveryId == "d8-n1"
        assert only(effects, Admit).turn == "t8"
        assert (again.turn_seq, again.delivery_seq) == (8, 8)

    def test_a_restore_while_a_command_runs_starts_it_again(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        _, effects = core.pick(admits["coder"].instance_id, "test", {}, 1.0)
        start = only(effects, StartExec)
        assert restored(core).resume().items == [start]

    def test_a_restore_starts_the_command_it_started_with(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        _, effects = core.pick(admits["coder"].instance_id, "run", {"target": "unit"}, 1.0)
        start = only(effects, StartExec)
        assert start == StartExec("work.running#3", "make unit", "/work", 600.0)
        assert restored(core).resume().items == [start]


class TestRunState:
    def test_none_before_the_start_then_the_active_leaf(self) -> None:
        core = new_core("continued")
        assert core.state is None
        core.start(0.0)
        assert core.state == "implementing"

    def test_an_ended_run_shows_its_final_state_also_after_a_restore(self) -> None:
        core, _ = started("continued", coder="s1")
        core.pick(CONTINUED_IID, "submit", {}, 1.0)
        core.admitted("t2", "s2", 1.5)
        core.pick(CONTINUED_IID, "submit", {}, 2.0)
        assert core.phase is RunPhase.SUCCEEDED
        assert core.config is not None
        assert (core.config.active, core.state) == ((), "done")
        assert restored(core).state == "done"

    def test_a_cancelled_run_shows_where_the_cancel_found_it(self) -> None:
        core, _ = started("continued", coder="s1")
        core.cancel(1.0)
        assert (core.phase, core.state) == (RunPhase.CANCELLED, "implementing")


class TestGoldenHistory:
    """The example manifest driven through one review round and a nudge; restarting the
    core after every input changes nothing."""

    @staticmethod
    def drive(restart: bool, restore: Callable[..., RunCore] = restored) -> RunCore:
        run = load_run_yaml(EXAMPLE.read_text(), str(EXAMPLE))
        workspace = WorkspaceView({"target": "/work/target/r1"})
        counter = iter(range(1, 1000))

        def new_id() -> str:
            return f"n{next(counter)}"

        def fresh(core: RunCore) -> RunCore:
            if not restart:
                return core
            again = restore(core, workspace=workspace, new_id=new_id)
            again.resume()
            return again

        core = RunCore(run, workspace=workspace, new_id=new_id)
        admit = only(core.start(0.0), Admit)
        now = 1.0

        def pick(event: str, payload: dict[str, Any], submission: str) -> Admit | None:
            nonlocal core, now
            core.admitted(admit.turn, submission, now)
            core = fresh(core)
            answer, effects = core.pick(admit.instance_id, event, payload, now + 1)
            assert isinstance(answer, Receipt)
            assert answer.turnComplete
            core = fresh(core)
            sweep = only(effects, Sweep)
            assert (sweep.cause, sweep.submission) == ("pick", submission)
            core.swept(sweep.turn, {submission: (Outcome.ENDED, None, None)}, now + 2)
            core = fresh(core)
            now += 3
            admits = effects.of(Admit)
            return admits[0] if admits and isinstance(admits[0], Admit) else None

        step = pick("submit", {"summary": "added --verbose"}, "s1")
        assert step is not None
        admit = step
        step = pick("review_verdict", {"verdict": "reject", "notes": "add tests"}, "s2")
        assert step is not None
        admit = step
        assert admit.prompt.startswith("The reviewer asked for changes:\n\nadd tests")
        core.admitted(admit.turn, "s3", now)
        nudge = only(core.settled(admit.turn, "s3", Outcome.COMPLETED, now + 1), Admit)
        assert nudge.nudge
        core = fresh(core)
        step = pick("submit", {"summary": "tests added"}, "s4")
        assert step is not None
        admit = step
        assert pick("review_verdict", {"verdict": "approve"}, "s5") is None
        core = fresh(core)
        assert only(core.signal("approve", None, now), Finished).phase == "Succeeded"
        return core

    def test_the_history_of_the_example(self) -> None:
        core = self.drive(restart=False)
        assert [(r.name, r.agent, r.state, r.outcome, r.cause) for r in core.history] == [
            ("t1", "coder", "implementing", Outcome.ENDED, "pick"),
            ("t2", "reviewer", "reviewing", Outcome.ENDED, "pick"),
            ("t3", "coder", "fixing", Outcome.ENDED, "pick"),
            ("t4", "reviewer", "reviewing", Outcome.ENDED, "pick"),
        ]
        fixing = core.history[2]
        assert [(s.id, s.outcome) for s in fixing.submissions] == [
            ("s3", Outcome.COMPLETED),
            ("s4", Outcome.ENDED),
        ]
        assert core.config is not None
        assert core.config.output == {"rounds": 1, "summary": "tests added"}

    def test_a_restart_after_every_input_changes_nothing(self) -> None:
        plain, restarted = self.drive(restart=False), self.drive(restart=True)
        assert restarted.history == plain.history
        assert restarted.snapshot() == plain.snapshot()

    def test_a_restart_from_the_runs_status_after_every_input_changes_nothing(self) -> None:
        plain = self.drive(restart=False)
        restarted = self.drive(restart=True, restore=restored_from_status)
        assert restarted.history == plain.history
        assert restarted.snapshot() == plain.snapshot()
