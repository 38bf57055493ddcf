"""The Harness's side of the toolbox: sessions over its Unix socket, and, on one
machine, the toolbox process itself.

The Harness never runs an Agent's tool, nor git in the Workspace's tree: it asks the
toolbox, which forks a process per session (``server``). A session opened for a
Submission lives until the Submission's run stops; closing it ends every process the
session started. A toolbox that cannot be reached, or that drops a session, raises
``ToolboxUnavailable``: the run reads that as a failed tool call, not as its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kubeturn_harness.errors import ToolboxUnavailable, WireError
from kubeturn_harness.sandbox.protocol import (
    LINE_LIMIT,
    Call,
    Command,
    CommandDone,
    Deliver,
    Delivered,
    Git,
    GitOp,
    Kind,
    Limits,
    Open,
    Opened,
    Refused,
    Removed,
    Result,
)
from kubeturn_harness.tools import RunAs, scrubbed_environment
from kubeturn_harness.wire import (
    ForgetRunRequest,
    ReposResponse,
    WorkspaceAccess,
    Worktree,
    WorktreesRequest,
    WorktreesResponse,
)

Answer = TypeVar("Answer", bound=BaseModel)

CONNECT_S = 10.0
"""How long opening a session may take: a fork and, for a Turn's first session on an old
worktree, adopting it (a git clone of refs and an index)."""
START_S = 30.0
"""How long a toolbox the Harness starts may take to listen: importing its tools."""
GIT_SESSIONS = 3
"""git sessions (worktrees, forgetting, the clones' listing) open at once; other requests
wait here for one (ADR 0082): many Runs asking at once start a few processes in the
toolbox, not one each, and a few keep both cores busy while one waits on the disk."""


@dataclass(frozen=True)
class Toolbox:
    """A toolbox, by its socket, and what every session of this Harness asks for."""

    socket: Path
    work_root: Path
    limits: Limits
    private: tuple[Path, ...] = ()
    """Paths no session may reach: the Harness's data dir."""
    git_sessions: int = GIT_SESSIONS
    """How many git sessions are open at once."""
    _git: GitSessions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_git", GitSessions(self.git_sessions))

    async def session(
        self,
        kind: Kind,
        *,
        cwd: Path | None = None,
        access: WorkspaceAccess = WorkspaceAccess.WRITE,
        bundle: str | None = None,
    ) -> Session:
        """Open a session; ``ToolboxUnavailable`` when the toolbox cannot, saying why."""
        opening = Open(
            kind=kind,
            workRoot=str(self.work_root),
            cwd=str(cwd) if cwd is not None else None,
            access=access,
            private=[str(path) for path in self.private],
            limits=self.limits,
            bundle=bundle,
        )
        try:
            async with asyncio.timeout(CONNECT_S):
                reader, writer = await asyncio.open_unix_connection(self.socket, limit=LINE_LIMIT)
        except (OSError, TimeoutError) as error:
            raise ToolboxUnavailable(
                f"the toolbox at {self.socket} cannot be reached: {error}"
            ) from error
        session = Session(reader, writer)
        try:
            opened = await session.ask(opening, Opened)
        except BaseException:
            await session.close()
            raise
        if opened.error is not None:
            await session.close()
            raise ToolboxUnavailable(opened.error)
        session.opened = opened
        return session

    async def exec(self, cwd: Path, command: str, seconds: float) -> CommandDone:
        """Run one command for the Machine, confined as the tools are."""
        session = await self.session(Kind.EXEC, cwd=cwd)
        try:
            request = Command(command=command, timeoutSeconds=seconds)
            answer = await session.ask_or_refused(request, CommandDone)
        finally:
            await session.close()
        if isinstance(answer, Refused):
            raise WireError(answer.error, field="command", status=answer.status)
        return answer

    async def deliver(self, worktree: Path, bundle: str, request: Deliver) -> Delivered:
        """Commit a Run's worktree and bundle its branch at ``bundle`` (relative to the work
        root), confined as the tools are."""
        session = await self.session(Kind.DELIVER, cwd=worktree, bundle=bundle)
        try:
            answer = await session.ask_or_refused(request, Delivered)
        finally:
            await session.close()
        if isinstance(answer, Refused):
            raise WireError(answer.error, field=answer.field, status=answer.status)
        return answer

    async def worktrees(self, request: WorktreesRequest) -> WorktreesResponse:
        return await self._ask_git(Git(op=GitOp.WORKTREES, worktrees=request), WorktreesResponse)

    async def repos(self) -> ReposResponse:
        return await self._ask_git(Git(op=GitOp.REPOS), ReposResponse)

    async def forget(self, request: ForgetRunRequest) -> dict[str, Worktree]:
        removed = await self._ask_git(Git(op=GitOp.FORGET, forget=request), Removed)
        return removed.worktrees

    async def ready(self, within: float) -> None:
        """Wait until the toolbox accepts sessions; ``ToolboxUnavailable`` after ``within``."""
        deadline = time.monotonic() + within
        while True:
            try:
                session = await self.session(Kind.GIT)
            except ToolboxUnavailable:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.1)
            else:
                await session.close()
                return

    async def _ask_git(self, request: Git, answer: type[Answer]) -> Answer:
        got = await self._git.ask(self, request, answer)
        if isinstance(got, Refused):
            raise WireError(got.error, field=got.field, status=got.status)
        return got


class GitSessions:
    """A Harness's git sessions: at most ``size`` open at once, a request waiting for its
    turn. A session that has answered serves the next request that waits, and is closed
    once none does: a burst (many Runs asking for their worktrees) opens a session per
    turn, not per request, and a quiet Harness holds none. A kept session the toolbox
    has ended meanwhile (it restarted) is not used again."""

    def __init__(self, size: int) -> None:
        self._turns = asyncio.Semaphore(size)
        self._waiting = 0
        self._idle: list[Session] = []

    async def ask(self, toolbox: Toolbox, request: Git, answer: type[Answer]) -> Answer | Refused:
        self._waiting += 1
        try:
            await self._turns.acquire()
        finally:
            self._waiting -= 1
        try:
            return await self._ask(toolbox, request, answer)
        finally:
            self._turns.release()

    async def _ask(self, toolbox: Toolbox, request: Git, answer: type[Answer]) -> Answer | Refused:
        session = self._idle.pop() if self._idle else None
        if session is not None and session.reader.at_eof():  # the toolbox ended it
            await session.close()
            session = None
        if session is None:
            session = await toolbox.session(Kind.GIT)
        try:
            got = await session.ask_or_refused(request, answer)
        except BaseException:
            await session.close()  # an answer may still come: the session is no use
            raise
        if self._waiting > len(self._idle):
            self._idle.append(session)
            return got
        unused, self._idle = self._idle, []  # kept for requests that were cancelled
        for done in (session, *unused):
            await done.close()
        return got


@dataclass
class Session:
    """One open session: requests answered in order."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    opened: Opened = field(default_factory=Opened)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Result:
        """Run one Working tool; ``ToolboxUnavailable`` if the session ended meanwhile."""
        return await self.ask(Call(tool=tool, arguments=arguments), Result)

    async def ask(self, request: BaseModel, answer: type[Answer]) -> Answer:
        """Send ``request``; its answer, read as ``answer``."""
        return _read(await self._exchange(request), answer)

    async def ask_or_refused(self, request: BaseModel, answer: type[Answer]) -> Answer | Refused:
        """Send ``request``; its answer, or the toolbox's refusal of it."""
        line = await self._exchange(request)
        with contextlib.suppress(ValidationError):
            return Refused.model_validate_json(line)
        return _read(line, answer)

    async def _exchange(self, request: BaseModel) -> bytes:
        try:
            self.writer.write(request.model_dump_json().encode() + b"\n")
            await self.writer.drain()
            line = await self.reader.readline()
        except (OSError, ValueError) as error:
            raise ToolboxUnavailable(f"the toolbox dropped the session: {error}") from error
        if not line:
            raise ToolboxUnavailable("the toolbox ended the session (it stopped or restarted)")
        return line

    async def close(self) -> None:
        """End the session: the toolbox ends every process it started."""
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _read(line: bytes, answer: type[Answer]) -> Answer:
    try:
        return answer.model_validate_json(line)
    except ValidationError as error:
        raise ToolboxUnavailable(f"the toolbox answered what is not an answer: {error}") from error


@dataclass
class LocalToolbox:
    """A toolbox the Harness started as its child (one machine, no Pod)."""

    process: subprocess.Popen[bytes]
    socket: Path
    directory: Path

    @classmethod
    def start(cls, *, run_as: RunAs | None, scratch_root: Path | None = None) -> LocalToolbox:
        """Start a toolbox that serves only this process, with an environment that holds
        no secret of this one (``scrubbed_environment``); its sessions run as ``run_as``
        when given (this process is root, so the toolbox is too until it forks).

        Must be called from the thread that lives as long as the toolbox should: the
        toolbox stops when that thread ends (``PR_SET_PDEATHSIG``)."""
        directory = Path(tempfile.mkdtemp(prefix="kubeturn-toolbox-"))
        if run_as is not None:
            directory.chmod(0o711)  # the sessions' user passes through to its scratch
        socket_path = directory / "toolbox.sock"
        scratch = scratch_root or directory / "scratch"
        scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        command = [
            sys.executable,
            "-m",
            "kubeturn_harness.sandbox",
            "--socket",
            str(socket_path),
            "--client-pid",
            str(os.getpid()),
            "--scratch-root",
            str(scratch),
        ]
        if run_as is not None:
            command += ["--run-as", f"{run_as.uid}:{run_as.gid}"]
        process = subprocess.Popen(
            command,
            env=scrubbed_environment(os.environ, home=str(scratch)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        return cls(process, socket_path, directory)

    async def wait_listening(self, within: float = START_S) -> None:
        """Until its socket exists; ``ToolboxUnavailable`` if it exits or takes too long."""
        deadline = time.monotonic() + within
        while not self.socket.exists():
            if self.process.poll() is not None:
                raise ToolboxUnavailable(
                    f"the toolbox exited with status {self.process.returncode}"
                )
            if time.monotonic() >= deadline:
                raise ToolboxUnavailable(f"the toolbox did not listen within {within:g} s")
            await asyncio.sleep(0.02)

    def stop(self) -> None:
        """Stop it and wait: its sessions end every process they started."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
