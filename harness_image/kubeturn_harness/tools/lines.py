"""Reading text files line by line in bounded memory, and showing one line.

Used by ``read`` and the Python ``grep``. A line longer than a bound is cut, and the
rest of it is skipped without being held in memory. Decides nothing about what a
result says; never writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from kubeturn_harness.tools import limits

CUT_MARKER = f" [… line cut at {limits.LINE_CHARS} characters]"


def bounded(handle: BinaryIO, max_bytes: int) -> Iterator[bytes]:
    """Each line of ``handle`` without its newline, at most ``max_bytes`` of it."""
    while line := handle.readline(max_bytes):
        if line.endswith(b"\n"):
            yield line[:-1]
            continue
        rest = line
        while len(rest) == max_bytes and not rest.endswith(b"\n"):
            rest = handle.readline(max_bytes)  # skip what is beyond the bound
        yield line


def shown(raw: bytes) -> str:
    """One line as a result shows it: decoded (bad UTF-8 as U+FFFD), without a CR
    before its newline, cut at ``LINE_CHARS`` characters with a marker."""
    return cut(raw.decode("utf-8", "replace"))


def cut(text: str) -> str:
    """``text`` without a trailing CR, cut at ``LINE_CHARS`` characters with a marker."""
    text = text.removesuffix("\r")
    if len(text) > limits.LINE_CHARS:
        return text[: limits.LINE_CHARS] + CUT_MARKER
    return text
