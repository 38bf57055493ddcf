"""Parts of the browser tier: where Chromium is, screenshots, and the scripted model of a
local Run (its held answers, released when the test says)."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeturn.local.workdir import Workdir
from tests.cli.support import WAIT_S

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


def scripted_model(workdir: Path) -> str:
    """The URL of the scripted model ``kubeturn run --model scripted:`` started for the Run
    of ``workdir``: the providers file it wrote there names it."""
    providers = yaml.safe_load(Workdir.at(workdir).providers.read_text())
    return str(providers["scripted"]["baseUrl"]).removesuffix("/v1")


def held(model: str) -> list[int]:
    """The steps of the requests the scripted model holds open now."""
    with urllib.request.urlopen(f"{model}/_requests", timeout=5) as response:
        requests = json.load(response)
    return [r["step"] for r in requests if r["held"] and not r["released"]]


def wait_held(model: str, steps: list[int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while (now := held(model)) != steps:
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S:g} s for held steps {steps}; held: {now}")
        time.sleep(0.05)


def release(model: str) -> int:
    """Let every held answer go on; how many there were."""
    sent = urllib.request.Request(f"{model}/_release", data=b"{}", method="POST")
    with urllib.request.urlopen(sent, timeout=5) as response:
        return int(json.load(response)["released"])
