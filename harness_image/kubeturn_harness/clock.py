"""The Harness's clock, injected so tests and the record agree on what time it is."""

from __future__ import annotations

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


class SystemClock:
    def now(self) -> str:
        return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def monotonic(self) -> float:
        return time.monotonic()
