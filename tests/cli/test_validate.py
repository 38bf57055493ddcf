"""``kubeturn validate`` on manifest files, in process.

Cases:
- a Workspace whose repo URL carries credentials: the path is named, the URL is not
  printed (ADR 0033), a valid file beside it is said valid;
- YAML too deep to read names the file and the bounds, and ``kubeturn validate`` prints
  it; one that reads but nests too deep names the path, cut.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubeturn import cli
from kubeturn.api import workspace
from kubeturn.api.depth import MAX_SPEC_DEPTH, MAX_STATE_DEPTH, MAX_VALUE_DEPTH
from kubeturn.errors import DefinitionErrors
from kubeturn.machine.load import load_run_yaml
from tests.repo_urls import ACCEPTED, REFUSED, workspace_document


def test_kubeturn_validate_names_the_path_in_a_workspace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(yaml.safe_dump(workspace_document(ACCEPTED[0])))
    bad.write_text(yaml.safe_dump(workspace_document(REFUSED[0])))

    assert cli.validate([good, bad]) == 1

    said = capsys.readouterr()
    assert said.out == f"{good}: valid\n"
    assert said.err == f"{bad}: spec.repos.target.url: {workspace.URL_CREDENTIALS}\n"


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """Python's default recursion limit, which ``kubeturn validate`` and the local runner
    run under (only ``kubeturn operator`` raises its own; an operator or emulator started
    earlier in this test process left it raised)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


@pytest.mark.usefixtures("default_recursion_limit")
def test_yaml_too_deep_to_read_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: kubeturn.dev/v1alpha1\nkind: Run\nmetadata: {name: deep}\nspec:\n"
        "  agents: {}\n  machine: {initial: b, states: {b: {type: final}}}\n"
        f"  input: {'[' * 1000}{']' * 1000}\n"
    )
    with pytest.raises(DefinitionErrors) as raised:
        load_run_yaml(text, "deep.yaml")
    assert str(raised.value) == (
        f"deep.yaml: nested too deep to read: a Run's spec nests at most {MAX_SPEC_DEPTH} "
        f"levels, its free JSON (input, context) {MAX_VALUE_DEPTH} and its states "
        f"{MAX_STATE_DEPTH}"
    )
    manifest = tmp_path / "deep.yaml"
    manifest.write_text(text)
    assert cli.main(["validate", str(manifest)]) == 1
    assert "deep.yaml: nested too deep to read" in capsys.readouterr().err
    manifest.write_text(text.replace("[" * 1000, "[" * 65).replace("]" * 1000, "]" * 65))
    assert cli.main(["validate", str(manifest)]) == 1
    said = capsys.readouterr().err
    assert (
        f"spec.input[0][0][0][0][0][0][0][0]…: nested deeper than {MAX_VALUE_DEPTH} levels" in said
    )
