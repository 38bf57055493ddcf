"""Turning the paths the model names into real paths, and refusing the denied ones.

Every path a tool touches passes through ``resolve`` first: relative to the Turn's
``cwd``, symbolic links resolved, so a link cannot lead into a denied path. Absolute
paths are taken as given; the tools are rooted at ``cwd``, not confined to it here (the
toolbox's session confines them, with Landlock, to their Run's worktrees). Must not
open files.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubeturn_harness.tools import context, errors


def resolve(ctx: context.ToolContext, raw: str) -> Path:
    """The real path ``raw`` names; ``ToolFailure`` if it is not a path or is denied."""
    if "\0" in raw:
        raise errors.ToolFailure(f"{raw!r} is not a path: it contains a NUL character.")
    try:
        path = Path(os.path.realpath(ctx.cwd / raw))
    except (ValueError, OSError) as error:
        raise errors.ToolFailure(f"{raw!r} is not a usable path: {error}") from error
    for denied in denied_roots(ctx):
        if path.is_relative_to(denied):
            raise errors.ToolFailure(
                f"Refused: {path} is inside {denied}, which the Working tools may not "
                "read, write or list."
            )
    return path


def denied_roots(ctx: context.ToolContext) -> tuple[Path, ...]:
    """The real paths of ``ctx.denied``: a real path under one of them is denied."""
    return tuple(Path(os.path.realpath(denied)) for denied in ctx.denied)


def is_denied(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether the real ``path`` lies in one of the real ``roots``."""
    return any(path.is_relative_to(root) for root in roots)


def printable(name: str) -> str:
    """``name`` as text a result can carry: bytes that are not UTF-8 (kept by
    ``os.fsdecode`` as lone surrogates) become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
