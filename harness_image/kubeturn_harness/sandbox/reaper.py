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
from collections.abc import Iterable
from dataclasses import dataclass, field

from kubeturn_harness.sandbox import privileges

KILL_ROUNDS = 200
"""Rounds of SIGKILL before giving up: each round ends every descendant seen, and a
process killed mid-fork leaves at most its new child for the next round; a fork bomb
is bounded by RLIMIT_NPROC well below this many generations."""
ROUND_PAUSE_S = 0.001
"""Pause between rounds, so that most killed processes are gone from ``/proc`` (or
zombies to collect) by the next look; a look costs about a millisecond."""


def become_subreaper() -> None:
    """Orphans beneath this process are re-parented to it, not to PID 1."""
    privileges.prctl(privileges.PR_SET_CHILD_SUBREAPER, 1)


def on_parent_death(signum: int) -> None:
    """Receive ``signum`` when the thread that started this process ends."""
    privileges.prctl(privileges.PR_SET_PDEATHSIG, signum)


@dataclass
class Table:
    """One look at the process table."""

    children: dict[int, list[int]] = field(default_factory=dict)
    """Every live process's id, by its parent's (zombies left out: already dead)."""
    zombies: list[int] = field(default_factory=list)
    """This process's children that have ended and wait to be collected."""


def look(me: int) -> Table:
    """Read every ``/proc/<pid>/stat`` once (raw reads: a few hundred take about a
    millisecond)."""
    table = Table()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue
        try:
            stat = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        # The command name (field 2) may hold spaces and parentheses: read past its last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2:
            continue
        pid, state, parent = int(name), fields[0], int(fields[1])
        if state == b"Z":
            if parent == me:
                table.zombies.append(pid)
        else:
            table.children.setdefault(parent, []).append(pid)
    return table


def _beneath(children: dict[int, list[int]], roots: Iterable[int]) -> set[int]:
    """Every process beneath ``roots`` (their children, theirs, …)."""
    found: set[int] = set()
    todo = [child for root in roots for child in children.get(root, [])]
    while todo:
        current = todo.pop()
        if current not in found:
            found.add(current)
            todo.extend(children.get(current, []))
    return found


def _childless() -> bool:
    """Whether this process has no child at all (then, as a subreaper, no descendant);
    asked of the kernel without collecting anything."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return False


def kill_descendants(*, spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every descendant of this process but ``spare`` (and theirs), until none
    is left; collect those that became its children. Answers how many were killed."""
    if not spare and _childless():
        return 0
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(KILL_ROUNDS):
        table = look(me)
        for pid in table.zombies:
            if pid not in spare:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        found = _beneath(table.children, [me]) - spare - _beneath(table.children, spare)
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= found
        time.sleep(ROUND_PAUSE_S)
    return len(killed)
