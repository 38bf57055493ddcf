"""The CRDs under ``crds/`` as files and against a JSON Schema validator: the static
half of ``tests/unit/test_crds.py``, which writes files and runs check-jsonschema.

Cases:
- drift: ``kubeturn.api.crds``'s ``--check`` agrees with the committed files, and writing
  into an empty directory gives the same files;
- examples: every manifest under examples/, read as kubectl reads it (YAML 1.1: a bare
  ``on:`` key becomes ``"true"``), validates against its CRD's openAPIV3Schema with
  check-jsonschema (unknown fields refused, as kubectl's strict field validation does);
  a bare ``on:`` under ``spec.machine`` is accepted; a misspelt field and a missing
  required field are refused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api import crds
from kubeturn.api.validation import validate_run
from tests.crd_schemas import CRDS, Node, as_json_schema, example_manifests, example_run, schema_of


def test_check_flag_agrees_and_writing_gives_the_same_files(tmp_path: Path) -> None:
    assert crds.main(["--out", str(CRDS), "--check"]) == 0
    assert crds.main(["--out", str(tmp_path), "--check"]) == 1
    assert crds.main(["--out", str(tmp_path)]) == 0
    for name in crds.crds():
        assert (tmp_path / name).read_bytes() == (CRDS / name).read_bytes()


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
