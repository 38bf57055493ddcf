"""What one session of the Agent's tools may touch: the plan of its Landlock rules.

A Turn's tools reach the Run's worktrees (every repo slot's worktree of the Run whose
worktree holds the Frame's ``cwd``: read and write with ``write`` access, read only
with ``read``), read the clones they borrow objects from and the system's directories,
and write a scratch directory of their own (``HOME`` and ``TMPDIR``). Nothing else:
not another Run's worktree, not the Harness's data, not the toolbox's socket, not
another session's scratch (ADR 0035, ADR 0036).

Private paths are never granted, even beneath a granted one: a grant that holds one
is cut into its other children (``cut``). Pure: the one piece of IO it needs, listing
a directory, is passed in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubeturn_harness.sandbox import landlock

REPOS_DIR = ".repos"
"""Where under the work root the clones live, one directory per repo slot."""
CHILD_SEPARATOR = "_"
"""Between a Run's branch and a fan-out child's part of its own branch, and so of their
worktrees' directories (ADR 0113); never in a Run's name."""
PARTIAL = ".partial"
"""The suffix of a worktree being made: it is renamed into place only when complete."""
DELIVERIES_DIR = ".deliveries"
"""Where under the work root the bundles of delivered branches go (ADR 0063): private to
every session, so no Agent writes what is pushed."""

SYSTEM_ROOTS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/srv",
    "/var",
    "/proc",
    "/sys",
)
"""Read (and execute) for every session: the programs, libraries and configuration a
build needs. ``/proc`` lets ``ps`` and ``/dev/fd`` work; a process outside the session's
domain keeps its ``environ`` and ``mem`` (Landlock's ptrace rule). ``/tmp``, ``/home``,
``/root`` and ``/run`` are not here: they hold other sessions' and people's files."""
DEVICES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
)
"""The devices a session opens, read and written; ``/dev`` itself may only be listed. Not
the disks, the console or the kernel's log, which a session running as root (one
machine, a Harness run as root) could otherwise read."""

Listing = Callable[[Path], Iterable[Path]]
"""The entries of a directory (``Path.iterdir``); passed in to keep the plan pure."""


@dataclass(frozen=True)
class Grant:
    path: Path
    access: landlock.Access


@dataclass(frozen=True)
class Plan:
    """One session's rules, and what it reaches, for the session's answer."""

    grants: tuple[Grant, ...]
    reach: tuple[Path, ...]
    writable: bool

    def rules(self) -> list[landlock.Rule]:
        return [landlock.Rule(grant.path, grant.access) for grant in self.grants]


def reach(
    cwd: Path,
    work_root: Path,
    slots: Collection[str],
    exists: Callable[[Path], bool],
    listing: Listing | None = None,
) -> tuple[Path, ...]:
    """The directories a session whose Frame is at ``cwd`` works in.

    Inside a Run's worktree (``<work root>/<slot>/<branch>/…``) it is that Run's
    worktree of every slot, and (found by ``listing``) those of its fan-out children,
    whose directories are its own's name, ``_`` and more (ADR 0113): a later state of
    the Run compares or merges its children's work. A child's worktree reaches only the
    child's. Anywhere else, ``cwd`` itself (a Frame that names a directory outside the
    worktrees reaches that tree, as its manifest asked)."""
    try:
        parts = cwd.relative_to(work_root).parts
    except ValueError:
        return (cwd,)
    if len(parts) >= 2 and parts[0] in slots:
        trees = [work_root / slot / parts[1] for slot in sorted(slots)]
        if listing is not None and CHILD_SEPARATOR not in parts[1]:
            prefix = parts[1] + CHILD_SEPARATOR
            trees += [
                child
                for slot in sorted(slots)
                if exists(work_root / slot)
                for child in sorted(listing(work_root / slot))
                if child.name.startswith(prefix) and not child.name.endswith(PARTIAL)
            ]
        return tuple(tree for tree in trees if exists(tree))
    return (cwd,)


def misnamed(branch: str, base: str | None) -> str | None:
    """Why a worktree on ``branch`` (made from ``base``'s, a fan-out child's) may not be
    made, or None. ``reach`` reads a Run's children from directory names, so a name must
    say whose it is: a Run's branch holds no ``_``, and a child's begins with its Run's
    whole branch (``base`` up to its first ``_``) and ``_`` (ADR 0113). Otherwise a Run
    whose branch begins another's would reach that one's children."""
    if base is None:
        if CHILD_SEPARATOR in branch:
            return f"a Run's branch holds no {CHILD_SEPARATOR!r}, got {branch!r}"
        return None
    run = base.partition(CHILD_SEPARATOR)[0]
    if branch.startswith(run + CHILD_SEPARATOR) and len(branch) > len(run) + 1:
        return None
    return (
        f"a fan-out child's branch begins with its Run's branch and {CHILD_SEPARATOR!r} "
        f"({run + CHILD_SEPARATOR!r}), got {branch!r}"
    )


def plan(
    *,
    cwd: Path,
    work_root: Path,
    slots: Collection[str],
    writable: bool,
    scratch: Path,
    private: Sequence[Path],
    readable: Sequence[Path],
    exists: Callable[[Path], bool],
    listing: Listing,
) -> Plan:
    """The grants of one session: its reach, its scratch, the clones (read only: an
    Agent never writes the repositories every Run borrows from), the system and the
    extra ``readable`` paths (the tools on PATH, the interpreter); never ``private``."""
    reached = reach(cwd, work_root, slots, exists, listing)
    clones = work_root / REPOS_DIR
    grants: list[Grant] = []
    for path in reached:
        if writable:
            grants += cut(Grant(path, landlock.WRITE), (*private, clones), listing)
        else:
            grants += cut(Grant(path, landlock.READ), private, listing)
    grants.append(Grant(scratch, landlock.WRITE))
    grants += cut(Grant(clones, landlock.READ), private, listing)
    grants.append(Grant(Path("/dev"), landlock.Access.READ_DIR))
    grants += [Grant(Path(device), landlock.DEVICES) for device in DEVICES]
    for root in (*(Path(p) for p in SYSTEM_ROOTS), *readable):
        grants += cut(Grant(root, landlock.READ), (*private, work_root), listing)
    return Plan(tuple(grants), reached, writable)


def cut(grant: Grant, private: Iterable[Path], listing: Listing) -> list[Grant]:
    """``grant``, or, when it holds a private path, a grant of each of its other
    children (down to the private path's parent); nothing when it lies in one."""
    private = list(private)
    if any(grant.path.is_relative_to(p) for p in private):
        return []
    holds = [p for p in private if p.is_relative_to(grant.path)]
    if not holds:
        return [grant]
    try:
        children = sorted(listing(grant.path))
    except OSError:
        return []
    cuts: list[Grant] = []
    for child in children:
        cuts += cut(Grant(child, grant.access), holds, listing)
    return cuts


def path_readable(path_variable: str, home: str | None) -> list[Path]:
    """The directories of the tools on ``PATH``, read only: each directory, and for a
    ``bin``/``shims`` directory its parent (an installation such as ``~/.pyenv`` or
    ``~/.cargo`` runs files beside it), unless that parent is a home or ``/``."""
    homes = {Path("/"), Path("/root"), Path("/home")}
    if home:
        homes.add(Path(home))
    found: list[Path] = []
    for entry in path_variable.split(os.pathsep):
        if not entry.startswith("/"):
            continue
        directory = Path(entry)
        found.append(directory)
        parent = directory.parent
        if (
            directory.name in ("bin", "shims")
            and parent not in homes
            and parent.parent != Path("/home")
        ):
            found.append(parent)
    return found
