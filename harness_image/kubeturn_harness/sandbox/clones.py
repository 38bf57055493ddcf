"""The Workspace's git clones (``<work-root>/.repos/<slot>``) and the Runs' worktrees
made from them (``<work-root>/<slot>/<branch, '/' as '-'>``).

A Run's worktree is a repository of its own that borrows the clone's objects (``git
clone --shared``: the clone's object directory is its alternate) and holds the Run's
branch ``kubeturn/<run>``: an Agent that commits writes its own repository only, and
never the clone, another Run's objects or another Run's branch (ADR 0036). The clone
is only read, by every Run.

git runs here as kubeturn's own, never as an Agent's: no hook, no fsmonitor, no
system or user configuration, no network, and never in a repository an Agent can
write except to fetch from it (``git fetch`` runs ``upload-pack`` there, which git
holds safe in an untrusted repository). Forgetting a Run fetches its branch into the
clone, so the branch stays (ADR 0030), and then removes the Run's repository.

Making a Run's worktree only reads the clone, so the worktrees of different Runs are
made at once; a change to the clone (forgetting a Run, adopting a linked worktree)
waits for them and holds the clone alone (ADR 0082). Both across processes: lock files
beside the toolbox's scratch. HTTP-free; it never clones from a remote (the init
containers do).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import stat
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from kubeturn_harness.errors import GitRefused
from kubeturn_harness.sandbox.confinement import CHILD_SEPARATOR, PARTIAL, REPOS_DIR, misnamed
from kubeturn_harness.sandbox.protocol import Refused
from kubeturn_harness.wire import (
    SLOT_NAME,
    Clone,
    ReposResponse,
    Worktree,
    WorktreesRequest,
    WorktreesResponse,
)

log = logging.getLogger(__name__)

SLOT = re.compile(SLOT_NAME)
GIT_TIMEOUT_S = 120.0
"""A worktree of a large repo takes seconds; two minutes bounds a stuck filesystem."""
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
"""A full commit id: SHA-1 (40 hex digits) or SHA-256 (64)."""
STARTED_FROM = "refs/kubeturn/started-from"
"""Where a fan-out child's worktree holds, while it is made, the commit it starts from."""
SAFE = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "core.untrackedCache=false",
    "-c", "protocol.allow=never",
    "-c", "protocol.file.allow=always",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
)  # fmt: skip
"""Settings on every git command: given on the command line, they win over anything a
repository's own configuration says. No hook or fsmonitor runs, no remote is reached
(only local paths), and no automatic gc or maintenance starts behind a command."""


def git_environment(base: Mapping[str, str], home: Path) -> dict[str, str]:
    """The environment of kubeturn's own git: no system or global configuration, no
    prompt, a home that holds nothing."""
    return {
        "PATH": base.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "LANG": base.get("LANG", "C.UTF-8"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "kubeturn",
        "GIT_AUTHOR_EMAIL": "kubeturn@localhost",
        "GIT_COMMITTER_NAME": "kubeturn",
        "GIT_COMMITTER_EMAIL": "kubeturn@localhost",
    }


def worktree_path(root: Path, slot: str, branch: str) -> Path:
    """Where a Run's worktree of ``slot`` on ``branch`` lives under the work root."""
    return root / slot / branch.replace("/", "-")


class Clones:
    """The clones under ``root``, and the Runs' worktrees of them."""

    def __init__(self, root: Path, *, locks: Path, env: Mapping[str, str]) -> None:
        self.root = root
        self._locks = locks
        self._env = dict(env)

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

    def worktree(self, slot: str, branch: str) -> Path:
        return worktree_path(self.root, slot, branch)

    async def listing(self) -> ReposResponse:
        """Every clone, with its path and checked-out commit."""
        repos = {}
        for slot in self.slots():
            code, output = await self._git(self.clone(slot), "rev-parse", "--verify", "-q", "HEAD")
            commit = output.strip()
            found = commit if code == 0 and COMMIT.match(commit) else None
            repos[slot] = Clone(path=str(self.clone(slot)), commit=found)
        return ReposResponse(repos=repos)

    async def worktrees(self, request: WorktreesRequest) -> WorktreesResponse:
        """Make (or find) a Run's worktree of each repo slot; idempotent."""
        wrong = misnamed(request.branch, request.base)
        if wrong is not None:
            raise GitRefused(Refused(error=wrong, field="branch", status=400))
        made: dict[str, Worktree] = {}
        for slot in request.slots:
            if not SLOT.match(slot):
                raise GitRefused(
                    Refused(
                        error=f"repo slot {slot!r} is not a slot name", field="slots", status=400
                    )
                )
            clone = self.clone(slot)
            if not _is_repo(clone):
                raise GitRefused(
                    Refused(error=f"no clone of repo slot {slot!r} at {clone}", field="slots")
                )
            path = self.worktree(slot, request.branch)
            base = self.worktree(slot, request.base) if request.base is not None else None
            if base is not None and not (base / ".git").is_dir():
                raise GitRefused(
                    Refused(error=f"no worktree of {slot!r} on {request.base!r}", field="base")
                )
            if (path / ".git").is_file():
                async with self._changing(slot):
                    if (path / ".git").is_file():
                        await self._adopt(slot, path)
            if not (path / ".git").is_dir():
                async with self._making(slot, path):
                    if not (path / ".git").is_dir():
                        await self._make(slot, path, request.branch, base)
            made[slot] = Worktree(path=str(path), branch=request.branch)
        return WorktreesResponse(worktrees=made)

    async def adopt_linked(self, paths: list[Path]) -> None:
        """Make each of ``paths`` that is a linked worktree (an earlier kubeturn made
        Runs' worktrees with ``git worktree add``) a repository of its own, keeping its
        files; the Agents of such a Run could not commit under their confinement."""
        for path in paths:
            try:
                slot = path.relative_to(self.root).parts[0]
            except (ValueError, IndexError):
                continue
            if (path / ".git").is_file() and _is_repo(self.clone(slot)):
                async with self._changing(slot):
                    if (path / ".git").is_file():
                        await self._adopt(slot, path)

    async def remove(self, branch: str) -> dict[str, Worktree]:
        """Remove the worktree on ``branch`` of every clone, and those of the Run's fan-out
        children (``<branch>_<child>``, ADR 0113), keeping each branch in the clone;
        answer the Run's own removed (slot → worktree), none where none is left."""
        removed: dict[str, Worktree] = {}
        for slot in self.slots():
            clone, path = self.clone(slot), self.worktree(slot, branch)
            async with self._changing(slot):
                for child, child_branch in self._children(slot, path, branch):
                    await self._remove(clone, child, child_branch, slot)
                if (path / ".git").is_file():
                    await self._adopt(slot, path)
                if (path / ".git").is_dir():
                    await self._remove(clone, path, branch, slot)
                    removed[slot] = Worktree(path=str(path), branch=branch)
        return removed

    def _children(self, slot: str, path: Path, branch: str) -> list[tuple[Path, str]]:
        """The worktrees of ``slot`` of the fan-out children of the Run whose worktree is
        ``path``, with their branches: a child's branch is the Run's, ``_``, and a part
        without ``/``, so its directory's name is the Run's directory's, ``_``, and that
        part; no Run's own name holds a ``_``."""
        prefix = path.name + CHILD_SEPARATOR
        parent = self.root / slot
        if not parent.is_dir():
            return []
        return [
            (entry, branch + entry.name[len(path.name) :])
            for entry in sorted(parent.iterdir())
            if entry.name.startswith(prefix) and not entry.is_symlink()
        ]

    async def _remove(self, clone: Path, path: Path, branch: str, slot: str) -> None:
        """Keep the branch of the worktree at ``path`` in the clone, and remove it (one
        cut short while being made has no branch to keep)."""
        if (path / ".git").is_dir() and not path.name.endswith(PARTIAL):
            await self._keep_branch(clone, path, branch, slot)
        await asyncio.to_thread(_remove_tree, path)

    # ------------------------------------------------------------------ the git work

    async def _make(self, slot: str, path: Path, branch: str, base: Path | None = None) -> None:
        """Three git commands (ADR 0082): the clone (whose HEAD is the clone's, read
        once), the clone's remote URL, the checkout of the branch at that HEAD; with
        ``base`` (a Run's worktree a fan-out child starts from, ADR 0113), the branch is
        fetched from there first and checked out at its commit. Made under
        ``.partial``: a worktree cut short is never taken as made."""
        clone = self.clone(slot)
        partial = path.with_name(path.name + PARTIAL)
        if partial.exists() or partial.is_symlink():
            await asyncio.to_thread(_remove_tree, partial)
        try:
            partial.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            said = f"{error.strerror}: {error.filename}"
            raise GitRefused(
                Refused(error=f"git could not make the worktree of {slot!r}: {said}", field="slots")
            ) from error
        await self._must(
            clone.parent, slot, "make the worktree of",
            "clone", "--shared", "--no-checkout", "--quiet", "--", str(clone), str(partial),
        )  # fmt: skip
        await self._copy_origin(clone, partial)
        start = "HEAD"
        if base is not None:
            await self._fetch_base(partial, base, branch, slot)
            start = STARTED_FROM
        await self._must(
            partial, slot, "check out the worktree of",
            "checkout", "--quiet", "--force", "-B", branch, start,
        )  # fmt: skip
        if base is not None:
            await self._must(partial, slot, "start the worktree of", "update-ref", "-d", start)
        partial.rename(path)

    async def _fetch_base(self, repository: Path, base: Path, branch: str, slot: str) -> None:
        """Fetch the commit ``base`` (a Run's worktree) has checked out into
        ``STARTED_FROM`` of ``repository``: git reads ``base`` only through ``fetch``,
        which an Agent's repository cannot turn against it."""
        code, output = await self._git(
            repository, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
            "--no-recurse-submodules", "--", str(base), f"+HEAD:{STARTED_FROM}",
        )  # fmt: skip
        if code != 0:
            raise GitRefused(
                Refused(
                    error=f"git could not start {branch!r} of {slot!r} from {base}: "
                    f"{output[-1000:]}",
                    field="base",
                )
            )

    async def _adopt(self, slot: str, path: Path) -> None:
        """Turn the linked worktree at ``path`` into a repository of its own on the same
        branch and commit; its files stay as they are (staged changes become unstaged)."""
        clone = self.clone(slot)
        branch, commit = await self._linked(clone, path, slot)
        partial = path.with_name(path.name + PARTIAL)
        await asyncio.to_thread(_remove_tree, partial)
        await self._must(
            clone.parent, slot, "adopt the worktree of",
            "clone", "--shared", "--no-checkout", "--quiet", "--", str(clone), str(partial),
        )  # fmt: skip
        await self._copy_origin(clone, partial)
        if branch is not None:
            await self._must(partial, slot, "adopt the branch of", "branch", "-f", branch, commit)
            await self._must(
                partial, slot, "adopt the branch of", "symbolic-ref", "HEAD", f"refs/heads/{branch}"
            )
        else:
            await self._must(
                partial, slot, "adopt the commit of", "update-ref", "--no-deref", "HEAD", commit
            )
        (path / ".git").unlink()
        (partial / ".git").rename(path / ".git")
        partial.rmdir()
        await self._must(path, slot, "index the worktree of", "reset", "--quiet")
        await asyncio.to_thread(_forget_linked, clone, path)
        log.info("made the linked worktree %s a repository of its own", path)

    async def _linked(self, clone: Path, path: Path, slot: str) -> tuple[str | None, str]:
        """The branch (None when detached) and commit of ``path``, as its clone records
        it: read from the clone, never from the worktree the Agent could write."""
        _, output = await self._must(
            clone, slot, "list the worktrees of", "worktree", "list", "--porcelain"
        )
        entry: dict[str, str] = {}
        for block in output.split("\n\n"):
            fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
            if fields.get("worktree") and Path(fields["worktree"]) == path:
                entry = fields
        commit = entry.get("HEAD", "")
        if not COMMIT.match(commit):
            raise GitRefused(
                Refused(error=f"git does not know the worktree {path} of {slot!r}", field="slots")
            )
        branch = entry.get("branch")
        return (branch.removeprefix("refs/heads/") if branch else None), commit

    async def _keep_branch(self, clone: Path, path: Path, branch: str, slot: str) -> None:
        """Fetch the Run's branch (or, if its Agents removed it, its HEAD) into the
        clone. A repository git cannot read is logged and left: its files go anyway."""
        for source in (f"refs/heads/{branch}", "HEAD"):
            code, output = await self._git(
                clone, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                "--no-recurse-submodules", "--", str(path), f"+{source}:refs/heads/{branch}",
            )  # fmt: skip
            if code == 0:
                return
        log.warning(
            "could not keep the branch %s of %s in %r: %s", branch, path, slot, output[-500:]
        )

    async def _copy_origin(self, clone: Path, repository: Path) -> None:
        """The worktree's ``origin`` names the clone's own remote, not the clone. git reads
        the clone's URL (an Agent could have written that configuration where Landlock
        does not confine it); the line ``git clone`` just wrote in the worktree's own
        configuration is rewritten here, as ``git config`` would write it, and only
        where it is found as git writes it (else ``git remote set-url`` does it)."""
        code, url = await self._git(clone, "config", "--get", "remote.origin.url")
        url = url.rstrip("\n")
        if code != 0 or not url.strip():
            return
        config = repository / ".git" / "config"
        text = config.read_text()
        written = f"\turl = {config_value(str(clone))}\n"
        if text.count(written) == 1 and text.count('[remote "origin"]\n') == 1:
            config.write_text(text.replace(written, f"\turl = {config_value(url)}\n"))
        else:
            await self._git(repository, "remote", "set-url", "origin", url)

    async def _must(self, cwd: Path, slot: str, what: str, *args: str) -> tuple[int, str]:
        code, output = await self._git(cwd, *args)
        if code != 0:
            raise GitRefused(
                Refused(error=f"git could not {what} {slot!r}: {output[-1000:]}", field="slots")
            )
        return code, output

    async def _git(self, cwd: Path, *args: str) -> tuple[int, str]:
        """Run git in ``cwd``: its exit code and its output (stdout and stderr)."""
        process = await asyncio.create_subprocess_exec(
            "git", *SAFE, *args,
            cwd=cwd,
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            async with asyncio.timeout(GIT_TIMEOUT_S):
                output, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, f"git {args[0]} did not finish within {GIT_TIMEOUT_S:g} s"
        return process.returncode or 0, output.decode("utf-8", "replace")

    @contextlib.asynccontextmanager
    async def _changing(self, slot: str) -> AsyncIterator[None]:
        """Held while this process changes the clone of ``slot`` or adopts a linked
        worktree of it: no worktree of it is being made meanwhile."""
        async with self._locked(f"{slot}.lock", fcntl.LOCK_EX):
            yield

    @contextlib.asynccontextmanager
    async def _making(self, slot: str, path: Path) -> AsyncIterator[None]:
        """Held while this process makes the worktree at ``path``: the clone of ``slot``
        is only read (shared with other Runs' making, never with a change to it), and
        the worktree is this process's alone (its one lock, by a digest of its name)."""
        digest = hashlib.sha256(path.name.encode()).hexdigest()[:32]
        async with (
            self._locked(f"{slot}.lock", fcntl.LOCK_SH),
            self._locked(f"{slot}.{digest}.lock", fcntl.LOCK_EX),
        ):
            yield

    @contextlib.asynccontextmanager
    async def _locked(self, name: str, operation: int) -> AsyncIterator[None]:
        """``flock`` of the lock file ``name``, held until the block ends (or this process
        does). Taken at once when free; else waited for in a thread."""
        self._locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._locks / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:
                await asyncio.to_thread(fcntl.flock, fd, operation)
            yield
        finally:
            os.close(fd)


def config_value(value: str) -> str:
    """``value`` as ``git config`` writes it in a configuration file (git's
    ``write_pair``): in double quotes when it starts or ends with a space or holds a
    ``;`` or ``#``; a newline, tab, ``"`` and ``\\`` escaped."""
    quote = (
        '"' if value.startswith(" ") or value.endswith(" ") or any(c in value for c in ";#") else ""
    )
    escaped = value.translate(
        {ord("\n"): "\\n", ord("\t"): "\\t", ord('"'): '\\"', ord("\\"): "\\\\"}
    )
    return f"{quote}{escaped}{quote}"


def _forget_linked(clone: Path, path: Path) -> None:
    """Remove what the clone records of the linked worktree that was at ``path``: the
    administrative directory whose ``gitdir`` names it (found from the clone's side, never
    from a file in the worktree, which an Agent could point anywhere)."""
    records = clone / ".git" / "worktrees"
    if not records.is_dir():
        return
    for record in records.iterdir():
        try:
            named = (record / "gitdir").read_text().strip()
        except OSError:
            continue
        if Path(named) == path / ".git" and not record.is_symlink():
            _remove_tree(record)


def _is_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").exists()


def _remove_tree(path: Path) -> None:
    """Remove ``path`` and all beneath it, also directories an Agent made unreadable or
    unwritable; never following a symbolic link out of it."""
    if path.is_symlink() or path.is_file():
        path.unlink()
        return
    if not path.exists():
        return
    os.chmod(path, stat.S_IRWXU)
    for root, directories, _ in os.walk(path):
        for name in directories:
            child = os.path.join(root, name)
            if not os.path.islink(child):
                os.chmod(child, stat.S_IRWXU)
    shutil.rmtree(path)
