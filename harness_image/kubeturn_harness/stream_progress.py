"""When the Harness tells a conversation's followers how far a model answer has streamed.

Providers report a request's usage only when its stream ends, and one answer may stream
for minutes; a follower (the Orchestrator, holding a Turn to a budget or watching it for
a stall) must see the output grow before then. So the run reports, in ``model-streamed``
events, the output pieces streamed so far, each counted as a token. A report is due when
at least ``tokens`` pieces AND at least ``seconds`` have passed since the request began
or since its last report: a short answer makes none, a fast stream makes one per
``seconds``, a slow one one per ``tokens``. Pure: time comes in as a function, asked only
once enough pieces have come, so the common piece costs a count and a comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STREAM_PROGRESS_TOKENS = 64
"""Pieces between two reports at the least. Most answers that only call a tool stream
fewer, and make no report: their ``message-appended`` follows within moments."""
STREAM_PROGRESS_S = 2.0
"""Seconds between two reports at the least: each is one line of the conversation's log
and one wake-up of each follower, so a 10-minute answer adds at most 300; a budget or a
stall is judged in seconds to minutes, so 2 s late is soon enough."""


@dataclass
class StreamThrottle:
    """Counts one request's output pieces and says when a report is due."""

    tokens: int
    seconds: float
    since: float
    """Monotonic seconds at the request's start or its last report."""
    pending: int = 0
    """Pieces counted since then."""

    def due(self, now: Callable[[], float]) -> bool:
        """Count one piece; True when a report is due, and then count from ``now()``."""
        self.pending += 1
        if self.pending < self.tokens:
            return False
        at = now()
        if at - self.since < self.seconds:
            return False
        self.pending, self.since = 0, at
        return True
