"""The record of every chat request the scripted model received, and its held requests.

Tests read the record (``GET /_requests``) to assert what the Harness sent and when a
response ended; they release held responses through it (``POST /_release``). Records
live in memory for the life of the server. No network IO; time comes from
``time.time()`` because the record is read by other processes' tests as epoch seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One chat request and what became of its response."""

    index: int
    """Arrival number, counted from 0 over the server's life (a clear does not reset it)."""
    received_at: float
    body: Any
    """The request JSON as received; ``None`` when the body was not JSON."""
    closed_at: float | None = None
    """When the response finished or the client disconnected."""
    disconnected: bool = False
    held: bool = False
    released: bool = False
    conversation: str | None = None
    """The ``match`` of the Conversation that answered, or ``None`` when none matched."""
    step: int | None = None
    """The Step index asked for (the number of assistant messages), when one matched."""
    cut: bool = False
    """The step's ``cut`` broke the answer off."""

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "receivedAt": self.received_at,
            "closedAt": self.closed_at,
            "disconnected": self.disconnected,
            "held": self.held,
            "released": self.released,
            "conversation": self.conversation,
            "step": self.step,
            "cut": self.cut,
            "body": self.body,
        }


class Journal:
    """Request records in arrival order, and the release signals of held requests."""

    def __init__(self) -> None:
        self._records: list[RequestRecord] = []
        self._arrivals = 0
        self._holds: dict[int, tuple[RequestRecord, asyncio.Event]] = {}

    def records(self) -> list[RequestRecord]:
        return list(self._records)

    def clear(self) -> None:
        """Forget the records; requests being held stay held and releasable."""
        self._records.clear()

    @contextmanager
    def receiving(self, body: Any) -> Iterator[RequestRecord]:
        """Record a request for as long as its response lasts.

        ``closedAt`` is stamped when the block exits, however it exits; a cancellation
        (the client disconnected, or the server is stopping) also marks the record
        ``disconnected`` before it propagates.
        """
        record = RequestRecord(index=self._arrivals, received_at=time.time(), body=body)
        self._arrivals += 1
        self._records.append(record)
        try:
            yield record
        except asyncio.CancelledError:
            record.disconnected = True
            raise
        finally:
            record.closed_at = time.time()

    async def hold(self, record: RequestRecord) -> None:
        """Wait until ``record`` is released; cancelling the wait leaves nothing behind."""
        record.held = True
        released = asyncio.Event()
        self._holds[record.index] = (record, released)
        try:
            await released.wait()
        finally:
            del self._holds[record.index]

    def release(self, match: str | None) -> int:
        """Release the held requests of the Conversation ``match``, or all; count them."""
        count = 0
        for record, released in self._holds.values():
            if (match is None or record.conversation == match) and not released.is_set():
                released.set()
                record.released = True
                count += 1
        return count
