"""Delivering a Run's work: its worktree committed on the Run's branch, and the branch
bundled where no Agent can write (ADR 0063).

The commit runs in a ``deliver`` session, confined as the Agents' tools are (ADR 0035): a
Run's worktree is the Agents' repository, and whatever its configuration makes git run
(a clean filter, an include) runs with no more rights than the Agents' own commands.
kubeturn's own settings come on the command line and win over the repository's: no
hook, no fsmonitor, no signing, no pager. The bundle is written to a file under
``<work root>/.deliveries`` that the session opened before it was confined: every
session's plan denies that directory (``confinement``), and the file is made anew, never
through a symlink or an earlier file an Agent could have planted. Whoever pushes reads
the bundle as data, beside the slot's clone (its prerequisites are the clone's objects).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from kubeturn_harness.sandbox.clones import SAFE
from kubeturn_harness.sandbox.confinement import DELIVERIES_DIR, REPOS_DIR
from kubeturn_harness.sandbox.protocol import Deliver, Delivered, Refused

GIT_TIMEOUT_S = 600.0
"""Staging and bundling a large change takes a while; ten minutes bounds a stuck one."""
COMMITTING = (
    "-c", "commit.gpgSign=false",
    "-c", "core.pager=cat",
    "-c", "core.editor=false",
)  # fmt: skip
"""Besides ``SAFE``: a delivered commit is never signed (no key is there) and nothing
waits on a person."""
BUNDLE_MODE = 0o644


def bundle_path(run: str, slot: str) -> str:
    """Where the bundle of a Run's slot goes, relative to the work root."""
    return f"{DELIVERIES_DIR}/{run}/{slot}.bundle"


def clone_path(slot: str) -> str:
    """The slot's clone, relative to the work root."""
    return f"{REPOS_DIR}/{slot}"


def open_bundle(work_root: Path, relative: str) -> int:
    """A new, empty file at ``relative`` under ``work_root`` (in ``.deliveries``), open
    for writing. Each directory on the way is opened without following a symlink; an
    earlier file of that name is unlinked, and the file is created exclusively, so
    whatever was planted there (a symlink, a hard link) is never written through."""
    parts = PurePosixPath(relative).parts
    if len(parts) < 2 or parts[0] != DELIVERIES_DIR or any(p in ("..", ".") for p in parts):
        raise ValueError(f"a bundle goes under {DELIVERIES_DIR}/, not at {relative!r}")
    directory = os.open(work_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=directory)
            inner = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory
            )
            os.close(directory)
            directory = inner
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parts[-1], dir_fd=directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(parts[-1], flags, BUNDLE_MODE, dir_fd=directory)
    finally:
        os.close(directory)


async def deliver(
    worktree: Path, clone: Path, request: Deliver, bundle: int, env: Mapping[str, str]
) -> Delivered | Refused:
    """Commit every change of ``worktree`` on ``request.branch`` (nothing when there is
    none) and write the branch's bundle to ``bundle``, thin against the clone's ``HEAD``."""
    git = _Git(worktree, request, env)
    if not (worktree / ".git").is_dir():
        return _refused(f"the Run has no worktree at {worktree}: nothing to deliver", "slot")
    head = (await git.out("symbolic-ref", "-q", "HEAD")).strip()
    ref = f"refs/heads/{request.branch}"
    if head != ref:
        where = f"on {head.removeprefix('refs/heads/')}" if head else "detached"
        return _refused(
            f"the worktree {worktree} is {where}, not on the Run's branch {request.branch}: "
            "its Agents moved it; check the branch out there again to deliver it",
            "branch",
        )
    code, said = await git.run("add", "-A")
    if code != 0:
        return _refused(f"git could not stage the worktree's changes: {said[-1000:]}", "slot")
    born = await git.commit_of(ref)
    changed = (await git.run("diff", "--cached", "--quiet", *(["HEAD"] if born else [])))[0] != 0
    if not born:
        changed = bool((await git.out("ls-files")).strip())
    if changed:
        code, said = await git.run(
            "commit", "-q", "--no-verify", "--no-gpg-sign", "--cleanup=strip", "-F", "-",
            stdin=request.message,
        )  # fmt: skip
        if code != 0:
            return _refused(f"git could not commit: {said[-1000:]}", "message")
    commit = await git.commit_of(ref)
    if commit is None:
        return _refused(
            f"nothing to deliver: the branch {request.branch} has no commit and the worktree "
            "no change",
            "slot",
        )
    code, said = await git.run(
        "bundle", "create", "-q", "-", ref, "--not", *await _base(git, clone, commit), stdout=bundle
    )
    if code != 0:
        return _refused(f"git could not bundle {request.branch}: {said[-1000:]}", "slot")
    return Delivered(commit=commit, changed=changed)


async def _base(git: _Git, clone: Path, commit: str) -> list[str]:
    """What the bundle leaves out: the clone's ``HEAD``, or, when the clone holds the
    commit already, its parents (a bundle holds at least one commit)."""
    git_dir = clone / ".git" if (clone / ".git").is_dir() else clone
    base = (await git.out("--git-dir", str(git_dir), "rev-parse", "--verify", "-q", "HEAD")).strip()
    if not base:
        return []
    if base == commit or (await git.run("merge-base", "--is-ancestor", commit, base))[0] == 0:
        return [f"{commit}^@"]
    return [base]


class _Git:
    def __init__(self, worktree: Path, request: Deliver, env: Mapping[str, str]) -> None:
        self._worktree = worktree
        self._env = {
            **env,
            "GIT_AUTHOR_NAME": request.authorName,
            "GIT_AUTHOR_EMAIL": request.authorEmail,
            "GIT_COMMITTER_NAME": request.authorName,
            "GIT_COMMITTER_EMAIL": request.authorEmail,
            "GIT_CEILING_DIRECTORIES": str(worktree.parent),
        }

    async def commit_of(self, ref: str) -> str | None:
        code, said = await self.run("rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
        return said.strip() if code == 0 and said.strip() else None

    async def out(self, *args: str) -> str:
        return (await self.run(*args))[1]

    async def run(
        self, *args: str, stdin: str | None = None, stdout: int | None = None
    ) -> tuple[int, str]:
        """git ``args`` in the worktree: its exit code and its output (stderr, and stdout
        unless ``stdout`` takes it)."""
        process = await asyncio.create_subprocess_exec(
            "git", *SAFE, *COMMITTING, *args,
            cwd=self._worktree,
            env=self._env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=stdout if stdout is not None else asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE if stdout is not None else asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            async with asyncio.timeout(GIT_TIMEOUT_S):
                out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, f"git {args[0]} did not finish within {GIT_TIMEOUT_S:g} s"
        said = (err if stdout is not None else out) or b""
        return process.returncode or 0, said.decode("utf-8", "replace")


def _refused(error: str, field: str) -> Refused:
    return Refused(error=error, field=field, status=409)
