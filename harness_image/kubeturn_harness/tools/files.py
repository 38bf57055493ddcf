"""The file tools: ``read``, ``write`` and ``edit``.

Each is a plain function that does blocking file IO; ``dispatch`` runs it in a worker
thread, never on the event loop. Expected failures raise ``ToolFailure``; an ``OSError``
is left to ``dispatch`` to translate. They run no subprocess.

They open regular files only (``_regular``): a FIFO that no process writes, or a device
that never ends, would hold the call for ever, and unlike ``bash`` these calls have no
time limit of their own that could end them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from kubeturn_harness.tools import context, errors, limits, lines, paths, schemas

NEW_FILE_MODE = 0o666
"""A file ``write`` makes, before the umask (as ``open`` makes one)."""


def read(args: schemas.Read, ctx: context.ToolContext) -> context.ToolResult:
    """Numbered lines from ``args.offset``, at most ``args.limit`` of them and at most
    ``ctx.output_limit_bytes`` of text, saying where to read on when cut short."""
    path = paths.resolve(ctx, args.path)
    if path.is_dir():
        raise errors.ToolFailure(
            f"{path} is a directory; list it with glob (pattern '*', path '{args.path}')."
        )
    binary = errors.ToolFailure(f"{path} is a binary file (it contains NUL bytes); not shown.")
    shown: list[str] = []
    size = 0
    total = 0
    more = False
    with os.fdopen(_regular(path, os.O_RDONLY), "rb") as handle:
        if b"\0" in handle.read(limits.BINARY_SNIFF_BYTES):
            raise binary
        handle.seek(0)
        for total, raw in enumerate(lines.bounded(handle, limits.LINE_BYTES_SHOWN), start=1):
            if b"\0" in raw:
                raise binary
            if total < args.offset:
                continue
            numbered = f"{total:>6}\t{lines.shown(raw)}"
            size += len(numbered.encode()) + 1
            if len(shown) == args.limit or (shown and size > ctx.output_limit_bytes):
                more = True
                break
            shown.append(numbered)
    if not shown:
        if total == 0:
            return context.ToolResult(f"{path} is empty.")
        raise errors.ToolFailure(
            f"offset {args.offset} is past the end of {path}, which has {total} lines."
        )
    if more:
        last = args.offset + len(shown) - 1
        shown.append(
            f"[Lines {args.offset}-{last} shown; the file goes on. Read on with offset={last + 1}.]"
        )
    return context.ToolResult("\n".join(shown))


def write(args: schemas.Write, ctx: context.ToolContext) -> context.ToolResult:
    """Writes ``args.content`` as UTF-8, making missing parent directories."""
    path = paths.resolve(ctx, args.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = args.content.encode()
    _write(path, data)
    return context.ToolResult(f"Wrote {len(data)} bytes to {path}.")


def edit(args: schemas.Edit, ctx: context.ToolContext) -> context.ToolResult:
    """Replaces the one occurrence of ``args.oldText`` with ``args.newText``."""
    path = paths.resolve(ctx, args.path)
    try:
        with os.fdopen(_regular(path, os.O_RDONLY), "rb") as handle:
            text = handle.read().decode()
    except UnicodeDecodeError as error:
        raise errors.ToolFailure(
            f"{path} is not UTF-8 text; edit changes text files only."
        ) from error
    count = text.count(args.oldText)
    if count == 0:
        hint = ""
        if "\r\n" in text and "\r\n" not in args.oldText:
            hint = " The file has CRLF line endings; oldText must have them too."
        raise errors.ToolFailure(f"oldText not found in {path}.{hint}")
    if count > 1:
        raise errors.ToolFailure(
            f"oldText occurs {count} times in {path}; add surrounding context to oldText "
            "so that it matches exactly once."
        )
    at = text.index(args.oldText)
    _write(path, text.replace(args.oldText, args.newText, 1).encode())
    line = text.count("\n", 0, at) + 1
    return context.ToolResult(f"Edited {path}: replaced 1 occurrence at line {line}.")


def _write(path: Path, data: bytes) -> None:
    with os.fdopen(_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as handle:
        handle.write(data)


def _regular(path: Path, flags: int) -> int:
    """``path`` opened with ``flags``, without waiting, when it is a regular file (then
    blocking as usual); ``ToolFailure`` naming what it is otherwise."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, NEW_FILE_MODE)
    except OSError as error:
        if error.errno == errno.ENXIO:  # a FIFO that no process reads
            raise errors.ToolFailure(_not_regular(path, "FIFO (a named pipe)")) from error
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise errors.ToolFailure(_not_regular(path, _kind(mode)))
    os.set_blocking(fd, True)
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO (a named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "directory" if stat.S_ISDIR(mode) else "special file"


def _not_regular(path: Path, kind: str) -> str:
    return (
        f"{path} is a {kind}, not a regular file; read, write and edit open regular files "
        "only (use bash, with its time limit, for anything else)."
    )
