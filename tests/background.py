"""Checks the suite starts as soon as it is collected and whose tests only read the answer.

A cold mypy spends about a minute of one core; the tiers collected before its test spend
most of theirs waiting on subprocesses and sockets, so it runs beside them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MYPY_TEST = "tests/test_static.py::test_mypy_strict"
MYPY = pytest.StashKey["subprocess.Popen[str]"]()


def start_mypy(config: pytest.Config) -> None:
    config.stash[MYPY] = subprocess.Popen(
        [str(BIN / "mypy")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(config: pytest.Config) -> None:
    """End a check whose test did not read it (a run stopped early, ``-x``)."""
    process = config.stash.get(MYPY, None)
    if process is not None and process.poll() is None:
        process.kill()
        process.communicate()
