"""Loading a Run manifest into a checked Chart (``kubeturn.machine.load``).

Cases:
- the example (examples/task-with-review.yaml) loads: its states, kinds, initials,
  transitions in document order with their manifest paths, timers (id and delay),
  invokes (templates, continue), finals (output, ``failed``), Menus; the YAML text and
  the parsed document give the same Chart;
- target resolution: a sibling, the nearest ancestor's child, a dotted path, a child
  of the source (``.name``), the source itself, from the root's ``on``; nearest wins;
  an unknown target names the closest state (the did-you-mean message verbatim), or the
  path of a same-named state out of reach; a target that is no path;
- reachability: an orphan, an unreachable compound (its children not repeated), an
  unreachable child of a reachable compound, ancestors entered with a deep target; a
  misspelt target is not reported again as unreachable states;
- kinds: a final with transitions, an invoke or children; a compound without initial
  or with an initial that is no child; an atomic with initial or onDone; output and
  outcome only on finals; the machine's initial;
- Menus: the missing description (message verbatim), descendants' events, the first
  definition wins, document order, the default schema, tool-name rules, Working tool
  names, ``agent.fault``/``CANCEL`` handled but never offered, schemas that are not
  JSON Schema or not an object, one report for an event two Agents are offered;
- expressions: guards, assign values and keys (shape, overlap), outputs, prompt, cwd and
  command templates, with their paths;
- invokes: unknown slot, both or neither of agent/exec, onDone on an agent, exec's
  onDone/onError events and timeout; durations; reserved event names; state names;
- the Workspace a cluster needs (``workspace_required``): a Run with no
  ``spec.workspace`` whose states invoke Agents and commands gets one problem at
  ``spec.workspace`` naming each state and what it runs (verbatim), reported with the
  manifest's other problems; the same Run loads without the option (the local runner),
  and with the option once it names a Workspace or describes one; a Run that invokes
  nothing needs none;
- all at once: five different problems give five errors, one per line; a shape problem
  inside the machine (a field, a transition, a list item, a required field, a whole
  state, an unknown field) hides none of its other problems and adds none (no
  reachability problem of a cut transition, no Menu or kind problem of a cut field);
  a malformed ``states``, which cannot be cut, is reported alone; YAML syntax errors
  name the source, line and column.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from kubeturn.api.validation import on_keys_restored
from kubeturn.errors import DefinitionError, DefinitionErrors, manifest_path
from kubeturn.machine import model
from kubeturn.machine.expressions import CelExpression, CelTemplate
from kubeturn.machine.load import LoadedRun, MenuEntry, load_run, load_run_yaml
from kubeturn.machine.menus import WORKING_TOOLS
from kubeturn_harness.tools.schemas import ToolName

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task-with-review.yaml"
_EXAMPLE = on_keys_restored(yaml.safe_load(EXAMPLE.read_text()))

AGENTS = {
    "coder": {"instructions": "Code."},
    "reviewer": {"instructions": "Review.", "workspace": "read"},
}


@pytest.fixture
def example() -> dict[str, Any]:
    """The example manifest as a document, free to break."""
    return copy.deepcopy(_EXAMPLE)


def manifest(states: dict[str, Any], **machine: Any) -> dict[str, Any]:
    machine.setdefault("initial", next(iter(states)))
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "t", "namespace": "dev"},
        "spec": {"agents": AGENTS, "machine": {**machine, "states": states}},
    }


def agent(slot: str = "coder", **extra: Any) -> dict[str, Any]:
    return {"agent": {"slot": slot, "prompt": "Do it.", **extra}}


def problems(document: Any) -> list[str]:
    with pytest.raises(DefinitionErrors) as caught:
        load_run(document)
    return [str(error) for error in caught.value.errors]


def only_problem(document: Any) -> str:
    [problem] = problems(document)
    return problem


DONE = {"type": "final"}


# --------------------------------------------------------------------------- the example


class TestTheExample:
    @pytest.fixture
    def run(self, example: dict[str, Any]) -> LoadedRun:
        return load_run(example)

    def test_identity(self, run: LoadedRun) -> None:
        assert (run.name, run.namespace) == ("task-with-review", "default")
        assert load_run(manifest({"a": DONE})).namespace == "dev"
        assert list(run.agents) == ["coder", "reviewer"]
        assert run.spec.machine.initial == "implementing"
        assert run.chart.context == {"rounds": 0, "summary": "", "notes": "", "reason": ""}

    def test_states(self, run: LoadedRun) -> None:
        states = run.chart.states
        assert list(states) == [
            "",
            "implementing",
            "reviewing",
            "fixing",
            "humanReview",
            "done",
            "failed",
        ]
        assert run.chart.root.kind is model.Kind.COMPOUND
        assert run.chart.root.initial == "implementing"
        assert run.chart.root.children == tuple(list(states)[1:])
        assert {s.kind for p, s in states.items() if p not in {"", "done", "failed"}} == {
            model.Kind.ATOMIC
        }
        assert states[model.StatePath("done")].kind is model.Kind.FINAL
        assert states[model.StatePath("implementing")].parent == model.ROOT

    def test_transitions_keep_document_order_and_where(self, run: LoadedRun) -> None:
        reviewing = run.chart.states[model.StatePath("reviewing")]
        verdicts = reviewing.on["review_verdict"]
        assert [t.target for t in verdicts] == ["humanReview", "failed", "fixing"]
        assert [t.where for t in verdicts] == [
            f"spec.machine.states.reviewing.on.review_verdict[{i}]" for i in range(3)
        ]
        assert verdicts[0].guard == CelExpression("event.verdict == 'approve'")
        assert verdicts[2].guard is None
        assert [key for key, _ in verdicts[2].assign] == ["context.rounds", "context.notes"]
        assert all(t.source == "reviewing" and t.event == "review_verdict" for t in verdicts)
        approve = run.chart.states[model.StatePath("humanReview")].on["approve"]
        assert approve == (
            model.Transition(
                source=model.StatePath("humanReview"),
                event="approve",
                target=model.StatePath("done"),
                where="spec.machine.states.humanReview.on.approve",
            ),
        )

    def test_a_turn_timeout(self, run: LoadedRun) -> None:
        [timer] = run.chart.states[model.StatePath("implementing")].after
        assert timer.id == "after:implementing:30m"
        assert timer.delay_s == 1800.0
        [transition] = timer.transitions
        assert (transition.event, transition.target) == (timer.id, "failed")
        assert transition.where == "spec.machine.states.implementing.after.30m"

    def test_invokes(self, run: LoadedRun) -> None:
        fixing = run.chart.states[model.StatePath("fixing")]
        assert fixing.invoke is not None
        call = fixing.invoke.agent
        assert call is not None
        assert (call.slot, call.continue_, call.cwd, call.model) == ("coder", True, None, None)
        assert isinstance(call.prompt, CelTemplate)
        rendered = call.prompt.render({"context": {"notes": "Rename x."}})
        assert rendered.startswith("The reviewer asked for changes:\n\nRename x.\n")
        reviewing = run.chart.states[model.StatePath("reviewing")]
        assert reviewing.invoke is not None
        assert reviewing.invoke.agent is not None
        assert reviewing.invoke.agent.continue_ is False

    def test_finals(self, run: LoadedRun) -> None:
        done = run.chart.states[model.StatePath("done")]
        failed = run.chart.states[model.StatePath("failed")]
        assert done.failed is False
        assert failed.failed is True
        assert done.output is not None
        output = done.output.evaluate({"context": {"rounds": 1, "summary": "s"}})
        assert output == {"rounds": 1, "summary": "s"}

    def test_menus(self, run: LoadedRun) -> None:
        assert list(run.menus) == ["implementing", "reviewing", "fixing"]
        [submit] = run.menu(model.StatePath("implementing"))
        assert submit.name == "submit"
        assert submit.description.startswith("The change is complete")
        assert submit.schema["required"] == ["summary"]
        [verdict] = run.menu(model.StatePath("reviewing"))  # agent.fault is never offered
        assert verdict.name == "review_verdict"
        assert verdict.schema["properties"]["verdict"]["enum"] == ["approve", "reject"]

    def test_a_state_without_an_agent_has_no_menu(self, run: LoadedRun) -> None:
        with pytest.raises(KeyError, match="invokes no Agent"):
            run.menu(model.StatePath("humanReview"))

    def test_the_yaml_text_gives_the_same_chart(self, run: LoadedRun) -> None:
        loaded = load_run_yaml(EXAMPLE.read_text(), source=str(EXAMPLE))
        assert loaded.chart == run.chart
        assert loaded.menus == run.menus


# --------------------------------------------------------------------------- targets

NESTED = {
    "work": {
        "initial": "coding",
        "on": {"restart": ".coding"},
        "states": {
            "coding": {
                "on": {
                    "next": "review",
                    "jump": "review.second",
                    "finish": "done",
                    "again": "coding",
                }
            },
            "review": {
                "initial": "first",
                "onDone": "done",
                "states": {
                    "first": {"on": {"back": "coding", "on2": "second", "finish": "done"}},
                    "second": {"on": {"top": "work.coding"}},
                    "done": DONE,
                },
            },
        },
    },
    "done": DONE,
}


class TestTargets:
    @pytest.fixture
    def chart(self) -> model.Chart:
        return load_run(manifest(NESTED, on={"abort": "done"})).chart

    @staticmethod
    def target(chart: model.Chart, state: str, event: str) -> str | None:
        [transition] = chart.states[model.StatePath(state)].on[event]
        return transition.target

    @pytest.mark.parametrize(
        ("state", "event", "target"),
        [
            pytest.param("work.coding", "next", "work.review", id="sibling"),
            pytest.param("work.coding", "again", "work.coding", id="itself"),
            pytest.param("work.coding", "jump", "work.review.second", id="dotted"),
            pytest.param("work.coding", "finish", "done", id="ancestors-child"),
            pytest.param("work.review.first", "back", "work.coding", id="parents-sibling"),
            pytest.param("work.review.first", "on2", "work.review.second", id="sibling-2"),
            pytest.param("work.review.first", "finish", "work.review.done", id="nearest-wins"),
            pytest.param("work.review.second", "top", "work.coding", id="path-from-top"),
            pytest.param("work", "restart", "work.coding", id="child-of-source"),
            pytest.param("", "abort", "done", id="from-the-root"),
        ],
    )
    def test_resolution(self, chart: model.Chart, state: str, event: str, target: str) -> None:
        assert self.target(chart, state, event) == target

    def test_on_done_resolves_from_its_state(self, chart: model.Chart) -> None:
        [transition] = chart.states[model.StatePath("work.review")].on_done
        assert (transition.target, transition.event) == ("done", model.DONE_STATE)

    def test_an_unknown_target_names_the_closest_state(self, example: dict[str, Any]) -> None:
        verdict = example["spec"]["machine"]["states"]["reviewing"]["on"]["review_verdict"]
        verdict[0]["target"] = "humanReveiw"
        assert problems(example) == [
            "spec.machine.states.reviewing.on.review_verdict[0].target: no state "
            "'humanReveiw' (did you mean 'humanReview'?)"
        ]

    def test_a_same_named_state_out_of_reach_is_suggested_by_path(self) -> None:
        states = copy.deepcopy(NESTED)
        states["done"] = {"type": "final"}
        states["start"] = {"on": {"go": "second", "enter": "work"}}
        document = manifest(states, initial="start")
        assert only_problem(document) == (
            "spec.machine.states.start.on.go: no state 'second' (did you mean "
            "'work.review.second'?)"
        )

    def test_a_child_of_an_atomic_state_is_no_state(self) -> None:
        document = manifest({"a": {"on": {"go": ".b"}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.on.go: no state '.b' (did you mean 'b'?)"
        )

    @pytest.mark.parametrize("text", ["a..b", "b.", "..", "a b", ""])
    def test_a_target_that_is_no_path(self, text: str) -> None:
        document = manifest({"a": {"on": {"go": {"target": text}}}, "b": DONE})
        assert problems(document)[0] == (
            f"spec.machine.states.a.on.go.target: {text!r} is not a state's name or path: "
            "names joined by '.', with a leading '.' for a child of this state"
        )


# --------------------------------------------------------------------------- reachability


class TestReachability:
    def test_an_orphan(self) -> None:
        document = manifest({"a": {"on": {"go": "b"}}, "b": DONE, "orphan": DONE})
        assert only_problem(document) == (
            "spec.machine.states.orphan: no transition leads to the state 'orphan': target "
            "it from another state, or remove it"
        )

    def test_an_unreachable_compound_is_reported_once(self) -> None:
        lost = {"initial": "x", "states": {"x": {"on": {"go": "y"}}, "y": DONE}}
        document = manifest({"a": DONE, "lost": lost})
        assert problems(document) == [
            "spec.machine.states.lost: no transition leads to the state 'lost': target it "
            "from another state, or remove it"
        ]

    def test_an_unreachable_child_of_a_reachable_compound(self) -> None:
        work = {"initial": "x", "states": {"x": {"on": {"go": "y"}}, "y": DONE, "spare": DONE}}
        document = manifest({"work": work})
        assert only_problem(document) == (
            "spec.machine.states.work.states.spare: no transition leads to the state "
            "'work.spare': target it from another state, or remove it"
        )

    def test_a_deep_target_enters_its_ancestors_but_not_their_initial(self) -> None:
        work = {"initial": "x", "states": {"x": DONE, "y": DONE}}
        document = manifest({"a": {"on": {"go": "work.y"}}, "work": work})
        assert only_problem(document).startswith(
            "spec.machine.states.work.states.x: no transition leads to the state 'work.x'"
        )

    def test_a_misspelt_target_is_not_reported_again_as_unreachable_states(
        self, example: dict[str, Any]
    ) -> None:
        example["spec"]["machine"]["states"]["implementing"]["on"]["submit"]["target"] = "reviewng"
        assert problems(example) == [
            "spec.machine.states.implementing.on.submit.target: no state 'reviewng' (did you "
            "mean 'reviewing'?)"
        ]


# --------------------------------------------------------------------------- kinds


class TestKinds:
    @pytest.mark.parametrize(
        ("field", "value", "what"),
        [
            ("on", {"go": "a"}, "takes no transitions"),
            ("after", {"1m": "a"}, "takes no transitions"),
            ("always", "a", "takes no transitions"),
            ("onDone", "a", "takes no transitions"),
            ("invoke", agent(), "invokes nothing"),
            ("states", {"x": DONE}, "has no child states"),
            ("initial", "x", "has no child states"),
        ],
    )
    def test_a_final_state_ends_its_parent(self, field: str, value: Any, what: str) -> None:
        document = manifest({"a": {"on": {"go": "end"}}, "end": {"type": "final", field: value}})
        assert problems(document)[0] == (
            f"spec.machine.states.end.{field}: a final state {what}: reaching it ends its "
            f"parent (or the Run); remove {field}, or drop type: final"
        )

    def test_a_compound_state_needs_initial(self) -> None:
        document = manifest({"work": {"states": {"x": DONE, "y": DONE}}})
        assert problems(document) == [
            "spec.machine.states.work: a compound state needs initial: the child entered "
            "first, one of 'x', 'y'"
        ]

    def test_a_compound_states_initial_is_its_child(self) -> None:
        document = manifest({"work": {"initial": "cdoing", "states": {"coding": DONE}}})
        assert problems(document) == [
            "spec.machine.states.work.initial: 'cdoing' is not a child of 'work' (did you "
            "mean 'coding'?)"
        ]

    def test_the_machines_initial_is_a_top_level_state(self) -> None:
        document = manifest({"a": DONE}, initial="b")
        assert problems(document) == ["spec.machine.initial: no top-level state 'b'"]

    def test_an_atomic_state_has_no_initial(self) -> None:
        document = manifest({"a": {"initial": "x", "on": {"go": "b"}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.initial: initial names the child entered first, but 'a' "
            "has no states; remove initial"
        )

    def test_on_done_belongs_to_compound_states(self) -> None:
        document = manifest({"a": {"onDone": "b", "on": {"go": "b"}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.onDone: only a compound state has onDone (taken when one "
            "of its final children is reached); a command's result is handled by "
            "invoke.onDone"
        )

    @pytest.mark.parametrize(("field", "value"), [("output", "1"), ("outcome", "failed")])
    def test_output_and_outcome_belong_to_final_states(self, field: str, value: str) -> None:
        document = manifest({"a": {field: value, "on": {"go": "b"}}, "b": DONE})
        assert only_problem(document) == (
            f"spec.machine.states.a.{field}: only a final state has {field}; add type: "
            f"final, or remove {field}"
        )


# --------------------------------------------------------------------------- menus


def offered(**on: Any) -> dict[str, Any]:
    return manifest({"a": {"invoke": agent(), "on": on}, "b": DONE})


TO_B = {"target": "b", "description": "Go to b."}


class TestMenus:
    def test_an_offered_event_needs_a_description(self, example: dict[str, Any]) -> None:
        verdict = example["spec"]["machine"]["states"]["reviewing"]["on"]["review_verdict"]
        del verdict[0]["description"]
        assert problems(example) == [
            "spec.machine.states.reviewing.on.review_verdict[0]: an event offered to the "
            "Agent 'reviewer' needs a description: add description: saying what the pick means"
        ]

    def test_a_menu_holds_descendants_events_first_definition_wins(self) -> None:
        work = {
            "invoke": agent(),
            "initial": "x",
            "on": {"stop": TO_B, "go": {**TO_B, "description": "Outer go."}},
            "states": {
                "x": {
                    "on": {
                        "go": {"target": "y", "description": "Inner go."},
                        "next": [{"target": "y", "description": "Next.", "guard": "true"}, "y"],
                    }
                },
                "y": DONE,
            },
        }
        run = load_run(manifest({"work": work, "b": DONE}))
        assert run.menu(model.StatePath("work")) == [
            MenuEntry("stop", "Go to b.", {"type": "object", "properties": {}}),
            MenuEntry("go", "Outer go.", {"type": "object", "properties": {}}),
            MenuEntry("next", "Next.", {"type": "object", "properties": {}}),
        ]

    def test_an_event_two_agents_are_offered_is_reported_once(self) -> None:
        work = {
            "invoke": agent("reviewer"),
            "initial": "x",
            "states": {"x": {"invoke": agent(), "on": {"go": "y"}}, "y": DONE},
        }
        assert problems(manifest({"work": work})) == [
            "spec.machine.states.work.states.x.on.go: an event offered to the Agent 'coder' "
            "needs a description: add description: saying what the pick means"
        ]

    @pytest.mark.parametrize("name", ["a.b", "9lives", "two words", "x" * 65])
    def test_an_offered_event_is_a_tool_name(self, name: str) -> None:
        assert only_problem(offered(**{name: TO_B})).endswith(
            f"{name!r} cannot be offered to the Agent 'coder': an offered event is a tool, "
            "so its name is a letter or '_' and then letters, digits, '_' or '-' (at most 64 "
            "characters)"
        )

    def test_an_offered_event_is_no_working_tool(self) -> None:
        assert only_problem(offered(bash=TO_B)) == (
            "spec.machine.states.a.on.bash: 'bash' is a Working tool's name; an event offered "
            "to the Agent 'coder' needs another name"
        )

    def test_the_working_tools_are_the_harnesss(self) -> None:
        assert frozenset(tool.value for tool in ToolName) == WORKING_TOOLS

    def test_machine_events_are_handled_but_never_offered(self) -> None:
        run = load_run(offered(go=TO_B, **{"agent.fault": "b", "CANCEL": "b"}))
        assert [entry.name for entry in run.menu(model.StatePath("a"))] == ["go"]

    def test_a_schema_must_be_json_schema(self) -> None:
        assert only_problem(offered(go={**TO_B, "schema": {"type": "objekt"}})).startswith(
            "spec.machine.states.a.on.go.schema: not a JSON Schema at $.type: 'objekt' is not "
        )

    def test_a_schema_describes_an_object(self) -> None:
        assert only_problem(offered(go={**TO_B, "schema": {"type": "string"}})) == (
            "spec.machine.states.a.on.go.schema: a payload's schema describes an object: give "
            "it type: object and its properties"
        )

    def test_events_no_agent_is_offered_need_no_description(self) -> None:
        load_run(manifest({"a": {"on": {"approve": "b"}}, "b": DONE}))


# --------------------------------------------------------------------------- expressions


class TestExpressions:
    def test_a_guard_that_does_not_compile(self) -> None:
        document = manifest({"a": {"on": {"go": {"target": "b", "guard": "1 +"}}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.on.go.guard: '1 +' does not compile: Syntax error: "
            "mismatched input '<EOF>' at column 4"
        )

    def test_a_guard_reading_another_variable(self) -> None:
        document = manifest({"a": {"on": {"go": ["b", {"guard": "self.x"}]}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.on.go[1].guard: 'self.x' reads 'self'; an expression may "
            "read only context, event, input, workspace"
        )

    def test_assign(self) -> None:
        assign = {"ctx.n": "1", "context.n": "1 +", "context.a": "1", "context.a.b": "2"}
        document = manifest({"a": {"on": {"go": {"assign": assign}}}})
        assert problems(document) == [
            'spec.machine.states.a.on.go.assign["ctx.n"]: an assign key is a path into the '
            "context such as context.rounds or context.review.notes; got 'ctx.n'",
            "spec.machine.states.a.on.go.assign[\"context.n\"]: '1 +' does not compile: Syntax "
            "error: mismatched input '<EOF>' at column 4",
            "spec.machine.states.a.on.go.assign: assign sets both 'context.a' and "
            "'context.a.b', one inside the other; set 'context.a' to the whole value",
        ]

    def test_a_targetless_transition_only_assigns(self) -> None:
        document = manifest({"a": {"on": {"tick": {"assign": {"context.n": "context.n + 1"}}}}})
        [tick] = load_run(document).chart.states[model.StatePath("a")].on["tick"]
        assert tick.target is None
        assert tick.assign == (("context.n", CelExpression("context.n + 1")),)

    def test_an_output_that_does_not_compile(self) -> None:
        document = manifest({"a": {"type": "final", "output": "{'a': }"}})
        assert only_problem(document).startswith(
            "spec.machine.states.a.output: \"{'a': }\" does not compile: "
        )

    def test_templates(self) -> None:
        invoke = {"agent": {"slot": "coder", "prompt": "Do {{ input.task", "cwd": "{{ cwd }}"}}
        exec_ = {"exec": {"command": "make {{ 1 + }}"}}
        document = manifest({"a": {"invoke": invoke}, "b": {"invoke": exec_}}, initial="a")
        document["spec"]["machine"]["states"]["a"]["on"] = {"go": {**TO_B}}
        assert problems(document) == [
            "spec.machine.states.a.invoke.agent.prompt: the template has an unclosed '{{' at "
            "line 1, column 4: close it with '}}' (write a literal '{{' as {{ '{{' }})",
            "spec.machine.states.a.invoke.agent.cwd: the hole {{ cwd }} at line 1, column 1 "
            "reads 'cwd'; an expression may read only context, event, input, workspace",
            "spec.machine.states.b.invoke.exec.command: the hole {{ 1 + }} at line 1, column "
            "6 does not compile: Syntax error: mismatched input '<EOF>' at column 6 of the hole",
        ]

    def test_a_prompt_may_read_the_event(self) -> None:
        invoke = {"agent": {"slot": "coder", "prompt": "Because {{ event.type }}."}}
        load_run(manifest({"a": {"invoke": invoke, "on": {"go": TO_B}}, "b": DONE}))


# --------------------------------------------------------------------------- invokes


class TestInvokes:
    def test_an_unknown_slot(self) -> None:
        document = manifest({"a": {"invoke": agent("codr"), "on": {"go": TO_B}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.invoke.agent.slot: no agent slot 'codr' in spec.agents "
            "(did you mean 'coder'?)"
        )

    def test_both_agent_and_exec(self) -> None:
        invoke = {**agent(), "exec": {"command": "make"}}
        document = manifest({"a": {"invoke": invoke, "on": {"go": TO_B}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.invoke: an invoke runs one thing: agent, exec, deliver or "
            "forEach, not agent and exec"
        )

    def test_neither_agent_nor_exec(self) -> None:
        document = manifest({"a": {"invoke": {"onError": "b"}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.invoke: an invoke runs one thing: add agent (an Agent's "
            "Turn), exec (a command), deliver (commit and push a repo slot's work) or "
            "forEach (a child Machine per item)"
        )

    def test_deliver(self) -> None:
        deliver = {
            "deliver": {
                "slot": "target",
                "message": "Work of {{ input.task }}",
                "push": True,
                "author": {"name": "Ada", "email": "ada@example.com"},
            },
            "onDone": "b",
        }
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        document["spec"]["workspace"] = {"template": {"repos": {"target": {"url": "."}}}}
        run = load_run(document)
        invoke = run.chart.states[model.StatePath("a")].invoke
        assert invoke is not None
        assert invoke.deliver == model.DeliverCall(
            "target", CelTemplate("Work of {{ input.task }}"), True, "Ada", "ada@example.com"
        )

    def test_deliver_has_a_default_author(self) -> None:
        deliver = {"deliver": {"slot": "target", "message": "m"}, "onDone": "b"}
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        document["spec"]["workspace"] = {"template": {"repos": {"target": {"url": "."}}}}
        invoke = load_run(document).chart.states[model.StatePath("a")].invoke
        assert invoke is not None
        assert invoke.deliver is not None
        assert (invoke.deliver.push, invoke.deliver.author_name, invoke.deliver.author_email) == (
            False,
            "kubeturn",
            "kubeturn@users.noreply.kubeturn.dev",
        )

    def test_deliver_names_a_repo_slot_of_the_template(self) -> None:
        deliver = {"deliver": {"slot": "targt", "message": "m"}, "onDone": "b"}
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        document["spec"]["workspace"] = {"template": {"repos": {"target": {"url": "."}}}}
        assert only_problem(document) == (
            "spec.machine.states.a.invoke.deliver.slot: no repo slot 'targt' in the Workspace "
            "(its repos: target)"
        )

    def test_deliver_without_a_workspace(self) -> None:
        deliver = {"deliver": {"slot": "target", "message": "m"}, "onDone": "b"}
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        assert only_problem(document).startswith(
            "spec.machine.states.a.invoke.deliver.slot: no repo slot 'target': the Run has no "
            "Workspace with repos"
        )

    def test_deliver_to_a_named_workspace_is_checked_when_it_runs(self) -> None:
        deliver = {"deliver": {"slot": "any", "message": "m"}, "onDone": "b"}
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        document["spec"]["workspace"] = {"name": "shared"}
        assert load_run(document).chart.states[model.StatePath("a")].invoke is not None

    def test_deliver_author_is_checked(self) -> None:
        deliver = {
            "deliver": {"slot": "target", "message": "m", "author": {"name": "A", "email": "x"}},
            "onDone": "b",
        }
        document = manifest({"a": {"invoke": deliver}, "b": DONE})
        document["spec"]["workspace"] = {"template": {"repos": {"target": {"url": "."}}}}
        assert only_problem(document).startswith(
            "spec.machine.states.a.invoke.deliver.author.email:"
        )

    def test_an_agents_turn_has_no_done(self) -> None:
        invoke = {**agent(), "onDone": "b"}
        document = manifest({"a": {"invoke": invoke, "on": {"go": TO_B}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.invoke.onDone: an Agent's Turn has no done: it ends by the "
            "Agent's picks or by its state's exit; handle the picks in on"
        )

    def test_exec(self) -> None:
        exec_ = {
            "exec": {"command": "make test", "cwd": "{{ workspace.repos.target }}"},
            "onDone": "b",
            "onError": [{"target": "b", "guard": "event.reason == 'exec'"}],
        }
        run = load_run(manifest({"a": {"invoke": exec_}, "b": DONE}))
        invoke = run.chart.states[model.StatePath("a")].invoke
        assert invoke is not None
        assert invoke.agent is None
        assert invoke.exec == model.ExecCall(
            CelTemplate("make test"), CelTemplate("{{ workspace.repos.target }}"), 600.0
        )
        assert [(t.event, t.target) for t in invoke.on_done] == [(model.DONE_INVOKE, "b")]
        assert [(t.event, t.where) for t in invoke.on_error] == [
            (model.ERROR_INVOKE, "spec.machine.states.a.invoke.onError[0]")
        ]
        assert run.menus == {}

    def test_an_exec_timeout_is_a_duration(self) -> None:
        exec_ = {"exec": {"command": "make", "timeout": "5 minutes"}, "onDone": "b"}
        assert only_problem(manifest({"a": {"invoke": exec_}, "b": DONE})) == (
            "spec.machine.states.a.invoke.exec.timeout: '5 minutes' is not a duration: write "
            "it without spaces (e.g. 30s, 10m, 1h30m)"
        )

    def test_dials_and_continue_reach_the_call(self) -> None:
        call = agent(prompt="p", model="openai/o3", thinkingLevel="low", **{"continue": True})
        run = load_run(manifest({"a": {"invoke": call, "on": {"go": TO_B}}, "b": DONE}))
        state = run.chart.states[model.StatePath("a")]
        assert state.invoke is not None
        assert state.invoke.agent == model.AgentCall(
            "coder", CelTemplate("p"), None, True, "openai/o3", "low"
        )


class TestWorkspaceRequired:
    STATES: ClassVar[dict[str, Any]] = {
        "a": {"invoke": agent(), "on": {"go": TO_B}},
        "b": {"invoke": {"exec": {"command": "make"}, "onDone": "c"}},
        "c": DONE,
    }

    def test_invokes_without_a_workspace_are_one_problem_naming_each(self) -> None:
        with pytest.raises(DefinitionErrors) as caught:
            load_run(manifest(self.STATES), workspace_required=True)
        [error] = caught.value.errors
        assert error.path == "spec.workspace"
        assert str(error) == (
            "spec.workspace: missing, and the state 'a' invokes the Agent 'coder'; the state "
            "'b' runs a command (exec): on a cluster Agents and commands run in a Workspace's "
            "sandbox. Name one (`workspace: {name: <workspace>}`) or describe one the Run "
            "owns (`workspace: {template: {repos: ...}}`)"
        )

    def test_it_is_reported_with_the_other_problems(self) -> None:
        states = {**self.STATES, "a": {"invoke": agent("codr"), "on": {"go": TO_B}}}
        with pytest.raises(DefinitionErrors) as caught:
            load_run(manifest(states), workspace_required=True)
        assert [error.path for error in caught.value.errors] == [
            "spec.machine.states.a.invoke.agent.slot",
            "spec.workspace",
        ]

    def test_without_the_option_the_run_loads(self) -> None:
        assert load_run(manifest(self.STATES)).spec.workspace is None

    @pytest.mark.parametrize(
        "workspace", [{"name": "shared"}, {"template": {"repos": {"target": {"url": "u"}}}}]
    )
    def test_a_named_or_described_workspace_satisfies_it(self, workspace: Any) -> None:
        document = manifest(self.STATES)
        document["spec"]["workspace"] = workspace
        assert load_run(document, workspace_required=True).spec.workspace is not None

    def test_a_run_that_invokes_nothing_needs_none(self) -> None:
        document = manifest({"a": {"on": {"go": "b"}}, "b": DONE})
        assert load_run(document, workspace_required=True).spec.workspace is None


# --------------------------------------------------------------------------- timers, events


class TestTimersAndEvents:
    def test_timers_in_document_order(self) -> None:
        after = {"500ms": "b", "1h30m": {"target": "b", "guard": "context.late"}}
        run = load_run(manifest({"a": {"after": after}, "b": DONE}))
        timers = run.chart.states[model.StatePath("a")].after
        assert [(t.id, t.delay_s) for t in timers] == [
            ("after:a:500ms", 0.5),
            ("after:a:1h30m", 5400.0),
        ]

    def test_a_bad_timer_duration(self) -> None:
        document = manifest({"a": {"after": {"2d": "b"}}, "b": DONE})
        assert only_problem(document) == (
            "spec.machine.states.a.after.2d: unknown unit 'd' in duration '2d': the units "
            "are ns, us, ms, s, m and h (for days write 24h)"
        )

    @pytest.mark.parametrize(
        ("event", "where"),
        [
            ("done.invoke", '["done.invoke"]'),
            ("error.platform", '["error.platform"]'),
            ("after:5s", ".after:5s"),
        ],
    )
    def test_reserved_event_names(self, event: str, where: str) -> None:
        document = manifest({"a": {"on": {event: "b"}}, "b": DONE})
        assert only_problem(document) == (
            f"spec.machine.states.a.on{where}: {event!r} is reserved: the machine names its "
            "own events done.…, error.… and after:…; handle an invoke's end with "
            "invoke.onDone or invoke.onError, a timer with after, a compound state's end "
            "with onDone, and a failed expression with error.expression"
        )

    def test_machine_events_may_be_handled(self) -> None:
        on = {"agent.fault": "b", "CANCEL": "b"}
        run = load_run(manifest({"a": {"on": on}, "b": DONE}, on={"CANCEL": "b"}))
        assert list(run.chart.root.on) == ["CANCEL"]

    @pytest.mark.parametrize("name", ["a.b", "a/b", "-a"])
    def test_state_names_hold_no_dot_or_slash(self, name: str) -> None:
        document = manifest({"a": {"on": {"go": "b"}}, "b": DONE, name: DONE})
        assert problems(document)[0].endswith(
            f"state name {name!r} must start with a letter, digit or '_' and hold only "
            "letters, digits, '_' and '-' (at most 63 characters): state paths join names "
            "with '.'"
        )


# --------------------------------------------------------------------------- all at once


COMPOUND = manifest(
    {
        "work": {
            "initial": "build",
            "on": {"CANCEL": "stopped"},
            "states": {
                "build": {
                    "invoke": {
                        "exec": {"command": "make", "timeout": "5m"},
                        "onDone": {"target": "review", "assign": {"context.n": "1"}},
                        "onError": [{"target": "failed", "guard": "true"}, "failed"],
                    },
                },
                "review": {
                    "invoke": agent(),
                    "on": {
                        "ok": {"target": "passed", "description": "Approve."},
                        "back": {"target": "build", "description": "Again."},
                    },
                    "after": {"1h": "failed"},
                },
                "failed": {"type": "final", "outcome": "failed", "output": "'no'"},
                "passed": {"type": "final", "output": "'yes'"},
            },
            "onDone": "end",
        },
        "end": {"always": {"target": "stopped", "guard": "true"}},
        "stopped": {"type": "final"},
    },
)


class TestAllAtOnce:
    def test_five_problems_give_five_errors(self, example: dict[str, Any]) -> None:
        states = example["spec"]["machine"]["states"]
        states["reviewing"]["on"]["review_verdict"][0]["target"] = "humanReveiw"
        states["reviewing"]["invoke"]["agent"]["slot"] = "reviwer"
        states["implementing"]["after"] = {"30 min": "failed"}
        states["reviewing"]["on"]["review_verdict"][1]["guard"] = "contxt.rounds >= 2"
        del states["fixing"]["on"]["submit"]["description"]
        with pytest.raises(DefinitionErrors) as caught:
            load_run(example)
        lines = str(caught.value).splitlines()
        assert lines == [str(error) for error in caught.value.errors]
        assert lines == [
            "spec.machine.states.implementing.after[\"30 min\"]: '30 min' is not a duration: "
            "write it without spaces (e.g. 30s, 10m, 1h30m)",
            "spec.machine.states.reviewing.on.review_verdict[0].target: no state "
            "'humanReveiw' (did you mean 'humanReview'?)",
            "spec.machine.states.reviewing.on.review_verdict[1].guard: 'contxt.rounds >= 2' "
            "reads 'contxt'; an expression may read only context, event, input, workspace",
            "spec.machine.states.reviewing.invoke.agent.slot: no agent slot 'reviwer' in "
            "spec.agents (did you mean 'reviewer'?)",
            "spec.machine.states.fixing.on.submit: an event offered to the Agent 'coder' "
            "needs a description: add description: saying what the pick means",
        ]
        assert all(isinstance(error, DefinitionError) for error in caught.value.errors)

    def test_a_shape_problem_in_one_state_hides_no_problem_of_another(
        self, example: dict[str, Any]
    ) -> None:
        states = example["spec"]["machine"]["states"]
        states["reviewing"]["on"]["review_verdict"][0]["target"] = "humanReveiw"
        states["done"]["outcome"] = "maybe"
        states["implementing"]["on"]["submit"]["guard"] = 3
        assert problems(example) == [
            "spec.machine.states.implementing.on.submit.guard: input should be a valid "
            "string; got 3",
            "spec.machine.states.done.outcome: input should be 'succeeded' or 'failed'; "
            "got 'maybe'",
            "spec.machine.states.reviewing.on.review_verdict[0].target: no state "
            "'humanReveiw' (did you mean 'humanReview'?)",
        ]

    @pytest.mark.parametrize(
        ("place", "value", "said"),
        [
            pytest.param(
                ("reviewing",),
                3,
                "spec.machine.states.reviewing: should be a mapping (an object); got int 3",
                id="a state, which still resolves as a target",
            ),
            pytest.param(
                ("implementing", "on", "submit"),
                3,
                "spec.machine.states.implementing.on.submit: a transition is a target "
                "state's name, a transition object, or a list of them",
                id="a transition, the only one to reviewing",
            ),
            pytest.param(
                ("reviewing", "on", "review_verdict", 0),
                [],
                "spec.machine.states.reviewing.on.review_verdict[0]: a transition is a "
                "target state's name or a transition object",
                id="a transition in a list, the later ones keeping their place",
            ),
            pytest.param(
                ("implementing", "invoke", "agent", "slot"),
                3,
                "spec.machine.states.implementing.invoke.agent.slot: input should be a "
                "valid string; got 3",
                id="a required field: its invoke is cut",
            ),
            pytest.param(
                ("done", "type"),
                "Final",
                "spec.machine.states.done.type: input should be 'final' or 'parallel'; got 'Final'",
                id="a final's type: its output is no problem then",
            ),
        ],
    )
    def test_what_is_cut_hides_nothing_else_and_adds_nothing(
        self, example: dict[str, Any], place: tuple[str | int, ...], value: Any, said: str
    ) -> None:
        states = example["spec"]["machine"]["states"]
        states["fixing"]["on"]["submit"]["target"] = "reviewin"
        states["humanReview"]["on"]["reject"]["guard"] = "contxt.rounds > 1"
        node = states
        for part in place[:-1]:
            node = node[part]
        node[place[-1]] = value
        assert problems(example) == [
            said,
            "spec.machine.states.fixing.on.submit.target: no state 'reviewin' (did you mean "
            "'reviewing'?)",
            "spec.machine.states.humanReview.on.reject.guard: 'contxt.rounds > 1' reads "
            "'contxt'; an expression may read only context, event, input, workspace",
        ]

    def test_an_unknown_field_is_cut(self, example: dict[str, Any]) -> None:
        states = example["spec"]["machine"]["states"]
        states["humanReview"]["on"]["reject"]["gaurd"] = "true"
        states["fixing"]["on"]["submit"]["target"] = "reviewin"
        assert problems(example) == [
            "spec.machine.states.humanReview.on.reject.gaurd: unknown field 'gaurd' "
            "(did you mean 'guard'?)",
            "spec.machine.states.fixing.on.submit.target: no state 'reviewin' (did you mean "
            "'reviewing'?)",
        ]

    def test_what_cannot_be_cut_is_reported_alone(self, example: dict[str, Any]) -> None:
        """A state's states name targets: cut, they would make targets unknown."""
        states = example["spec"]["machine"]["states"]
        states["reviewing"]["on"]["review_verdict"][0]["target"] = "humanReveiw"
        states["humanReview"]["states"] = ["waiting"]
        assert problems(example) == [
            "spec.machine.states.humanReview.states: should be a mapping (an object); got a list"
        ]

    @pytest.mark.parametrize(
        ("document", "known"),
        [
            pytest.param(_EXAMPLE, ("fixing", "on", "submit", "target"), id="the example"),
            pytest.param(
                COMPOUND,
                ("work", "states", "review", "on", "back", "target"),
                id="compound states",
            ),
        ],
    )
    def test_every_single_corruption_is_said_and_adds_nothing(
        self, document: dict[str, Any], known: tuple[str, ...]
    ) -> None:
        """Each field of the states (not inside free JSON) set to each wrong value, and
        each mapping given an unknown field, beside one unknown target: the corruption is
        reported, the target too unless the corruption holds it or is a ``states`` (which
        cannot be cut), and nothing else (exhaustive: some hundreds of loads)."""
        target = manifest_path("spec.machine.states", *known)
        for where, corrupt in _corruptions(document["spec"]["machine"]["states"]):
            broken = copy.deepcopy(document)
            states = broken["spec"]["machine"]["states"]
            _setting(known, "nowhere")(states)
            corrupt(states)
            said = problems(broken)
            place = manifest_path("spec.machine.states", *where)
            own = [line for line in said if _around(line.split(": ", 1)[0], place)]
            others = [line for line in said if line not in own]
            assert own, (where, said)
            assert [line for line in others if not line.startswith(target)] == [], (where, said)
            if not _around(target, place) and where[-1] != "states":
                assert len(others) == 1, (where, said)

    def test_yaml_syntax_errors_name_the_source_line_and_column(self) -> None:
        with pytest.raises(DefinitionErrors) as caught:
            load_run_yaml("kind: Run\nspec: [unclosed\n", source="run.yaml")
        [error] = caught.value.errors
        assert error.path == "run.yaml:3:1"
        assert error.message.startswith("not valid YAML: ")

    def test_definition_errors_need_an_error(self) -> None:
        with pytest.raises(ValueError, match="at least one"):
            DefinitionErrors([])


WRONG: tuple[Any, ...] = (3, [3], {"bogus": 1})


def _corruptions(
    node: Any, where: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], Callable[[Any], None]]]:
    """Every single corruption below ``node``: each value set to each of ``WRONG`` (that
    differs from it in kind), and an unknown field added to each mapping; schemas and
    context are free JSON, so only they themselves are corrupted, not what they hold."""
    if isinstance(node, dict):
        yield (*where, "bogus"), _setting((*where, "bogus"), "x")
    if not isinstance(node, dict | list):
        return
    for key, value in node.items() if isinstance(node, dict) else enumerate(node):
        place = (*where, key)
        for wrong in WRONG:
            if type(wrong) is not type(value):
                yield place, _setting(place, wrong)
        if key != "schema":
            yield from _corruptions(value, place)


def _setting(place: tuple[str | int, ...], value: Any) -> Callable[[Any], None]:
    def corrupt(states: Any) -> None:
        node = states
        for part in place[:-1]:
            node = node[part]
        node[place[-1]] = copy.deepcopy(value)

    return corrupt


def _around(path: str, place: str) -> bool:
    inner, outer = (path, place) if len(path) >= len(place) else (place, path)
    return inner == outer or inner.startswith((outer + ".", outer + "["))


# --------------------------------------------------------------------------- stalls, retries


class TestStallsAndRetries:
    """``stallAfter`` and ``invoke.agent.retry`` (ADR 0115): what loads, and the problems
    named at their paths."""

    @staticmethod
    def working(**extra: Any) -> dict[str, Any]:
        done = {"done": {"target": "z", "description": "Done."}}
        return manifest({"a": {"invoke": agent(**extra), "on": done}, "z": DONE})

    def test_a_retry_policy_compiles_with_its_defaults(self) -> None:
        run = load_run(self.working(retry={"when": ["runaway"]}))
        call = run.chart.state(model.StatePath("a")).invoke
        assert call is not None
        assert call.agent is not None
        assert call.agent.retry == model.RetryPolicy(
            limit=1, when=frozenset({"runaway"}), backoff_s=0.0, fresh_conversation=False
        )

    @pytest.mark.parametrize(
        ("retry", "path"),
        [
            ({"when": []}, "retry.when"),
            ({"when": ["deleted"]}, "retry.when[0]"),
            ({"when": ["runaway"], "limit": 11}, "retry.limit"),
            ({"when": ["runaway"], "backoff": "soon"}, "retry.backoff"),
            ({"when": ["runaway"], "freshConversation": "yes"}, "retry.freshConversation"),
        ],
    )
    def test_a_bad_retry_is_named_at_its_path(self, retry: dict[str, Any], path: str) -> None:
        problem = only_problem(self.working(retry=retry))
        assert problem.startswith(f"spec.machine.states.a.invoke.agent.{path}:"), problem

    @pytest.mark.parametrize("value", ["0s", "soon", "-1m"])
    def test_a_stall_after_that_is_no_time_is_refused(self, value: str) -> None:
        document = self.working()
        document["spec"]["agents"] = {"coder": {"instructions": "Code.", "stallAfter": value}}
        assert only_problem(document).startswith("spec.agents.coder.stallAfter:")


# --------------------------------------------------------------------------- limits


class TestLimits:
    """``spec.limits`` and ``spec.agents.<slot>.limits`` (ADR 0117): what loads, and the
    problems named at their paths."""

    @staticmethod
    def limited(run: dict[str, Any] | None = None, slot: dict[str, Any] | None = None) -> Any:
        done = {"done": {"target": "z", "description": "Done."}}
        document = manifest({"a": {"invoke": agent(), "on": done}, "z": DONE})
        if run is not None:
            document["spec"]["limits"] = run
        document["spec"]["agents"] = {"coder": {"instructions": "Code.", "limits": slot}}
        return document

    def test_limits_load_as_written(self) -> None:
        run = load_run(
            self.limited(
                {"tokens": 100000, "cost": "2.50", "wallTime": "2h"},
                {"cost": "1", "perTurn": {"tokens": 20000, "wallTime": "15m"}},
            )
        )
        assert run.spec.limits is not None
        assert (run.spec.limits.tokens, run.spec.limits.cost) == (100000, "2.50")
        slot = run.agents["coder"].limits
        assert slot is not None
        assert slot.perTurn is not None
        assert (slot.cost, slot.perTurn.tokens, slot.perTurn.wallTime) == ("1", 20000, "15m")

    def test_a_cost_written_as_a_number_says_to_quote_it(self) -> None:
        problem = only_problem(self.limited({"cost": 2.5}))
        assert problem.startswith('spec.limits.cost: write a cost as text in quotes, e.g. "2.5"')

    @pytest.mark.parametrize(
        ("run", "slot", "path"),
        [
            ({"tokens": 0}, None, "spec.limits.tokens"),
            ({"tokens": "many"}, None, "spec.limits.tokens"),
            ({"cost": 2.5}, None, "spec.limits.cost"),
            ({"cost": "0"}, None, "spec.limits.cost"),
            ({"cost": "$2"}, None, "spec.limits.cost"),
            ({"wallTime": "0s"}, None, "spec.limits.wallTime"),
            ({"wallTime": "a while"}, None, "spec.limits.wallTime"),
            ({"turns": 3}, None, "spec.limits.turns"),
            (None, {"wallTime": "1h"}, "spec.agents.coder.limits.wallTime"),
            (None, {"perTurn": {"cost": "-1"}}, "spec.agents.coder.limits.perTurn.cost"),
            (None, {"perTurn": {"tokens": -5}}, "spec.agents.coder.limits.perTurn.tokens"),
        ],
    )
    def test_a_bad_limit_is_named_at_its_path(
        self, run: dict[str, Any] | None, slot: dict[str, Any] | None, path: str
    ) -> None:
        problem = only_problem(self.limited(run, slot))
        assert problem.startswith(f"{path}:"), problem
