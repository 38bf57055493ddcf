"""What ``kubeturn validate --cluster`` checks beyond a manifest's shape: what would make a
Run that is valid on one machine fail on a cluster.

- An Agent that names no model, when a state invokes it without naming one and no default
  model is known: the sandbox's Harness would refuse its Turns. A default is known from
  ``--default-model`` (the chart's ``defaultModel``, which validate cannot read), the
  Run's inline Workspace template's ``defaultModel``, or the ``spec.defaultModel`` of a
  Workspace manifest of the name the Run gives, among the files validated together.
- A repo ``url`` that is a local path (``.``, ``./x``, ``/abs``, ``file://…``, a bare
  ``name``): the local runner clones it from this machine, but a sandbox's clone container
  has no such path (ADR 0061).

Each problem is a ``DefinitionError`` at its manifest path, saying how to fix it. Pure:
the caller reads the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeturn.api.machine import StateSpec
from kubeturn.api.run import Run
from kubeturn.api.validation import validate_run, validate_workspace
from kubeturn.api.workspace import Repo
from kubeturn.errors import DefinitionError, DefinitionErrors

SCP_LIKE = re.compile(r"^[^/:]+:")
"""git's scp-like remote, ``[user@]host:path``: a colon before any slash."""


def is_local_path(url: str) -> bool:
    """Whether git reads ``url`` as a path on this machine rather than a remote: a
    ``file:`` URL, or neither ``scheme://`` nor scp-like (``host:path``) — ``.``,
    ``./repo``, ``../repo``, ``/srv/repo.git``, ``~/repo``, ``repo``."""
    if url.startswith("file:"):
        return True
    if "://" in url:
        return False
    return url.startswith((".", "/", "~")) or SCP_LIKE.match(url) is None


@dataclass(frozen=True)
class Known:
    """What the files validated together, and the flags, say of the cluster."""

    default_model: str | None = None
    """``--default-model``: the chart's ``defaultModel`` as the user says it is."""
    workspaces: Mapping[str, str | None] = field(default_factory=dict)
    """Workspace manifests among the files: name → its ``spec.defaultModel``."""


def known_from(documents: Iterable[Any], default_model: str | None) -> Known:
    """:class:`Known` from every document among the files (those that are no valid
    Workspace are left out: their own problems are reported by their own check)."""
    workspaces: dict[str, str | None] = {}
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "Workspace":
            try:
                workspace = validate_workspace(document)
            except DefinitionErrors:
                continue
            workspaces[workspace.metadata.name] = workspace.spec.defaultModel
    return Known(default_model, workspaces)


def check(document: Any, known: Known) -> None:
    """``DefinitionErrors`` with every cluster problem of a Run or Workspace manifest
    whose shape is valid; nothing when it has none."""
    if isinstance(document, dict) and document.get("kind") == "Workspace":
        found = _repo_problems(validate_workspace(document).spec.repos, "spec.repos")
    else:
        found = run_problems(validate_run(document), known)
    if found:
        raise DefinitionErrors(found)


def run_problems(run: Run, known: Known) -> list[DefinitionError]:
    spec = run.spec
    template = spec.workspace.template if spec.workspace is not None else None
    found: list[DefinitionError] = []
    if template is not None:
        found += _repo_problems(template.repos, "spec.workspace.template.repos")
    default = known.default_model
    if template is not None and template.defaultModel:
        default = template.defaultModel
    named = spec.workspace.name if spec.workspace is not None else None
    if named is not None and known.workspaces.get(named):
        default = known.workspaces[named]
    if default is not None:
        return found
    chosen = _models_chosen(spec.machine.states.values())
    for slot, agent in spec.agents.items():
        if agent.model is None and chosen.get(slot) is False:
            found.append(DefinitionError(f"spec.agents.{slot}.model", _no_model(named)))
    return found


def _no_model(workspace: str | None) -> str:
    where = (
        f"the Workspace {workspace}'s spec.defaultModel (give its manifest too)"
        if workspace is not None
        else "spec.workspace.template.defaultModel"
    )
    return (
        "the Agent names no model and no default model is known, so its Turns would be "
        "refused on the cluster: name one (e.g. model: openai/gpt-4.1), set "
        f"{where}, or, when the chart sets defaultModel, say so: kubeturn validate "
        "--cluster --default-model PROVIDER/MODEL"
    )


def _models_chosen(states: Iterable[StateSpec]) -> dict[str, bool]:
    """Slot → whether every state that invokes it names the model (none invokes it:
    absent)."""
    chosen: dict[str, bool] = {}
    for state in _all(states):
        agent = state.invoke.agent if state.invoke is not None else None
        if agent is not None:
            chosen[agent.slot] = chosen.get(agent.slot, True) and agent.model is not None
    return chosen


def _all(states: Iterable[StateSpec]) -> Iterator[StateSpec]:
    for state in states:
        yield state
        yield from _all((state.states or {}).values())


def _repo_problems(repos: Mapping[str, Repo], where: str) -> list[DefinitionError]:
    return [
        DefinitionError(
            f"{where}.{slot}.url",
            f"{repo.url!r} is a path on this machine: the local runner clones it from here, "
            "but a sandbox on the cluster has no such path; give the repository's clone URL "
            "(https://… or ssh://…, e.g. the one `git remote get-url origin` prints)",
        )
        for slot, repo in repos.items()
        if is_local_path(repo.url)
    ]
