"""The ``grep`` tool: ripgrep when the image has it, a pure-Python search when not.

Both searches give the same answer for the same tree: files in path order, hidden
files searched, ``.git`` and binary files (a NUL byte) skipped, symbolic links not
followed, ``glob`` with ripgrep's meaning, denied paths left out, matches as
``file:line:text`` with files relative to the search root. ripgrep runs as a
subprocess of the Turn (its identity, environment and time limit); the Python search
runs in a worker thread, never on the event loop. Must not write anything.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubeturn_harness.tools import (
    context,
    errors,
    limits,
    lines,
    paths,
    patterns,
    processes,
    schemas,
    tree,
)


@dataclass(frozen=True)
class _Target:
    root: Path
    """The real file or directory searched."""
    is_file: bool


@dataclass(frozen=True)
class _Match:
    file: str
    """Relative to the search root (a file's own name when the root is that file)."""
    line: int
    text: str


@dataclass
class _Found:
    matches: list[_Match] = field(default_factory=list)
    more: bool = False
    """There are matches beyond ``GREP_MATCHES``."""
    timed_out: bool = False

    def add(self, match: _Match) -> bool:
        """Keeps ``match``; False when the cap is reached and the search should stop."""
        if len(self.matches) == limits.GREP_MATCHES:
            self.more = True
            return False
        self.matches.append(match)
        return True


async def grep(args: schemas.Grep, ctx: context.ToolContext) -> context.ToolResult:
    """Matches of ``args.pattern`` under ``args.path``; "No matches." is not an error."""
    target = await asyncio.to_thread(_target, args, ctx)
    ripgrep = shutil.which("rg")
    if ripgrep is not None:
        found = await _with_ripgrep(ripgrep, args, target, ctx)
    else:
        budget = tree.Budget(ctx.bash_timeout_s)
        try:
            found = await asyncio.to_thread(_in_python, args, target, ctx, budget)
        finally:
            budget.stop()
    return _answer(found, ctx)


def _target(args: schemas.Grep, ctx: context.ToolContext) -> _Target:
    root = paths.resolve(ctx, args.path)
    if root.is_dir():
        return _Target(root=root, is_file=False)
    with root.open("rb") as handle:
        for raw in lines.bounded(handle, limits.LINE_BYTES_SEARCHED):
            if b"\0" in raw:
                raise errors.ToolFailure(f"{root} is a binary file; grep searches text.")
    return _Target(root=root, is_file=True)


async def _with_ripgrep(
    ripgrep: str, args: schemas.Grep, target: _Target, ctx: context.ToolContext
) -> _Found:
    argv = [
        ripgrep,
        "--line-number",
        "--no-heading",
        "--color=never",
        "--with-filename",
        "--null",  # a NUL after each file name, so names with ':' parse
        "--hidden",
        "--no-ignore",
        "--no-messages",  # unreadable files are passed over, as the Python search does
        "--sort=path",
        f"--max-columns={limits.LINE_BYTES_SHOWN}",
        "--max-columns-preview",
    ]
    if args.ignoreCase:
        argv.append("--ignore-case")
    if args.glob is not None:
        argv += ["--glob", args.glob]
    argv += ["--glob", "!.git", "--regexp", args.pattern, "--"]
    cwd, where = (target.root.parent, target.root.name) if target.is_file else (target.root, ".")
    argv.append(where)
    output = _RipgrepOutput(found=_Found(), base=cwd, denied=paths.denied_roots(ctx))
    async with processes.spawned(
        argv, ctx, cwd=cwd, sink=output.received, merge_stderr=False
    ) as running:
        try:
            async with asyncio.timeout(ctx.bash_timeout_s):
                await running.output()
                if output.found.more:
                    return output.found
                if await running.exit() == 2 and not output.found.matches:
                    message = output.errors.decode("utf-8", "replace").strip()
                    raise errors.ToolFailure(f"ripgrep refused the search: {message}")
        except TimeoutError:
            output.found.timed_out = True
    return output.found


class _RipgrepOutput:
    """A ``processes.Sink`` for ripgrep: parses ``file NUL line:text`` records as they
    arrive, leaves out denied files, and wants no more once the cap is reached."""

    def __init__(self, found: _Found, base: Path, denied: tuple[Path, ...]) -> None:
        self.found = found
        self.errors = b""
        self._base = base
        self._denied = denied
        self._pending = b""

    def received(self, fd: int, data: bytes) -> bool:
        if fd == processes.STDERR:
            self.errors = (self.errors + data)[: limits.PIPE_CHUNK]
            return True
        *records, self._pending = (self._pending + data).split(b"\n")
        for record in records:
            match = _parse(record)
            if match is None or paths.is_denied(self._base / match.file, self._denied):
                continue
            if not self.found.add(_Match(match.file.removeprefix("./"), match.line, match.text)):
                return False
        return True


def _parse(record: bytes) -> _Match | None:
    """One ``file NUL line:text`` record; None for anything else (a notice)."""
    name, nul, rest = record.partition(b"\0")
    number, colon, text = rest.partition(b":")
    if not nul or not colon or not number.isdigit():
        return None
    return _Match(file=os.fsdecode(name), line=int(number), text=text.decode("utf-8", "replace"))


def _in_python(
    args: schemas.Grep, target: _Target, ctx: context.ToolContext, budget: tree.Budget
) -> _Found:
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.ignoreCase else 0)
    except re.error as error:
        raise errors.ToolFailure(
            f"Invalid regular expression {args.pattern!r}: {error}."
        ) from error
    found = _Found()
    candidates: Iterable[tuple[str, Path]]
    if target.is_file:
        candidates = [(target.root.name, target.root)]
    else:
        denied = paths.denied_roots(ctx)
        selects = _glob_filter(args.glob)
        candidates = (
            (entry.rel, entry.path)
            for entry in tree.walk(target.root, denied)
            if not entry.is_dir and not entry.is_symlink and selects(entry.rel)
        )
    for rel, path in candidates:
        if budget.spent():
            found.timed_out = True
            return found
        for match in _file_matches(path, rel, regex):
            if not found.add(match):
                return found
    return found


def _glob_filter(glob: str | None) -> Callable[[str], bool]:
    """Which files ``glob`` selects, as ripgrep reads it: without a ``/`` it is matched
    against names, with one against paths from the root; a trailing ``/`` matches
    directories only; a leading ``!`` excludes what it matches, and a directory it
    matches is excluded with everything below it."""
    if glob is None:
        return lambda rel: True
    negated = glob.startswith("!")
    body = glob.removeprefix("!")
    directories_only = body.endswith("/")
    body = body.rstrip("/")
    anchored = "/" in body
    regex = patterns.compile_glob(body.removeprefix("/"))

    def matches(rel: str) -> bool:
        return regex.match(rel if anchored else rel.rpartition("/")[2]) is not None

    def selects(rel: str) -> bool:
        parts = rel.split("/")
        directories = ("/".join(parts[:depth]) for depth in range(1, len(parts)))
        if negated:
            return not any(map(matches, directories)) and (directories_only or not matches(rel))
        return not directories_only and matches(rel)

    return selects


def _file_matches(path: Path, rel: str, regex: re.Pattern[str]) -> list[_Match]:
    """Matching lines of one file, at most one more than the cap; none for a binary
    file (a NUL byte anywhere) or one that cannot be read."""
    matches: list[_Match] = []
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(lines.bounded(handle, limits.LINE_BYTES_SEARCHED), 1):
                if b"\0" in raw:
                    return []
                text = raw.decode("utf-8", "replace")
                if len(matches) <= limits.GREP_MATCHES and regex.search(text):
                    matches.append(_Match(file=rel, line=number, text=text))
    except OSError:
        return []
    return matches


def _answer(found: _Found, ctx: context.ToolContext) -> context.ToolResult:
    if not found.matches and not found.timed_out:
        return context.ToolResult("No matches.")
    shown: list[str] = []
    size = 0
    more = found.more
    for match in found.matches:
        line = f"{paths.printable(match.file)}:{match.line}:{lines.cut(match.text)}"
        size += len(line.encode()) + 1
        if shown and size > ctx.output_limit_bytes:
            more = True
            break
        shown.append(line)
    if more:
        shown.append(
            f"[Showing the first {len(shown)} matches; there are more. "
            "Narrow the pattern, path or glob to see the rest.]"
        )
    if found.timed_out:
        shown.append(
            f"[The search timed out after {ctx.bash_timeout_s:g} s; the matches are partial.]"
        )
    return context.ToolResult("\n".join(shown), is_error=found.timed_out)
