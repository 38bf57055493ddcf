"""The Run manifest's models (``kubeturn.api``) and their validation messages.

Cases:
- the example manifest validates; aliases (``continue``, ``schema``, ``class``) are read
  and written back under their manifest names; defaults (workspace access ``write``,
  repo ref ``main``, storage ``10Gi``, exec timeout ``10m``, empty input and signals);
- every property of the generated JSON Schema has a description (``kubectl explain``);
- unknown fields are refused everywhere but metadata and free JSON (input, context,
  signal data), with a did-you-mean among the fields of that very object;
- the one-of rules and formats: workspace name xor template, ``provider/model``, slot
  names that are one path segment, unique signal ids, thinking levels and access;
- a transition's three shapes (target, object, list) and the message for a fourth;
- pydantic errors become ``DefinitionErrors`` at manifest paths: list indices,
  ``["quoted"]`` keys, missing fields, a bare ``on`` key that YAML 1.1 read as true
  (read as ``on``; explained when ``on`` is there too), a
  document that is not a mapping;
- ``parse_duration``: Go's syntax, and a message for each kind of mistake.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeturn import api
from kubeturn.api.validation import BOOLEAN_KEY, on_keys_restored, validate_run
from kubeturn.errors import DefinitionErrors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "task-with-review.yaml"


@pytest.fixture
def document() -> dict[str, Any]:
    return copy.deepcopy(_EXAMPLE)


_EXAMPLE = on_keys_restored(yaml.safe_load(EXAMPLE.read_text()))


def problems(document: Any) -> list[str]:
    with pytest.raises(DefinitionErrors) as caught:
        validate_run(document)
    return [str(error) for error in caught.value.errors]


class TestTheExample:
    def test_it_validates_and_keeps_what_was_written(self, document: dict[str, Any]) -> None:
        run = validate_run(document)
        assert run.metadata.name == "task-with-review"
        assert run.metadata.namespace is None
        assert run.spec.agents["reviewer"].workspace is api.run.WorkspaceAccess.READ
        implementing = run.spec.machine.states["implementing"]
        assert implementing.invoke is not None
        assert implementing.invoke.agent is not None
        assert implementing.invoke.agent.continue_ is True
        submit = implementing.on["submit"]
        assert isinstance(submit, api.Transition)
        assert submit.schema_ is not None
        assert submit.schema_["required"] == ["summary"]

    def test_aliases_are_written_back_under_their_manifest_names(
        self, document: dict[str, Any]
    ) -> None:
        dumped = validate_run(document).model_dump(by_alias=True, exclude_none=True)
        states = dumped["spec"]["machine"]["states"]
        assert states["implementing"]["invoke"]["agent"]["continue"] is True
        assert "schema" in states["implementing"]["on"]["submit"]

    def test_defaults(self, document: dict[str, Any]) -> None:
        run = validate_run(document)
        assert run.spec.workspace is not None
        template = run.spec.workspace.template
        assert template is not None
        assert template.repos["target"].ref == "main"
        assert template.storage.size == "10Gi"
        assert template.storage.class_ is None
        assert run.spec.agents["coder"].workspace is api.run.WorkspaceAccess.WRITE
        assert run.spec.signals == []
        assert run.spec.cancel is False
        assert api.ExecInvoke(command="make test").timeout == "10m"
        assert api.RunSpec.model_validate({"agents": {}, "machine": _MACHINE}).input == {}

    def test_storage_class_is_read_under_its_manifest_name(self) -> None:
        storage = api.Storage.model_validate({"size": "1Gi", "class": "fast"})
        assert storage.class_ == "fast"


_MACHINE = {"initial": "a", "states": {"a": {"type": "final"}}}


def _minimal(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": {"agents": {"coder": {"instructions": "Code."}}, "machine": _MACHINE, **spec},
    }


def _described(schema: dict[str, Any], where: str = "#") -> list[str]:
    """Paths of properties without a description, anywhere in ``schema``."""
    missing = []
    for name, prop in schema.get("properties", {}).items():
        if not prop.get("description"):
            missing.append(f"{where}/{name}")
        missing.extend(_described(prop, f"{where}/{name}"))
    for name, definition in schema.get("$defs", {}).items():
        missing.extend(_described(definition, f"#/$defs/{name}"))
    return missing


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    schema = api.Run.model_json_schema(by_alias=True)
    assert _described(schema) == []
    assert "continue" in schema["$defs"]["AgentInvoke"]["properties"]
    assert "schema" in schema["$defs"]["Transition"]["properties"]


class TestUnknownFields:
    def test_a_misspelt_field_is_named_with_a_suggestion_from_its_own_object(
        self, document: dict[str, Any]
    ) -> None:
        verdicts = document["spec"]["machine"]["states"]["reviewing"]["on"]["review_verdict"]
        verdicts[1]["gaurd"] = verdicts[1].pop("guard")
        document["spec"]["agents"]["coder"]["thinkinglevel"] = "low"
        assert problems(document) == [
            "spec.agents.coder.thinkinglevel: unknown field 'thinkinglevel' "
            "(did you mean 'thinkingLevel'?)",
            "spec.machine.states.reviewing.on.review_verdict[1].gaurd: unknown field 'gaurd' "
            "(did you mean 'guard'?)",
        ]

    def test_a_field_far_from_any_gets_no_suggestion(self, document: dict[str, Any]) -> None:
        document["spec"]["colour"] = "blue"
        assert problems(document) == ["spec.colour: unknown field 'colour'"]

    def test_metadata_and_free_json_take_any_field(self, document: dict[str, Any]) -> None:
        document["metadata"].update(labels={"team": "a"}, uid="123", namespace="dev")
        document["spec"]["input"] = {"anything": [1, {"goes": True}]}
        document["spec"]["machine"]["context"]["deep"] = {"x": [None]}
        document["spec"]["signals"] = [{"id": "1", "event": "approve", "data": {"any": 1}}]
        run = validate_run(document)
        assert run.metadata.namespace == "dev"
        assert run.metadata.model_extra == {"labels": {"team": "a"}, "uid": "123"}

    def test_status_is_the_operators_and_passes_through(self, document: dict[str, Any]) -> None:
        document["status"] = {"phase": "Running", "writtenByANewerOperator": 1}
        status = validate_run(document).status
        assert status is not None
        assert status.phase == "Running"
        assert status.model_extra == {"writtenByANewerOperator": 1}


class TestShapes:
    @pytest.mark.parametrize(
        "workspace",
        [
            pytest.param({}, id="neither"),
            pytest.param({"name": "w", "template": {"repos": {"r": {"url": "u"}}}}, id="both"),
        ],
    )
    def test_a_workspace_has_exactly_one_of_name_or_template(
        self, workspace: dict[str, Any]
    ) -> None:
        assert problems(_minimal(workspace=workspace)) == [
            "spec.workspace: a workspace has exactly one of name or template"
        ]

    def test_a_model_says_its_provider(self) -> None:
        document = _minimal()
        document["spec"]["agents"]["coder"]["model"] = "gpt-4o"
        assert problems(document) == [
            "spec.agents.coder.model: a model is written 'provider/model', e.g. "
            "'openai/gpt-4o'; got 'gpt-4o'"
        ]

    @pytest.mark.parametrize("name", ["..", "a/b", "-a", "", "x" * 64])
    def test_an_agent_slot_name_is_one_safe_path_segment(self, name: str) -> None:
        document = _minimal()
        document["spec"]["agents"] = {name: {"instructions": "Code."}}
        [problem] = problems(document)
        assert problem.startswith(f"spec.agents: an agent slot name {name!r} must start with")

    def test_a_repo_slot_name_is_one_safe_path_segment(self) -> None:
        [problem] = problems(_minimal(workspace={"template": {"repos": {"../up": {"url": "u"}}}}))
        assert problem.startswith("spec.workspace.template.repos: a repo slot name '../up'")

    def test_a_workspace_template_needs_a_repo(self) -> None:
        assert problems(_minimal(workspace={"template": {"repos": {}}})) == [
            "spec.workspace.template.repos: dictionary should have at least 1 item after "
            "validation, not 0"
        ]

    def test_signal_ids_are_unique(self) -> None:
        signals = [{"id": "a", "event": "approve"}, {"id": "a", "event": "reject"}]
        assert problems(_minimal(signals=signals)) == [
            "spec.signals: signal id 'a' appears twice; ids are unique"
        ]

    def test_enums_name_the_allowed_values_and_what_was_given(self) -> None:
        document = _minimal()
        document["spec"]["agents"]["coder"].update(workspace="rw", thinkingLevel="max")
        assert problems(document) == [
            "spec.agents.coder.workspace: input should be 'write', 'read' or 'none'; got 'rw'",
            "spec.agents.coder.thinkingLevel: input should be 'off', 'minimal', 'low', "
            "'medium' or 'high'; got 'max'",
        ]

    def test_api_version_and_kind_are_fixed(self) -> None:
        document = _minimal()
        document.update(apiVersion="kubeturn.dev/v1", kind="Job")
        assert problems(document) == [
            "apiVersion: input should be 'kubeturn.dev/v1alpha1'; got 'kubeturn.dev/v1'",
            "kind: input should be 'Run'; got 'Job'",
        ]

    def test_missing_fields_are_named(self) -> None:
        document = _minimal()
        del document["spec"]["machine"]
        del document["metadata"]["name"]
        assert problems(document) == [
            "metadata.name: is required; add it",
            "spec.machine: is required; add it",
        ]

    @pytest.mark.parametrize("document", [None, [], "Run", 3])
    def test_a_document_that_is_no_mapping(self, document: Any) -> None:
        [problem] = problems(document)
        assert problem.startswith("should be a mapping (an object); got ")


class TestTransitionShapes:
    def machine(self, transition: Any) -> dict[str, Any]:
        document = _minimal()
        document["spec"]["machine"] = {
            "initial": "a",
            "states": {"a": {"on": {"go": transition}}, "b": {"type": "final"}},
        }
        return document

    @pytest.mark.parametrize(
        "transition",
        [
            pytest.param("b", id="target"),
            pytest.param({"target": "b", "guard": "true"}, id="object"),
            pytest.param(["b", {"target": "b"}], id="list"),
        ],
    )
    def test_three_shapes_are_transitions(self, transition: Any) -> None:
        validate_run(self.machine(transition))

    def test_anything_else_is_refused_saying_what_a_transition_is(self) -> None:
        assert problems(self.machine(7)) == [
            "spec.machine.states.a.on.go: a transition is a target state's name, a "
            "transition object, or a list of them"
        ]

    def test_errors_inside_a_list_name_the_index_and_not_pydantics_tags(self) -> None:
        assert problems(self.machine(["b", {"target": 1}, 2])) == [
            "spec.machine.states.a.on.go[1].target: input should be a valid string; got 1",
            "spec.machine.states.a.on.go[2]: a transition is a target state's name or a "
            "transition object",
        ]

    def test_keys_that_hold_dots_are_quoted(self) -> None:
        document = self.machine({"target": "b", "assign": {"context.n": 1}})
        assert problems(document) == [
            'spec.machine.states.a.on.go.assign["context.n"]: input should be a valid string; got 1'
        ]


class TestBooleanKeys:
    def test_an_unquoted_on_read_by_yaml_1_1_is_explained(self) -> None:
        text = """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: r}
spec:
  agents: {}
  machine:
    initial: a
    states:
      a:
        on:
          go: b
      b: {type: final}
"""
        run = validate_run(yaml.safe_load(text))
        assert run.spec.machine.states["a"].on is not None

    def test_an_unquoted_on_in_a_fan_out_child_machine_is_read_as_on(self) -> None:
        text = """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: r}
spec:
  agents: {}
  machine:
    initial: fix
    states:
      fix:
        invoke:
          forEach:
            items: "[1, 2]"
            machine:
              initial: a
              states:
                a:
                  on:
                    go: b
                b: {type: final}
          onDone: done
      done: {type: final}
"""
        run = validate_run(yaml.safe_load(text))
        invoke = run.spec.machine.states["fix"].invoke
        assert invoke is not None
        assert invoke.forEach is not None
        assert invoke.forEach.machine.states["a"].on is not None

    def test_the_key_true_from_the_api_server_is_read_as_on_too(self) -> None:
        document = _minimal()
        document["spec"]["machine"]["states"]["a"] = {"true": {"go": "a"}}
        assert validate_run(document).spec.machine.states["a"].on is not None

    def test_a_true_key_beside_on_is_explained(self) -> None:
        document = _minimal()
        document["spec"]["machine"]["states"]["a"] = {"on": {"go": "a"}, "true": {"go": "a"}}
        assert problems(document) == [f"spec.machine.states.a.true: {BOOLEAN_KEY}"]


class TestParseDuration:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("500ms", 0.5),
            ("30s", 30.0),
            ("10m", 600.0),
            ("1h", 3600.0),
            ("1h30m", 5400.0),
            ("1.5h", 5400.0),
            (".5s", 0.5),
            ("2h45m30s", 9930.0),
            ("1500us", 0.0015),
            ("1500µs", 0.0015),
            ("1000000000ns", 1.0),
            ("0", 0.0),
            ("0s", 0.0),
        ],
    )
    def test_go_syntax(self, text: str, seconds: float) -> None:
        assert api.parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("", "a duration is a number with a unit (e.g. 30s, 10m, 1h30m); got ''"),
            ("10", "missing unit in duration '10': write 10s, 10m or 10h"),
            ("1h30", "missing unit in duration '1h30': write 30s, 30m or 30h"),
            (
                "2d",
                "unknown unit 'd' in duration '2d': the units are ns, us, ms, s, m and h "
                "(for days write 24h)",
            ),
            ("-5m", "a duration cannot carry a sign (e.g. 30s, 10m, 1h30m); got '-5m'"),
            ("30 m", "'30 m' is not a duration: write it without spaces (e.g. 30s, 10m, 1h30m)"),
            ("m", "'m' is not a duration (e.g. 30s, 10m, 1h30m)"),
        ],
    )
    def test_mistakes_say_what_to_write(self, text: str, message: str) -> None:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            api.parse_duration(text)
