"""One session of the toolbox, in a process of its own: forked for one connection, it
confines itself and serves that connection's requests until the Harness closes it.

A ``tools``, ``exec`` or ``deliver`` session makes itself a child subreaper, takes its rlimits
and restricts itself with Landlock to its plan (``confinement``) before it reads its
first request; every process it starts inherits all of it. After each request, and
when the connection closes or the process is told to stop (SIGTERM, or the toolbox's
death), it kills every process it started, ``setsid`` and double forks included, then
answers or exits. A ``deliver`` session opens its bundle's file before it is confined
(``deliveries``). A ``git`` session is kubeturn's own work on the clones: it is not
confined and runs no Agent's command.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401  (see below)
import contextlib
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pydantic import BaseModel, ValidationError

from kubeturn_harness.errors import GitRefused, LandlockError
from kubeturn_harness.sandbox import confinement, deliveries, landlock, privileges, reaper
from kubeturn_harness.sandbox.clones import Clones, git_environment
from kubeturn_harness.sandbox.protocol import (
    LINE_LIMIT,
    Call,
    Command,
    CommandDone,
    Deliver,
    Git,
    GitOp,
    Kind,
    Open,
    Opened,
    Refused,
    Removed,
    Result,
)
from kubeturn_harness.tools import RunAs, ToolContext, run_command, run_tool, scrubbed_environment
from kubeturn_harness.tools.errors import ToolFailure
from kubeturn_harness.wire import WorkspaceAccess

log = logging.getLogger(__name__)

# Every module a session uses is imported here, before the toolbox forks it: a session
# that becomes another user (``run_as``) may not be able to read the interpreter's files
# (a Python under /root), and one confined by Landlock reads only what its plan grants.
# ``asyncio.to_thread`` imports its executor's module on first use, hence the import above.


@dataclass(frozen=True)
class ToolboxSettings:
    """What every session of one toolbox shares."""

    scratch_root: Path
    """Where each session gets its own ``HOME``/``TMPDIR``; no session reaches another's."""
    socket: Path
    """The toolbox's socket: private to every session."""
    required: bool = False
    """Refuse to open a confined session where the kernel has no Landlock."""
    readable: tuple[Path, ...] = ()
    """Read-only paths beyond the system's: the tools on PATH, the interpreter."""
    run_as: RunAs | None = None
    """The user every session becomes right after its fork, when the toolbox is root
    (a Harness run as root on one machine): the Agents' commands never run as root."""


Handler = Callable[[bytes], Awaitable[BaseModel]]


def main(connection: socket.socket, settings: ToolboxSettings) -> int:
    """The forked child's whole life: serve ``connection``, then end what it started."""
    scratch: list[Path] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        _finish(scratch)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    reaper.on_parent_death(signal.SIGTERM)
    if os.getppid() == 1:
        return 0  # the toolbox is gone already
    privileges.become(settings.run_as)
    reaper.become_subreaper()
    try:
        asyncio.run(_serve(connection, settings, scratch))
    finally:
        _finish(scratch)
    return 0


def _finish(scratch: list[Path]) -> None:
    reaper.kill_descendants()
    for path in scratch:
        shutil.rmtree(path, ignore_errors=True)


async def _serve(connection: socket.socket, settings: ToolboxSettings, scratch: list[Path]) -> None:
    reader, writer = await asyncio.open_connection(sock=connection, limit=LINE_LIMIT)
    try:
        first = await reader.readline()
        try:
            opening = Open.model_validate_json(first)
        except ValidationError as error:
            await _send(writer, Opened(error=f"not a session: {error.errors()[0]['msg']}"))
            return
        try:
            opened, handler = await _open(opening, settings, scratch)
        except (OSError, ValueError) as error:  # ValueError: a path with a NUL in it
            opened, handler = Opened(error=f"the session could not be made: {error}"), None
        await _send(writer, opened)
        if handler is None:
            return
        await _requests(reader, writer, handler)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
) -> None:
    """Answer requests in order. The Harness sends nothing while a call runs: its closing
    the connection (or anything it sends meanwhile) cuts the call."""
    while line := await reader.readline():
        work = asyncio.ensure_future(handler(line))
        closed = asyncio.ensure_future(reader.read(1))
        done, _ = await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
        if work not in done:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            reaper.kill_descendants()
            return
        closed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closed
        reaper.kill_descendants()
        await _send(writer, work.result())


async def _send(writer: asyncio.StreamWriter, message: BaseModel) -> None:
    writer.write(message.model_dump_json().encode() + b"\n")
    await writer.drain()


async def _open(
    opening: Open, settings: ToolboxSettings, scratch: list[Path]
) -> tuple[Opened, Handler | None]:
    work_root = Path(opening.workRoot)
    home = Path(tempfile.mkdtemp(prefix="session-", dir=settings.scratch_root))
    scratch.append(home)
    clones = Clones(
        work_root,
        locks=settings.scratch_root / ".locks",
        env=git_environment(os.environ, home),
    )
    if opening.kind is Kind.GIT:
        privileges.undumpable()
        return Opened(), _git_handler(clones)
    cwd = Path(opening.cwd or work_root)
    if not cwd.is_absolute():
        return Opened(error=f"cwd must be an absolute path, got {cwd}"), None
    writable = opening.access is WorkspaceAccess.WRITE
    slots = clones.slots()
    reach = confinement.reach(cwd, work_root, slots, Path.is_dir, Path.iterdir)
    # A fan-out child's worktree is never a linked one (ADR 0113): adopting it would let
    # the child's Agent, by making its .git a file, stop its Run's sessions opening.
    await clones.adopt_linked([p for p in reach if confinement.CHILD_SEPARATOR not in p.name])
    private = [Path(p) for p in opening.private]
    private += [
        settings.scratch_root,
        settings.socket.parent,
        work_root / confinement.DELIVERIES_DIR,
    ]
    bundle: int | None = None
    if opening.kind is Kind.DELIVER:
        # Opened before the session is confined: the plan denies .deliveries to it.
        try:
            bundle = deliveries.open_bundle(work_root, opening.bundle or "")
        except (OSError, ValueError) as error:
            said = f"the bundle could not be made at {opening.bundle}: {error}"
            return Opened(), _refusing(said)
    plan = confinement.plan(
        cwd=cwd,
        work_root=work_root,
        slots=slots,
        writable=writable,
        scratch=home,
        private=private,
        readable=settings.readable,
        exists=Path.exists,
        listing=Path.iterdir,
    )
    _limit(opening.limits.processes, opening.limits.memoryBytes)
    version = landlock.abi()
    if version:
        try:
            landlock.restrict(plan.rules(), abi_version=version)
        except LandlockError as error:
            return Opened(error=f"the tools could not be confined: {error}"), None
    elif settings.required:
        return Opened(
            error="the tools cannot be confined: this kernel has no Landlock (Linux 5.13 or "
            "later, with landlock in its lsm= list), and the toolbox requires it"
        ), None
    context = ToolContext(
        cwd=cwd,
        env={**scrubbed_environment(os.environ, home=str(home)), "TMPDIR": str(home)},
        denied=tuple(private),
        bash_timeout_s=opening.limits.bashTimeoutS,
        output_limit_bytes=opening.limits.outputLimitBytes,
        end_strays=reaper.kill_descendants,
    )
    opened = Opened(landlock=version, reach=[str(p) for p in plan.reach], writable=writable)
    if opening.kind is Kind.EXEC:
        return opened, _exec_handler(context)
    if bundle is not None:
        env = git_environment(os.environ, home)
        return opened, _deliver_handler(cwd, clones, bundle, env)
    return opened, _tools_handler(context)


def _limit(processes: int, memory: int | None) -> None:
    """No core files; at most ``processes`` more processes of this user than run now
    (RLIMIT_NPROC counts them all); each process's data at most ``memory`` bytes."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    mine = _processes_of(os.getuid())
    resource.setrlimit(resource.RLIMIT_NPROC, (mine + processes, mine + processes))
    if memory is not None:
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                count += entry.stat().st_uid == uid
    return count


def _tools_handler(context: ToolContext) -> Handler:
    async def handle(line: bytes) -> BaseModel:
        try:
            call = Call.model_validate_json(line)
        except ValidationError as error:
            return Result(text=f"The toolbox could not read the call: {error}", isError=True)
        result = await run_tool(call.tool, call.arguments, context)
        return Result(text=result.text, isError=result.is_error)

    return handle


def _exec_handler(context: ToolContext) -> Handler:
    async def handle(line: bytes) -> BaseModel:
        try:
            command = Command.model_validate_json(line)
        except ValidationError as error:
            return Refused(error=f"not a command: {error}", status=400)
        try:
            done = await run_command(command.command, context, command.timeoutSeconds)
        except OSError as error:
            said = f"{error.strerror or error}: {error.filename or context.cwd}"
            return Refused(error=f"the command could not start: {said}", field="cwd", status=400)
        except ToolFailure as failure:
            return Refused(error=str(failure), field="command", status=400)
        return CommandDone(
            exitCode=done.exit_code,
            output=done.output,
            droppedBytes=done.dropped,
            timedOut=done.exit_code is None,
        )

    return handle


def _refusing(error: str) -> Handler:
    async def handle(line: bytes) -> BaseModel:
        return Refused(error=error, field="slot", status=409)

    return handle


def _deliver_handler(worktree: Path, clones: Clones, bundle: int, env: dict[str, str]) -> Handler:
    async def handle(line: bytes) -> BaseModel:
        try:
            request = Deliver.model_validate_json(line)
        except ValidationError as error:
            return Refused(error=f"not a delivery: {error}", status=400)
        clone = clones.clone(worktree.parent.name)
        try:
            return await deliveries.deliver(worktree, clone, request, bundle, env)
        except OSError as error:
            return Refused(error=f"git could not run: {error}", field="slot")

    return handle


def _git_handler(clones: Clones) -> Handler:
    async def handle(line: bytes) -> BaseModel:
        try:
            request = Git.model_validate_json(line)
        except ValidationError as error:
            return Refused(error=f"not a git request: {error}", status=400)
        try:
            if request.op is GitOp.WORKTREES and request.worktrees is not None:
                return await clones.worktrees(request.worktrees)
            if request.op is GitOp.FORGET and request.forget is not None:
                return Removed(worktrees=await clones.remove(request.forget.branch))
            return await clones.listing()
        except GitRefused as refused:
            return refused.refused
        except OSError as error:
            return Refused(error=f"the Workspace's tree could not be changed: {error}")

    return handle
