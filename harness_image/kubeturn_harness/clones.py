"""The Workspace's git clones (``<work-root>/.repos/<slot>``) and the Runs' worktrees made
from them (``<work-root>/<slot>/<branch, '/' as '-'>``).

git runs as the Working tools run (their user, their scrubbed environment): the clones
belong to the tools' user, and git refuses a repository another user owns. Worktrees of
one clone are made one at a time: git's worktree metadata (``.git/worktrees/``) is not
safe for concurrent adds in one repository (many Runs starting at once failed reading
each other's half-made entries), and so are their removals. A removed worktree's branch
stays in its clone: deleting a Run discards its working directories, not the commits its
Agents made (ADR 0030). HTTP-free. It never clones (the sandbox's init containers do)
and never deletes a branch.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Callable
from pathlib import Path

from kubeturn_harness.errors import WireError
from kubeturn_harness.tools import ToolContext, run_command
from kubeturn_harness.wire import (
    Clone,
    ReposResponse,
    Worktree,
    WorktreesRequest,
    WorktreesResponse,
)

REPOS_DIR = ".repos"
"""Where under the work root the clones live, one directory per repo slot."""
SLOT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
GIT_TIMEOUT_S = 120.0
"""A worktree of a large repo takes seconds; two minutes bounds a stuck filesystem."""
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
"""A full commit id: SHA-1 (40 hex digits) or SHA-256 (64)."""

Context = Callable[[Path, float], ToolContext]
"""How git is run: the tools' context at a directory, with a time limit in seconds."""


class Clones:
    """The clones under ``root``, and worktrees of them."""

    def __init__(self, root: Path, context: Context) -> None:
        self.root = root
        self._context = context
        self._changing: dict[str, asyncio.Lock] = {}
        """Slot → held while git changes its clone's worktrees."""

    def clone(self, slot: str) -> Path:
        return self.root / REPOS_DIR / slot

    def slots(self) -> list[str]:
        """The repo slots that hold a clone (a ``.git`` directory, or a bare repository)."""
        base = self.root / REPOS_DIR
        if not base.is_dir():
            return []
        return sorted(
            path.name for path in base.iterdir() if SLOT.match(path.name) and _is_repo(path)
        )

    async def head(self, slot: str) -> str | None:
        """The commit the slot's clone has checked out; None when git cannot say."""
        command = "git rev-parse --verify --quiet HEAD"
        result = await run_command(command, self._context(self.clone(slot), 0.0), GIT_TIMEOUT_S)
        commit = result.output.strip()
        return commit if result.exit_code == 0 and COMMIT.match(commit) else None

    async def listing(self) -> ReposResponse:
        """Every clone, with its path and checked-out commit."""
        repos = {}
        for slot in self.slots():
            repos[slot] = Clone(path=str(self.clone(slot)), commit=await self.head(slot))
        return ReposResponse(repos=repos)

    async def worktrees(self, request: WorktreesRequest) -> WorktreesResponse:
        """Make (or find) a Run's worktree of each repo slot; idempotent."""
        made: dict[str, Worktree] = {}
        for slot in request.slots:
            if not SLOT.match(slot):
                raise WireError(f"repo slot {slot!r} is not a slot name", field="slots")
            clone = self.clone(slot)
            path = self.worktree(slot, request.branch)
            if not _is_repo(clone):
                raise WireError(
                    f"no clone of repo slot {slot!r} at {clone}", field="slots", status=409
                )
            async with self._changing_lock(slot):
                # Looked at under the lock: the same Run asking twice at once makes it once.
                if not path.exists():
                    await self._add(clone, path, request.branch, slot)
            made[slot] = Worktree(path=str(path), branch=request.branch)
        return WorktreesResponse(worktrees=made)

    async def remove(self, branch: str) -> dict[str, Worktree]:
        """Remove the worktree on ``branch`` of every clone, keeping the branch; answer
        those removed (slot → worktree); none where none is left, so asking again is safe."""
        removed: dict[str, Worktree] = {}
        for slot in self.slots():
            clone, path = self.clone(slot), self.worktree(slot, branch)
            async with self._changing_lock(slot):
                # A linked worktree holds a ``.git`` file (a clone, a directory); any other
                # directory at the path is not git's to remove, nor the Harness's.
                if (path / ".git").is_file():
                    # Forced twice: also a worktree with changes, or one an Agent locked.
                    quoted = shlex.quote(str(path))
                    await self._git(clone, f"git worktree remove -f -f {quoted}", slot, "remove")
                    removed[slot] = Worktree(path=str(path), branch=branch)
                # Drops what git still records of worktrees whose directory is gone.
                await self._git(clone, "git worktree prune", slot, "prune")
        return removed

    def worktree(self, slot: str, branch: str) -> Path:
        """Where a Run's worktree of ``slot`` on ``branch`` lives."""
        return self.root / slot / branch.replace("/", "-")

    def _changing_lock(self, slot: str) -> asyncio.Lock:
        return self._changing.setdefault(slot, asyncio.Lock())

    async def _git(self, clone: Path, command: str, slot: str, what: str) -> None:
        """Run one git command in the clone; a 409 with git's words when it fails."""
        result = await run_command(command, self._context(clone, 0.0), GIT_TIMEOUT_S)
        if result.exit_code != 0:
            raise WireError(
                f"git could not {what} the worktrees of {slot!r}: {result.output[-1000:]}",
                field="branch",
                status=409,
            )

    async def _add(self, clone: Path, path: Path, branch: str, slot: str) -> None:
        command = f"git worktree add -B {shlex.quote(branch)} {shlex.quote(str(path))} HEAD"
        result = await run_command(command, self._context(clone, 0.0), GIT_TIMEOUT_S)
        if result.exit_code != 0:
            raise WireError(
                f"git could not make the worktree of {slot!r}: {result.output[-1000:]}",
                field="slots",
                status=409,
            )


def _is_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").exists()
