"""Per-child worktrees (ADR 0113): which fan-out children work in worktrees of their own,
on which branch, and what a child's invokes wait for.

A fan-out with ``worktree: per-child`` gives each child, when it starts, a worktree of
every repo slot on a branch of its own, made from the current commit of the branch of
the Machine it fans out of (the Run's, or an enclosing child's), so the child starts
from the work committed before it. The child's invokes (and those of the children it
fans out with a shared worktree) wait until the shell reports the worktrees made, then
run in them. Pure: no IO, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeturn.machine.interpreter import Event, InvokeEntry
from kubeturn.machine.model import ROOT, Chart, StatePath, machine_of, parent_of
from kubeturn.orchestrator.frames import WorkspaceView

BRANCH_MAX = 240
"""The longest child branch the Harness's ``WorktreesRequest`` admits; a Run's own is at
most 200 (``kubeturn.k8s.names``), which leaves a child's part 39 characters at least."""
SEPARATOR = "_"
"""Between the Run's branch and the child's part: a Run's name (a DNS subdomain) and so
its branch never holds it, so no child's branch is ever another Run's, nor its
worktree's directory another Run's."""
DIGEST_LENGTH = 16
"""Hex digits of the digest a cut child's part ends with: 64 bits, so no key an Agent
could steer the items to meets another child's digest."""


def child_branch(run_branch: str, child: StatePath) -> str:
    """The branch of a child's worktrees: the Run's branch, ``_``, and the child's root
    with each ``[`` as ``=`` and each ``]`` cut (``kubeturn/fix-run_fix=pkg-a`` for
    ``fix[pkg-a]``; a child of a child: ``kubeturn/fix-run_fix=a.sub=b``). No state name
    or key holds ``=`` or ``.``, so two children's parts never read the same. One too
    long, or one git would refuse (ending ``.lock``), has the child's part cut and a
    digest of the whole added, long enough that no chosen key meets another's; the Run's
    branch is always kept whole, since the sandbox reaches a Run's children by it (the
    Harness refuses a child's branch that does not begin so)."""
    part = child.replace("[", "=").replace("]", "")
    whole = f"{run_branch}{SEPARATOR}{part}"
    if len(whole) <= BRANCH_MAX and not whole.endswith(".lock"):
        return whole
    room = BRANCH_MAX - len(run_branch) - len(SEPARATOR) - DIGEST_LENGTH - 1
    digest = hashlib.sha256(whole.encode()).hexdigest()[:DIGEST_LENGTH]
    return f"{run_branch}{SEPARATOR}{part[:room].rstrip('-._')}-{digest}"


def per_child(chart: Chart, child: StatePath) -> bool:
    """Whether the fan-out child rooted at ``child`` asked for worktrees of its own."""
    parent = parent_of(child)
    invoke = chart.state(parent).invoke if parent is not None else None
    return invoke is not None and invoke.fan_out is not None and invoke.fan_out.per_child_worktree


def owner(chart: Chart, path: StatePath) -> StatePath:
    """The Machine whose worktrees the state ``path`` works in: its own Machine's root when
    that is a per-child fan-out child, else its enclosing Machine's owner; ``ROOT`` for
    the Run's own."""
    machine = machine_of(path)
    while machine != ROOT and not per_child(chart, machine):
        parent = parent_of(machine)
        assert parent is not None
        machine = machine_of(parent)
    return machine


@dataclass(frozen=True)
class Waiting:
    """An invoke started in a child whose worktrees are not made yet; the event that
    entered its state renders its Frame once they are."""

    invocation: str
    event: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, entry: InvokeEntry, event: Event) -> Waiting:
        return cls(entry.id, event.type, dict(event.fields))


@dataclass
class ChildWorktrees:
    """One child's worktrees: asked for (``repos`` None), made, or failed (``error``)."""

    branch: str
    base: str
    repos: dict[str, str] | None = None
    error: str | None = None
    asked: bool = False
    """Its ``MakeWorktrees`` was decided (a child's base must be made first)."""
    waiting: list[Waiting] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        return self.repos is None and self.error is None

    def view(self) -> WorkspaceView | None:
        return WorkspaceView(self.repos, self.branch) if self.repos is not None else None


def write(children: Mapping[StatePath, ChildWorktrees]) -> list[dict[str, Any]]:
    """The children's worktrees as a snapshot keeps them (``snapshots``): a list, which a
    status's merge patch replaces whole, so a child forgotten is gone from it."""
    return [
        {
            "child": scope,
            "branch": made.branch,
            "base": made.base,
            "repos": made.repos,
            "error": made.error,
            "asked": made.asked,
            "waiting": [
                {"invocation": w.invocation, "event": w.event, "fields": dict(w.fields)}
                for w in made.waiting
            ],
        }
        for scope, made in children.items()
    ]


def read(data: Sequence[Mapping[str, Any]]) -> dict[StatePath, ChildWorktrees]:
    """``write``'s JSON, read back."""
    return {
        StatePath(made["child"]): ChildWorktrees(
            branch=str(made["branch"]),
            base=str(made["base"]),
            repos=dict(made["repos"]) if made.get("repos") is not None else None,
            error=made.get("error"),
            asked=bool(made.get("asked")),
            waiting=[
                Waiting(str(w["invocation"]), str(w["event"]), dict(w.get("fields") or {}))
                for w in made.get("waiting") or []
            ],
        )
        for made in data
    }


@dataclass(frozen=True)
class Made:
    """How making a child's worktrees ended: slot → path, or why not."""

    repos: Mapping[str, str] | None = None
    error: str | None = None
