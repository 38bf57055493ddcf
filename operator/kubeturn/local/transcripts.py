"""The transcripts of a Run on this machine, read from its workdir: the status in
``snapshot.json`` (its Turns) and the conversation logs in the Harness's data dir
(``.kubeturn/harness/``), read in place as the Harness writes them.

Following polls both files every ``POLL_S``: the Harness and ``kubeturn run`` are other
processes that say nothing when they write, and a file watch (inotify, kqueue) is neither
in the standard library nor the same on every system (ADR 0105). A log is read on from the
byte where the last read stopped, and only whole lines are taken (an append is one
``write`` of a whole line, so a line without its newline is one being written). Nothing
here writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kubeturn.api.status import RunPhase
from kubeturn.local.control import files_of
from kubeturn.local.workdir import RunFiles, Workdir, default_workdir
from kubeturn.transcripts import project, stream
from kubeturn.transcripts.model import Entry
from kubeturn.transcripts.source import Query
from kubeturn_harness import store
from kubeturn_harness.wire import StreamEvent

POLL_S = 0.25
"""How often a follower looks at the files again: a Turn's lines show within a quarter
of a second (``kubeturn run`` reads ``kubeturn send``'s signals as often), and a look is
a ``stat``-sized read of two small files."""


@dataclass
class _Log:
    """How far one conversation's log was read."""

    events: int = 0
    position: int = 0
    """The byte after the last whole line read."""


class LocalReader:
    """A ``stream.Reader`` over a local Run's files."""

    def __init__(self, files: RunFiles, harness_data: Path, poll_s: float = POLL_S) -> None:
        self._files = files
        self._harness_data = harness_data
        self._poll_s = poll_s
        self._logs: dict[Path, _Log] = {}

    async def status(self) -> Mapping[str, Any]:
        return self._files.read_status() or {"phase": RunPhase.PENDING.value}

    async def read(
        self, agent: str, instance_id: str, offset: int
    ) -> tuple[list[StreamEvent], int]:
        path = (
            self._harness_data
            / "conversations"
            / store.conversation_id(agent, instance_id)
            / store.EVENTS_FILE
        )
        return await asyncio.to_thread(self._read, path, offset)

    def _read(self, path: Path, offset: int) -> tuple[list[StreamEvent], int]:
        log = self._logs.setdefault(path, _Log())
        if offset != log.events:
            log = self._logs[path] = _Log()
        try:
            with path.open("rb") as handle:
                handle.seek(log.position)
                data = handle.read()
        except FileNotFoundError:
            return [], offset
        found: list[StreamEvent] = []
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # being written, or torn by a crash (the Harness cuts it on start)
            log.position += len(line)
            log.events += 1
            try:
                event = StreamEvent.model_validate_json(line)
            except ValidationError:
                continue  # a whole line of no kind this kubeturn knows: passed by
            if event.offset >= offset:
                found.append(event)
        return found, log.events

    async def wait(self, conversation: stream.Conversation | None, offset: int) -> None:
        await asyncio.sleep(self._poll_s)


class LocalTranscripts:
    """The ``TranscriptSource`` of a local Run (``kubeturn logs`` without ``--kube``)."""

    def __init__(self, name: str, workdir: Path | None, poll_s: float = POLL_S) -> None:
        self.name = name
        self._files = files_of(name, workdir)
        root = Workdir.at(workdir or default_workdir(name))
        self._reader = LocalReader(self._files, root.harness_data, poll_s)

    def entries(self, query: Query) -> AsyncIterator[Entry]:
        return stream.entries(self._reader, query)

    def query(
        self, target: str | None, *, since_turn: int | None = None, follow: bool = False
    ) -> Query:
        """The query of ``kubeturn logs NAME [TURN | AGENT]`` (``project.query_for``)."""
        status = self._files.read_status() or {}
        return project.query_for(
            target, status, self._agents(), since_turn=since_turn, follow=follow
        )

    def _agents(self) -> list[str]:
        """The Run's Agent slots, from the manifest it started with."""
        try:
            manifest = yaml.safe_load(self._files.manifest.read_text(encoding="utf-8"))
            return [str(slot) for slot in manifest["spec"]["agents"]]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            return []
