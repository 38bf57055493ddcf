"""Benchmark: what the toolbox costs a Turn, against running the Working tools in-process.

Run from the repository root: ``.venv/bin/python bench/toolbox.py [--sessions 1 8 32]
[--calls 8] [--quick] [--json]``. The default run takes about 35 s on 2 cores, ``--quick``
about 15 s.

What runs: a toolbox started as the Harness starts one on one machine
(``LocalToolbox.start``, as the current user; as root its sessions keep uid 0 with no
capability), serving this process over its Unix socket. Its work root is a temp dir with a
tiny git clone in ``.repos/app``; the Run's worktree of it is made by the toolbox's own
``git`` session, and every ``tools`` session opens with its ``cwd`` there, so it is
confined (Landlock, rlimits, subreaper) exactly as a Turn's session is. The in-process
baseline is ``run_tool`` on a ``ToolContext`` rooted at the same worktree: how the
Harness ran the Working tools before the toolbox.

What it measures:

1. **session open / close**: ``Toolbox.session`` (connect, fork, confine, the ``Opened``
   answer); ``Session.close`` as the caller sees it; and close → the session's process
   ended (a pidfd becomes readable: exact, no polling), which is when its processes are
   killed and its scratch removed. Then back-to-back open+close cycles per second.
2. **tool call round trip**: ``read`` of a small file, ``write`` of a small file,
   ``grep`` over a small tree (24 files) and ``bash`` running ``true``, through one open
   session and in-process, interleaved so drift falls on both alike; the ratio of the
   medians is the toolbox's cost per call.
3. **background processes**: a ``bash`` call that leaves four ``sleep &`` in its group,
   and the same plus one ``setsid`` (its own session, which no group kill reaches), timed
   until the call returns; after each call ``/proc`` is scanned for the sleeps' argv, and
   none may be left. The in-process path runs the ``setsid`` one once as a check that the
   scan finds what is left (it is left there: only the toolbox's subreaper ends it), and
   this process kills it.
4. **concurrency**, for each N of ``--sessions``: N sessions opened at once; while they
   sit idle, open+close cycles of one more (the toolbox's loop does work for every open
   session each time it wakes, so this shows what an open session costs the next open),
   and, at the largest N, the toolbox's CPU over a few seconds of nothing; then each
   makes ``--calls`` calls (read, grep, bash, write, in turn): calls per second over the
   call phase and per-call latency; and once all have made their calls, the RSS of the
   toolbox process and of its sessions (``VmRSS`` in ``/proc/<pid>/status``, and ``Pss``
   from ``smaps_rollup``, which divides the pages a fork leaves shared among their
   sharers, so its sum is what the sessions really hold).

5. **worktrees** (``--worktrees [N ...]``, instead of the above): N Runs' worktrees made
   through the toolbox client (``Toolbox.worktrees``, its bound on git sessions
   included), asked one after another and all at once; the processes the toolbox starts
   per worktree (``strace``); with ``--baseline REV``, the toolbox of that revision in
   the same run (bench/README.md says more).

The toolbox ends every process a call started by scanning ``/proc`` (``reaper``), so the
number of processes this machine shows sets part of what a call costs: the header
prints it, with the cost of one such scan measured here. Percentiles are nearest-rank.
Figures only: nothing is asserted beyond sanity (each call answered as expected, and no
process left).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "harness_image"))

from kubeturn_harness.sandbox import reaper  # noqa: E402
from kubeturn_harness.sandbox.client import START_S, LocalToolbox, Session, Toolbox  # noqa: E402
from kubeturn_harness.sandbox.protocol import Kind, Limits  # noqa: E402
from kubeturn_harness.settings import ToolSettings  # noqa: E402
from kubeturn_harness.tools import ToolContext, run_tool, scrubbed_environment  # noqa: E402
from kubeturn_harness.wire import WorktreesRequest  # noqa: E402

SLOT = "app"
RUN_BRANCH = "bench"
SMALL_FILE = "small.txt"
NEEDLE = "needle"
TREE_DIRS, TREE_FILES, TREE_LINES = 3, 8, 40
"""The grep tree: 3 directories of 8 files of 40 lines, a small package's worth."""
WARMUP = 5
"""Samples of each kind taken first and not counted: imports, the worker thread, caches."""
SAMPLES, QUICK_SAMPLES = 50, 15
"""Counted samples of each sequential figure: enough for a p95 that is not the max."""
HELD_SAMPLES, QUICK_HELD_SAMPLES = 10, 5
"""Opens while N sessions are held open: at 32 held each took a quarter of a second here."""
SESSIONS, QUICK_SESSIONS = (1, 8, 32), (1, 8)
"""32: a busy sandbox Pod, a session per live Submission."""
CALLS, QUICK_CALLS = 8, 4
"""Calls per concurrent session: each tool of the mix twice (once in ``--quick``)."""
STRAY_SAMPLES, QUICK_STRAY_SAMPLES = 20, 5
IDLE_S, QUICK_IDLE_S = 3.0, 2.0
"""How long the toolbox's CPU is watched while its held sessions sit idle: it wakes for
its stray scan every ``server.STRAY_SCAN_S`` (1 s), so this sees two or three."""
SETTLE_S = 0.5
"""Before the idle watch: the toolbox's work for the last close (a wake-up) is done."""
BACKGROUND = 4
"""``sleep &`` per stray call: a few, as a test runner's leftover daemons would be."""
PHASE_TIMEOUT_S = 120.0
"""Far above any phase here (seconds); a phase that takes this long is a hang."""
KIB_PER_MIB = 1024
"""``/proc/<pid>/status`` and ``smaps_rollup`` give memory in kB."""


# ----------------------------------------------------------------------------- the world


@dataclass
class World:
    """The toolbox, its client, the worktree every session works in, and the in-process
    context that runs the same tools there without it."""

    local: LocalToolbox
    toolbox: Toolbox
    cwd: Path
    context: ToolContext

    async def session(self) -> Session:
        return await self.toolbox.session(Kind.TOOLS, cwd=self.cwd)


def limits() -> Limits:
    """The Harness's default limits of a session (``ToolSettings``), as it sends them."""
    tools = ToolSettings()
    return Limits(
        bashTimeoutS=tools.bash_timeout_s,
        outputLimitBytes=tools.output_limit_bytes,
        processes=tools.processes,
        memoryBytes=tools.memory_bytes,
    )


def make_clone(clone: Path) -> None:
    """A one-commit repository: the small file and the grep tree."""
    clone.mkdir(parents=True)
    (clone / SMALL_FILE).write_text("a small file\nof two lines\n")
    for d in range(TREE_DIRS):
        package = clone / "src" / f"pkg{d}"
        package.mkdir(parents=True)
        for f in range(TREE_FILES):
            lines = [
                f"value_{n} = {n}  # {NEEDLE if n % 10 == 0 else 'hay'}" for n in range(TREE_LINES)
            ]
            (package / f"mod{f}.py").write_text("\n".join(lines) + "\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "tree"]):
        subprocess.run([*git, *args], cwd=clone, check=True, capture_output=True)


async def make_world(root: Path) -> World:
    work_root = root / "work"
    make_clone(work_root / ".repos" / SLOT)
    home = root / "home"
    home.mkdir()
    local = LocalToolbox.start(run_as=None)
    try:
        await local.wait_listening()  # its socket exists: bound, and maybe not yet listening
        toolbox = Toolbox(socket=local.socket, work_root=work_root, limits=limits())
        await toolbox.ready(START_S)  # as the Harness waits for it
        made = await toolbox.worktrees(
            WorktreesRequest(run="bench", branch=RUN_BRANCH, slots=[SLOT])
        )
    except BaseException:
        local.stop()
        raise
    cwd = Path(made.worktrees[SLOT].path)
    context = ToolContext(
        cwd=cwd,
        env={**scrubbed_environment(os.environ, home=str(home)), "TMPDIR": str(home)},
        bash_timeout_s=toolbox.limits.bashTimeoutS,
        output_limit_bytes=toolbox.limits.outputLimitBytes,
    )
    return World(local, toolbox, cwd, context)


# ----------------------------------------------------------------------------- /proc


def _stat_fields(pid: str) -> list[str] | None:
    """Fields 3… of ``/proc/<pid>/stat`` (state, ppid, …); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read().decode()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def children(pid: int) -> set[int]:
    """The live (not zombie) children of ``pid``: the toolbox's are its sessions."""
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat_fields(name)
            if fields and fields[0] != "Z" and fields[1] == str(pid):
                found.add(int(name))
    return found


def running_with(argument: str) -> list[int]:
    """Live processes with ``argument`` in their argv: what a stray call left running."""
    wanted = argument.encode()
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        fields = _stat_fields(name)
        if wanted in argv and fields and fields[0] != "Z":
            found.append(int(name))
    return found


def status_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``pid``, in kB; empty once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM") if key in fields}


def pss_kib(pid: int) -> int | None:
    """Proportional set size: each shared page counted once across the processes that
    share it, so the sessions' sum is not inflated by what their fork left shared."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


async def ended(pid: int) -> Callable[[], Awaitable[None]]:
    """A waiter for ``pid``'s end, armed now (a pidfd: readable once it has exited)."""
    descriptor = os.pidfd_open(pid)

    async def wait() -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(descriptor, readable)
        try:
            await done
        finally:
            loop.remove_reader(descriptor)
            os.close(descriptor)

    return wait


# ----------------------------------------------------------------------------- 1. sessions


@dataclass(frozen=True)
class Budget:
    """How many samples of each figure a run takes."""

    samples: int
    held_samples: int
    stray_samples: int
    idle_s: float
    sessions: tuple[int, ...]
    calls: int

    @property
    def held(self) -> int:
        """The most sessions the concurrency opens: where the toolbox's idle CPU is watched."""
        return max(self.sessions)


@dataclass
class Samples:
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.seconds.setdefault(key, []).append(value)


async def open_close(world: World, samples: Samples, budget: Budget) -> float:
    """Open and close sessions one at a time; answer back-to-back cycles per second."""
    toolbox_pid = world.local.process.pid
    for i in range(WARMUP + budget.samples):
        before = children(toolbox_pid)
        began = time.perf_counter()
        session = await world.session()
        opened = time.perf_counter()
        (pid,) = children(toolbox_pid) - before
        gone = await ended(pid)
        closing = time.perf_counter()
        await session.close()
        closed = time.perf_counter()
        await gone()
        finished = time.perf_counter()
        if i >= WARMUP:
            samples.add("open", opened - began)
            samples.add("close", closed - closing)
            samples.add("close_to_ended", finished - closing)
    return await cycles_per_second(world, samples, budget.samples, "cycle")


async def cycles_per_second(world: World, samples: Samples, n: int, key: str) -> float:
    """Back-to-back open+close, as a Harness opening a session per Submission does."""
    began = time.perf_counter()
    for _ in range(n):
        started = time.perf_counter()
        session = await world.session()
        samples.add(f"open_{key}", time.perf_counter() - started)
        await session.close()
    return n / (time.perf_counter() - began)


async def idle_cpu_percent(pid: int, seconds: float) -> float:
    """``pid``'s CPU while nothing is asked of it, in percent of one core, after
    ``SETTLE_S`` for the work of the last close to end."""
    await asyncio.sleep(SETTLE_S)
    before, began = cpu_seconds(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    return round(100 * (cpu_seconds(pid) - before) / (time.perf_counter() - began), 1)


def cpu_seconds(pid: int) -> float:
    """User and system time of ``pid`` (``utime``, ``stime``: fields 14 and 15 of stat)."""
    fields = _stat_fields(str(pid))
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- 2. calls

TOOLS: dict[str, dict[str, Any]] = {
    "read": {"path": SMALL_FILE},
    "write": {"path": "written.txt", "content": "written by the benchmark\n" * 4},
    "grep": {"pattern": NEEDLE, "path": "src"},
    "bash": {"command": "true"},
}
EXPECTED = {"read": "small file", "write": "Wrote 100 bytes", "grep": NEEDLE, "bash": "Exit code 0"}
"""What each call's text must hold: it ran, and did what it was asked."""


def check(tool: str, text: str, is_error: bool) -> None:
    if is_error or EXPECTED[tool] not in text:
        raise RuntimeError(f"{tool} answered {'an error' if is_error else 'unexpectedly'}: {text}")


async def in_process(world: World, tool: str, arguments: dict[str, Any]) -> str:
    result = await run_tool(tool, arguments, world.context)
    check(tool, result.text, result.is_error)
    return result.text


async def through(session: Session, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call(tool, arguments)
    check(tool, result.text, result.isError)
    return result.text


async def tool_calls(world: World, samples: Samples, n: int) -> None:
    """Each tool through one session and in-process, alternating which goes first."""
    session = await world.session()
    try:
        for i in range(WARMUP + n):
            for tool, arguments in TOOLS.items():
                order = (True, False) if i % 2 else (False, True)
                for boxed in order:
                    began = time.perf_counter()
                    if boxed:
                        await through(session, tool, arguments)
                    else:
                        await in_process(world, tool, arguments)
                    if i >= WARMUP:
                        path = "toolbox" if boxed else "in_process"
                        samples.add(f"{tool}_{path}", time.perf_counter() - began)
    finally:
        await session.close()


# ----------------------------------------------------------------------------- 3. strays


@dataclass
class Strays:
    left: int = 0
    """Sleeps still running once a toolbox call had returned (must stay 0)."""
    in_process_left: int = 0
    """The ``setsid`` sleeps the in-process path left (the scan's check: expect 1)."""


async def stray_calls(world: World, samples: Samples, n: int) -> Strays:
    """``bash`` calls that leave processes behind; each is scanned for once it returns."""
    marker = f"1000.{secrets.randbelow(10**6):06d}"  # a sleep's argument no other process has
    group = f"for i in {' '.join('x' * BACKGROUND)}; do sleep {marker} & done"
    # The call ends only once the setsid sleep has left the group (its session id is its
    # own pid, field 6 of its stat), so the group's kill cannot end it first.
    escaping = (
        f"{group}; setsid sleep {marker} >/dev/null 2>&1 & "
        'until read -r -a stat < /proc/$!/stat && [ "${stat[5]}" = "$!" ]; do :; done'
    )
    commands = {"strays_group": group, "strays_setsid": escaping}
    strays = Strays()
    session = await world.session()
    try:
        for i in range(WARMUP + n):
            for key, command in commands.items():
                began = time.perf_counter()
                await through(session, "bash", {"command": command})
                if i >= WARMUP:
                    samples.add(key, time.perf_counter() - began)
                strays.left += len(running_with(marker))
    finally:
        await session.close()
    await in_process(world, "bash", {"command": escaping, "timeoutSeconds": 10})
    left = running_with(marker)
    strays.in_process_left = len(left)
    for pid in left:  # this process started them (in-process); nothing else has the marker
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return strays


# ----------------------------------------------------------------------------- 4. concurrency

MIX = ("read", "grep", "bash", "write")


async def concurrent(world: World, sessions: int, budget: Budget) -> dict[str, Any]:
    """``sessions`` sessions opened at once. Once all are open, and while they sit idle:
    open+close cycles of one more, and (at the most sessions) the toolbox's CPU. Then
    each makes ``budget.calls`` calls; memory is read once all have, before any closes."""
    barrier = asyncio.Barrier(sessions + 1)
    opens: list[float] = []
    latencies: list[float] = []
    marks: dict[str, float] = {}
    held = Samples()
    figures: dict[str, Any] = {}

    async def one(index: int) -> None:
        began = time.perf_counter()
        session = await world.session()
        opens.append(time.perf_counter() - began)
        try:
            await barrier.wait()  # every session open
            await barrier.wait()  # the idle figures taken: go
            for call in range(budget.calls):
                tool = MIX[call % len(MIX)]
                arguments = TOOLS[tool]
                if tool == "write":
                    arguments = {**arguments, "path": f"written-{index}.txt"}
                started = time.perf_counter()
                await through(session, tool, arguments)
                latencies.append(time.perf_counter() - started)
            await barrier.wait()  # every session done
            await barrier.wait()  # memory read
        finally:
            await session.close()

    async def conductor() -> None:
        await barrier.wait()
        marks["open"] = time.perf_counter()
        if sessions == budget.held:
            figures["toolbox_cpu_percent_idle"] = await idle_cpu_percent(
                world.local.process.pid, budget.idle_s
            )
        figures["cycles_per_s_held"] = round(
            await cycles_per_second(world, held, budget.held_samples, "held"), 1
        )
        await barrier.wait()
        marks["go"] = time.perf_counter()
        await barrier.wait()
        marks["done"] = time.perf_counter()
        figures["memory"] = toolbox_memory(world.local.process.pid)
        await barrier.wait()

    began = time.perf_counter()
    async with asyncio.timeout(PHASE_TIMEOUT_S), asyncio.TaskGroup() as group:
        group.create_task(conductor())
        for index in range(sessions):
            group.create_task(one(index))
    return {
        "sessions": sessions,
        "calls_per_session": budget.calls,
        "calls_per_s": round(sessions * budget.calls / (marks["done"] - marks["go"]), 1),
        "call_ms": summary_ms(latencies),
        "open_at_once_ms": summary_ms(opens),
        "all_open_s": round(marks["open"] - began, 3),
        "open_while_held_ms": summary_ms(held.seconds["open_held"]),
        **figures,
    }


def toolbox_memory(toolbox_pid: int) -> dict[str, Any]:
    """The toolbox process's RSS, and its sessions' RSS and PSS, in MiB."""
    own = status_kib(toolbox_pid)
    rss: list[int] = []
    pss: list[int] = []
    for pid in children(toolbox_pid):
        rss.append(status_kib(pid).get("VmRSS", 0))
        if (proportional := pss_kib(pid)) is not None:
            pss.append(proportional)
    return {
        "toolbox_rss_mib": mib(own.get("VmRSS", 0)),
        "toolbox_peak_rss_mib": mib(own.get("VmHWM", 0)),
        "toolbox_pss_mib": mib(pss_kib(toolbox_pid) or 0),
        "session_processes": len(rss),
        "session_rss_mib_each": mib(max(rss)) if rss else None,
        "session_rss_mib_sum": mib(sum(rss)),
        "session_pss_mib_sum": mib(sum(pss)) if len(pss) == len(rss) else None,
    }


def mib(kib: int) -> float:
    return round(kib / KIB_PER_MIB, 1)


# ----------------------------------------------------------------------------- 5. worktrees

WORKTREE_RUNS = (50, 200)
"""Runs whose worktrees are made, one size at a time: a busy shared Workspace."""
COUNTED_WORKTREES = 10
"""Worktrees made while ``strace`` counts the processes they start: exact, so a few do."""
ORIGIN = "https://example.invalid/kubeturn/bench.git"
"""The clone's own remote: each worktree's ``origin`` must name it."""
SESSION_END_S = 0.02
"""After each request asked one after another: its session's process has ended and been
collected, so the toolbox's CPU counted for it holds the session's whole life."""
BASELINE_SESSIONS = 100
"""Requests an earlier revision's toolbox is sent at once: all of them, up to this."""


def start_toolbox(code: Path | None) -> LocalToolbox:
    """A toolbox as the Harness starts one (``LocalToolbox.start``); with ``code``, one
    whose ``kubeturn_harness`` is the package under ``code`` (an earlier revision's): the
    same command, with ``code`` first on its ``PYTHONPATH``."""
    if code is None:
        return LocalToolbox.start(run_as=None)
    directory = Path(tempfile.mkdtemp(prefix="kubeturn-toolbox-"))
    socket_path, scratch = directory / "toolbox.sock", directory / "scratch"
    scratch.mkdir(mode=0o700)
    command = [sys.executable, "-m", "kubeturn_harness.sandbox", "--socket", str(socket_path)]
    command += ["--client-pid", str(os.getpid()), "--scratch-root", str(scratch)]
    env = {**scrubbed_environment(os.environ, home=str(scratch)), "PYTHONPATH": str(code)}
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    return LocalToolbox(process, socket_path, directory)


def export_harness(revision: str, into: Path) -> Path:
    """The ``kubeturn_harness`` package of ``revision`` of this repository, under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "harness_image"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "harness_image"


@dataclass
class Trees:
    """A work root with one clone, and a toolbox serving it."""

    local: LocalToolbox
    toolbox: Toolbox
    work_root: Path
    head: str

    async def make(self, run: str) -> float:
        """Ask for ``run``'s worktree; the seconds until it is answered."""
        began = time.perf_counter()
        await self.toolbox.worktrees(
            WorktreesRequest(run=run, branch=f"kubeturn/{run}", slots=[SLOT])
        )
        return time.perf_counter() - began

    def check(self, runs: Sequence[str]) -> None:
        """Each Run's worktree is on its branch at the clone's HEAD, its origin the
        clone's remote (read from the files git wrote: no process per worktree)."""
        for run in runs:
            git_dir = self.work_root / SLOT / f"kubeturn-{run}" / ".git"
            head = (git_dir / "HEAD").read_text().strip()
            commit = (git_dir / "refs" / "heads" / "kubeturn" / run).read_text().strip()
            config = (git_dir / "config").read_text()
            if head != f"ref: refs/heads/kubeturn/{run}" or commit != self.head:
                raise RuntimeError(f"{run}'s worktree is at {head} {commit}, not {self.head}")
            if f"url = {ORIGIN}\n" not in config:
                raise RuntimeError(f"{run}'s worktree's origin is not {ORIGIN}: {config}")


def make_clone_of_origin(clone: Path) -> str:
    """``make_clone`` with ``ORIGIN`` as its remote, as an init container leaves one;
    its HEAD commit."""
    make_clone(clone)
    subprocess.run(["git", "-C", str(clone), "remote", "add", "origin", ORIGIN], check=True)
    return subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


@contextlib.asynccontextmanager
async def trees(code: Path | None, git_sessions: int | None) -> AsyncIterator[Trees]:
    """A fresh clone (with ``ORIGIN`` as its remote) and a toolbox of ``code``, whose
    client opens at most ``git_sessions`` git sessions at once (None: its default)."""
    root = Path(tempfile.mkdtemp(prefix="kubeturn-worktrees-bench-"))
    try:
        head = make_clone_of_origin(root / "work" / ".repos" / SLOT)
        local = start_toolbox(code)
        try:
            await local.wait_listening()
            bound = {} if git_sessions is None else {"git_sessions": git_sessions}
            toolbox = Toolbox(
                socket=local.socket, work_root=root / "work", limits=limits(), **bound
            )
            await toolbox.ready(START_S)
            yield Trees(local, toolbox, root / "work", head)
        finally:
            local.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def toolbox_cpu_seconds(pid: int) -> float:
    """The toolbox's CPU with its ended children's (its sessions, and their git, each
    waited for): ``utime``, ``stime``, ``cutime`` and ``cstime`` (fields 14 to 17)."""
    fields = _stat_fields(str(pid))
    if fields is None:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def sequential_rounds(
    codes: dict[str, Path | None], git_sessions: int | None, n: int
) -> list[dict[str, Any]]:
    """``n`` Runs' worktrees asked for one after another of each code's toolbox, the
    toolboxes taking turns request by request (which goes first alternating), so that a
    change in the machine's load falls on each alike. Wall time is the sum of a code's
    own requests."""
    runs = [f"run-{index:04d}" for index in range(n)]
    async with contextlib.AsyncExitStack() as stack:
        worlds = {
            name: await stack.enter_async_context(trees(code, bound(code, git_sessions)))
            for name, code in codes.items()
        }
        latencies: dict[str, list[float]] = {name: [] for name in worlds}
        cpu = dict.fromkeys(worlds, 0.0)
        for world in worlds.values():
            await world.make("warm")  # the toolbox's first session: imports, caches
        order = list(worlds)
        async with asyncio.timeout(PHASE_TIMEOUT_S * 5):
            for index, run in enumerate(runs):
                for name in order[index % len(order) :] + order[: index % len(order)]:
                    pid = worlds[name].local.process.pid
                    before = toolbox_cpu_seconds(pid)
                    latencies[name].append(await worlds[name].make(run))
                    await asyncio.sleep(SESSION_END_S)  # the session's end counted as its own
                    cpu[name] += toolbox_cpu_seconds(pid) - before
        for world in worlds.values():
            world.check(runs)
    return [
        row(name, n, "sequential", sum(latencies[name]), latencies[name], cpu[name])
        for name in worlds
    ]


async def at_once_round(
    name: str, code: Path | None, git_sessions: int | None, n: int
) -> dict[str, Any]:
    """``n`` Runs' worktrees, asked for all at once."""
    runs = [f"run-{index:04d}" for index in range(n)]
    async with trees(code, bound(code, git_sessions)) as world:
        await world.make("warm")
        pid = world.local.process.pid
        cpu = toolbox_cpu_seconds(pid)
        began = time.perf_counter()
        async with asyncio.timeout(PHASE_TIMEOUT_S * 5):
            latencies = list(await asyncio.gather(*(world.make(run) for run in runs)))
        wall = time.perf_counter() - began
        await asyncio.sleep(SETTLE_S)  # the last sessions' ends reaped by the toolbox
        cpu = toolbox_cpu_seconds(pid) - cpu
        world.check(runs)
    return row(name, n, "at_once", wall, latencies, cpu)


def bound(code: Path | None, git_sessions: int | None) -> int | None:
    """The client's bound on git sessions: this tree's (None: its default), or for an
    earlier revision's toolbox ``BASELINE_SESSIONS``: that Harness sent every request at
    once, and its toolbox dropped connections past the 128 its backlog held."""
    return git_sessions if code is None else BASELINE_SESSIONS


def row(
    name: str, n: int, mode: str, wall: float, latencies: list[float], cpu: float
) -> dict[str, Any]:
    return {
        "code": name,
        "n": n,
        "mode": mode,
        "wall_s": round(wall, 2),
        "per_s": round(n / wall, 1),
        "ms": summary_ms(latencies) | {"p99": round(percentile(latencies, 99) * 1000, 1)},
        "toolbox_cpu_ms_each": round(1000 * cpu / n, 1),
    }


async def processes_per_worktree(code: Path | None) -> dict[str, float] | None:
    """The processes the toolbox starts per worktree, by program (``strace`` counting
    each ``execve`` that succeeded under it); None where there is no ``strace``."""
    if shutil.which("strace") is None:
        return None
    async with trees(code, None) as world:
        await world.make("warm")
        out = world.work_root.parent / "strace.txt"
        pid = world.local.process.pid
        tracer = await asyncio.create_subprocess_exec(
            "strace", "-f", "-qq", "-z", "-e", "trace=execve", "-e", "signal=none",
            "-o", str(out), "-p", str(pid),
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            while _tracer(pid) == 0:
                await asyncio.sleep(0.01)
            for index in range(COUNTED_WORKTREES):
                await world.make(f"counted-{index}")
        finally:
            tracer.terminate()
            await tracer.wait()
        traced = out.read_text().splitlines()
    programs: dict[str, int] = {}
    for line in traced:
        if "execve(" in line:
            program = line.split('execve("', 1)[1].split('"', 1)[0].rsplit("/", 1)[-1]
            programs[program] = programs.get(program, 0) + 1
    counts = {name: count / COUNTED_WORKTREES for name, count in sorted(programs.items())}
    return {"all": sum(counts.values()), **counts}


def _tracer(pid: int) -> int:
    """The pid tracing ``pid`` (0: none yet)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return 0


async def worktree_bench(
    sizes: Sequence[int], baseline: str | None, git_sessions: int | None
) -> dict[str, Any]:
    """The worktree figures of this tree's toolbox and, with ``baseline``, of that
    revision's, in the same run: for each size, one after another (taking turns), then
    all at once (one code after the other)."""
    host = machine()
    scratch = Path(tempfile.mkdtemp(prefix="kubeturn-baseline-"))
    try:
        codes: dict[str, Path | None] = {"this tree": None}
        if baseline is not None:
            codes = {baseline: export_harness(baseline, scratch), **codes}
        processes = {name: await processes_per_worktree(code) for name, code in codes.items()}
        rounds: list[dict[str, Any]] = []
        for n in sizes:
            rounds += await sequential_rounds(codes, git_sessions, n)
            for name, code in codes.items():
                rounds.append(await at_once_round(name, code, git_sessions, n))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"machine": host, "processes_per_worktree": processes, "rounds": rounds}


def print_worktrees(figures: dict[str, Any]) -> None:
    m = figures["machine"]
    print(
        f"machine: {m['cores']} cores ({m['usable_cores']} usable), Python {m['python']}, "
        f"as {m['user']}; load average {m['load_average_1m_at_start']} at start\n"
    )
    for name, counts in figures["processes_per_worktree"].items():
        said = (
            "no strace here"
            if counts is None
            else ", ".join(
                f"{program} {count:g}" for program, count in counts.items() if program != "all"
            )
        )
        total = "" if counts is None else f"{counts['all']:g} "
        print(f"processes per worktree, {name}: {total}({said})")
    print(
        f"\n{'worktrees':<12}{'asked':<12}{'code':<14}{'wall s':>8}{'per s':>8}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'toolbox CPU ms each':>21}"
    )
    for row in figures["rounds"]:
        print(
            f"{row['n']:<12}{row['mode'].replace('_', ' '):<12}{row['code']:<14}"
            f"{row['wall_s']:>8.2f}{row['per_s']:>8.1f}{row['ms']['p50']:>9.1f}"
            f"{row['ms']['p99']:>9.1f}{row['toolbox_cpu_ms_each']:>21.1f}"
        )


# ----------------------------------------------------------------------------- report


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` percent of values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50) * 1000, 3),
        "p95": round(percentile(values, 95) * 1000, 3),
        "n": len(values),
    }


def proc_scan_ms(rounds: int = 50) -> float:
    """The median of one ``reaper.look`` at ``/proc`` here: a session that has children
    after a call takes one, and the toolbox one each time it wakes."""
    times: list[float] = []
    for _ in range(rounds):
        began = time.perf_counter()
        reaper.look(os.getpid())
        times.append(time.perf_counter() - began)
    return round(percentile(times, 50) * 1000, 3)


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "user": "root" if os.geteuid() == 0 else f"uid {os.geteuid()}",
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
        "processes_visible": sum(name.isdigit() for name in os.listdir("/proc")),
        "proc_scan_ms": proc_scan_ms(),
    }


def report(
    host: dict[str, Any],
    landlock: int,
    samples: Samples,
    cycles_per_s: float,
    strays: Strays,
    concurrency: list[dict[str, Any]],
    memory: dict[str, Any],
) -> dict[str, Any]:
    latency = {key: summary_ms(values) for key, values in samples.seconds.items()}
    return {
        "machine": host,
        "landlock_abi": landlock,
        "latency_ms": latency,
        "cycles_per_s": round(cycles_per_s, 1),
        "toolbox_over_in_process_p50": {
            tool: round(latency[f"{tool}_toolbox"]["p50"] / latency[f"{tool}_in_process"]["p50"], 2)
            for tool in TOOLS
        },
        "strays": {
            "left_after_toolbox_calls": strays.left,
            "left_by_in_process_setsid": strays.in_process_left,
            "over_bash_true_p50": {
                key: round(latency[key]["p50"] / latency["bash_toolbox"]["p50"], 2)
                for key in ("strays_group", "strays_setsid")
            },
        },
        "concurrency": concurrency,
        "toolbox_memory": memory,
    }


ROWS = (
    ("open", "open (connect, fork, confine)"),
    ("close", "close (as the caller sees it)"),
    ("close_to_ended", "close → session process ended"),
    ("open_cycle", "open, back to back with close"),
)


def print_table(figures: dict[str, Any]) -> None:
    m, latency = figures["machine"], figures["latency_ms"]
    print(
        f"machine: {m['cores']} cores ({m['usable_cores']} usable), Python {m['python']}, "
        f"{m['platform']}, as {m['user']}; load average {m['load_average_1m_at_start']} at "
        f"start; {m['processes_visible']} processes in /proc, one reaper walk of /proc "
        f"{m['proc_scan_ms']:.2f} ms; Landlock ABI {figures['landlock_abi']}\n"
    )
    print(f"{'sessions, ms':<40}{'p50':>9}{'p95':>9}{'n':>6}")
    for key, label in ROWS:
        figure = latency[key]
        print(f"{label:<40}{figure['p50']:>9.2f}{figure['p95']:>9.2f}{figure['n']:>6}")
    print(f"open+close cycles/s: {figures['cycles_per_s']:.0f}\n")

    print(
        f"{'tool calls, ms':<16}{'toolbox p50':>12}{'p95':>9}{'in-process p50':>16}{'p95':>9}"
        f"{'ratio p50':>11}"
    )
    for tool in TOOLS:
        boxed, local = latency[f"{tool}_toolbox"], latency[f"{tool}_in_process"]
        ratio = figures["toolbox_over_in_process_p50"][tool]
        print(
            f"{tool:<16}{boxed['p50']:>12.2f}{boxed['p95']:>9.2f}{local['p50']:>16.2f}"
            f"{local['p95']:>9.2f}{ratio:>10.2f}x"
        )

    strays = figures["strays"]
    print(f"\n{'bash leaving processes, ms':<40}{'p50':>9}{'p95':>9}{'n':>6}{'/ true':>9}")
    for key, label in (
        ("strays_group", f"{BACKGROUND} × sleep &"),
        ("strays_setsid", f"{BACKGROUND} × sleep & + setsid sleep &"),
    ):
        figure = latency[key]
        ratio = strays["over_bash_true_p50"][key]
        print(
            f"{label:<40}{figure['p50']:>9.2f}{figure['p95']:>9.2f}{figure['n']:>6}{ratio:>8.2f}x"
        )
    print(
        f"left running once the toolbox's calls returned: {strays['left_after_toolbox_calls']}"
        f" (the scan's check: the in-process path left {strays['left_by_in_process_setsid']}"
        " setsid sleep, killed here)\n"
    )

    rows = figures["concurrency"]
    print(
        f"{'N sessions × M calls':<22}{'calls/s':>9}{'call p50':>10}{'p95':>9}"
        f"{'open p50':>10}{'p95':>9}   (ms; N opened at once)"
    )
    for row in rows:
        call, opening = row["call_ms"], row["open_at_once_ms"]
        print(
            f"{row['sessions']:>4} × {row['calls_per_session']:<15}{row['calls_per_s']:>9.0f}"
            f"{call['p50']:>10.2f}{call['p95']:>9.2f}{opening['p50']:>10.2f}"
            f"{opening['p95']:>9.2f}"
        )
    print(
        f"\n{'N sessions open':<22}{'open p50':>10}{'p95':>9}{'toolbox RSS':>13}"
        f"{'sessions RSS':>14}{'PSS':>8}   (ms: one more opened while N sit idle; MiB: once "
        "the N made their calls)"
    )
    for row in rows:
        opening, memory = row["open_while_held_ms"], row["memory"]
        pss = memory["session_pss_mib_sum"]
        print(
            f"{row['sessions']:>4}{'':<18}{opening['p50']:>10.2f}{opening['p95']:>9.2f}"
            f"{memory['toolbox_rss_mib']:>13.1f}{memory['session_rss_mib_sum']:>14.1f}"
            f"{'-' if pss is None else f'{pss:.1f}':>8}"
        )
    busiest = next((row for row in rows if "toolbox_cpu_percent_idle" in row), None)
    start, end = figures["toolbox_memory"]["start"], figures["toolbox_memory"]["end"]
    each = [r["memory"]["session_rss_mib_each"] for r in rows if r["memory"]["session_processes"]]
    if busiest is not None:
        print(
            f"the toolbox's CPU while {busiest['sessions']} sessions sit idle: "
            f"{busiest['toolbox_cpu_percent_idle']:.1f}% of a core"
        )
    print(
        f"toolbox RSS {start['toolbox_rss_mib']:.1f} MiB at start, {end['toolbox_rss_mib']:.1f}"
        f" MiB at the end (peak {end['toolbox_peak_rss_mib']:.1f}); one session's RSS at most "
        f"{max(each) if each else 0:.1f} MiB (summed, RSS counts the pages a fork shares "
        "once per session, PSS once in all)"
    )


# ----------------------------------------------------------------------------- main


async def bench(budget: Budget) -> dict[str, Any]:
    host = machine()
    root = Path(tempfile.mkdtemp(prefix="kubeturn-toolbox-bench-"))
    samples = Samples()
    try:
        world = await make_world(root)
        try:
            toolbox_pid = world.local.process.pid
            memory = {"start": toolbox_memory(toolbox_pid)}
            probe = await world.session()
            landlock = probe.opened.landlock
            await probe.close()
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                cycles_per_s = await open_close(world, samples, budget)
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                await tool_calls(world, samples, budget.samples)
            async with asyncio.timeout(PHASE_TIMEOUT_S):
                strays = await stray_calls(world, samples, budget.stray_samples)
            concurrency = [await concurrent(world, n, budget) for n in budget.sessions]
            memory["end"] = toolbox_memory(toolbox_pid)
        finally:
            world.local.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report(host, landlock, samples, cycles_per_s, strays, concurrency, memory)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sessions",
        type=int,
        nargs="+",
        default=None,
        help=f"concurrent sessions, one run each (default {' '.join(map(str, SESSIONS))})",
    )
    parser.add_argument(
        "--calls", type=int, default=None, help=f"calls per concurrent session (default {CALLS})"
    )
    parser.add_argument("--quick", action="store_true", help="a short run: fewer samples")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--worktrees",
        type=int,
        nargs="*",
        default=None,
        help="time making this many Runs' worktrees instead (default "
        f"{' '.join(map(str, WORKTREE_RUNS))}), one after another and all at once",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        default=None,
        help="with --worktrees: also time the toolbox of this git revision (e.g. main)",
    )
    parser.add_argument(
        "--git-sessions",
        type=int,
        default=None,
        help="with --worktrees: git sessions the client opens at once (default the Toolbox's)",
    )
    args = parser.parse_args(argv)
    if args.worktrees is not None:
        sizes = tuple(args.worktrees or WORKTREE_RUNS)
        if min(sizes) < 1 or (args.git_sessions is not None and args.git_sessions < 1):
            parser.error("--worktrees and --git-sessions must be at least 1")
        made = asyncio.run(worktree_bench(sizes, args.baseline, args.git_sessions))
        if args.json:
            print(json.dumps(made, ensure_ascii=False, indent=2))
        else:
            print_worktrees(made)
        return 0
    quick = args.quick
    budget = Budget(
        samples=QUICK_SAMPLES if quick else SAMPLES,
        held_samples=QUICK_HELD_SAMPLES if quick else HELD_SAMPLES,
        stray_samples=QUICK_STRAY_SAMPLES if quick else STRAY_SAMPLES,
        idle_s=QUICK_IDLE_S if quick else IDLE_S,
        sessions=tuple(args.sessions or (QUICK_SESSIONS if quick else SESSIONS)),
        calls=args.calls if args.calls is not None else (QUICK_CALLS if quick else CALLS),
    )
    if min(budget.sessions) < 1 or budget.calls < 1:
        parser.error("--sessions and --calls must be at least 1")
    figures = asyncio.run(bench(budget))
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, indent=2))
    else:
        print_table(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
