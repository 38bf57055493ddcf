"""The Harness's clock, injected so tests and the record agree on what time it is, and so
a wait (a model request's back-off) takes no real time in a test."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> str:
        """Wall-clock time as an RFC 3339 string, for records."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for waits and latencies."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; cancelling the waiting task ends the wait at once."""
        ...


class SystemClock:
    def now(self) -> str:
        return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
