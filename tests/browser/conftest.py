"""Fixtures of the browser tier: real local Runs, ``kubeturn ui`` serving them, and a
headless Chromium driven by Playwright (ADR 0108).

Playwright cannot download a browser here: it drives the Chromium installed on the
machine (``KUBETURN_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH). The
tier skips, saying why, when there is none or Playwright is missing. Two Runs run in the
background for the whole module: ``task-with-review`` waiting at ``humanReview`` after
four Turns, and ``live`` whose one Turn stays live (the scripted model holds its answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import queue
import re
import shutil
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubeturn.local.ui import serve
from kubeturn.local.workdir import Workdir
from kubeturn.transcripts import Entry, Query, TranscriptSource
from tests.cli.support import EXAMPLES, Background, git_repo, wait_status

MACHINES = Path(__file__).parent / "machines"
SCREENSHOTS = os.environ.get("KUBETURN_CONSOLE_SCREENSHOTS")
"""A directory to save each page's screenshot in (``docs/console`` regenerates the
README's); none saves nothing."""


def chromium() -> str:
    found = os.environ.get("KUBETURN_CHROMIUM") or next(
        (p for name in ("chromium", "chromium-browser") if (p := shutil.which(name))), None
    )
    if found is None:
        pytest.skip("no Chromium: install Debian's chromium, or set KUBETURN_CHROMIUM")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; the test fails on any error the page reported (a script's, a
    resource refused by the console's content security policy)."""
    opened = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: errors.append(str(e)))
    yield opened
    opened.close()
    assert errors == [], errors


def screenshot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium()
    path = git_repo(tmp_path_factory.mktemp("browser") / "project")
    for name in ("task-with-review.yaml", "task-with-review.script.yaml"):
        shutil.copy(EXAMPLES / name, path / name)
    for name in ("live.yaml", "live.script.yaml"):
        shutil.copy(MACHINES / name, path / name)
    return path


@pytest.fixture(scope="module")
def runs(project: Path) -> Iterator[Path]:
    """Both Runs started and at rest; interrupted (as Ctrl-C does) at the end."""
    started = [
        Background.start(
            "run", f"{name}.yaml", "--model", f"scripted:{name}.script.yaml", cwd=project
        )
        for name in ("task-with-review", "live")
    ]
    try:
        root = project / ".kubeturn-work"
        wait_status(
            root / "task-with-review",
            "task-with-review",
            lambda s: s.get("state") == "humanReview" and s.get("turnCount") == 4,
            "task-with-review to wait at humanReview",
        )
        wait_status(
            root / "live",
            "live",
            lambda s: [t.get("phase") for t in s["snapshot"].get("turns", [])] == ["live"],
            "the live Run's Turn to be live",
        )
        yield root
    finally:
        for running in started:
            if running.process.poll() is None:
                running.signal(signal.SIGINT)
                with contextlib.suppress(AssertionError):
                    running.wait()
            running.stop()


@pytest.fixture(scope="module")
def ui(project: Path, runs: Path) -> Iterator[str]:
    """``kubeturn ui`` serving the project's Runs: the URL it printed."""
    served = Background.start("ui", "--port", "0", cwd=project)
    try:
        line = served.wait_line(r"serving the Runs under .* at http://127\.0\.0\.1:\d+/runs")
        found = re.search(r"(http://\S+)/runs", line)
        assert found is not None
        yield found.group(1)
    finally:
        served.signal(signal.SIGINT)
        with contextlib.suppress(AssertionError):
            served.wait()
        served.stop()


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


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("transcripts")


@pytest.fixture(scope="module")
def console(runs: Path, transcripts: Path) -> Iterator[str]:
    served = InProcess(runs, transcripts)
    yield served.url
    served.stop()
