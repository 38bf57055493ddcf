"""Parallel states (``type: parallel``) against SCXML's semantics, with exact entry and
exit orders; cases from the W3C SCXML Implementation Report Plan (IRP) are named by
test number, translated to kubeturn manifests (no ``onentry``/``raise``: an event is
sent instead, and ``assign`` on transitions stands for executable content).

Cases:
- the initial configuration enters the parallel state, then each region and its
  initial chain, in document order (412, 413); a deep target inside one region enters
  the other regions' defaults (576);
- a signal (scope: the root) is offered to every region; a pick scoped to one region's
  state is not seen by another region handling the same event name;
- selection: inner states win, a region's leaf that handles nothing lets the parallel
  state's own transition be selected (403a); conflicts: the earlier in document order
  wins, unless the later one's source is a descendant of the earlier's (403b, 403c);
  targetless transitions in every region are all taken in one microstep;
- exit order: reverse document order, children before parents (404); executable
  content: every ``assign`` of a microstep is evaluated before anything moves, then
  applied in document order (405, a deviation); entry order: document order, parents
  before children (406);
- a transition between two regions, or the parallel state's own into a region, leaves
  and enters the whole parallel state (a domain is never a parallel state); a
  transition out of the parallel state from one
  region exits every region, the others' transitions on the same event losing by
  conflict;
- ``done.state``: a compound region's (416), the parallel state's once every region is
  in a final state (417, 570), once, with every region's output by name, also when
  every region reaches its final in one microstep;
- ``after`` timers and ``always`` transitions in regions; ``error.expression`` raised in
  a region is heard by that region only; CANCEL exits every region (innermost, latest
  first) and stops each region's invoke; exec invokes in regions answered one by one;
- queries: ``accepted`` gives every region's events once, leaf by leaf and inner first;
  ``handled_below`` a region; an invoke in another region holds no rest;
- a parallel region completing last completes its parallel parent (done events outward).
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.machine import interpreter as it
from kubeturn.machine.interpreter import CANCEL, Status, Stopped
from tests.unit.stepping import EXEC, Machine, moved

PICK = frozenset({"t1"})


def review(**extra: Any) -> dict[str, Any]:
    """A two-region review: each region reads, then approves (a final with an output) or
    rejects (out of the parallel state)."""

    def region(verdict: str) -> dict[str, Any]:
        return {
            "initial": "reading",
            "on": {"reread": ".reading"},
            "states": {
                "reading": {
                    "on": {
                        "approve": "ok",
                        "reject": "rejected",
                        "bump": {"assign": {"context.n": "context.n + 1"}},
                    }
                },
                "ok": {"type": "final", "output": f"'{verdict}'"},
            },
        }

    machine: dict[str, Any] = {
        "initial": "idle",
        "context": {"n": 0},
        "states": {
            "idle": {"on": {"go": "review", "deep": "review.style.ok"}},
            "review": {
                "type": "parallel",
                "onDone": {"target": "merged", "assign": {"context.reviews": "event.output"}},
                "states": {"security": region("approved"), "style": region("fine")},
            },
            "rejected": {"on": {"retry": "idle"}},
            "merged": {"type": "final", "output": "context.reviews"},
        },
    }
    machine.update(extra)
    return machine


def started(machine: dict[str, Any]) -> Machine:
    m = Machine(machine)
    m.send("go")
    return m


SEC = "review.security.reading"
STY = "review.style.reading"
EVERY = ("review", "review.security", SEC, "review.style", STY)
"""The parallel state's states in document order."""


class TestInitialConfiguration:
    def test_entering_a_parallel_state_enters_every_region_in_document_order(self) -> None:
        """IRP 412/413: the initial configuration holds every region's initial chain;
        IRP 406: parents before children, document order between regions."""
        m = Machine({**review(), "initial": "review"})
        assert moved(m.first) == ((), EVERY)
        assert m.active == (SEC, STY)
        assert m.config.leaves == (SEC, STY)

    def test_a_non_default_initial_inside_a_region(self) -> None:
        """IRP 413: a region's own ``initial`` is respected, not its first child."""
        machine = review()
        machine["states"]["review"]["states"]["style"]["initial"] = "ok"
        m = Machine({**machine, "initial": "review"})
        assert m.first.entered == (*EVERY[:4], "review.style.ok")
        assert m.active == (SEC, "review.style.ok")

    def test_a_deep_target_enters_the_other_regions_defaults(self) -> None:
        """IRP 576: a target deep in one region enters the parallel state, every other
        region's default, and the target's chain, in document order."""
        m = Machine(review())
        step = m.send("deep")
        assert moved(step) == (
            ("idle",),
            ("review", "review.security", SEC, "review.style", "review.style.ok"),
        )
        assert m.active == (SEC, "review.style.ok")


class TestScopes:
    def test_a_signal_is_offered_to_every_region(self) -> None:
        m = started(review())
        step = m.send("approve")
        assert step.exited == (
            STY,
            SEC,
            "review.style.ok",
            "review.style",
            "review.security.ok",
            "review.security",
            "review",
            "merged",
        )
        assert m.config.status is Status.DONE

    def test_a_pick_scoped_to_one_region_is_not_seen_by_another(self) -> None:
        m = started(review())
        step = m.send("approve", scope=SEC)
        assert moved(step) == ((SEC,), ("review.security.ok",))
        assert m.active == ("review.security.ok", STY)

    def test_a_pick_scoped_to_a_region_reaches_its_leaves_only(self) -> None:
        m = started(review())
        step = m.send("bump", scope="review.style")
        assert step.taken
        assert m.config.context == {"n": 1}
        assert moved(step) == ((), ())

    def test_a_scope_holding_no_active_leaf_takes_nothing(self) -> None:
        m = started(review())
        m.send("approve", scope=SEC)
        step = m.send("approve", scope=SEC)
        assert not step.taken


class TestSelection:
    def test_inner_states_win_and_a_silent_region_offers_the_parallel_states_own(
        self,
    ) -> None:
        """IRP 403a: each leaf selects the first enabled transition from itself outward,
        in document order on each state; a leaf whose region handles nothing reaches the
        parallel state's transition, taken beside the other region's targetless one."""
        machine = review()
        parallel = machine["states"]["review"]
        parallel["on"] = {"x": {"assign": {"context.outer": "true"}}}
        security = parallel["states"]["security"]
        security["on"] = {"x": {"assign": {"context.region": "true"}}}
        security["states"]["reading"]["on"]["x"] = [
            {"guard": "false", "target": "rejected"},
            {"assign": {"context.leaf": "true"}},
        ]
        m = started(machine)
        step = m.send("x")
        assert moved(step) == ((), ())
        assert m.config.context == {"n": 0, "leaf": True, "outer": True}

    def test_the_earlier_of_two_conflicting_transitions_wins(self) -> None:
        """IRP 403b: both regions leave the parallel state on ``reject``; their exit
        sets overlap, and the first in document order is the one taken."""
        machine = review()
        machine["states"]["review"]["states"]["style"]["states"]["reading"]["on"]["reject"] = "idle"
        m = started(machine)
        step = m.send("reject")
        assert step.exited == (STY, "review.style", SEC, "review.security", "review")
        assert step.entered == ("rejected",)
        assert [(mv.source, mv.target) for mv in step.moves] == [(SEC, "rejected")]

    def test_a_region_internal_transition_earlier_in_document_order_preempts_a_later_exit(
        self,
    ) -> None:
        """IRP 403c: a transition inside the first region exits only its leaf, but that
        leaf is in the later transition's exit set (the whole parallel state): the
        earlier one wins, and the Machine stays in the parallel state."""
        machine = review()
        regions = machine["states"]["review"]["states"]
        regions["security"]["states"]["reading"]["on"]["z"] = "ok"
        regions["style"]["states"]["reading"]["on"]["z"] = "rejected"
        m = started(machine)
        step = m.send("z")
        assert moved(step) == ((SEC,), ("review.security.ok",))
        assert m.active == ("review.security.ok", STY)

    def test_a_descendants_transition_preempts_its_ancestors_selected_before(self) -> None:
        """IRP 403c: the parallel state's own transition (selected first, for the leaf of
        a region that handles nothing) loses to a later one whose source is inside it."""
        machine = review()
        parallel = machine["states"]["review"]
        parallel["on"] = {"y": "idle"}
        parallel["states"]["style"]["states"]["reading"]["on"]["y"] = "rejected"
        m = started(machine)
        step = m.send("y")
        assert step.entered == ("rejected",)
        assert [(mv.source, mv.target) for mv in step.moves] == [(STY, "rejected")]

    def test_a_targetless_transition_in_each_region_is_taken_in_one_microstep(self) -> None:
        m = started(review())
        step = m.send("bump")
        assert step.taken
        assert moved(step) == ((), ())
        assert m.active == (SEC, STY)


class TestOrders:
    def test_exit_order_is_reverse_document_order_children_first(self) -> None:
        """IRP 404: leaving the parallel state exits the later region's states first,
        each state after its descendants, the parallel state last."""
        m = started(review())
        step = m.send("reject")
        assert step.exited == tuple(reversed(EVERY))

    def test_every_assign_is_evaluated_before_any_is_applied_in_document_order(self) -> None:
        """IRP 405, a deviation: SCXML runs each transition's executable content in
        document order, the second seeing the first's assignments (n = 12 here).
        kubeturn evaluates every ``assign`` of a microstep first, on the context before
        it, then applies them in document order: the later region's value wins (n = 2),
        and no microstep half-applies when a value fails."""
        machine = review()
        regions = machine["states"]["review"]["states"]
        regions["security"]["states"]["reading"]["on"]["w"] = {
            "assign": {"context.n": "context.n * 10 + 1", "context.a": "context.n"}
        }
        regions["style"]["states"]["reading"]["on"]["w"] = {
            "target": "ok",
            "assign": {"context.n": "context.n * 10 + 2", "context.b": "context.n"},
        }
        m = started(machine)
        m.send("w")
        assert m.config.context == {"n": 2, "a": 0, "b": 0}

    def test_entry_order_is_document_order_parents_first(self) -> None:
        """IRP 406: entering the parallel state from outside enters it, then each region
        before its children, regions in document order."""
        m = Machine(review())
        assert m.send("go").entered == EVERY


class TestBetweenRegions:
    def test_a_transition_into_another_region_leaves_and_enters_the_parallel_state(
        self,
    ) -> None:
        """The domain (SCXML's LCCA) is never a parallel state: a transition from one
        region into another exits the whole parallel state and enters it again, every
        other region at its default."""
        machine = review()
        machine["states"]["review"]["states"]["security"]["states"]["reading"]["on"]["swap"] = (
            "style.ok"
        )
        m = started(machine)
        m.send("approve", scope=SEC)
        step = m.send("swap", scope="review.style")
        assert not step.taken
        m2 = started(machine)
        step = m2.send("swap")
        assert step.exited == tuple(reversed(EVERY))
        assert step.entered == ("review", "review.security", SEC, "review.style", "review.style.ok")
        assert m2.active == (SEC, "review.style.ok")

    def test_the_parallel_states_own_transition_into_a_region_leaves_and_enters_it(
        self,
    ) -> None:
        """SCXML's domain of a transition is its source only when the source is compound:
        a parallel state's transition to a state inside a region leaves the parallel
        state and enters it again."""
        machine = review()
        machine["states"]["review"]["on"] = {"skip": "review.style.ok"}
        m = started(machine)
        m.send("approve", scope=SEC)
        step = m.send("skip")
        assert step.exited == (
            STY,
            "review.style",
            "review.security.ok",
            "review.security",
            "review",
        )
        assert step.entered == ("review", "review.security", SEC, "review.style", "review.style.ok")
        assert m.active == (SEC, "review.style.ok")

    def test_a_region_that_leaves_the_parallel_state_exits_every_region(self) -> None:
        machine = review()
        machine["states"]["review"]["states"]["style"]["invoke"] = EXEC
        m = started(machine)
        exec_ = m.invoke("review.style")
        step = m.send("reject", cause=PICK, scope=SEC)
        assert step.exited == tuple(reversed(EVERY))
        assert step.stopped == (Stopped(exec_, PICK),)
        assert m.active == ("rejected",)


class TestDone:
    def test_a_compound_regions_final_raises_its_done_state(self) -> None:
        """IRP 416: reaching a region's final raises that region's ``done.state`` (its
        ``onDone``), not yet the parallel state's."""
        machine = review()
        machine["states"]["review"]["states"]["security"]["onDone"] = {
            "assign": {"context.security": "event.output"}
        }
        m = started(machine)
        m.send("approve", scope=SEC)
        assert m.config.context == {"n": 0, "security": "approved"}
        assert m.active == ("review.security.ok", STY)

    def test_the_parallel_states_done_waits_for_every_region(self) -> None:
        """IRP 417/570: ``done.state`` of the parallel state comes once every region is
        in a final state, carrying each region's output by name."""
        m = started(review())
        first = m.send("approve", scope=SEC)
        assert first.moves[-1].target == "review.security.ok"
        assert m.config.status is Status.RUNNING
        step = m.send("approve", scope=STY)
        assert step.exited == (
            STY,
            "review.style.ok",
            "review.style",
            "review.security.ok",
            "review.security",
            "review",
            "merged",
        )
        assert step.entered == ("review.style.ok", "merged")
        assert m.config.status is Status.DONE
        assert m.config.output == {"security": "approved", "style": "fine"}

    def test_every_region_final_in_one_microstep_gives_one_done_with_every_output(
        self,
    ) -> None:
        """IRP 570: both regions reach their finals in one microstep; the parallel
        state's ``done.state`` is raised once, with both outputs."""
        machine = review()
        machine["states"]["review"]["onDone"] = {
            "target": "merged",
            "assign": {"context.reviews": "event.output", "context.n": "context.n + 1"},
        }
        m = started(machine)
        m.send("approve")
        assert m.config.context == {"n": 1, "reviews": {"security": "approved", "style": "fine"}}
        assert m.config.output == {"security": "approved", "style": "fine"}

    def test_a_region_reaching_a_top_level_final_ends_the_run(self) -> None:
        machine = review()
        machine["states"]["review"]["states"]["style"]["states"]["reading"]["on"]["stop"] = {
            "target": "merged",
            "assign": {"context.reviews": "'stopped'"},
        }
        m = started(machine)
        step = m.send("stop")
        assert step.exited == (*reversed(EVERY), "merged")
        assert (m.config.status, m.config.output) == (Status.DONE, "stopped")
        assert m.config.ended_in == ("merged",)


class TestTimersAndAlways:
    @pytest.fixture
    def timed(self) -> Machine:
        machine = review()
        regions = machine["states"]["review"]["states"]
        regions["security"]["states"]["reading"]["after"] = {"5s": "ok"}
        regions["style"]["states"]["reading"]["after"] = {"2s": "ok"}
        return started(machine)

    def test_each_regions_timer_is_armed_and_fires_alone(self, timed: Machine) -> None:
        assert [(t.state, t.fire_at) for t in timed.config.timers] == [(SEC, 5.0), (STY, 2.0)]
        step = timed.fire(timed.timer(STY))
        assert moved(step) == ((STY,), ("review.style.ok",))
        assert [t.state for t in timed.config.timers] == [SEC]
        step = timed.fire(timed.timer(SEC))
        assert timed.config.status is Status.DONE

    def test_leaving_the_parallel_state_cancels_every_regions_timer(self, timed: Machine) -> None:
        armed = timed.config.timers
        step = timed.send("reject")
        assert step.cancelled == (armed[1], armed[0])
        assert timed.config.timers == ()

    def test_always_in_two_regions_is_taken_in_one_microstep(self) -> None:
        machine = review()
        machine["states"]["review"]["on"] = {"ready": {"assign": {"context.go": "true"}}}
        regions = machine["states"]["review"]["states"]
        for name in ("security", "style"):
            regions[name]["states"]["reading"]["always"] = {
                "guard": "has(context.go)",
                "target": "ok",
            }
        m = started(machine)
        step = m.send("ready")
        assert [(mv.source, mv.event) for mv in step.moves] == [
            (SEC, None),
            (STY, None),
            ("review", "done.state"),
        ]
        assert m.config.output == {"security": "approved", "style": "fine"}


class TestErrors:
    @pytest.fixture
    def checking(self) -> Machine:
        machine = review()
        regions = machine["states"]["review"]["states"]
        reading = regions["security"]["states"]["reading"]
        reading["on"]["check"] = {"guard": "event.x > 0", "target": "ok"}
        regions["security"]["on"] = {
            "error.expression": {"assign": {"context.where": "event.state"}}
        }
        regions["style"]["states"]["reading"]["on"]["error.expression"] = "rejected"
        return started(machine)

    def test_error_expression_is_heard_by_the_failing_region_only(self, checking: Machine) -> None:
        step = checking.send("check")
        assert step.taken
        assert moved(step) == ((), ())
        assert checking.config.context == {"n": 0, "where": SEC}
        assert checking.active == (SEC, STY)

    def test_unhandled_in_the_failing_region_the_run_faults(self) -> None:
        machine = review()
        reading = machine["states"]["review"]["states"]["security"]["states"]["reading"]
        reading["on"]["check"] = {"guard": "event.x > 0", "target": "ok"}
        m = started(machine)
        step = m.send("check")
        assert m.config.status is Status.FAILED
        assert step.fault is not None
        assert f"in state '{SEC}'" in (m.config.message or "")
        assert m.config.ended_in == (SEC, STY)


class TestCancel:
    def test_cancel_exits_every_region_and_stops_each_invoke(self) -> None:
        machine = review()
        regions = machine["states"]["review"]["states"]
        regions["security"]["states"]["reading"]["invoke"] = EXEC
        regions["style"]["states"]["reading"]["invoke"] = EXEC
        m = started(machine)
        first, second = m.config.invokes
        step = m.send(CANCEL, cause=PICK)
        assert step.exited == tuple(reversed(EVERY))
        assert step.stopped == (Stopped(second, PICK), Stopped(first, PICK))
        assert m.config.status is Status.CANCELLED
        assert m.config.ended_in == (SEC, STY)

    def test_each_regions_exec_answers_its_own_region(self) -> None:
        machine = review()
        regions = machine["states"]["review"]["states"]
        for name in ("security", "style"):
            regions[name]["states"]["reading"]["invoke"] = {**EXEC, "onDone": "ok"}
        m = started(machine)
        step = m.done(STY, {"exitCode": 0})
        assert moved(step) == ((STY,), ("review.style.ok",))
        assert [i.state for i in m.config.invokes] == [SEC]
        m.done(SEC, {"exitCode": 0})
        assert m.config.output == {"security": "approved", "style": "fine"}


class TestQueries:
    def test_accepted_gives_each_regions_events_once_leaf_by_leaf(self) -> None:
        machine = review()
        style = machine["states"]["review"]["states"]["style"]
        style["states"]["reading"]["on"]["polish"] = "ok"
        m = started(machine)
        found = [(a.event, a.state) for a in it.accepted(m.chart, m.config)]
        assert found == [
            ("approve", SEC),
            ("reject", SEC),
            ("bump", SEC),
            ("reread", "review.security"),
            ("polish", STY),
        ]

    def test_handled_below_a_region(self) -> None:
        m = started(review())
        assert it.handled_below(m.chart, m.config, "review.security") == [
            "approve",
            "reject",
            "bump",
            "reread",
        ]

    def test_an_invoke_in_another_region_does_not_hold_rest(self) -> None:
        machine = review()
        machine["states"]["review"]["states"]["style"]["states"]["reading"]["invoke"] = EXEC
        m = started(machine)
        assert it.at_rest(m.chart, m.config, SEC)
        assert it.at_rest(m.chart, m.config, "review.security")
        assert not it.at_rest(m.chart, m.config, "review")


class TestNestedParallel:
    @staticmethod
    def region(event: str, output: str) -> dict[str, Any]:
        return {
            "initial": "w",
            "states": {"w": {"on": {event: "f"}}, "f": {"type": "final", "output": output}},
        }

    def test_a_parallel_region_completing_last_completes_its_parallel_parent(self) -> None:
        """SCXML 3.4: done.state.id once all of a parallel state's children are in final
        states; a region that is itself a parallel state is when all of its own are. Its
        algorithm checks only a final's grandparent, so a parallel region completing
        last would leave its parent waiting: kubeturn raises each done outward."""
        machine = {
            "initial": "p",
            "states": {
                "p": {
                    "type": "parallel",
                    "onDone": {"target": "over", "assign": {"context.out": "event.output"}},
                    "states": {
                        "q": {
                            "type": "parallel",
                            "onDone": {"assign": {"context.q": "event.output"}},
                            "states": {
                                "q1": self.region("a", "'one'"),
                                "q2": self.region("b", "'two'"),
                            },
                        },
                        "r": self.region("c", "'three'"),
                    },
                },
                "over": {"type": "final", "output": "context"},
            },
        }
        m = Machine(machine)
        m.send("c")
        m.send("a")
        assert m.config.status is Status.RUNNING
        m.send("b")
        both = {"q": {"q1": "one", "q2": "two"}, "r": "three"}
        assert m.config.output == {"q": both["q"], "out": both}
