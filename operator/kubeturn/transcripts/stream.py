"""The one loop every transcript source runs: read the Run's status, read each chosen
Turn's conversation log on from where it was read to, project, and yield what is new;
with ``follow``, again after each wait until the Run is finished and every Turn's log is
read to its end (or, for one Turn asked for by name, until that Turn is).

A source supplies only its ``Reader`` (where the status and the logs are, how to wait
for more), so a local Run and a Run on a cluster show the same entries in the same order.
Turns are shown one after another in number order: while following, a Turn that is still
live holds back the Turns after it (their entries come once it settled), so one Turn's
lines are never interleaved with another's.

A log that cannot be read now (its Harness is not reachable) leaves a settled Turn to be
read again while following, until the Run is finished: then what its status says is
all there is to show (a finished Run's Workspace may be gone with its Harness).

Why the status is read before the logs: a Turn's record reaches the status only after
its Harness wrote every settlement it records (the sweep is answered once they are
written), so a log read after a status that holds the record holds the Turn's last
event, and the Turn is finished there. No IO of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubeturn.api.status import FINISHED
from kubeturn.transcripts import project
from kubeturn.transcripts.model import Entry
from kubeturn.transcripts.source import Query
from kubeturn_harness.wire import StreamEvent

Conversation = tuple[str, str]
"""(Agent slot, Instance ID): where a conversation's log is."""


class Reader(Protocol):
    """Where one Run's status and its conversation logs are read."""

    async def status(self) -> Mapping[str, Any]:
        """The Run's status as it is now (shaped like ``Run.status``)."""
        ...

    async def read(
        self, agent: str, instance_id: str, offset: int
    ) -> tuple[list[StreamEvent], int] | None:
        """Events of the conversation from ``offset`` that are there now (none when the
        log has no more, or does not exist yet), and the offset to read on from; never
        waits for more. None when the log cannot be read now (its Harness is not
        reachable)."""
        ...

    async def wait(self, conversation: Conversation | None, offset: int) -> None:
        """Return when more may have happened: the conversation followed (None: none is)
        may have grown past ``offset``, or the status may have changed."""
        ...


@dataclass
class _Held:
    """A conversation's events read so far, and the offset to read on from (past any
    event the reader passed by)."""

    events: list[StreamEvent] = field(default_factory=list)
    offset: int = 0


async def entries(reader: Reader, query: Query) -> AsyncIterator[Entry]:
    """The chosen Turns' entries, Turn by Turn in number order (ADR 0105)."""
    logs: dict[Conversation, _Held] = {}
    shown: dict[str, int] = {}
    done: set[str] = set()
    while True:
        status = await reader.status()
        finished = status.get("phase") in FINISHED
        following: project.TurnView | None = None
        for turn in project.chosen(project.turns_of(status), query):
            if turn.name in done:
                continue
            key = (turn.agent, turn.instance_id)
            held = logs.setdefault(key, _Held())
            read = await _read_on(reader, key, held)
            made = project.project(turn, held.events)
            for entry in made[shown.get(turn.name, 0) :]:
                yield entry
            shown[turn.name] = len(made)
            if turn.settled is not None and (read or finished):
                done.add(turn.name)
            elif query.follow:
                following = turn
                break
        if not query.follow or (finished and following is None) or query.turn in done:
            return  # (one Turn followed has nothing more once it is done)
        if following is None:
            await reader.wait(None, 0)
        else:
            key = (following.agent, following.instance_id)
            await reader.wait(key, logs[key].offset)


async def _read_on(reader: Reader, key: Conversation, held: _Held) -> bool:
    """Read the conversation on from ``held.offset`` to what its log has now (a page at a
    time); False when it could not be read."""
    while True:
        page = await reader.read(key[0], key[1], held.offset)
        if page is None:
            return False
        events, after = page
        held.events.extend(event for event in events if event.offset >= held.offset)
        if after <= held.offset:
            return True
        held.offset = after
