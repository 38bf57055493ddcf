"""Fixtures of the browser tier: real local Runs, ``kubeturn ui`` serving them, and a
headless Chromium driven by Playwright (ADR 0108).

Playwright cannot download a browser here: it drives the Chromium installed on the
machine (``KUBETURN_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH). The
tier skips, saying why, when there is none or Playwright is missing. Three Runs run in
the background for the whole module: ``task-with-review`` waiting at ``humanReview`` after
four Turns, ``live`` whose one Turn stays live: the scripted model holds its second
answer until the test releases it, and ``regions`` at rest in two regions of a parallel
state, one of them fanning out.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.support import chromium
from tests.cli.support import EXAMPLES, Background, git_repo, wait_status

MACHINES = Path(__file__).parent / "machines"
REGIONS_STATE = "review.left.waiting, review.right.fanning"


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


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium()
    path = git_repo(tmp_path_factory.mktemp("browser") / "project")
    for name in ("task-with-review.yaml", "task-with-review.script.yaml"):
        shutil.copy(EXAMPLES / name, path / name)
    for name in ("live.yaml", "live.script.yaml", "regions.yaml", "regions.script.yaml"):
        shutil.copy(MACHINES / name, path / name)
    return path


@pytest.fixture(scope="module")
def runs(project: Path) -> Iterator[Path]:
    """The Runs started and at rest; interrupted (as Ctrl-C does) at the end."""
    started = [
        Background.start(
            "run", f"{name}.yaml", "--model", f"scripted:{name}.script.yaml", cwd=project
        )
        for name in ("task-with-review", "live", "regions")
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
        wait_status(
            root / "regions",
            "regions",
            lambda s: s.get("state") == REGIONS_STATE,
            "the regions Run to rest in both regions",
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
