"""Fan-out invokes (``invoke.forEach``): a child Machine per item of a CEL list.

Cases:
- concurrency: five items, two at a time: exactly two children run, the next one (by
  item index) starts when one ends, in the same step; ``done.invoke`` once every child
  ended, its output the children's outputs in item order and its results each child's
  key, status, output and message;
- keys: an item that is a key names its child; others take their index; ``forEach.key``
  names them from ``input``; a key that is no key, or twice the same, is the invoke's
  ``error.invoke`` (reason ``items``) saying which items, as is a key that is no
  string or a key expression that fails; items that are not a list, more than
  ``MAX_ITEMS`` (the API's bound), larger than ``MAX_ITEMS_BYTES`` of JSON, or that
  fail, likewise; an empty list is done at once
  with ``[]``; children that end (or fail) as they start make one answer;
- failFast: the first failing child is the invoke's ``error.invoke`` (reason
  ``child-failed``, its key); the running children run on while the state stays, no
  pending one starts; the state's exit (or CANCEL) stops every child's invoke with the
  macrostep's cause; without failFast every child runs to its end and the results say
  which failed; children failing in one microstep make one error, never a fault;
- isolation: a child's unhandled ``error.expression`` or invoke error fails the child,
  not the Run, stopping its own invokes with no cause while the child started in its
  place keeps the pick's; an event scoped to one child's state reaches no other child; a
  signal (scope: the root) reaches no child; a child's timer moves that child only;
- a fan-out in a child (nested instance paths) and a fan-out in a parallel region;
- expressions of a child see its own ``context`` and its item as ``input``
  (``interpreter.activation`` too);
- snapshot and restore in the middle of a fan-out give the configuration back, and the
  rest of the run takes the same steps.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeturn.api import machine as api
from kubeturn.machine import interpreter as it
from kubeturn.machine.interpreter import NO_CAUSE, ChildStatus, Status, Stopped
from tests.unit.stepping import EXEC, Machine, moved

PICK = frozenset({"t1"})
ITEMS = ["a", "b", "c", "d", "e"]


def child(**work: Any) -> dict[str, Any]:
    """A child Machine: ``work`` until ``ok`` (done, its output from its item and
    context) or ``bad`` (a failed final)."""
    return {
        "initial": "work",
        "context": {"tries": 0},
        "states": {
            "work": {
                "on": {
                    "ok": "done",
                    "bad": "broken",
                    "bump": {"assign": {"context.tries": "context.tries + 1"}},
                    "check": {"guard": "event.x > 0", "target": "done"},
                },
                **work,
            },
            "done": {"type": "final", "output": "string(input) + ':' + string(context.tries)"},
            "broken": {"type": "final", "outcome": "failed", "output": "'broken'"},
        },
    }


def fan(
    items: Any = ITEMS, machine: dict[str, Any] | None = None, **for_each: Any
) -> dict[str, Any]:
    return {
        "initial": "fix",
        "context": {"items": items},
        "states": {
            "fix": {
                "invoke": {
                    "forEach": {
                        "items": "context.items",
                        "concurrency": 2,
                        "machine": machine or child(),
                        **for_each,
                    },
                    "onDone": {
                        "target": "merged",
                        "assign": {
                            "context.output": "event.output",
                            "context.results": "event.results",
                        },
                    },
                    "onError": {"target": "failed", "assign": {"context.error": "event"}},
                },
                "on": {"leave": "failed"},
            },
            "merged": {"on": {"again": "fix"}},
            "failed": {"on": {"again": "fix"}},
        },
    }


def statuses(m: Machine) -> dict[str, str]:
    return {c.key: c.status.value for c in m.config.children}


def finish(m: Machine, key: str, event: str = "ok", **fields: Any) -> it.Step:
    return m.send(event, scope=f"fix[{key}].work", **fields)


class TestConcurrency:
    def test_two_children_run_the_others_wait(self) -> None:
        m = Machine(fan())
        assert m.first.entered == ("fix", "fix[a]", "fix[a].work", "fix[b]", "fix[b].work")
        assert [i.kind for i in m.first.started] == [it.InvokeKind.FAN_OUT]
        assert m.active == ("fix", "fix[a].work", "fix[b].work")
        assert m.config.leaves == ("fix",)
        assert statuses(m) == dict(zip(ITEMS, ["running"] * 2 + ["pending"] * 3, strict=True))

    def test_the_next_child_by_index_starts_when_one_ends(self) -> None:
        m = Machine(fan())
        step = finish(m, "b")
        assert moved(step) == (
            ("fix[b].work", "fix[b].done", "fix[b]"),
            ("fix[b].done", "fix[c]", "fix[c].work"),
        )
        assert m.active == ("fix", "fix[a].work", "fix[c].work")
        assert statuses(m) == {
            "a": "running",
            "b": "succeeded",
            "c": "running",
            "d": "pending",
            "e": "pending",
        }

    def test_done_once_every_child_ended_with_outputs_in_item_order(self) -> None:
        m = Machine(fan())
        for key in ("b", "a", "d", "c"):
            finish(m, key)
            assert m.active[0] == "fix"
        m.send("bump", scope="fix[e].work")
        step = finish(m, "e")
        assert step.moves[-1].target == "merged"
        assert m.active == ("merged",)
        assert m.config.children == ()
        assert m.config.context["output"] == ["a:0", "b:0", "c:0", "d:0", "e:1"]
        assert m.config.context["results"][4] == {
            "key": "e",
            "status": "succeeded",
            "output": "e:1",
            "message": None,
        }


class TestKeys:
    def test_an_item_that_is_no_key_takes_its_index(self) -> None:
        m = Machine(fan(["ok-1", "no key", 7, True, {"n": 1}], concurrency=5))
        assert [c.key for c in m.config.children] == ["ok-1", "1", "7", "3", "4"]
        assert m.active[:3] == ("fix", "fix[ok-1].work", "fix[1].work")

    def test_a_key_expression_names_each_child(self) -> None:
        m = Machine(fan([{"name": "x"}, {"name": 5}], key="input.name"))
        assert [c.scope for c in m.config.children] == ["fix[x]", "fix[5]"]
        assert [c.item for c in m.config.children] == [{"name": "x"}, {"name": 5}]

    @pytest.mark.parametrize(
        ("items", "key", "message"),
        [
            (
                [{"name": "a b"}],
                "input.name",
                "item 0's key 'a b' is not a key: letters, digits, '_' and '-' (at most 63); "
                "say one with forEach.key",
            ),
            (
                [{"name": "x"}, {"name": "x"}],
                "input.name",
                "items 0 and 1 have the same key 'x'; say one that tells them apart with "
                "forEach.key",
            ),
            (
                ["a", "a"],
                None,
                "items 0 and 1 have the same key 'a'; say one that tells them apart with "
                "forEach.key",
            ),
            (
                [{"name": True}],
                "input.name",
                "item 0's key True is a bool, not a string; say one with forEach.key",
            ),
            (
                [{"n": [1]}],
                "input.n",
                "item 0's key [1] is a list, not a string; say one with forEach.key",
            ),
            ("nope", None, "forEach.items (context.items) is a str, not a list"),
            ({"a": 1}, None, "forEach.items (context.items) is a dict, not a list"),
            (
                list(range(101)),
                None,
                "forEach.items (context.items) has 101 items; a fan-out takes 100",
            ),
        ],
    )
    def test_bad_items_are_the_invokes_error(
        self, items: Any, key: str | None, message: str
    ) -> None:
        extra = {"key": key} if key else {}
        m = Machine(fan(items, **extra))
        assert m.active == ("failed",)
        assert m.config.context["error"] == {
            "type": "error.invoke",
            "reason": "items",
            "message": message,
        }
        assert m.config.children == ()

    def test_items_that_fail_are_the_invokes_error(self) -> None:
        machine = fan()
        machine["states"]["fix"]["invoke"]["forEach"]["items"] = "context.missing"
        m = Machine(machine)
        assert m.config.context["error"]["message"] == (
            "forEach.items (context.missing) failed: no key 'missing'"
        )

    def test_a_key_that_fails_is_the_invokes_error(self) -> None:
        m = Machine(fan([{"n": 1}], key="input.name"))
        assert m.active == ("failed",)
        assert m.config.context["error"]["reason"] == "items"
        assert m.config.context["error"]["message"].startswith(
            "forEach.key (input.name) failed for item 0: "
        )

    def test_the_bound_is_the_apis(self) -> None:
        assert it.MAX_ITEMS == api.MAX_ITEMS

    def test_items_too_large_for_the_status_are_the_invokes_error(self) -> None:
        items = [{"name": f"p{i}", "notes": "x" * 3000} for i in range(90)]
        m = Machine(fan(items, key="input.name"))
        assert m.active == ("failed",)
        assert m.config.context["error"]["reason"] == "items"
        assert m.config.context["error"]["message"] == (
            "forEach.items (context.items) is 272,331 bytes of JSON; a fan-out takes "
            "262,144: give each child a name or an index, and let it read what it needs "
            "from the Run's input"
        )
        assert m.config.children == ()

    def test_an_empty_list_is_done_at_once(self) -> None:
        m = Machine(fan([]))
        assert m.active == ("merged",)
        assert m.config.context["output"] == []
        assert m.config.context["results"] == []


class TestFailFast:
    def test_the_first_failing_child_is_the_invokes_error(self) -> None:
        m = Machine(fan(machine=child(invoke=EXEC)))
        b_exec = m.invoke("fix[b].work")
        step = m.send("bad", scope="fix[a].work", cause=PICK)
        assert m.config.context["error"] == {
            "type": "error.invoke",
            "reason": "child-failed",
            "key": "a",
            "message": "the child 'a' failed: reached the failed final 'fix[a].broken'",
        }
        assert m.active == ("failed",)
        assert Stopped(b_exec, PICK) in step.stopped
        assert [s.invoke.state for s in step.stopped] == ["fix[a].work", "fix[b].work"]
        assert m.config.children == ()
        assert m.config.invokes == ()

    def test_an_unhandled_child_failure_fails_the_run_with_no_cause_for_any_stop(self) -> None:
        """ADR 0068: a defect no state catches is no pick's, even when the pick moved its
        own child first (hypothesis found it: the picking child's stop kept the pick)."""
        machine = fan(machine=child(invoke=EXEC))
        del machine["states"]["fix"]["invoke"]["onError"]
        m = Machine(machine)
        step = m.send("bad", scope="fix[a].work", cause=PICK)
        assert m.config.status is Status.FAILED
        assert [s.invoke.state for s in step.stopped] == ["fix[a].work", "fix[b].work"]
        assert {s.cause for s in step.stopped} == {NO_CAUSE}

    def test_the_running_children_run_on_while_the_state_stays(self) -> None:
        machine = fan()
        machine["states"]["fix"]["invoke"]["onError"] = {"assign": {"context.error": "event.key"}}
        m = Machine(machine)
        finish(m, "a", "bad")
        assert m.config.context["error"] == "a"
        assert statuses(m) == {
            "a": "failed",
            "b": "running",
            "c": "pending",
            "d": "pending",
            "e": "pending",
        }
        finish(m, "b")
        assert statuses(m)["c"] == "pending"
        step = m.send("leave", cause=PICK)
        assert m.active == ("failed",)
        assert m.config.children == ()
        assert "fix" in step.exited

    def test_exiting_the_state_stops_every_childs_invoke_with_the_cause(self) -> None:
        m = Machine(fan(machine=child(invoke=EXEC)))
        live = m.config.invokes
        step = m.send("leave", cause=PICK)
        assert step.exited == ("fix[b].work", "fix[b]", "fix[a].work", "fix[a]", "fix")
        assert step.stopped == (
            Stopped(live[2], PICK),
            Stopped(live[1], PICK),
            Stopped(live[0], PICK),
        )
        assert [s.invoke.kind for s in step.stopped] == ["exec", "exec", "fan-out"]

    def test_cancel_exits_every_child_and_stops_their_invokes(self) -> None:
        m = Machine(fan(machine=child(invoke=EXEC)))
        live = m.config.invokes
        step = m.send(it.CANCEL, cause=PICK)
        assert m.config.status is Status.CANCELLED
        assert step.exited == ("fix[b].work", "fix[b]", "fix[a].work", "fix[a]", "fix")
        assert {s.invoke for s in step.stopped} == set(live)
        assert m.config.children == ()
        assert m.config.ended_in == ("fix",)

    def test_children_that_end_as_they_start_make_one_done(self) -> None:
        quick = {"initial": "done", "states": {"done": {"type": "final", "output": "input"}}}
        m = Machine(fan(machine=quick))
        assert m.active == ("merged",)
        assert m.config.context["output"] == ITEMS
        assert [mv.event for mv in m.first.moves] == ["done.invoke"]

    def test_a_child_that_fails_as_it_starts_fails_fast(self) -> None:
        broken = {"initial": "no", "states": {"no": {"type": "final", "outcome": "failed"}}}
        m = Machine(fan(machine=broken))
        assert m.active == ("failed",)
        assert m.config.context["error"]["key"] == "a"
        assert [c for c in m.first.entered if c.endswith("]")] == ["fix[a]"]

    def test_without_fail_fast_every_child_runs_and_results_say_which_failed(self) -> None:
        m = Machine(fan(["a", "b", "c"], failFast=False))
        finish(m, "a", "bad")
        finish(m, "b")
        finish(m, "c", "bad")
        assert m.active == ("merged",)
        assert m.config.context["output"] == ["broken", "b:0", "broken"]
        assert [(r["key"], r["status"]) for r in m.config.context["results"]] == [
            ("a", "failed"),
            ("b", "succeeded"),
            ("c", "failed"),
        ]
        assert m.config.context["results"][0]["message"] == (
            "reached the failed final 'fix[a].broken'"
        )


class TestIsolation:
    def test_an_unhandled_expression_error_fails_the_child_not_the_run(self) -> None:
        m = Machine(fan(["a", "b"], failFast=False))
        step = finish(m, "a", "check")
        assert step.fault is None
        assert m.config.status is Status.RUNNING
        [a, b] = m.config.children
        assert a.status is ChildStatus.FAILED
        assert "the Machine faulted in state 'fix[a].work'" in (a.message or "")
        assert b.status is ChildStatus.RUNNING
        assert m.active == ("fix", "fix[b].work")

    def test_an_unhandled_invoke_error_fails_the_child_not_the_run(self) -> None:
        m = Machine(fan(["a", "b"], failFast=False, machine=child(invoke=EXEC)))
        m.error("fix[a].work", reason="exec", message="boom")
        [a, b] = m.config.children
        assert (a.status, b.status) == (ChildStatus.FAILED, ChildStatus.RUNNING)
        assert a.message == (
            "the invoke of state 'fix[a].work' failed and no onError handles it: boom"
        )
        assert m.config.status is Status.RUNNING

    def test_an_event_scoped_to_one_child_reaches_no_other(self) -> None:
        m = Machine(fan())
        m.send("bump", scope="fix[a].work")
        assert [c.context for c in m.config.children[:2]] == [{"tries": 1}, {"tries": 0}]

    def test_a_signal_reaches_no_child(self) -> None:
        m = Machine(fan())
        step = m.send("ok")
        assert not step.taken
        assert m.active == ("fix", "fix[a].work", "fix[b].work")

    def test_a_childs_expressions_see_its_context_and_item(self) -> None:
        m = Machine(fan())
        m.send("bump", scope="fix[b].work")
        seen = it.activation(m.config, None, it.Scope(input="run"), "fix[b].work")
        assert (seen["context"], seen["input"]) == ({"tries": 1}, "b")
        assert it.activation(m.config, None, it.Scope(input="run"))["input"] == "run"


class TestNesting:
    def test_a_fan_out_in_a_child(self) -> None:
        inner = child()
        inner["states"]["work"]["invoke"] = {
            "forEach": {"items": "[input + '1', input + '2']", "machine": child()},
            "onDone": {"target": "done", "assign": {"context.tries": "size(event.output)"}},
        }
        m = Machine(fan(["a"], machine=inner))
        assert m.active == ("fix", "fix[a].work", "fix[a].work[a1].work", "fix[a].work[a2].work")
        m.send("ok", scope="fix[a].work[a2].work")
        step = m.send("ok", scope="fix[a].work[a1]")
        assert m.active == ("merged",)
        assert m.config.context["output"] == ["a:2"]
        assert step.exited[-3:] == ("fix[a].done", "fix[a]", "fix")

    def test_a_fan_out_in_a_parallel_region(self) -> None:
        machine = {
            "initial": "both",
            "context": {"items": ["a", "b"]},
            "states": {
                "both": {
                    "type": "parallel",
                    "onDone": {"target": "over", "assign": {"context.out": "event.output"}},
                    "states": {
                        "fan": {
                            "initial": "fix",
                            "states": {
                                "fix": {
                                    "invoke": {
                                        "forEach": {"items": "context.items", "machine": child()},
                                        "onDone": "fixed",
                                    }
                                },
                                "fixed": {"type": "final", "output": "'fixed'"},
                            },
                        },
                        "watch": {
                            "initial": "waiting",
                            "states": {
                                "waiting": {"on": {"ok": "seen"}},
                                "seen": {"type": "final", "output": "'seen'"},
                            },
                        },
                    },
                },
                "over": {"type": "final", "output": "context.out"},
            },
        }
        m = Machine(machine)
        fan_out = ("both.fan.fix", "both.fan.fix[a].work", "both.fan.fix[b].work")
        assert m.active == (*fan_out, "both.watch.waiting")
        m.send("ok")
        assert m.active == (*fan_out, "both.watch.seen")
        m.send("ok", scope="both.fan.fix[a].work")
        m.send("ok", scope="both.fan.fix[b].work")
        assert m.config.output == {"fan": "fixed", "watch": "seen"}


class TestSnapshots:
    def test_restore_mid_fan_out_gives_the_configuration_and_the_same_steps(self) -> None:
        m = Machine(fan())
        finish(m, "b")
        m.send("bump", scope="fix[c].work")
        data = json.loads(json.dumps(it.snapshot(m.config)))
        restored = it.restore(data)
        assert restored == m.config
        rest = [("ok", "fix[a].work"), ("bad", "fix[c].work"), ("ok", "fix[d].work")]
        steps = []
        for config in (m.config, restored):
            made = []
            for name, scope in rest:
                step = it.step(m.chart, config, it.Event(name, scope=scope), it.Scope(), 0.0)
                made.append(step)
                config = step.config
            steps.append(made)
        assert steps[0] == steps[1]


class TestOneAnswer:
    def test_children_failing_in_one_microstep_give_one_error(self) -> None:
        """Two children whose eventless transitions fail them in one microstep: the
        fan-out answers once; the second failure's answer is stale, not a fault."""
        quick = child()
        quick["states"]["work"]["always"] = {"guard": "input != 'c'", "target": "broken"}
        machine = fan(["a", "b", "c"], machine=quick)
        machine["states"]["fix"]["invoke"]["onError"] = {
            "assign": {"context.errors": "context.errors + [event.key]"}
        }
        machine["context"] = {"items": ["a", "b", "c"], "errors": []}
        m = Machine(machine)
        assert m.config.status is Status.RUNNING
        assert m.config.context["errors"] == ["a"]
        assert statuses(m) == {"a": "failed", "b": "failed", "c": "pending"}
        assert m.active == ("fix",)

    def test_a_child_that_faults_stops_its_own_with_no_cause_the_next_starts_with_it(
        self,
    ) -> None:
        """A child's fault is a defect: its invokes stop with no cause; the child that
        starts in its place is started by the pick's macrostep, with the pick's cause."""
        m = Machine(fan(["a", "b"], concurrency=1, failFast=False, machine=child(invoke=EXEC)))
        step = finish(m, "a", "check", cause=PICK)
        assert [(s.invoke.state, s.cause) for s in step.stopped] == [("fix[a].work", frozenset())]
        assert [(i.state, i.cause) for i in step.started] == [("fix[b].work", PICK)]


class TestChildTimers:
    def test_each_childs_timer_moves_that_child_only(self) -> None:
        m = Machine(fan(["a", "b"], machine=child(after={"5s": "done"})))
        assert [(t.state, t.fire_at) for t in m.config.timers] == [
            ("fix[a].work", 5.0),
            ("fix[b].work", 5.0),
        ]
        step = m.fire(m.timer("fix[b].work"))
        assert moved(step) == (("fix[b].work", "fix[b].done", "fix[b]"), ("fix[b].done",))
        assert [t.state for t in m.config.timers] == ["fix[a].work"]
        step = m.send("leave", cause=PICK)
        assert [t.state for t in step.cancelled] == ["fix[a].work"]
