"""The CRDs under ``crds/``, generated from the models by ``kubeturn.api.crds``.

Cases:
- drift: regenerating from the models gives the committed files byte for byte, and
  ``crds/`` holds no other file; the failure names the command that regenerates them;
  the command's ``--check`` agrees, and writing into an empty directory gives the same
  files;
- names: group, version (served, storage), scope, plural, singular, kind, listKind,
  short names (krun, kws, turn), category kubeturn, the status subresource; every
  model's ``apiVersion`` type spells ``GROUP_VERSION``, the group and version the CRDs
  are generated with;
- printer columns: exactly as specified, each path a field of the schema with the
  column's type (date only for the creation time);
- descriptions: every property of every schema has one (``kubectl explain`` teaches);
- structural: a checker of the Kubernetes rules (a type on every node except those that
  keep what is written or are int-or-string; no ``$ref``/``anyOf``/``oneOf``/``allOf``/
  ``not``/``const``; ``nullable`` instead of a null type, never on an enum; no
  ``additionalProperties`` beside ``properties``; arrays have items; metadata only typed;
  map-list keys required) finds nothing in the CRDs, and does find each kind of fault
  in a schema made to have it;
- what a schema cannot describe is kept as written, and the description says so: the
  recursive states, transitions (several shapes), free JSON, ``spec.machine`` (for a
  bare ``on:``, ADR 0011); quantities are int-or-string;
- examples: every manifest under examples/, read as kubectl reads it (YAML 1.1: a bare
  ``on:`` key becomes ``"true"``), validates against its CRD's openAPIV3Schema with
  check-jsonschema (unknown fields refused, as kubectl's strict field validation does),
  and against its model; a bare ``on:`` under ``spec.machine`` is accepted; a misspelt
  field and a missing required field are refused;
- CEL rules (x-kubernetes-validations): each compiles with the ``cel`` package, and each
  means what it says on sample objects (exactly one of workspace name/template; signals
  append-only; cancel not undone; an AgentTurn's spec immutable; an egress peer is an
  ipBlock or selectors; an egress endPort follows a port, in a Workspace and in a Run's
  template; a repo's url carries no credentials, in a Workspace and in a Run's
  template); every rule has samples, and the models refuse what the egress and url
  rules refuse.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import cel
import pytest
import yaml
from pydantic import ValidationError

from kubeturn.api import common, crds
from kubeturn.api.agentturn import AgentTurn
from kubeturn.api.egress import Peer, PolicyPort
from kubeturn.api.run import Run
from kubeturn.api.validation import validate_run
from kubeturn.api.workspace import Workspace

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = REPO / "examples"
REGENERATE = f"regenerate them from the repository root with: {crds.COMMAND}"

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"

Node = dict[str, Any]


def committed() -> dict[str, Node]:
    """The committed CRDs by kind, as the API server would read them."""
    documents = (yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml")))
    return {document["spec"]["names"]["kind"]: document for document in documents}


def schema_of(kind: str) -> Node:
    schema: Node = committed()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def node_at(schema: Node, path: str) -> Node:
    """The node at a dotted path of property names; ``*`` steps into a map's values and
    ``[]`` into a list's items."""
    node = schema
    for part in path.split("."):
        if part == "*":
            node = node["additionalProperties"]
        elif part == "[]":
            node = node["items"]
        else:
            node = node["properties"][part]
    return node


def walk(node: Node, path: str = "") -> Iterator[tuple[str, Node]]:
    """Every schema node below ``node`` (itself included) with its path."""
    yield path or "<root>", node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")


KINDS = ("Run", "Workspace", "AgentTurn")


# --- drift -------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(crds.crds()))
def test_committed_file_matches_the_models(name: str) -> None:
    path = CRDS / name
    assert path.exists(), f"crds/{name} is missing; {REGENERATE}"
    expected = crds.render(crds.crds()[name])
    assert path.read_text(encoding="utf-8") == expected, (
        f"crds/{name} differs from what kubeturn.api's models generate; {REGENERATE}"
    )


def test_crds_directory_holds_only_generated_files() -> None:
    stale = sorted({path.name for path in CRDS.iterdir()} - set(crds.crds()))
    assert not stale, f"crds/ holds files no model generates: {stale}; delete them"


def test_check_flag_agrees_and_writing_gives_the_same_files(tmp_path: Path) -> None:
    assert crds.main(["--out", str(CRDS), "--check"]) == 0
    assert crds.main(["--out", str(tmp_path), "--check"]) == 1
    assert crds.main(["--out", str(tmp_path)]) == 0
    for name in crds.crds():
        assert (tmp_path / name).read_bytes() == (CRDS / name).read_bytes()


def test_generated_files_start_with_the_header() -> None:
    for path in CRDS.glob("*.yaml"):
        assert path.read_text().startswith(
            "# Generated by python -m kubeturn.api.crds; do not edit.\n"
        )


# --- names and columns -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural", "singular", "short"),
    [
        ("Run", "runs", "run", "krun"),
        ("Workspace", "workspaces", "workspace", "kws"),
        ("AgentTurn", "agentturns", "agentturn", "turn"),
    ],
)
def test_names(kind: str, plural: str, singular: str, short: str) -> None:
    document = committed()[kind]
    assert document["apiVersion"] == "apiextensions.k8s.io/v1"
    assert document["kind"] == "CustomResourceDefinition"
    assert document["metadata"]["name"] == f"{plural}.kubeturn.dev"
    spec = document["spec"]
    assert spec["group"] == "kubeturn.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "plural": plural,
        "singular": singular,
        "kind": kind,
        "listKind": f"{kind}List",
        "shortNames": [short],
        "categories": ["kubeturn"],
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_every_models_api_version_is_the_group_version() -> None:
    assert common.GROUP_VERSION == f"{common.GROUP}/{common.VERSION}" == "kubeturn.dev/v1alpha1"
    assert get_args(common.GroupVersion) == (common.GROUP_VERSION,)
    for model in (Run, Workspace, AgentTurn):
        assert model.model_fields["apiVersion"].annotation == common.GroupVersion


AGE = ("Age", ".metadata.creationTimestamp", "date")
COLUMNS = {
    "AgentTurn": [
        ("Run", ".spec.runRef.name", "string"),
        ("Agent", ".spec.agent.slot", "string"),
        ("State", ".spec.statePath", "string"),
        ("Phase", ".status.phase", "string"),
        ("Outcome", ".status.settlement.outcome", "string"),
        AGE,
    ],
    "Run": [
        ("State", ".status.state", "string"),
        ("Phase", ".status.phase", "string"),
        ("Turns", ".status.turnCount", "integer"),
        AGE,
        ("Accepts", ".status.waitingFor", "string"),
    ],
    "Workspace": [
        ("Phase", ".status.phase", "string"),
        ("Repos", ".status.repoCount", "integer"),
        ("Runs", ".status.runCount", "integer"),
        ("Active", ".status.activeRunCount", "integer"),
        AGE,
    ],
}


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns(kind: str) -> None:
    columns = committed()[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"], c["type"]) for c in columns] == COLUMNS[kind]
    assert all(c.get("description") for c in columns)


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns_name_fields_of_their_type(kind: str) -> None:
    schema = schema_of(kind)
    for name, path, kind_of_column in COLUMNS[kind]:
        if path == ".metadata.creationTimestamp":
            continue
        node = node_at(schema, path.removeprefix("."))
        assert node["type"] == kind_of_column, f"column {name}: {path} is {node['type']}"


# --- descriptions ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_property_has_a_description(kind: str) -> None:
    missing = [
        f"{path}.{name}"
        for path, node in walk(schema_of(kind))
        for name, child in node.get("properties", {}).items()
        if not child.get("description", "").strip()
    ]
    assert not missing, f"{kind}: properties without a description: {missing}"
    assert schema_of(kind)["description"]


# --- structural schemas --------------------------------------------------------------

TYPES = {"string", "number", "integer", "boolean", "array", "object"}
ALLOWED = {
    "description",
    "type",
    "format",
    "enum",
    "default",
    "nullable",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "uniqueItems",
    INT_OR_STRING,
    PRESERVE,
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "x-kubernetes-embedded-resource",
}
FORBIDDEN = {
    "$ref": "references are not allowed: inline the definition",
    "$defs": "definitions are not allowed: inline them",
    "definitions": "definitions are not allowed: inline them",
    "anyOf": "a union cannot be structural: keep the node as written, or int-or-string",
    "oneOf": "a union cannot be structural: keep the node as written",
    "allOf": "allOf is not used in kubeturn's CRDs",
    "not": "not is not used in kubeturn's CRDs",
    "const": "OpenAPI v3.0 has no const: use a one-value enum",
    "title": "no title: kubectl explain shows descriptions",
}


def structural_problems(schema: Node) -> list[str]:
    """The Kubernetes structural-schema rules ``schema`` (an openAPIV3Schema) breaks."""
    problems: list[str] = []
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is not None and set(metadata) - {"type", "description"}:
        problems.append("metadata: only its type (object) may be given")
    for path, node in walk(schema):
        # The API server fills in metadata's fields itself.
        problems.extend(
            f"{path}: {problem}" for problem in node_problems(node, metadata=path == ".metadata")
        )
    return problems


def node_problems(node: Node, *, metadata: bool = False) -> list[str]:
    problems = [f"{key}: {why}" for key, why in FORBIDDEN.items() if key in node]
    problems += [
        f"unknown keyword {key!r}" for key in node if key not in ALLOWED and key not in FORBIDDEN
    ]
    kind = node.get("type")
    if kind is None:
        if not (node.get(PRESERVE) is True or node.get(INT_OR_STRING) is True):
            problems.append("no type (only a node kept as written or int-or-string may omit it)")
    elif not isinstance(kind, str) or kind not in TYPES:
        problems.append(f"type {kind!r}: one of {sorted(TYPES)}; for null use nullable")
    if INT_OR_STRING in node and kind is not None:
        problems.append("int-or-string takes no type")
    if node.get("nullable") and "enum" in node:
        problems.append("a nullable enum refuses null anyway: leave nullable out")
    if "nullable" in node and node["nullable"] is not True:
        problems.append("nullable is only ever true")
    if PRESERVE in node and node[PRESERVE] is not True:
        problems.append(f"{PRESERVE} is only ever true")
    if "default" in node and node["default"] is None:
        problems.append("a null default")
    if node.get("uniqueItems"):
        problems.append("uniqueItems: Kubernetes forbids it (quadratic); use a list type")
    extra = node.get("additionalProperties")
    if extra is not None and "properties" in node:
        problems.append("additionalProperties beside properties")
    if extra is not None and not isinstance(extra, dict):
        problems.append("additionalProperties is a schema, not a boolean")
    if kind == "array" and not isinstance(node.get("items"), dict):
        problems.append("an array without items")
    fields = {"properties", "additionalProperties", PRESERVE} & set(node)
    if kind == "object" and not fields and not metadata:
        problems.append("an object without fields drops everything written in it")
    for name in node.get("required", ()):
        if name not in node.get("properties", {}):
            problems.append(f"required {name!r} is no property")
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", ()):
            if key not in items.get("required", ()) and "default" not in items.get(
                "properties", {}
            ).get(key, {}):
                problems.append(f"map-list key {key!r} must be required or defaulted")
    for rule in node.get("x-kubernetes-validations", ()):
        if not (isinstance(rule.get("rule"), str) and isinstance(rule.get("message"), str)):
            problems.append(f"a validation needs a rule and a message: {rule}")
    return problems


@pytest.mark.parametrize("kind", KINDS)
def test_schemas_are_structural(kind: str) -> None:
    problems = structural_problems(schema_of(kind))
    assert not problems, f"{kind}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("schema", "fault"),
    [
        ({"properties": {"a": {"type": "string", "description": "d"}}}, "no type"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}, "$ref"),
        (
            {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}},
            "anyOf",
        ),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, "type"),
        ({"type": "object", "properties": {"a": {"type": "null"}}}, "nullable"),
        (
            {
                "type": "object",
                "properties": {"a": {"type": "string", "enum": ["x"], "nullable": True}},
            },
            "nullable enum",
        ),
        (
            {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "beside",
        ),
        ({"type": "object", "additionalProperties": True}, "not a boolean"),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "without items"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, "without fields"),
        ({"type": "object", "properties": {"a": {"type": "string", "const": "x"}}}, "const"),
        (
            {
                "type": "object",
                "properties": {"metadata": {"type": "object", "required": ["name"]}},
            },
            "metadata",
        ),
        ({"type": "object", "required": ["b"], "properties": {}}, "no property"),
        (
            {
                "type": "object",
                "properties": {
                    "a": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["id"],
                        "items": {"type": "object", "properties": {"id": {"type": "string"}}},
                    }
                },
            },
            "map-list key",
        ),
        ({"type": "object", "properties": {"a": {"type": "string", "examples": ["x"]}}}, "unknown"),
    ],
)
def test_structural_checker_finds_each_fault(schema: Node, fault: str) -> None:
    problems = structural_problems(schema)
    assert any(fault in problem for problem in problems), problems


# --- what a schema cannot describe -------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Run", "spec.machine.states.*"),
        ("Run", "spec.machine.on.*"),
        ("Run", "spec.machine.context"),
        ("Run", "spec.input"),
        ("Run", "spec.signals.[].data"),
        ("Run", "spec.workspace.template.env.[]"),
        ("Run", "status.snapshot"),
        ("Run", "status.output"),
        ("Workspace", "spec.envFrom.[]"),
        ("AgentTurn", "spec.menu.[].schema"),
    ],
)
def test_what_cannot_be_described_is_kept_as_written(kind: str, path: str) -> None:
    assert node_at(schema_of(kind), path)[PRESERVE] is True


@pytest.mark.parametrize("path", ["spec.machine.states", "spec.machine.on"])
def test_the_description_says_the_operator_checks_it(path: str) -> None:
    description = node_at(schema_of("Run"), path)["description"]
    assert crds.CHECKED_ON_LOAD in description
    assert "kubectl explain" in description or "several shapes" in description


def test_the_machine_keeps_unknown_keys_for_a_bare_on() -> None:
    machine = node_at(schema_of("Run"), "spec.machine")
    assert machine[PRESERVE] is True
    assert "docs/decisions/0011" in machine["description"]
    assert set(machine["properties"]) == {"initial", "context", "on", "states"}


def test_quantities_are_int_or_string() -> None:
    for path in ("spec.resources.requests.*", "spec.resources.limits.*"):
        assert node_at(schema_of("Workspace"), path) == {INT_OR_STRING: True}


# --- examples against their CRDs ---------------------------------------------------


def as_kubectl_sends(value: Any) -> Any:
    """``value`` (read by PyYAML, YAML 1.1 like kubectl) as the JSON kubectl sends: keys
    are strings (the boolean key of a bare ``on:`` becomes ``"true"``), times are text."""
    if isinstance(value, dict):
        return {_key(key): as_kubectl_sends(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_kubectl_sends(item) for item in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def as_json_schema(node: Node) -> Node:
    """The JSON Schema that checks what the API server checks with ``node``: nullable
    and int-or-string as type lists, and unknown fields refused wherever the schema does
    not keep them (kubectl's strict field validation, its default)."""
    result: Node = {}
    for key, value in node.items():
        if key == "properties":
            result[key] = {name: as_json_schema(child) for name, child in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            result[key] = as_json_schema(value)
        elif key != "nullable" and not key.startswith("x-kubernetes-"):
            result[key] = value
    if node.get(INT_OR_STRING):
        result["type"] = ["integer", "string"]
    if node.get("nullable"):
        result["type"] = [node["type"], "null"]
    if "properties" in node and not node.get(PRESERVE):
        result["additionalProperties"] = False
    return result


def example_manifests() -> list[tuple[str, Node]]:
    manifests = []
    for path in sorted([*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.yml")]):
        for number, document in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(document, dict) and str(document.get("apiVersion", "")).startswith(
                "kubeturn.dev/"
            ):
                name = path.relative_to(EXAMPLES).as_posix()
                manifests.append((f"{name}#{number}", as_kubectl_sends(document)))
    return manifests


def check_jsonschema(kind: str, instances: dict[str, Node], tmp_path: Path) -> str:
    """Run check-jsonschema on ``instances`` with ``kind``'s CRD schema; its output, or
    the test fails with it."""
    result = run_check_jsonschema(kind, instances, tmp_path)
    assert result.returncode == 0, f"{kind} examples refused:\n{result.stdout}{result.stderr}"
    return result.stdout


def run_check_jsonschema(
    kind: str, instances: dict[str, Node], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "check-jsonschema"
    executable = str(tool) if tool.exists() else shutil.which("check-jsonschema")
    if executable is None:
        pytest.fail(
            "check-jsonschema is not installed; install the dev extras: pip install -e '.[dev]'"
        )
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **as_json_schema(schema_of(kind)),
    }
    schema_file = tmp_path / f"{kind}.schema.json"
    schema_file.write_text(json.dumps(schema))
    files = []
    for name, instance in instances.items():
        file = tmp_path / f"{name.replace('#', '-').replace('/', '-')}.json"
        file.write_text(json.dumps(instance))
        files.append(str(file))
    return subprocess.run(
        [executable, "--schemafile", str(schema_file), *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_examples_validate_against_their_crds(tmp_path: Path) -> None:
    by_kind: dict[str, dict[str, Node]] = {}
    for name, manifest in example_manifests():
        assert manifest["apiVersion"] == "kubeturn.dev/v1alpha1", name
        by_kind.setdefault(manifest["kind"], {})[name] = manifest
    assert {"Run", "Workspace"} <= set(by_kind), "examples/ should hold a Run and a Workspace"
    for kind, instances in by_kind.items():
        check_jsonschema(kind, instances, tmp_path)


def test_examples_validate_against_their_models() -> None:
    for name, manifest in example_manifests():
        if manifest["kind"] == "Run":
            validate_run(manifest)
        elif manifest["kind"] == "Workspace":
            Workspace.model_validate(manifest)
        else:
            pytest.fail(f"{name}: no model check for kind {manifest['kind']}")


def example_run() -> Node:
    """``examples/task-with-review.yaml``: the commented example, with bare ``on`` keys."""
    [run] = [
        manifest for name, manifest in example_manifests() if name == "task-with-review.yaml#0"
    ]
    return run


def test_the_example_run_carries_bare_on_keys_as_kubectl_sends_them() -> None:
    states = example_run()["spec"]["machine"]["states"]
    assert "true" in states["implementing"]
    assert "on" not in states["implementing"]


def test_a_bare_on_under_the_machine_is_accepted(tmp_path: Path) -> None:
    run = example_run()
    run["spec"]["machine"]["true"] = {"CANCEL": "failed"}
    check_jsonschema("Run", {"machine-on": run}, tmp_path)
    validate_run(run)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda run: run["spec"]["agents"]["coder"].update(instructionz="x"), "instructionz"),
        (lambda run: run["spec"].pop("machine"), "machine"),
        (lambda run: run["spec"]["agents"]["coder"].update(workspace="all"), "all"),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(change: Any, named: str, tmp_path: Path) -> None:
    run = example_run()
    change(run)
    result = run_check_jsonschema("Run", {"faulty": run}, tmp_path)
    assert result.returncode == 1, result.stdout
    assert named in result.stdout + result.stderr


# --- CEL rules ---------------------------------------------------------------------


def rules() -> list[tuple[str, str, str]]:
    """Every CEL rule of every CRD: (kind, path, rule)."""
    return [
        (kind, path.lstrip("."), validation["rule"])
        for kind in KINDS
        for path, node in walk(schema_of(kind))
        for validation in node.get("x-kubernetes-validations", ())
    ]


@pytest.mark.parametrize(("kind", "path", "rule"), rules())
def test_rules_compile(kind: str, path: str, rule: str) -> None:
    program = cel.compile(rule)
    assert set(program.variables()) & {"self", "oldSelf"}, f"{kind} {path}: reads neither"


PEER_SAMPLES: list[tuple[Any, Any, bool]] = [
    ({"ipBlock": {"cidr": "203.0.113.0/24"}}, None, True),
    ({"podSelector": {}}, None, True),
    ({"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "vllm"}}}, None, True),
    ({"ipBlock": {"cidr": "203.0.113.0/24"}, "namespaceSelector": {}}, None, False),
    ({}, None, False),
]
"""An egress rule's peer: an ipBlock, or selectors, never both nor neither."""
PORT_SAMPLES: list[tuple[Any, Any, bool]] = [
    ({"port": 443}, None, True),
    ({"port": 8000, "endPort": 8100}, None, True),
    ({"protocol": "UDP"}, None, True),
    ({"endPort": 8100}, None, False),
]
"""An egress port: an endPort only after a port."""
EGRESS_RULES = {
    "spec.egress.rules[].to[]": PEER_SAMPLES,
    "spec.egress.rules[].ports[]": PORT_SAMPLES,
    "spec.egress.public.ports[]": PORT_SAMPLES,
}
"""The egress rules of a Workspace's spec, which a Run's template holds too."""
SIGNAL_A = {"id": "a", "event": "approve"}
SIGNAL_B = {"id": "b", "event": "reject", "data": {"notes": "no"}}
TURN_SPEC = {"runRef": {"name": "r"}, "turn": "t1", "prompt": "do it", "menu": [{"name": "x"}]}
CLONE_URLS: list[tuple[Any, Any, bool]] = [
    ("https://git.example.invalid/team/a.git", None, True),
    ("git@github.com:org/repo.git", None, True),
    ("ssh://git@git.example.invalid:2222/team/a.git", None, True),
    ("https://bot:ghp-token@git.example.invalid/team/a.git", None, False),
    ("https://ghp-token@git.example.invalid/team/a.git", None, False),
    ("ssh://git:password@git.example.invalid/team/a.git", None, False),
]
"""tests/unit/test_repo_urls.py holds many more, checked against the model too."""
SAMPLES: dict[tuple[str, str], list[tuple[Any, Any, bool]]] = {
    # (kind, path): [(self, oldSelf or None on create, expected)]
    ("Run", "spec.workspace"): [
        ({"name": "shared"}, None, True),
        ({"template": {"repos": {}}}, None, True),
        ({"name": "shared", "template": {"repos": {}}}, None, False),
        ({}, None, False),
    ],
    ("Run", "spec.signals"): [
        ([SIGNAL_A, SIGNAL_B], [SIGNAL_A], True),
        ([SIGNAL_A], [SIGNAL_A], True),
        ([SIGNAL_B, SIGNAL_A], [SIGNAL_A, SIGNAL_B], True),
        ([SIGNAL_B], [SIGNAL_A], False),
        ([], [SIGNAL_A], False),
    ],
    ("Run", "spec.cancel"): [
        (True, False, True),
        (True, True, True),
        (False, False, True),
        (False, True, False),
    ],
    ("Run", "spec.workspace.template.repos.*.url"): CLONE_URLS,
    ("Workspace", "spec.repos.*.url"): CLONE_URLS,
    ("AgentTurn", "spec"): [
        (TURN_SPEC, TURN_SPEC, True),
        ({**TURN_SPEC, "prompt": "do it again"}, TURN_SPEC, False),
        ({**TURN_SPEC, "menu": []}, TURN_SPEC, False),
    ],
    **{("Workspace", path): samples for path, samples in EGRESS_RULES.items()},
    **{
        ("Run", path.replace("spec.", "spec.workspace.template.", 1)): samples
        for path, samples in EGRESS_RULES.items()
    },
}


@pytest.mark.parametrize(("kind", "path", "rule"), rules())
def test_rules_mean_what_they_say(kind: str, path: str, rule: str) -> None:
    assert (kind, path) in SAMPLES, f"{kind} {path}: add samples for {rule!r}"
    program = cel.compile(rule)
    for self_value, old_value, expected in SAMPLES[kind, path]:
        context = {"self": self_value}
        if old_value is not None:
            context["oldSelf"] = old_value
        assert program.execute(context) is expected, (rule, self_value, old_value)


@pytest.mark.parametrize(
    ("model", "samples"), [(Peer, PEER_SAMPLES), (PolicyPort, PORT_SAMPLES)], ids=["peer", "port"]
)
def test_models_refuse_what_the_egress_rules_refuse(
    model: type[Peer | PolicyPort], samples: list[tuple[Any, Any, bool]]
) -> None:
    for value, _, accepted in samples:
        try:
            model.model_validate(value)
        except ValidationError:
            assert not accepted, value
        else:
            assert accepted, value


def test_every_sampled_rule_exists() -> None:
    assert set(SAMPLES) == {(kind, path) for kind, path, _ in rules()}
