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

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from kubeturn.errors import DeliveryFailed
from kubeturn.orchestrator.effects import StartDeliver
from kubeturn.orchestrator.invokes import DeliverResult

log = logging.getLogger(__name__)


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


def shown_url(url: str) -> str:
    """``url`` without a user or password, as messages quote it (an ssh URL may name its
    login user; one with a password is never quoted either)."""
    if "://" in url:
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    user, at, rest = url.partition("@")
    scp_like = at and "/" not in user and ":" in rest
    return rest if scp_like else url


def refused(request: PushRequest, why: str) -> PushResult:
    """A push that did not happen, in the one line every pusher gives: the slot, where to
    (``shown_url``) and why."""
    return PushResult(
        pushed=False,
        error=f"cannot push repo slot '{request.slot}' to {shown_url(request.url)}: {why}",
    )


class Pusher(Protocol):
    async def push(self, request: PushRequest) -> PushResult: ...


@dataclass(frozen=True)
class Committed:
    """What the sandbox answered a delivery: the branch's commit and bundle."""

    commit: str
    changed: bool
    bundle: str
    clone: str


class Committer(Protocol):
    """Commits a Run's worktree of a slot on its branch and bundles it (the Harness's
    ``POST /deliveries``). Safe to repeat: nothing changed since is the same commit."""

    async def commit(
        self, slot: str, branch: str, message: str, author: tuple[str, str]
    ) -> Committed: ...


@dataclass(frozen=True)
class Remote:
    """A repo slot's repository, as its Workspace names it."""

    url: str
    secret: str | None = None


NO_PUSHER = (
    "no pusher on this operator: it cannot push a Run's branch; deliver with push: false, "
    "or run an operator that pushes"
)


@dataclass
class Deliverer:
    """The ``DeliverPort`` of a Run: the sandbox commits and bundles, then, with ``push``,
    the ``Pusher`` pushes the bundle's branch to the slot's repository."""

    namespace: str
    run: str
    workspace: str
    branch: str
    committer: Committer
    remotes: Callable[[], Awaitable[Mapping[str, Remote]]]
    """Each repo slot's repository, as the Workspace names it when the push is made."""
    pusher: Pusher | None
    """None: a push fails with ``NO_PUSHER``."""

    async def deliver(self, effect: StartDeliver) -> DeliverResult:
        try:
            done = await self.committer.commit(
                effect.slot,
                self.branch,
                effect.message,
                (effect.author_name, effect.author_email),
            )
        except DeliveryFailed as failed:
            return DeliverResult(branch=self.branch, error=str(failed))
        result = DeliverResult(branch=self.branch, commit=done.commit, changed=done.changed)
        if not effect.push:
            return result
        remote = (await self.remotes()).get(effect.slot)
        if remote is None:
            return replace(result, error=f"the Workspace has no repo slot {effect.slot!r}")
        result = replace(result, remote=remote.url)
        if self.pusher is None:
            return replace(result, error=NO_PUSHER)
        request = PushRequest(
            namespace=self.namespace,
            run=self.run,
            workspace=self.workspace,
            slot=effect.slot,
            branch=self.branch,
            commit=done.commit,
            bundle=done.bundle,
            clone=done.clone,
            url=remote.url,
            secret=remote.secret,
        )
        try:
            pushed = await self.pusher.push(request)
        except Exception as error:  # a pusher's defect fails this delivery, not the Run's actor
            log.exception("the push of %s to %s failed", self.branch, remote.url)
            pushed = refused(request, f"the pusher failed: {error}")
        if not pushed.pushed:
            said = pushed.error or refused(request, "the pusher did not say why").error
            return replace(result, error=said)
        return replace(result, pushed=True)
