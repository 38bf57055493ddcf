"""The ``bash`` tool: one command, its combined output's tail and its exit code.

The command runs through ``processes.spawned``, so a timeout, a cancelled Turn (a sweep)
or the command's own end leaves none of its processes running. Memory is bounded by
keeping only the last ``output_limit_bytes`` of output as it arrives. Must not read
or write files itself.
"""

from __future__ import annotations

import asyncio

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


async def bash(args: schemas.Bash, ctx: context.ToolContext) -> context.ToolResult:
    """Runs ``bash -c args.command`` in ``ctx.cwd``; a non-zero exit or a timeout is an error."""
    seconds = ctx.bash_timeout_s
    if args.timeoutSeconds is not None:
        seconds = min(args.timeoutSeconds, seconds)
    tail = Tail(ctx.output_limit_bytes)
    code: int | None = None
    async with processes.spawned(
        ["bash", "-c", args.command], ctx, cwd=ctx.cwd, sink=tail.add, merge_stderr=True
    ) as running:
        try:
            async with asyncio.timeout(seconds):
                code = await running.exit()
                running.kill_group()  # background children would hold stdout open
                await running.output()
        except TimeoutError:
            code = None
    parts: list[str] = []
    if tail.dropped:
        parts.append(
            f"[Output cut: the first {tail.dropped} bytes were dropped; "
            f"the last {len(tail.kept)} follow.]"
        )
    parts.append(tail.kept.decode("utf-8", "replace").removesuffix("\n") or "(no output)")
    if code is None:
        parts.append(f"[Timed out after {seconds:g} s; the command and its processes were killed.]")
    elif code < 0:
        parts.append(f"[Killed by signal {-code}.]")
    else:
        parts.append(f"[Exit code {code}.]")
    return context.ToolResult("\n".join(parts), is_error=code != 0)
