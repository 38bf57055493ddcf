"""The ``bash`` tool: one command, its combined output's tail and its exit code.

The command runs through ``processes.spawned``, so a timeout, a cancelled Turn (a sweep)
or the command's own end leaves none of its processes running. Memory is bounded by
keeping only the last ``output_limit_bytes`` of output as it arrives. Must not read
or write files itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kubeturn_harness.tools import context, processes, schemas


class Tail:
    """The last ``limit`` bytes of a stream, and how many bytes before them were dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def add(self, fd: int, data: bytes) -> bool:
        """A ``processes.Sink``: keeps the end of everything, so always wants more."""
        self.kept += data
        excess = len(self.kept) - self.limit
        if excess > 0:
            del self.kept[:excess]
            self.dropped += excess
        return True


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None
    """None when the command timed out; negative when a signal killed it."""
    output: str
    """The tail of stdout and stderr combined."""
    dropped: int
    """Bytes of output before the tail that were dropped."""
    kept: int
    """Bytes of output in the tail."""
    seconds: float
    """The time limit it ran under."""


async def run_command(command: str, ctx: context.ToolContext, seconds: float) -> CommandResult:
    """Run ``bash -c command`` in ``ctx.cwd`` as the tools run, within ``seconds``."""
    tail = Tail(ctx.output_limit_bytes)
    code: int | None = None
    async with processes.spawned(
        ["bash", "-c", command], ctx, cwd=ctx.cwd, sink=tail.add, merge_stderr=True
    ) as running:
        try:
            async with asyncio.timeout(seconds):
                code = await running.exit()
                running.kill_group()  # background children would hold stdout open
                ctx.end_strays()  # and so would those that left the group
                await running.output()
        except TimeoutError:
            code = None
    output = tail.kept.decode("utf-8", "replace").removesuffix("\n")
    return CommandResult(code, output, tail.dropped, len(tail.kept), seconds)


async def bash(args: schemas.Bash, ctx: context.ToolContext) -> context.ToolResult:
    """Runs ``bash -c args.command`` in ``ctx.cwd``; a non-zero exit or a timeout is an error."""
    seconds = ctx.bash_timeout_s
    if args.timeoutSeconds is not None:
        seconds = min(args.timeoutSeconds, seconds)
    result = await run_command(args.command, ctx, seconds)
    parts: list[str] = []
    if result.dropped:
        parts.append(
            f"[Output cut: the first {result.dropped} bytes were dropped; "
            f"the last {result.kept} follow.]"
        )
    parts.append(result.output or "(no output)")
    code = result.exit_code
    if code is None:
        parts.append(f"[Timed out after {seconds:g} s; the command and its processes were killed.]")
    elif code < 0:
        parts.append(f"[Killed by signal {-code}.]")
    else:
        parts.append(f"[Exit code {code}.]")
    return context.ToolResult("\n".join(parts), is_error=code != 0)
