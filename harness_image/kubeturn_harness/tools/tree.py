"""Walking a directory tree for ``glob`` and the Python ``grep``, and bounding the walk.

The walk is depth first with the entries of each directory in name order (the order of
``rg --sort path``), skips every ``.git`` (directory, or the file of a worktree), never
enters a denied path and never follows a symbolic link, so every entry's path is real.
Unreadable directories are passed over. It runs in a worker thread; it must not touch
the event loop, and it reads no file contents.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kubeturn_harness.tools import paths


@dataclass(frozen=True)
class Entry:
    rel: str
    """``/``-separated path relative to the walk's root."""
    path: Path
    is_dir: bool
    """A real directory (a symbolic link to one is not)."""
    is_symlink: bool


class Budget:
    """How long a walk may run, and a switch to stop it sooner (its caller was cancelled:
    a worker thread cannot be interrupted, so the walk checks this between entries)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def spent(self) -> bool:
        return self._stopped.is_set() or time.monotonic() >= self._deadline


def walk(root: Path, denied: tuple[Path, ...], *, max_depth: int | None = None) -> Iterator[Entry]:
    """Every entry under the real directory ``root``; ``max_depth`` 1 lists only
    ``root``'s own entries."""
    pending = [(entry, "", 1) for entry in reversed(_children(root))]
    while pending:
        entry, prefix, depth = pending.pop()
        path = Path(entry.path)
        if entry.name == ".git" or paths.is_denied(path, denied):
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_symlink = entry.is_symlink()
        except OSError:
            continue
        rel = prefix + entry.name
        yield Entry(rel=rel, path=path, is_dir=is_dir, is_symlink=is_symlink)
        if is_dir and (max_depth is None or depth < max_depth):
            pending.extend((child, rel + "/", depth + 1) for child in reversed(_children(path)))


def _children(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError:
        return []
