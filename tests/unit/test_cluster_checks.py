"""``kubeturn.api.cluster_checks``: what ``validate --cluster`` adds, at named functions.

Cases:
- ``is_local_path``: ``file:`` URLs and paths (``.``, ``./x``, ``../x``, ``/abs``, ``~/x``,
  a bare name) are local; ``scheme://`` URLs and scp-like ``[user@]host:path`` are not;
- an Agent with no model is a problem only where a state invokes it without a model and
  no default is known; a state's own ``model`` serves it; an Agent no state invokes is
  no problem here; ``--default-model``, the template's ``defaultModel`` and a named
  Workspace's, when known, each serve it;
- every local repo url of a Run's template is reported at its slot's path.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.api import cluster_checks
from kubeturn.api.cluster_checks import Known
from kubeturn.api.validation import validate_run


@pytest.mark.parametrize(
    ("url", "local"),
    [
        (".", True),
        ("./app", True),
        ("../app", True),
        ("/srv/app.git", True),
        ("~/app", True),
        ("app", True),
        ("file:///srv/app.git", True),
        ("https://git.example/app.git", False),
        ("ssh://git@git.example/app.git", False),
        ("git@git.example:team/app.git", False),
        ("git.example:team/app.git", False),
    ],
)
def test_is_local_path(url: str, local: bool) -> None:
    assert cluster_checks.is_local_path(url) is local


def run(*, agents: dict[str, Any], invokes: dict[str, str | None], **template: Any) -> Any:
    """A Run whose states invoke each slot of ``invokes`` (with that model, or none)."""
    states: dict[str, Any] = {"done": {"type": "final"}}
    names = list(invokes)
    for number, (slot, model) in enumerate(invokes.items()):
        agent: dict[str, Any] = {"slot": slot, "prompt": "work"}
        if model is not None:
            agent["model"] = model
        following = names[number + 1] if number + 1 < len(names) else "done"
        states[slot] = {
            "invoke": {"agent": agent},
            "on": {"finish": {"target": following, "description": "Finished."}},
        }
    repos = template.pop("repos", {"target": {"url": "https://git.example/a.git"}})
    return validate_run(
        {
            "apiVersion": "kubeturn.dev/v1alpha1",
            "kind": "Run",
            "metadata": {"name": "r"},
            "spec": {
                "workspace": {"template": {"repos": repos, **template}},
                "agents": {
                    name: {"instructions": "Work.", "workspace": "read", **fields}
                    for name, fields in agents.items()
                },
                "machine": {"initial": names[0], "states": states},
            },
        }
    )


def paths(found: list[Any]) -> list[str]:
    return [problem.path for problem in found]


def test_only_agents_invoked_without_a_model_need_a_default() -> None:
    made = run(
        agents={"a": {}, "b": {}, "c": {"model": "openai/x"}, "unused": {}},
        invokes={"a": None, "b": "openai/y", "c": None},
    )
    assert paths(cluster_checks.run_problems(made, Known())) == ["spec.agents.a.model"]


def test_a_known_default_serves_them() -> None:
    made = run(agents={"a": {}}, invokes={"a": None})
    assert cluster_checks.run_problems(made, Known(default_model="openai/x")) == []
    own = run(agents={"a": {}}, invokes={"a": None}, defaultModel="openai/x")
    assert cluster_checks.run_problems(own, Known()) == []


def test_every_local_repo_is_reported_at_its_slot() -> None:
    repos = {
        "app": {"url": "."},
        "docs": {"url": "https://git.example/d.git"},
        "lib": {"url": "/x"},
    }
    made = run(agents={"a": {"model": "openai/x"}}, invokes={"a": None}, repos=repos)
    assert paths(cluster_checks.run_problems(made, Known())) == [
        "spec.workspace.template.repos.app.url",
        "spec.workspace.template.repos.lib.url",
    ]
