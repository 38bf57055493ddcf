"""What the in-process benchmarks share: timing a call, and a scratch directory in
memory where the machine has one (so a log's writes measure the code, not the disk)."""

from __future__ import annotations

import os
import tempfile
import timeit
from collections.abc import Callable


def per_call_us(call: Callable[[], object], number: int) -> float:
    """The best of 5 repeats of ``number`` calls, in microseconds per call."""
    return min(timeit.repeat(call, number=number, repeat=5)) / number * 1e6


def scratch() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory, under /dev/shm when there is one."""
    return tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
