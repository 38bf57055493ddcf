"""What delivering a Run's work asks of whoever pushes it.

A ``deliver`` invoke commits the Agents' work on the Run's branch inside the sandbox (as
the Agents' tools run: nothing there holds a credential) and leaves a git bundle of that
branch where no Agent can write. Pushing the bundle needs the slot's credential, so it is
done apart: on a cluster by a short-lived Pod that alone mounts the slot's Secret, locally
by the runner itself. Both push from a repository of their own made from the bundle and
the slot's clone, never from the Agent's repository, so nothing an Agent wrote (a hook, a
setting, a symlink) runs or is followed where the credential is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PushRequest:
    """One slot's delivered branch to push to its repository."""

    namespace: str
    """The Run's namespace ("" for a local Run)."""
    run: str
    """The Run's name."""
    workspace: str
    """The Workspace whose sandbox holds the bundle and the clone."""
    slot: str
    branch: str
    """The branch to push, ``kubeturn/<run>``."""
    commit: str
    """The commit the bundle's branch points at; the remote branch is set to it."""
    bundle: str
    """The bundle's path relative to the work root (the Workspace's work volume, or the
    local workdir)."""
    clone: str
    """The slot's clone, relative to the work root: the bundle's prerequisites are its
    objects."""
    url: str
    """The slot's repository URL."""
    secret: str | None
    """The slot's ``secretRef`` Secret (cluster only)."""


@dataclass(frozen=True)
class PushResult:
    pushed: bool
    error: str | None = None
    """Why not, in one line (credentials refused, not a fast-forward, unreachable)."""


class Pusher(Protocol):
    async def push(self, request: PushRequest) -> PushResult: ...
