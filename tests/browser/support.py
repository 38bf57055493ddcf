"""Parts of the browser tier: where Chromium is, screenshots, and the console served in
the test's own process with transcripts the test writes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import queue
import shutil
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubeturn.local.ui import serve
from kubeturn.local.workdir import Workdir
from kubeturn.transcripts import Entry, Query, TranscriptSource

SCREENSHOTS = os.environ.get("KUBETURN_CONSOLE_SCREENSHOTS")
"""A directory to save each page's screenshot in (``docs/console`` regenerates the
README's); none saves nothing."""


def chromium() -> str:
    """The Chromium to drive; the test skips, saying why, when there is none."""
    named = os.environ.get("KUBETURN_CHROMIUM")
    if named:
        if not os.access(named, os.X_OK):
            pytest.skip(f"KUBETURN_CHROMIUM={named} is not an executable")
        return named
    names = ("chromium", "chromium-browser")
    found = next((path for name in names if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip("no Chromium: install Debian's chromium, or set KUBETURN_CHROMIUM")
    return found


def screenshot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


@dataclass(frozen=True)
class FileTranscript:
    """A transcript read from a file of NDJSON entries the test writes as it goes."""

    path: Path

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        for line in lines:
            entry = Entry.model_validate_json(line)
            if query.turn in (None, entry.turn):
                yield entry


class InProcess:
    """The console of ``kubeturn ui`` served in a thread of the test's, its transcripts
    read from ``<transcripts>/<run>.ndjson``."""

    def __init__(self, root: Path, transcripts: Path) -> None:
        self._root, self._transcripts = root, transcripts
        self._urls: queue.Queue[str] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._thread.start()
        self.url = self._urls.get(timeout=20).removesuffix("/runs")

    def _source(self, workdir: Workdir, run: str) -> TranscriptSource:
        return FileTranscript(self._transcripts / f"{run}.ndjson")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        ready: asyncio.Future[str] = self._loop.create_future()
        self._task = asyncio.ensure_future(
            serve(self._root, 0, io.StringIO(), transcripts=self._source, ready=ready)
        )
        self._urls.put(await ready)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def stop(self) -> None:
        assert self._loop is not None
        assert self._task is not None
        self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(20)
