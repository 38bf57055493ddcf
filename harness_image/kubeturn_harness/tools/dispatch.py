"""Running one Working tool by name: validation, the tool, and the translation of its
expected failures into ``ToolResult(is_error=True)``.

The one place ``OSError`` becomes a message for the model. Does not check Workspace
access: the tool loop offers only ``working_tools(access)`` and refuses other names
before calling ``run_tool``. File tools run in worker threads, never on the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, assert_never

from kubeturn_harness.tools import context, errors, files, grep, listing, schemas, shell


async def run_tool(
    name: str, arguments: dict[str, Any], ctx: context.ToolContext
) -> context.ToolResult:
    """Runs the Working tool ``name``. Expected failures (bad arguments, a missing file,
    no unique match, a non-zero exit) are failed results, never exceptions; a cancelled
    run kills its processes and re-raises ``CancelledError``."""
    try:
        tool = schemas.ToolName(name)
    except ValueError:
        known = ", ".join(schemas.ToolName)
        return context.ToolResult(
            f"There is no Working tool named {name!r}; the Working tools are {known}.",
            is_error=True,
        )
    try:
        return await _run(schemas.validate(tool, arguments), ctx)
    except errors.ToolError as error:
        return context.ToolResult(str(error), is_error=True)
    except OSError as error:
        return context.ToolResult(_describe(error), is_error=True)


async def _run(args: schemas.Arguments, ctx: context.ToolContext) -> context.ToolResult:
    match args:
        case schemas.Read():
            return await asyncio.to_thread(files.read, args, ctx)
        case schemas.Write():
            return await asyncio.to_thread(files.write, args, ctx)
        case schemas.Edit():
            return await asyncio.to_thread(files.edit, args, ctx)
        case schemas.Bash():
            return await shell.bash(args, ctx)
        case schemas.Grep():
            return await grep.grep(args, ctx)
        case schemas.Glob():
            return await listing.glob(args, ctx)
        case _:
            assert_never(args)


def _describe(error: OSError) -> str:
    """``No such file or directory: /work/x`` rather than ``[Errno 2] ...``."""
    reason = error.strerror or str(error)
    return f"{reason}: {error.filename}" if error.filename else reason
