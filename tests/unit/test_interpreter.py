"""The interpreter's one step (``kubeturn.machine.interpreter``), one fixture machine per
feature (``tests/unit/machines``), each loaded through ``load_run_yaml`` with real CEL.

Cases, a class per fixture, each asserting the exact ``entered``/``exited`` order:
- moves: start; atomic to atomic; into a compound (its initial chain); out of a nested
  state to an uncle (innermost exited first, outermost entered first); out of the
  compound; a parent's transition to its own child (the parent stays); a target equal
  to its source moves nothing; a targetless transition assigns and moves nothing; an
  unhandled event changes nothing;
- assign: every value sees the context before the transition (a swap); nested keys
  and new keys; values from the event; the previous configuration is not changed;
- guards: document order (the first enabled wins), inner states before outer ones;
- always: a chain of eventless transitions; a loop faults at ``MAX_MICROSTEPS``;
- timers: armed on entry at now + delay; due and next fire; a firing timer leaves and
  cancels its sibling; exit cancels; a stale timer event is dropped, also when its
  state was entered again;
- execs: started on entry, stopped on exit; onDone by exit code with ``event.output``
  (the answered exec is no longer running, not stopped); onError; a result of an exec
  that is no longer running is dropped (also an error, also when its state was entered
  again); no onDone leaves the state as it is; an unhandled error fails the Run naming
  the state, its stops with no cause;
- agent faults: onError; ``agent.fault`` bubbling to a parent; unhandled, the Run fails
  naming the state;
- finals: a compound's final child raises its onDone with the output; a top-level
  final ends the Run done with its output; ``outcome: failed`` fails it, top-level and
  nested; a finished Run takes no event; every end keeps the leaf it ended in
  (``ended_in``: the final, where CANCEL, a fault or an unhandled error found it) while
  its leaf is the root;
- cancel: an unhandled CANCEL cancels the Run, stopping every invoke and cancelling
  every timer, innermost first; a handled CANCEL is an ordinary event;
- faults: an expression error nothing handles fails the Run with ``fault`` set, the
  message naming the state, the expression, its path and the key, and every stop
  without a cause, also stops made before the error in the same step;
- expression errors (``error.expression``): a failing guard selects nothing and the
  state's handler routes it, with the state, path and message; a failing assign moves
  nothing and writes nothing, an outer handler takes it; a final's failing output is
  heard in the final (no done event); an error while handling one faults the Run;
  ``accepted``: the events the active states take, innermost first, with description
  and schema, none of the Machine's own, none once ended;
- causes: a step's cause rides its stops, starts and armed timers; cancelled timers
  keep their own causes; a timer armed by a pick fires with it; a timer armed before
  keeps no cause;
- Rest and ``handled_below``: an exec below holds Rest, a settled one does not; a timer
  on a child targeting inside holds Rest; a Turn timeout (and a child's timer leaving)
  does not; the events offered, inner ones first;
- passing through: an invoke entered and left in one step is in both ``started`` and
  ``stopped``, and not in the configuration;
- snapshot: ``restore(snapshot(config))`` through JSON gives the configuration back,
  an ended one too; a snapshot written before ``endedIn`` restores with none.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from kubeturn.machine import interpreter as it
from kubeturn.machine.interpreter import (
    DONE_INVOKE,
    ERROR_INVOKE,
    MAX_MICROSTEPS,
    NO_CAUSE,
    Config,
    Event,
    InvokeEntry,
    InvokeKind,
    Status,
    Stopped,
    TimerEntry,
)
from kubeturn.machine.load import load_run_yaml
from kubeturn.machine.model import ROOT, Chart, StatePath
from tests.unit import stepping
from tests.unit.stepping import moved

MACHINES = Path(__file__).parent / "machines"
SCOPE = it.Scope()
PICK = frozenset({"t1"})


@functools.cache
def chart(name: str) -> Chart:
    path = MACHINES / f"{name}.yaml"
    return load_run_yaml(path.read_text(), str(path)).chart


class Machine(stepping.Machine):
    """One fixture machine, driven a step at a time."""

    def __init__(self, name: str, now: float = 0.0) -> None:
        super().__init__(chart(name), now)

    @property
    def leaf(self) -> str:
        return StatePath(", ".join(self.config.active))


class TestMoves:
    def test_start_enters_the_initial_state(self) -> None:
        m = Machine("moves")
        assert moved(m.first) == ((), ("a",))
        assert m.first.taken
        assert m.first.event.type == "start"
        assert m.config == Config(active=(StatePath("a"),), context={"n": 0})

    def test_atomic_to_atomic(self) -> None:
        m = Machine("moves")
        step = m.send("next")
        assert step.taken
        assert moved(step) == (("a",), ("b",))
        assert m.leaf == "b"

    def test_into_a_compound_enters_its_initial_chain(self) -> None:
        m = Machine("moves")
        step = m.send("dive")
        assert moved(step) == (("a",), ("c", "c.c1", "c.c1.deep"))
        assert m.leaf == "c.c1.deep"

    def test_out_of_a_nested_state_to_an_uncle(self) -> None:
        m = Machine("moves")
        m.send("dive")
        step = m.send("uncle")
        assert moved(step) == (("c.c1.deep", "c.c1"), ("c.c2",))
        assert m.leaf == "c.c2"

    def test_out_of_the_compound_exits_innermost_first(self) -> None:
        m = Machine("moves")
        m.send("dive")
        step = m.send("away")
        assert moved(step) == (("c.c1.deep", "c.c1", "c"), ("b",))

    def test_a_parents_transition_to_its_own_child_does_not_exit_the_parent(self) -> None:
        m = Machine("moves")
        m.send("dive")
        step = m.send("toC2")
        assert moved(step) == (("c.c1.deep", "c.c1"), ("c.c2",))
        again = m.send("toC2")
        assert moved(again) == (("c.c2",), ("c.c2",))
        assert m.leaf == "c.c2"

    def test_a_target_equal_to_its_source_moves_nothing(self) -> None:
        m = Machine("moves")
        m.send("dive")
        before = m.config
        step = m.send("stay")
        assert step.taken
        assert moved(step) == ((), ())
        assert m.config == before

    def test_a_targetless_transition_assigns_and_moves_nothing(self) -> None:
        m = Machine("moves")
        m.send("dive")
        step = m.send("count")
        assert step.taken
        assert moved(step) == ((), ())
        assert m.leaf == "c.c1.deep"
        assert m.config.context == {"n": 1}

    def test_an_unhandled_event_is_not_taken_and_changes_nothing(self) -> None:
        m = Machine("moves")
        before = m.config
        step = m.send("uncle")
        assert not step.taken
        assert moved(step) == ((), ())
        assert m.config == before


class TestAssign:
    def test_every_value_sees_the_context_before_the_transition(self) -> None:
        m = Machine("assign")
        m.send("swap")
        assert (m.config.context["a"], m.config.context["b"]) == (10, 1)

    def test_nested_and_new_keys_are_written_after_all_values_are_read(self) -> None:
        m = Machine("assign")
        before = m.config
        step = m.send("move")
        assert moved(step) == (("s",), ("t",))
        assert m.config.context == {
            "a": 11,
            "b": 1,
            "nested": {"x": 2, "y": 2},
            "fresh": {"deep": "new"},
        }
        assert before.context == {"a": 1, "b": 10, "nested": {"x": 1, "y": 2}}

    def test_a_value_reads_the_events_payload(self) -> None:
        m = Machine("assign")
        m.send("set", value=[1, "two"])
        assert m.config.context["a"] == [1, "two"]


class TestGuards:
    @pytest.mark.parametrize(
        ("n", "target"),
        [
            pytest.param(10, "big", id="first-of-three-enabled"),
            pytest.param(3, "positive", id="second-of-two-enabled"),
            pytest.param(-5, "fallback", id="only-the-last"),
            pytest.param(-200, "fromOuter", id="none-inner-so-outer"),
        ],
    )
    def test_the_first_enabled_transition_wins_inner_states_first(
        self, n: int, target: str
    ) -> None:
        m = Machine("guards")
        m.config = it.with_context(m.config, {"n": n})
        step = m.send("go")
        assert moved(step) == (("outer.inner", "outer"), (target,))


class TestAlways:
    def test_eventless_transitions_run_until_none_is_enabled(self) -> None:
        m = Machine("always")
        step = m.send("go")
        assert step.exited == ("idle", "a", "b", "c", "b", "c", "b", "c", "b")
        assert step.entered == ("a", "b", "c", "b", "c", "b", "c", "b", "settled")
        assert m.leaf == "settled"
        assert m.config.context == {"n": 3}
        assert m.config.status is Status.RUNNING

    def test_a_loop_faults_after_max_microsteps(self) -> None:
        m = Machine("always")
        step = m.send("spin", cause=PICK)
        fault = (
            f"CEL expression 'always' failed: more than {MAX_MICROSTEPS} eventless "
            "transitions in one step: a loop"
        )
        assert step.fault == fault
        assert m.config.status is Status.FAILED
        assert m.config.message == f"the Machine faulted: {fault}"
        assert m.leaf == ROOT
        assert len(step.entered) == MAX_MICROSTEPS + 1
        assert len(step.exited) == MAX_MICROSTEPS + 2
        assert step.entered[:3] == ("spin1", "spin2", "spin1")


class TestTimers:
    TEN = TimerEntry("after:waiting:10s", StatePath("waiting"), 110.0, NO_CAUSE, 1)
    THIRTY = TimerEntry("after:waiting:30s", StatePath("waiting"), 130.0, NO_CAUSE, 2)

    def test_timers_are_armed_on_entry_at_absolute_fire_times(self) -> None:
        m = Machine("timers", now=100.0)
        assert m.first.armed == (self.TEN, self.THIRTY)
        assert m.config.timers == (self.TEN, self.THIRTY)
        assert it.next_fire(m.config) == 110.0

    def test_due_lists_timers_whose_time_has_come_in_firing_order(self) -> None:
        m = Machine("timers", now=100.0)
        assert it.due(m.config, 109.999) == []
        assert it.due(m.config, 110.0) == [self.TEN]
        assert it.due(m.config, 1e9) == [self.TEN, self.THIRTY]
        assert it.timer_event(self.TEN) == Event(
            "after:waiting:10s", cause=NO_CAUSE, origin="after:waiting:10s#1"
        )

    def test_a_firing_timer_takes_its_transition_and_exit_cancels_the_other(self) -> None:
        m = Machine("timers", now=100.0)
        step = m.event(it.timer_event(it.due(m.config, 110.0)[0]), 110.0)
        assert step.taken
        assert moved(step) == (("waiting",), ("timedOut",))
        assert step.cancelled == (self.THIRTY,)
        assert m.config.timers == ()
        assert it.next_fire(m.config) is None

    def test_exit_cancels_every_timer_of_the_state(self) -> None:
        m = Machine("timers", now=100.0)
        step = m.send("poke", now=105.0)
        assert step.cancelled == (self.TEN, self.THIRTY)
        assert m.config.timers == ()

    def test_a_stale_timer_event_is_dropped(self) -> None:
        m = Machine("timers", now=100.0)
        m.send("poke", now=105.0)
        before = m.config
        step = m.event(it.timer_event(self.TEN), 110.0)
        assert not step.taken
        assert moved(step) == ((), ())
        assert m.config == before

    def test_a_timer_of_an_earlier_entry_is_stale_when_its_state_is_entered_again(
        self,
    ) -> None:
        m = Machine("timers", now=100.0)
        m.send("poke", now=105.0)
        again = m.send("back", now=120.0)
        ten, thirty = again.armed
        assert (ten.fire_at, ten.seq, thirty.fire_at, thirty.seq) == (130.0, 3, 150.0, 4)
        assert not m.event(it.timer_event(self.TEN), 130.0).taken
        assert m.config.timers == (ten, thirty)
        step = m.fire(ten)
        assert moved(step) == (("waiting",), ("timedOut",))


class TestExecs:
    def test_an_exec_is_started_on_entry_and_stopped_on_exit(self) -> None:
        m = Machine("execs")
        step = m.send("build", cause=PICK)
        entry = InvokeEntry(StatePath("building"), InvokeKind.EXEC, PICK, 1)
        assert step.started == (entry,)
        assert m.config.invokes == (entry,)
        left = m.send("abandon")
        assert moved(left) == (("building",), ("idle",))
        assert left.stopped == (Stopped(entry, NO_CAUSE),)
        assert m.config.invokes == ()

    def test_done_goes_to_on_done_with_the_output(self) -> None:
        m = Machine("execs")
        m.send("build")
        step = m.done("building", {"exitCode": 0, "output": "ok", "timedOut": False})
        assert moved(step) == (("building",), ("passed",))
        assert step.stopped == ()
        assert m.config.context["out"] == "ok"
        assert m.config.invokes == ()

    def test_a_failing_command_is_a_result_routed_by_guard(self) -> None:
        m = Machine("execs")
        m.send("build")
        step = m.done("building", {"exitCode": 2, "output": "FAIL", "timedOut": False})
        assert moved(step) == (("building",), ("broken",))

    def test_an_error_goes_to_on_error(self) -> None:
        m = Machine("execs")
        m.send("build")
        step = m.error("building", reason="exec", message="the Harness refused it")
        assert moved(step) == (("building",), ("unrunnable",))
        assert m.config.context["why"] == "the Harness refused it"

    def test_the_result_of_an_exec_no_longer_running_is_dropped(self) -> None:
        m = Machine("execs")
        m.send("build")
        entry = m.invoke("building")
        m.send("abandon")
        before = m.config
        for type_ in (DONE_INVOKE, ERROR_INVOKE):
            step = m.event(Event(type_, {"output": {}, "message": "late"}, origin=entry.id))
            assert not step.taken
            assert m.config == before

    def test_a_stale_result_is_dropped_when_its_state_runs_again(self) -> None:
        m = Machine("execs")
        m.send("build")
        stale = m.invoke("building")
        m.send("abandon")
        m.send("build")
        before = m.config
        for type_ in (DONE_INVOKE, ERROR_INVOKE):
            step = m.event(Event(type_, {"output": {}, "message": "late"}, origin=stale.id))
            assert not step.taken
            assert m.config == before

    def test_with_no_on_done_the_state_stays_and_the_exec_is_over(self) -> None:
        m = Machine("execs")
        m.send("quiet")
        step = m.done("quietly", {"exitCode": 0, "output": "", "timedOut": False})
        assert not step.taken
        assert m.leaf == "quietly"
        assert m.config.invokes == ()

    def test_an_error_nothing_handles_fails_the_run_naming_the_state(self) -> None:
        m = Machine("execs")
        m.send("quiet", cause=PICK)
        step = m.error("quietly", reason="exec", message="boom")
        assert step.taken
        assert m.config.status is Status.FAILED
        assert m.config.message == (
            "the invoke of state 'quietly' failed and no onError handles it: boom"
        )
        assert moved(step) == (("quietly",), ())
        assert (m.leaf, m.config.ended_in) == (ROOT, ("quietly",))


class TestPassingThrough:
    def test_an_invoke_entered_and_left_in_one_step_is_both_started_and_stopped(self) -> None:
        # The Step records every microstep; the core starts only what still runs.
        m = Machine("skipped")
        step = m.send("go", cause=PICK)
        assert moved(step) == (("idle", "ask"), ("ask", "skippedIt"))
        entry = InvokeEntry(StatePath("ask"), InvokeKind.AGENT, PICK, 1)
        assert step.started == (entry,)
        assert step.stopped == (Stopped(entry, PICK),)
        assert m.config.invokes == ()


class TestAgentFaults:
    def test_on_error_takes_the_agents_error(self) -> None:
        m = Machine("agent_faults")
        agent = m.invoke("caught")
        step = m.error("caught", reason="no-pick", message="stopped without a pick")
        assert moved(step) == (("caught",), ("recovered",))
        assert step.stopped == (Stopped(agent, NO_CAUSE),)
        assert m.config.context == {"why": "no-pick"}

    def test_unhandled_by_on_error_it_bubbles_as_agent_fault(self) -> None:
        m = Machine("agent_faults")
        entered = m.send("toBubbling")
        assert moved(entered) == (("caught",), ("bubbling", "bubbling.asking"))
        step = m.error("bubbling.asking", reason="failed", message="provider down")
        assert moved(step) == (("bubbling.asking", "bubbling"), ("recovered",))
        assert m.config.context == {"why": "bubbled: failed"}

    def test_unhandled_anywhere_it_fails_the_run_naming_the_state(self) -> None:
        m = Machine("agent_faults")
        m.send("toBare")
        agent = m.invoke("bare")
        step = m.error("bare", reason="failed", message="provider down")
        assert m.config.status is Status.FAILED
        assert m.config.message == (
            "the invoke of state 'bare' failed and no onError handles it: provider down"
        )
        assert step.stopped == (Stopped(agent, NO_CAUSE),)
        assert m.leaf == ROOT


class TestFinals:
    def test_a_final_child_raises_its_parents_on_done(self) -> None:
        m = Machine("finals")
        assert moved(m.first) == ((), ("job", "job.working"))
        step = m.send("finish")
        assert step.exited == ("job.working", "job.complete", "job")
        assert step.entered == ("job.complete", "finished")
        assert m.config.context["result"] == 20
        assert m.config.status is Status.RUNNING

    def test_a_top_level_final_ends_the_run_done_with_its_output(self) -> None:
        m = Machine("finals")
        m.send("finish")
        step = m.send("end")
        assert moved(step) == (("finished", "done"), ("done",))
        assert m.config.status is Status.DONE
        assert m.config.output == {"n": 2, "result": 20}
        assert m.config.message is None
        assert (m.leaf, m.config.ended_in) == (ROOT, ("done",))

    def test_a_failed_final_fails_the_run(self) -> None:
        m = Machine("finals")
        m.send("finish")
        m.send("abort")
        assert m.config.status is Status.FAILED
        assert m.config.message == "reached the failed final 'failed'"
        assert m.config.output is None
        assert (m.leaf, m.config.ended_in) == (ROOT, ("failed",))

    def test_a_nested_failed_final_fails_the_run_before_any_on_done(self) -> None:
        m = Machine("finals")
        step = m.send("bail")
        assert step.exited == ("job.working", "job.jobFailed", "job")
        assert step.entered == ("job.jobFailed",)
        assert m.config.status is Status.FAILED
        assert m.config.output == "nope"
        assert m.config.message == "reached the failed final 'job.jobFailed'"
        assert m.config.ended_in == ("job.jobFailed",)

    def test_a_finished_run_takes_no_event(self) -> None:
        m = Machine("finals")
        m.send("finish")
        m.send("end")
        before = m.config
        step = m.send("end")
        assert not step.taken
        assert m.config == before


class TestCancel:
    def test_an_unhandled_cancel_cancels_the_run_and_stops_everything(self) -> None:
        m = Machine("cancel")
        assert moved(m.first) == ((), ("outer", "outer.inner"))
        agent, exec_ = m.invoke("outer"), m.invoke("outer.inner")
        outer_timer, inner_timer = m.timer("outer"), m.timer("outer.inner")
        step = m.send("CANCEL")
        assert step.taken
        assert moved(step) == (("outer.inner", "outer"), ())
        assert step.stopped == (Stopped(exec_, NO_CAUSE), Stopped(agent, NO_CAUSE))
        assert step.cancelled == (inner_timer, outer_timer)
        assert m.config.status is Status.CANCELLED
        assert m.config.message == "cancelled"
        assert (m.config.timers, m.config.invokes, m.leaf) == ((), (), ROOT)
        assert m.config.ended_in == ("outer.inner",)

    def test_a_handled_cancel_is_an_ordinary_event(self) -> None:
        m = Machine("cancel")
        m.fire(m.timer("outer"))
        assert m.leaf == "shielded"
        step = m.send("CANCEL")
        assert step.taken
        assert m.config.status is Status.RUNNING
        assert m.config.context == {"cancels": 1}


class TestFaults:
    def test_a_guard_that_fails_faults_the_run_and_stops_with_no_cause(self) -> None:
        m = Machine("faults")
        agent, exec_ = m.invoke("work"), m.invoke("work.busy")
        step = m.send("check", cause=PICK)
        fault = "CEL expression 'event.missing == 1' failed: no key 'missing'"
        assert step.fault == fault
        assert m.config.status is Status.FAILED
        assert m.config.message == (
            f"the Machine faulted in state 'work': {fault} "
            "(spec.machine.states.work.on.check.guard); no state handles error.expression"
        )
        assert moved(step) == (("work.busy", "work"), ())
        assert step.stopped == (Stopped(exec_, NO_CAUSE), Stopped(agent, NO_CAUSE))
        assert (m.config.timers, m.config.invokes, m.leaf) == ((), (), ROOT)
        assert m.config.ended_in == ("work.busy",)

    def test_stops_made_before_the_error_in_the_same_step_lose_their_cause(self) -> None:
        m = Machine("faults")
        agent, exec_ = m.invoke("work"), m.invoke("work.busy")
        step = m.send("onward", cause=PICK)
        assert step.fault == "CEL expression 'context.nope == 1' failed: no key 'nope'"
        assert moved(step) == (("work.busy", "work", "checked"), ("checked",))
        assert step.stopped == (Stopped(exec_, NO_CAUSE), Stopped(agent, NO_CAUSE))
        assert m.config.status is Status.FAILED


class TestExpressionErrors:
    def test_a_failing_guard_selects_nothing_and_its_state_routes_the_error(self) -> None:
        m = Machine("expression_errors")
        agent = m.invoke("work")
        step = m.send("approve", cause=PICK)
        assert moved(step) == (("work",), ("retry",))
        assert step.stopped == (Stopped(agent, PICK),)
        assert (step.fault, m.config.status) == (None, Status.RUNNING)
        assert m.config.context["failure"] == {
            "state": "work",
            "where": "spec.machine.states.work.on.approve.guard",
            "message": "no key 'level'",
        }

    def test_a_failing_assign_moves_and_writes_nothing_and_an_outer_handler_takes_it(
        self,
    ) -> None:
        m = Machine("expression_errors")
        step = m.send("count")
        # Reaching the top-level final ends the Run, which exits it too.
        assert moved(step) == (("work", "broken"), ("broken",))
        assert m.config.status is Status.FAILED
        assert m.config.output == {"state": "work", "expression": "event.missing", "key": "missing"}
        assert (m.config.context["n"], "m" in m.config.context) == (0, False)
        assert m.config.message == "reached the failed final 'broken'"

    def test_a_final_output_that_fails_is_heard_in_the_final(self) -> None:
        m = Machine("expression_errors")
        step = m.send("finish")
        assert moved(step) == (
            ("work", "ending.last", "ending", "broken"),
            ("ending", "ending.last", "broken"),
        )
        assert m.config.output == {
            "state": "ending.last",
            "expression": "context.absent",
            "key": "absent",
        }

    def test_an_error_while_handling_one_faults_the_run(self) -> None:
        m = Machine("expression_errors")
        m.send("approve")
        step = m.send("bad")
        assert step.fault == "CEL expression 'event.never == 1' failed: no key 'never'"
        assert m.config.status is Status.FAILED
        assert m.config.message == (
            "the Machine faulted in state 'retry': CEL expression 'event.never == 1' failed: "
            "no key 'never' (spec.machine.states.retry.on[\"error.expression\"].guard); it "
            "failed while error.expression was handled"
        )
        assert m.config.ended_in == ("retry",)

    def test_accepted_lists_what_the_active_states_take(self) -> None:
        m = Machine("expression_errors")
        assert [(a.event, a.state, a.description) for a in it.accepted(m.chart, m.config)] == [
            ("approve", "work", "Approve."),
            ("count", "work", "Count."),
            ("finish", "work", "Finish."),
        ]
        review = Machine("guards")
        assert it.accepted(review.chart, review.config)
        m.send("count")
        assert it.accepted(m.chart, m.config) == []


class TestCauses:
    def test_a_steps_cause_rides_its_starts_and_armed_timers(self) -> None:
        m = Machine("causes")
        assert {t.cause for t in m.first.armed} == {NO_CAUSE}
        assert {i.cause for i in m.first.started} == {NO_CAUSE}
        step = m.send("run", now=5.0, cause=PICK)
        assert moved(step) == (("ask.idle",), ("ask.testing",))
        testing = StatePath("ask.testing")
        assert step.armed == (TimerEntry("after:ask.testing:10s", testing, 15.0, PICK, 3),)
        assert step.started == (InvokeEntry(testing, InvokeKind.EXEC, PICK, 4),)
        assert m.timer("ask").cause == NO_CAUSE

    def test_a_steps_cause_rides_its_stops_and_cancelled_timers_keep_theirs(self) -> None:
        m = Machine("causes")
        m.send("run", cause=PICK)
        agent, exec_ = m.invoke("ask"), m.invoke("ask.testing")
        timeout, testing = m.timer("ask"), m.timer("ask.testing")
        step = m.send("quit", cause=PICK)
        assert moved(step) == (("ask.testing", "ask"), ("gone",))
        assert step.stopped == (Stopped(exec_, PICK), Stopped(agent, PICK))
        assert step.cancelled == (testing, timeout)
        assert (testing.cause, timeout.cause) == (PICK, NO_CAUSE)

    def test_a_timer_the_pick_armed_fires_with_the_picks_cause(self) -> None:
        m = Machine("causes")
        m.send("run", cause=PICK)
        exec_ = m.invoke("ask.testing")
        step = m.fire(m.timer("ask.testing"))
        assert step.event.cause == PICK
        assert moved(step) == (("ask.testing",), ("ask.idle",))
        assert step.stopped == (Stopped(exec_, PICK),)

    def test_an_exec_error_nothing_handles_stops_everything_with_no_cause(self) -> None:
        # The exec the pick started carries the pick's cause, but a defect that no state
        # catches is never the pick's (the outcome table: aborted).
        m = Machine("causes")
        m.send("run", cause=PICK)
        agent = m.invoke("ask")
        step = m.error("ask.testing", reason="exec", message="unreachable")
        assert step.event.cause == PICK
        assert m.config.status is Status.FAILED
        assert m.config.message == (
            "the invoke of state 'ask.testing' failed and no onError handles it: unreachable"
        )
        assert step.stopped == (Stopped(agent, NO_CAUSE),)

    def test_a_timer_armed_before_the_pick_keeps_no_cause(self) -> None:
        m = Machine("causes")
        m.send("run", cause=PICK)
        agent, exec_ = m.invoke("ask"), m.invoke("ask.testing")
        step = m.fire(m.timer("ask"))
        assert step.event.cause == NO_CAUSE
        assert moved(step) == (("ask.testing", "ask"), ("timeout",))
        assert step.stopped == (Stopped(exec_, NO_CAUSE), Stopped(agent, NO_CAUSE))


class TestRest:
    ASK = StatePath("ask")

    def test_at_start_the_turn_timeout_does_not_hold_rest(self) -> None:
        m = Machine("rest")
        assert it.at_rest(m.chart, m.config, self.ASK)
        assert it.handled_below(m.chart, m.config, self.ASK) == ["note", "run", "cool", "snooze"]
        assert it.handled_below(m.chart, m.config, StatePath("ask.idle")) == ["note"]

    def test_an_exec_running_below_holds_rest_until_it_settles(self) -> None:
        m = Machine("rest")
        m.send("run")
        assert not it.at_rest(m.chart, m.config, self.ASK)
        assert it.handled_below(m.chart, m.config, self.ASK) == ["run", "cool", "snooze"]
        m.done("ask.testing", {"exitCode": 0, "output": "", "timedOut": False})
        assert m.leaf == "ask.testing"
        assert it.at_rest(m.chart, m.config, self.ASK)

    def test_a_timer_on_a_child_targeting_inside_holds_rest(self) -> None:
        m = Machine("rest")
        m.send("cool")
        assert not it.at_rest(m.chart, m.config, self.ASK)
        m.fire(m.timer("ask.cooling"))
        assert m.leaf == "ask.idle"
        assert it.at_rest(m.chart, m.config, self.ASK)

    def test_a_timer_on_a_child_leaving_the_agents_state_does_not_hold_rest(self) -> None:
        m = Machine("rest")
        m.send("snooze")
        assert len(m.config.timers) == 2
        assert it.at_rest(m.chart, m.config, self.ASK)


class TestSnapshot:
    def test_restore_gives_the_configuration_back_through_json(self) -> None:
        m = Machine("causes", now=1.5)
        m.send("run", now=2.25, cause=frozenset({"t2", "t1"}))
        m.config = it.with_context(m.config, {"deep": {"list": [1, 2.5, None, "x"]}})
        data = json.loads(json.dumps(it.snapshot(m.config)))
        assert it.restore(data) == m.config

    def test_an_ended_configuration_restores_with_the_leaf_it_ended_in(self) -> None:
        m = Machine("finals")
        m.send("finish")
        m.send("end")
        data = json.loads(json.dumps(it.snapshot(m.config)))
        assert it.restore(data) == m.config
        assert it.restore(data).ended_in == ("done",)
        del data["endedIn"]
        assert it.restore(data).ended_in == ()
