"""A repo slot's ``url`` carries no credentials (``kubeturn.api.workspace``, ADR 0033):
refused by the model, by the CRDs' CEL rule, and by ``kubeturn run --repo``, and never
quoted in a message.

Cases:
- refused: an http(s) URL with any user or password (``https://user:token@host``,
  ``https://token@host``, ``https://:token@host``, any case of the scheme), a URL of
  any scheme with a password (``ssh://user:password@host``, ``git://``, ``ftp://``), an
  ssh URL whose user part is not one plain name; accepted: an ssh login user
  (``ssh://git@host``, ``git+ssh://``, ``git@host:path``), no user, ``@`` in the path,
  query or fragment, paths;
- the model names the path (``spec.repos.target.url`` in a Workspace,
  ``spec.workspace.template.repos.target.url`` in a Run) with a message that says where
  credentials go, and neither it nor pydantic's own error text holds the secret;
- a value quoted in another problem (a URL where a mapping goes, one too long) is
  redacted: ``https://***@host``;
- the CRDs carry the rule on both paths, with the model's message, and it agrees with
  the model on every URL here; the URL's length and the number of slots are bounded, so
  the API server can price the rule;
- ``kubeturn run --repo`` refuses such a URL without printing it (``kubeturn validate``
  naming the path in a Workspace manifest is ``tests/cli/test_validate.py``'s).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from kubeturn import cli
from kubeturn.api import workspace
from kubeturn.api.validation import validate_run, validate_workspace
from kubeturn.errors import CommandError, DefinitionErrors
from tests.repo_urls import ACCEPTED, REFUSED, SECRET, workspace_document

REPO = Path(__file__).resolve().parents[2]


def refusal(document: dict[str, Any]) -> DefinitionErrors:
    with pytest.raises(DefinitionErrors) as raised:
        validate_workspace(document)
    return raised.value


@pytest.mark.parametrize("url", REFUSED)
def test_the_model_refuses_credentials_naming_the_path(url: str) -> None:
    errors = refusal(workspace_document(url))

    assert [(e.path, e.message) for e in errors.errors] == [
        ("spec.repos.target.url", workspace.URL_CREDENTIALS)
    ]
    assert workspace.carries_credentials(url)
    assert SECRET not in str(errors)
    assert SECRET not in str(errors.__cause__), "pydantic's own text quotes the input"


@pytest.mark.parametrize("url", ACCEPTED)
def test_the_model_accepts_urls_without_credentials(url: str) -> None:
    assert validate_workspace(workspace_document(url)).spec.repos["target"].url == url
    assert not workspace.carries_credentials(url)
    assert workspace.redacted(url) == url


def test_a_runs_template_names_its_own_path() -> None:
    run = yaml.safe_load((REPO / "examples" / "hello.yaml").read_text())
    run["spec"]["workspace"] = {"template": workspace_document(REFUSED[0])["spec"]}

    with pytest.raises(DefinitionErrors) as raised:
        validate_run(run)

    assert [e.path for e in raised.value.errors] == ["spec.workspace.template.repos.target.url"]
    assert SECRET not in str(raised.value)


def test_a_value_quoted_in_another_problem_is_redacted() -> None:
    document = workspace_document(REFUSED[0])
    document["spec"]["repos"]["other"] = REFUSED[1]
    document["spec"]["repos"]["long"] = {"url": f"{REFUSED[0]}#{'x' * 2048}"}

    errors = refusal(document)

    messages = {e.path: e.message for e in errors.errors}
    assert messages["spec.repos.other"] == (
        "should be a mapping (an object); got the string "
        "'https://***@git.example.invalid/team/a.git'"
    )
    assert messages["spec.repos.long.url"].startswith(
        "string should have at most 2048 characters; got 'https://***@git.example.invalid/"
    )
    assert SECRET not in str(errors)


def test_redacted_hides_the_user_and_password_alone() -> None:
    assert workspace.redacted(REFUSED[0]) == "https://***@git.example.invalid/team/a.git"
    assert workspace.redacted(REFUSED[5]) == "ssh://***@git.example.invalid/team/a.git"
    assert workspace.redacted("ssh://git@host/a@b") == "ssh://git@host/a@b"


# ----------------------------------------------------------------------------- the CRDs

RULE_PATHS = {
    "workspaces.kubeturn.dev.yaml": ["spec", "repos", "*", "url"],
    "runs.kubeturn.dev.yaml": ["spec", "workspace", "template", "repos", "*", "url"],
}


def crd_node(file: str, path: list[str]) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / file).read_text())
    node: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in path:
        node = node["additionalProperties"] if part == "*" else node["properties"][part]
    return node


@pytest.mark.parametrize("file", sorted(RULE_PATHS))
def test_the_crds_refuse_them_too_with_the_models_message(file: str) -> None:
    url = crd_node(file, RULE_PATHS[file])
    assert url["x-kubernetes-validations"] == [
        {"rule": workspace.URL_RULE, "message": f"a repo's url {workspace.URL_CREDENTIALS}"}
    ]
    # The API server prices the rule by these bounds before it admits the CRD.
    assert url["maxLength"] == workspace.MAX_URL_LENGTH
    assert crd_node(file, RULE_PATHS[file][:-2])["maxProperties"] == workspace.MAX_REPOS
    program = cel.compile(url["x-kubernetes-validations"][0]["rule"])
    for candidate in [*REFUSED, *ACCEPTED]:
        assert program.execute({"self": candidate}) is not workspace.carries_credentials(
            candidate
        ), candidate


# ----------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("item", [f"target={REFUSED[0]}", REFUSED[1]])
def test_kubeturn_run_refuses_a_repo_override_with_credentials(item: str) -> None:
    with pytest.raises(CommandError) as raised:
        cli.run(argparse.Namespace(repo=[item]))

    assert SECRET not in str(raised.value)
    assert str(raised.value).startswith("--repo ")
