"""The numbers that bound what a Working tool reads, walks and answers, each with why.

Constants only; nothing here does IO. The per-Turn limits (timeout, output bytes) live
in ``ToolContext`` instead, because the Harness sets them.
"""

from __future__ import annotations

READ_LINES = 2000
"""Lines ``read`` answers when the model names no ``limit``: most source files whole,
and about as much as one result should carry."""

LINE_CHARS = 2000
"""Characters of one line that ``read`` and ``grep`` show: minified or generated files
have single lines of megabytes, which would fill a result with noise."""

LINE_BYTES_SHOWN = LINE_CHARS * 4
"""Bytes of one line read to show ``LINE_CHARS`` characters (UTF-8 needs at most 4 per
character); the rest of a longer line is skipped without being held in memory."""

LINE_BYTES_SEARCHED = 1024 * 1024
"""Bytes of one line the Python ``grep`` matches against; a longer line is searched in
its first MiB only, so one giant line cannot exhaust the Harness's memory."""

BINARY_SNIFF_BYTES = 8192
"""Bytes at the start of a file that ``read`` checks for a NUL byte, the sign of a
binary file (git's and GNU grep's heuristic uses the same size)."""

GREP_MATCHES = 200
"""Matches ``grep`` answers at most: beyond this the model learns more by narrowing the
pattern, path or glob than by reading on."""

GLOB_PATHS = 500
"""Paths ``glob`` answers at most, for the same reason as ``GREP_MATCHES``; paths are
shorter than match lines, so more fit."""

PIPE_CHUNK = 64 * 1024
"""Bytes read from a subprocess's output at a time: one pipe buffer on Linux."""
