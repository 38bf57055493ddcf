"""Starting the Working tools' subprocesses so that none outlives its tool call.

Each process runs in a new session (so its own process group) with the context's
scrubbed environment and an empty stdin; its output is pushed to a sink
as it arrives, so the sink bounds memory. Leaving ``spawned`` — by return, error,
timeout or cancellation — kills the whole group with SIGKILL, closes the pipes and
waits for the leader's exit, which takes milliseconds. (A process that starts its own
session escapes the group; the toolbox's session, a subreaper, ends it.) Must not
interpret output.

The exit is awaited through ``SubprocessProtocol.process_exited``, not
``Process.wait()``: on Python 3.11 ``wait()`` also waits for the pipes to close, which
a background child holding stdout delays indefinitely.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

from kubeturn_harness.tools import context, errors

STDOUT = 1
STDERR = 2

Sink = Callable[[int, bytes], bool]
"""Takes output from a pipe (``STDOUT`` or ``STDERR``); answers False when it wants no more."""


class _Watcher(asyncio.SubprocessProtocol):
    """Passes output to the sink and resolves a future at the process's exit and one
    when output is done (every pipe at its end, or the sink had enough)."""

    def __init__(self, sink: Sink, pipes: set[int]) -> None:
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.output_done: asyncio.Future[None] = loop.create_future()
        self._sink = sink
        self._open = pipes

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        if self.output_done.done():
            return
        chunk = data if isinstance(data, bytes) else data.encode()  # binary pipes: bytes
        if not self._sink(fd, chunk):
            self.output_done.set_result(None)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.output_done.done():
            self.output_done.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


class Running:
    """A subprocess started by ``spawned``."""

    def __init__(self, transport: asyncio.SubprocessTransport, watcher: _Watcher) -> None:
        self._transport = transport
        self._watcher = watcher

    async def exit(self) -> int:
        """Until the process has exited (its children may still run); its exit status,
        negative for the signal that killed it."""
        await asyncio.shield(self._watcher.exited)
        code = self._transport.get_returncode()
        assert code is not None  # set before process_exited is called
        return code

    async def output(self) -> None:
        """Until every output pipe is at its end, or the sink wanted no more."""
        await asyncio.shield(self._watcher.output_done)

    def kill_group(self) -> None:
        """SIGKILL every process left in the group (its id is the leader's pid)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._transport.get_pid(), signal.SIGKILL)


@contextlib.asynccontextmanager
async def spawned(
    argv: Sequence[str],
    ctx: context.ToolContext,
    *,
    cwd: Path,
    sink: Sink,
    merge_stderr: bool,
) -> AsyncIterator[Running]:
    """``argv`` running in its own process group, its output going to ``sink``;
    with ``merge_stderr`` stderr arrives as ``STDOUT`` too."""
    if any("\0" in arg for arg in argv):
        raise errors.ToolFailure("A NUL character cannot be passed to a command; remove it.")
    pipes = {STDOUT} if merge_stderr else {STDOUT, STDERR}
    transport, watcher = await asyncio.get_running_loop().subprocess_exec(
        lambda: _Watcher(sink, pipes),
        *argv,
        cwd=cwd,
        env=dict(ctx.env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge_stderr else asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    running = Running(transport, watcher)
    try:
        yield running
    finally:
        running.kill_group()
        transport.close()
        await running.exit()
