"""Durable conversation logs under the data dir: one append-only JSON-lines file each.

The log is the record: the stream clients follow, the history view, what a restarted
Harness rebuilds its queues from, and what a conversation dropped from memory is read
back from. Every event is written and flushed before it is acknowledged, so it survives
a Harness restart; settlements are also fsynced, so the outcome survives the node. A
torn last line (a crash mid-write) is dropped on load. A log holds no file open between
appends: each append opens, writes and closes its file, so a Harness keeps a thousand
conversations in memory within a container's 1024 file descriptors (ADR 0054). A log is
deleted only when the
Harness forgets the deleted Run it belongs to (ADR 0030). This module knows nothing of
what the events mean.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubeturn_harness.clock import Clock
from kubeturn_harness.wire import ConversationId, EventType, StreamEvent

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
META_FILE = "conversation.json"


def conversation_id(name: str, instance_id: str) -> ConversationId:
    """A stable id for one Agent's conversation at one Instance ID."""
    digest = hashlib.sha256(f"{name}\0{instance_id}".encode()).hexdigest()
    return ConversationId(f"conv-{digest[:24]}")


class ConversationLog:
    """One conversation's events, in memory and on disk, with a wake-up for followers."""

    def __init__(self, directory: Path, name: str, instance_id: str, clock: Clock) -> None:
        self.directory = directory
        self.name = name
        self.instance_id = instance_id
        self.id = conversation_id(name, instance_id)
        self._clock = clock
        self._events: list[StreamEvent] = _load_events(directory / EVENTS_FILE)
        self._made = False
        """Whether the directory and its meta file are known to exist."""
        self._appended = asyncio.Event()
        self.readers = 0
        """Followers parked in ``wait_beyond``: while any waits, the log must stay the one
        appends go to, so its conversation is kept in memory."""

    @property
    def events(self) -> list[StreamEvent]:
        return self._events

    @property
    def next_offset(self) -> int:
        return len(self._events)

    def append(
        self, type_: EventType, data: dict[str, Any], *, durable: bool = False
    ) -> StreamEvent:
        """Write one event; ``durable`` also fsyncs it (settlements)."""
        event = StreamEvent(offset=len(self._events), type=type_, at=self._clock.now(), data=data)
        _append(self._path(), (event.model_dump_json() + "\n").encode(), sync=durable)
        self._events.append(event)
        self._appended.set()
        self._appended = asyncio.Event()
        return event

    def read(self, offset: int, limit: int) -> list[StreamEvent]:
        return self._events[offset : offset + limit]

    async def wait_beyond(self, offset: int, seconds: float) -> bool:
        """Wait until an event at ``offset`` exists; False when ``seconds`` passed first."""
        self.readers += 1
        try:
            async with asyncio.timeout(seconds):
                while len(self._events) <= offset:
                    await self._appended.wait()
        except TimeoutError:
            return len(self._events) > offset
        finally:
            self.readers -= 1
        return True

    def close(self) -> None:
        """Nothing stays open between appends; kept so a conversation's end reads as one."""

    def _path(self) -> Path:
        if not self._made:
            self.directory.mkdir(parents=True, exist_ok=True)
            meta = self.directory / META_FILE
            if not meta.exists():
                meta.write_text(json.dumps({"name": self.name, "instanceId": self.instance_id}))
            self._made = True
        return self.directory / EVENTS_FILE


def _append(path: Path, data: bytes, *, sync: bool) -> None:
    """Append ``data`` to ``path`` in one open: written whole (O_APPEND), then closed;
    ``sync`` also fsyncs it first."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
        if sync:
            os.fsync(descriptor)
    finally:
        os.close(descriptor)


class Store:
    """The data dir: where every conversation's log lives."""

    def __init__(self, root: Path, clock: Clock) -> None:
        self.root = root
        self._clock = clock

    def open(self, name: str, instance_id: str) -> ConversationLog:
        """The conversation's log, read from disk when it was recorded, else empty."""
        return ConversationLog(self._directory(name, instance_id), name, instance_id, self._clock)

    def recorded(self, name: str, instance_id: str) -> bool:
        """Whether this conversation has a log (as ``existing`` would find it)."""
        return (self._directory(name, instance_id) / META_FILE).is_file()

    def existing(self) -> Iterator[ConversationLog]:
        """Every conversation a previous process of this Harness recorded."""
        for directory, name, instance_id in self._recorded():
            try:
                conversation_log = ConversationLog(directory, name, instance_id, self._clock)
            except OSError:
                log.warning("skipping unreadable conversation directory %s", directory)
                continue
            yield conversation_log

    def instances(self) -> Iterator[tuple[str, str]]:
        """(agent name, Instance ID) of every recorded conversation; no log is read."""
        for _, name, instance_id in self._recorded():
            yield name, instance_id

    def remove(self, name: str, instance_id: str) -> None:
        """Delete a conversation's log. Its meta file goes first: a removal cut short
        leaves nothing that ``existing`` or ``recorded`` would take for a conversation."""
        directory = self._directory(name, instance_id)
        (directory / META_FILE).unlink(missing_ok=True)
        shutil.rmtree(directory, ignore_errors=True)

    def _recorded(self) -> Iterator[tuple[Path, str, str]]:
        base = self.root / "conversations"
        if not base.is_dir():
            return
        for directory in sorted(base.iterdir()):
            meta = directory / META_FILE
            try:
                names = json.loads(meta.read_text())
                yield directory, names["name"], names["instanceId"]
            except (OSError, ValueError, KeyError):
                log.warning("skipping unreadable conversation directory %s", directory)

    def _directory(self, name: str, instance_id: str) -> Path:
        return self.root / "conversations" / conversation_id(name, instance_id)

    def check_writable(self) -> None:
        """Raise OSError unless the data dir can be written (readiness)."""
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.root / ".writable"
        probe.write_text("ok")
        probe.unlink()


def _load_events(path: Path) -> list[StreamEvent]:
    """Read a log; cut a torn tail off the file so later appends stay readable."""
    if not path.exists():
        return []
    events: list[StreamEvent] = []
    good = 0
    with path.open("rb") as handle:
        for line in handle:
            try:
                events.append(StreamEvent.model_validate_json(line))
            except ValueError:
                log.warning("cutting a torn record at byte %d of %s", good, path)
                break
            good += len(line)
    if good < path.stat().st_size:
        with path.open("r+b") as handle:
            handle.truncate(good)
    return events
