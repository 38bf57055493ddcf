"""Loading parallel states and fan-outs (``kubeturn.machine.load``), every problem with
its manifest path.

Cases:
- parallel states: without states, with ``initial``, with a final region, with an
  invoke of its own, each refused (messages verbatim); regions are compound or atomic,
  and every region's states count as reachable once the parallel state is;
- fan-outs: the child Machine's states are compiled under ``<state>[]`` with their
  paths in ``invoke.forEach.machine``; compile errors in it (items, key, guards,
  outputs, initial, targets) name that path, nested fan-outs too; a child transition
  targeting a state of an enclosing Machine is refused saying so (and that state is not
  reported unreachable for it); an unreachable child state is reported;
- continued conversations: two states of one slot in regions of one parallel state are
  refused naming both; the same slot continued in a fan-out child beside a region (a
  child has its own conversations) loads;
- depth: states nested through ``forEach.machine`` count toward
  ``kubeturn.api.depth.MAX_STATE_DEPTH``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.api.depth import MAX_STATE_DEPTH
from kubeturn.errors import DefinitionErrors
from kubeturn.machine import model
from kubeturn.machine.load import load_run
from tests.unit.stepping import document

DONE = {"type": "final"}


def manifest(states: dict[str, Any]) -> dict[str, Any]:
    return document(
        {"initial": next(iter(states)), "states": states},
        agents={"coder": {"instructions": "Code."}},
    )


def agent(**extra: Any) -> dict[str, Any]:
    return {"agent": {"slot": "coder", "prompt": "Do it.", **extra}}


def problems(written: dict[str, Any]) -> list[str]:
    with pytest.raises(DefinitionErrors) as caught:
        load_run(written)
    return [str(error) for error in caught.value.errors]


def only_problem(written: dict[str, Any]) -> str:
    [problem] = problems(written)
    return problem


REGION = {"initial": "r", "states": {"r": {"on": {"x": "f"}}, "f": DONE}}
WHERE = "spec.machine.states.fix.invoke.forEach.machine"


def fan_out(machine: dict[str, Any], **for_each: Any) -> dict[str, Any]:
    return {"invoke": {"forEach": {"items": "[1, 2]", "machine": machine, **for_each}}}


def child(**states: Any) -> dict[str, Any]:
    return {"initial": "work", "states": {"work": {"on": {"ok": "done"}}, "done": DONE, **states}}


def continued() -> dict[str, Any]:
    return {
        "invoke": agent(**{"continue": True}),
        "on": {"x": {"target": "f", "description": "Hand it in."}},
    }


class TestParallel:
    def test_without_states(self) -> None:
        assert only_problem(manifest({"p": {"type": "parallel"}})) == (
            "spec.machine.states.p: a parallel state runs its child states (regions) at "
            "once, and has none: add states, or drop type: parallel"
        )

    def test_with_initial(self) -> None:
        written = {"type": "parallel", "initial": "a", "states": {"a": REGION, "b": REGION}}
        assert only_problem(manifest({"p": written})) == (
            "spec.machine.states.p.initial: a parallel state enters every child state at "
            "once; remove initial"
        )

    def test_with_a_final_region(self) -> None:
        written = {"type": "parallel", "states": {"a": REGION, "b": DONE}}
        assert only_problem(manifest({"p": written})) == (
            "spec.machine.states.p.states.b.type: a region of a parallel state cannot be "
            "final: give the region states and a final child, and the parallel state's "
            "onDone is taken once every region reaches its final"
        )

    def test_with_an_invoke(self) -> None:
        written = {
            "type": "parallel",
            "invoke": {"exec": {"command": "make"}},
            "states": {"a": REGION, "b": REGION},
        }
        assert only_problem(manifest({"p": written})) == (
            "spec.machine.states.p.invoke: a parallel state invokes nothing itself: invoke "
            "in its regions' states"
        )

    def test_regions_compound_or_atomic_all_reachable(self) -> None:
        written = {"type": "parallel", "states": {"a": REGION, "b": {"on": {"y": "done"}}}}
        chart = load_run(manifest({"p": written, "done": DONE})).chart
        assert chart.states[model.StatePath("p")].kind is model.Kind.PARALLEL
        assert chart.regions(model.StatePath("p")) == ["p.a", "p.b"]
        assert chart.states[model.StatePath("p.b")].kind is model.Kind.ATOMIC


class TestFanOut:
    def test_the_child_machine_is_compiled_under_its_root(self) -> None:
        chart = load_run(manifest({"fix": fan_out(child(), key="string(input)")})).chart
        assert [p for p in chart.states if p.startswith("fix")] == [
            "fix",
            "fix[]",
            "fix[].work",
            "fix[].done",
        ]
        fan = chart.states[model.StatePath("fix")].invoke
        assert fan is not None
        assert fan.fan_out is not None
        assert (fan.fan_out.root, fan.fan_out.concurrency, fan.fan_out.fail_fast) == (
            "fix[]",
            4,
            True,
        )
        assert chart.states[model.StatePath("fix[].work")].on["ok"][0].target == "fix[].done"

    def test_compile_errors_name_the_child_machines_path(self) -> None:
        machine = {
            "initial": "work",
            "states": {
                "work": {"on": {"ok": {"target": "done", "guard": "input.("}}},
                "done": {"type": "final", "output": "input +"},
            },
        }
        assert problems(manifest({"fix": fan_out(machine, key="x(")})) == [
            "spec.machine.states.fix.invoke.forEach.key: 'x(' does not compile: Syntax "
            "error: mismatched input '<EOF>' at column 3",
            f"{WHERE}.states.work.on.ok.guard: 'input.(' does not compile: Syntax error: "
            "no viable alternative at input '.(' at column 7",
            f"{WHERE}.states.done.output: 'input +' does not compile: Syntax error: "
            "mismatched input '<EOF>' at column 8",
        ]

    def test_an_unknown_target_and_initial_in_the_child(self) -> None:
        machine = {"initial": "wurk", "states": {"work": {"on": {"ok": "dnoe"}}, "done": DONE}}
        assert problems(manifest({"fix": fan_out(machine)})) == [
            f"{WHERE}.initial: no top-level state 'wurk' (did you mean 'work'?)",
            f"{WHERE}.states.work.on.ok: no state 'dnoe' (did you mean 'done'?)",
        ]

    def test_a_child_transition_to_a_state_outside_it_is_refused(self) -> None:
        states = {"fix": {**fan_out(child(work={"on": {"ok": "after"}})), "on": {"go": "after"}}}
        assert problems(manifest({**states, "after": DONE})) == [
            f"{WHERE}.states.work.on.ok: no state 'after' in the child Machine of 'fix': a "
            "child Machine's transitions stay inside it, and 'after' is outside; leave "
            "through that state's invoke.onDone or invoke.onError",
            f"{WHERE}.states.done: no transition leads to the state 'fix[].done': target it "
            "from another state, or remove it",
        ]

    def test_a_nested_childs_transition_to_an_enclosing_childs_state(self) -> None:
        inner = child(work={"on": {"ok": "outer"}})
        outer = {
            "initial": "w",
            "states": {"w": {**fan_out(inner), "on": {"x": "outer"}}, "outer": DONE},
        }
        assert problems(manifest({"fix": fan_out(outer)}))[0] == (
            f"{WHERE}.states.w.invoke.forEach.machine.states.work.on.ok: no state 'outer' in "
            "the child Machine of 'fix[].w': a child Machine's transitions stay inside it, "
            "and 'fix[].outer' is outside; leave through that state's invoke.onDone or "
            "invoke.onError"
        )

    def test_an_unreachable_child_state(self) -> None:
        assert only_problem(manifest({"fix": fan_out(child(lost={}))})) == (
            f"{WHERE}.states.lost: no transition leads to the state 'fix[].lost': target it "
            "from another state, or remove it"
        )

    def test_bad_items_concurrency_and_worktree(self) -> None:
        assert problems(manifest({"fix": fan_out(child(), items="[1", concurrency=0)})) == [
            "spec.machine.states.fix.invoke.forEach.concurrency: input should be greater "
            "than or equal to 1; got 0",
            "spec.machine.states.fix.invoke.forEach.items: '[1' does not compile: Syntax "
            "error: mismatched input '<EOF>' at column 3",
        ]
        assert problems(manifest({"fix": fan_out(child(), concurrency=101, worktree="x")})) == [
            "spec.machine.states.fix.invoke.forEach.concurrency: input should be less than "
            "or equal to 100; got 101",
            "spec.machine.states.fix.invoke.forEach.worktree: input should be 'shared' or "
            "'per-child'; got 'x'",
        ]


class TestContinuedConversations:
    def test_two_regions_continuing_one_slot_are_refused_naming_both(self) -> None:
        def region() -> dict[str, Any]:
            return {"initial": "w", "states": {"w": continued(), "f": DONE}}

        written = {"type": "parallel", "states": {"a": region(), "b": region()}}
        assert only_problem(manifest({"p": written})) == (
            "spec.machine.states.p.states.b.states.w.invoke.agent.continue: the states "
            "'p.a.w' and 'p.b.w' both continue the Agent 'coder''s conversation, and as "
            "regions of the parallel state 'p' they are active at once: a conversation "
            "takes one Turn at a time. Drop continue: true from one, or give it another "
            "agent slot"
        )

    def test_a_fan_out_child_has_its_own_conversations(self) -> None:
        fan = {
            "initial": "fix",
            "states": {
                "fix": {**fan_out({"initial": "w", "states": {"w": continued(), "f": DONE}})},
                "f": DONE,
            },
        }
        fan["states"]["fix"]["invoke"]["onDone"] = "f"
        region = {"initial": "w", "states": {"w": continued(), "f": DONE}}
        written = {"type": "parallel", "states": {"a": region, "b": fan}}
        loaded = load_run(manifest({"p": written}))
        assert model.StatePath("p.b.fix[].w") in loaded.chart.states


class TestDepth:
    @staticmethod
    def nested_fan_outs(levels: int) -> dict[str, Any]:
        """``levels`` states deep: a fan-out whose child's one state fans out again."""
        state: dict[str, Any] = DONE
        for _ in range(levels - 1):
            state = {
                "invoke": {
                    "forEach": {
                        "items": "[1]",
                        "machine": {"initial": "s", "states": {"s": state}},
                    },
                    "onDone": "s",
                }
            }
        return state

    def test_states_nested_through_for_each_count_toward_the_bound(self) -> None:
        deep = manifest({"s": self.nested_fan_outs(MAX_STATE_DEPTH + 1)})
        assert only_problem(deep) == (
            "spec.machine.states.s.invoke.forEach.machine.states.s.invoke…: states nested "
            f"deeper than {MAX_STATE_DEPTH} levels"
        )
        chart = load_run(manifest({"s": self.nested_fan_outs(MAX_STATE_DEPTH)})).chart
        assert len(chart.states) == 2 * MAX_STATE_DEPTH
