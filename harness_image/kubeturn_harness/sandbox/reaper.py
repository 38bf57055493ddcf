"""Finding and ending every process a session started, however it left its group.

A process that calls ``setsid`` or forks twice leaves its process group and its
parent, so killing a group misses it. A *child subreaper* (``PR_SET_CHILD_SUBREAPER``)
keeps it: every orphan beneath the subreaper is re-parented to it rather than to PID
1, so the subreaper's descendants are exactly what it started, and ``kill_descendants``
ends them all. Reads ``/proc``; signals; never starts a process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from kubeturn_harness.sandbox import privileges

KILL_ROUNDS = 200
"""Rounds of SIGKILL before giving up: each round ends every descendant seen, and a
process killed mid-fork leaves at most its new child for the next round; a fork bomb
is bounded by RLIMIT_NPROC well below this many generations."""
ROUND_PAUSE_S = 0.005
"""Pause between rounds, so killed processes are gone from ``/proc`` before the next look."""


def become_subreaper() -> None:
    """Orphans beneath this process are re-parented to it, not to PID 1."""
    privileges.prctl(privileges.PR_SET_CHILD_SUBREAPER, 1)


def on_parent_death(signum: int) -> None:
    """Receive ``signum`` when the thread that started this process ends."""
    privileges.prctl(privileges.PR_SET_PDEATHSIG, signum)


def _processes() -> Iterator[tuple[int, str, int]]:
    """Every visible process: its id, its state (``Z`` for a zombie) and its parent's id."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: read past its last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            yield int(entry.name), fields[0], int(fields[1])


def _parents() -> dict[int, int]:
    """Every live process id → its parent's id (zombies left out: they are already dead,
    and only waiting for their parent to collect them)."""
    return {pid: parent for pid, state, parent in _processes() if state != "Z"}


def descendants(pid: int) -> set[int]:
    """Every process beneath ``pid`` (its children, theirs, …)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = list(children.get(pid, []))
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(children.get(current, []))
    return found


def reap(spare: frozenset[int] = frozenset()) -> None:
    """Collect the exit of every child of this process that has ended, but ``spare``
    (children whose exit someone else waits for)."""
    me = os.getpid()
    for pid, state, parent in _processes():
        if state == "Z" and parent == me and pid not in spare:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def kill_descendants(*, spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every descendant of this process but ``spare`` (and theirs), until none
    is left; reap those that became its children. Answers how many were killed."""
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        found = descendants(me) - spare
        for excluded in spare:
            found -= descendants(excluded)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= found
        time.sleep(ROUND_PAUSE_S)
        reap(spare)
    reap(spare)
    return len(killed)
