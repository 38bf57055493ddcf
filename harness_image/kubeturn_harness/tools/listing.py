"""The ``glob`` tool: the paths under a directory that match a glob pattern.

The pattern is matched against each path relative to the search root, so ``*.py``
lists the root's own files and ``**/*.py`` every depth. The walk (``tree.walk``) runs
in a worker thread under the Turn's time limit. Must not read file contents.
"""

from __future__ import annotations

import asyncio

from kubeturn_harness.tools import context, errors, limits, paths, patterns, schemas, tree


async def glob(args: schemas.Glob, ctx: context.ToolContext) -> context.ToolResult:
    """Sorted matching paths, directories marked with a trailing ``/``."""
    budget = tree.Budget(ctx.bash_timeout_s)
    try:
        return await asyncio.to_thread(_glob, args, ctx, budget)
    finally:
        budget.stop()


def _glob(args: schemas.Glob, ctx: context.ToolContext, budget: tree.Budget) -> context.ToolResult:
    if args.pattern.startswith("/"):
        raise errors.ToolFailure(
            f"pattern {args.pattern!r} is absolute; put the directory in path and keep "
            "the pattern relative to it."
        )
    root = paths.resolve(ctx, args.path)
    if not root.is_dir():
        raise errors.ToolFailure(f"{root} is not a directory; glob searches under a directory.")
    pattern = args.pattern.removeprefix("./")
    directories_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    regex = patterns.compile_glob(pattern)
    # Without '**' a pattern of n segments cannot match deeper than n levels.
    depth = None if "**" in pattern else pattern.count("/") + 1
    found: list[str] = []
    timed_out = False
    for entry in tree.walk(root, paths.denied_roots(ctx), max_depth=depth):
        if budget.spent():
            timed_out = True
            break
        if (entry.is_dir or not directories_only) and regex.match(entry.rel):
            found.append(paths.printable(entry.rel) + ("/" if entry.is_dir else ""))
    found.sort()
    if not found and not timed_out:
        return context.ToolResult(f"No paths under {root} match {args.pattern!r}.")
    shown: list[str] = []
    size = 0
    for rel in found[: limits.GLOB_PATHS]:
        size += len(rel.encode()) + 1
        if shown and size > ctx.output_limit_bytes:
            break
        shown.append(rel)
    if len(shown) < len(found):
        shown.append(
            f"[Showing the first {len(shown)} of {len(found)} paths; narrow the pattern "
            "or path to see the rest.]"
        )
    if timed_out:
        shown.append(
            f"[The search timed out after {ctx.bash_timeout_s:g} s; the paths are partial.]"
        )
    return context.ToolResult("\n".join(shown), is_error=timed_out)
