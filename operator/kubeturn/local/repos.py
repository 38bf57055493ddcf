"""Repo slots on one machine: which repository each slot names, and its clone in the workdir.

A slot's ``url`` is anything ``git clone`` takes: a URL (``https://``, ``ssh://``,
``file://``, ``git@host:path``) or a local path. A relative path is read from the
directory ``kubeturn`` runs in, as git reads it, so ``url: .`` is the repository you are
in. ``--repo SLOT=URL|PATH`` replaces a slot's url for one local run and leaves the
manifest as a cluster takes it. The clone holds committed history only: uncommitted
changes of a local repository are not in it.

The clone checks out the slot's ``ref``: a branch of the remote, a tag or a commit. A
``ref`` the manifest does not write defaults to ``main``; when the repository has no
``main``, its default branch is used instead. git never prompts: a repository that needs
credentials git does not already have fails at once, naming the slot.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from kubeturn.api.workspace import Repo
from kubeturn.errors import CommandError

GIT_TIMEOUT_S = 300.0
"""A clone or push of a large repository over a slow link takes minutes; five bound a
stuck one."""
_SCP_LIKE = re.compile(r"^[\w.+-]+@[\w.-]+:")


@dataclass(frozen=True)
class Slot:
    """A repo slot as this run clones it."""

    name: str
    url: str
    """What ``git clone`` is given: a URL, or an absolute path."""
    ref: str
    ref_written: bool
    """Whether the manifest (or ``--repo``) named the ref; a default ``main`` may be absent."""


def is_remote(url: str) -> bool:
    return "://" in url or bool(_SCP_LIKE.match(url))


def resolve(url: str, base: Path) -> str:
    """``url`` as ``git clone`` should get it: remote URLs as written, paths absolute."""
    if is_remote(url):
        return url
    return str((base / Path(url).expanduser()).resolve())


def slots(repos: dict[str, Repo], overrides: dict[str, str], base: Path) -> dict[str, Slot]:
    """The slots to clone: the manifest's, with ``--repo`` overrides applied; a slot an
    override names and the manifest does not is added (a Run with no Workspace of its own)."""
    found: dict[str, Slot] = {}
    for name, repo in repos.items():
        url = overrides.get(name, repo.url)
        found[name] = Slot(name, resolve(url, base), repo.ref, "ref" in repo.model_fields_set)
    for name, url in overrides.items():
        if name not in found:
            found[name] = Slot(name, resolve(url, base), "main", False)
    return found


async def clone(slot: Slot, destination: Path) -> None:
    """Clone ``slot`` into ``destination`` and check out its ref; one-line errors."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    code, said = await _git("clone", "--quiet", "--", slot.url, str(destination))
    if code != 0:
        shutil.rmtree(destination, ignore_errors=True)
        raise CommandError(
            f"cannot clone repo slot {slot.name!r} from {slot.url}: {said}; check the URL, "
            f"or give the slot another with --repo {slot.name}=URL|PATH"
        )
    for candidate in (f"origin/{slot.ref}", slot.ref):
        code, _ = await _git(
            "-C", str(destination), "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"
        )
        if code == 0:
            code, said = await _git(
                "-C", str(destination), "checkout", "--quiet", "--detach", candidate
            )
            if code != 0:
                raise CommandError(
                    f"cannot check out ref {slot.ref!r} of repo slot {slot.name!r} "
                    f"({slot.url}): {said}"
                )
            return
    if slot.ref_written:
        raise CommandError(
            f"repo slot {slot.name!r} ({slot.url}) has no branch, tag or commit "
            f"{slot.ref!r}; fix its ref in the manifest"
        )


async def _git(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    """Run git; its exit code and the last line it said (stdout and stderr merged)."""
    code, said = await run_git(*args, cwd=cwd)
    lines = [line.strip() for line in said.splitlines()]
    return code, next((line for line in reversed(lines) if line), "")


async def run_git(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    """Run the person's git, never prompting; its exit code and all it said (stdout and
    stderr merged). Bounded by ``GIT_TIMEOUT_S``."""
    environment = {
        **os.environ,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": os.environ.get("GIT_SSH_COMMAND", "ssh -o BatchMode=yes"),
    }
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=cwd,
            env=environment,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except FileNotFoundError as error:
        raise CommandError(
            "git is not installed (or not on PATH); kubeturn run clones the Run's repo slots "
            "with it: install git"
        ) from error
    try:
        async with asyncio.timeout(GIT_TIMEOUT_S):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return 1, f"git {args[0]} took longer than {GIT_TIMEOUT_S:g} s"
    return process.returncode or 0, output.decode(errors="replace").strip()
