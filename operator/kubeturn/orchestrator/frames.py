"""Frame resolution: a Turn's ``prompt`` and ``cwd``, rendered and checked before admission.

The rules (docs/turn-semantics.md §4): ``cwd`` must be absolute, or the Turn is refused
naming the Frame; absent under a Workspace with one repo slot, it is that slot's
worktree; absent with several slots, the Turn is refused naming the slots and the line
to add; with no Workspace, ``/work``. Pure; no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeturn.errors import ExpressionError, FrameRefused
from kubeturn.machine.model import AgentCall, ExecCall, Template

NO_WORKSPACE_CWD = "/work"


@dataclass(frozen=True)
class WorkspaceView:
    """The worktrees a Machine works in (the Run's, or a per-child fan-out child's): repo
    slot → absolute path, and their branch when the shell says it."""

    repos: Mapping[str, str]
    branch: str | None = None

    def activation(self) -> dict[str, Any]:
        """What expressions see as ``workspace``: ``repos``, and ``branch`` when known."""
        seen: dict[str, Any] = {"repos": dict(self.repos)}
        if self.branch is not None:
            seen["branch"] = self.branch
        return seen


@dataclass(frozen=True)
class Frame:
    prompt: str
    cwd: str


def agent_frame(
    call: AgentCall, activation: Mapping[str, Any], workspace: WorkspaceView | None, where: str
) -> Frame:
    """Render and check an agent invoke's Frame; ``where`` is its manifest path."""
    prompt = _render(call.prompt, activation, f"{where}.prompt")
    return Frame(prompt, _cwd(call.cwd, activation, workspace, where))


def exec_frame(
    call: ExecCall, activation: Mapping[str, Any], workspace: WorkspaceView | None, where: str
) -> Frame:
    command = _render(call.command, activation, f"{where}.command")
    return Frame(command, _cwd(call.cwd, activation, workspace, where))


def _cwd(
    template: Template | None,
    activation: Mapping[str, Any],
    workspace: WorkspaceView | None,
    where: str,
) -> str:
    if template is not None:
        cwd = _render(template, activation, f"{where}.cwd")
        if not cwd.startswith("/"):
            raise FrameRefused(
                f"{where}.cwd: the Frame's cwd must be an absolute path, got {cwd!r} "
                f"(from {template.source!r})"
            )
        return cwd
    if workspace is None:
        return NO_WORKSPACE_CWD
    slots = sorted(workspace.repos)
    if len(slots) == 1:
        return workspace.repos[slots[0]]
    named = ", ".join(f"'{slot}'" for slot in slots)
    raise FrameRefused(
        f"{where}: no cwd, and the Workspace has {len(slots)} repo slots ({named}); "
        f'say which: add cwd: "{{{{ workspace.repos.{slots[0]} }}}}" to {where}'
    )


def _render(template: Template, activation: Mapping[str, Any], where: str) -> str:
    try:
        return template.render(activation)
    except ExpressionError as error:
        raise FrameRefused(f"{where}: {error}") from error
