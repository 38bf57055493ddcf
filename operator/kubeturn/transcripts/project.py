"""A transcript, projected from what kubeturn records: the Run's Turns (``Run.status``:
the settled Turns' records in ``turns``, the live ones in ``snapshot.turns``) and each
Turn's conversation log on its Harness (``kubeturn_harness.wire.StreamEvent``).

Rules (ADR 0105):

- Turns come in number order; a Turn's entries begin with its header (``turn``) and,
  once its record is in the status, end with its ``settlement`` (outcome, cause,
  message, tokens).
- A conversation may hold several Turns (``continue: true``): an event belongs to the
  Turn whose Submissions name it (``submissionId``), and to no other.
- The first Submission's prompt is the ``prompt`` (its Briefing in ``data``); a later
  Submission of the same Turn is a ``nudge``. The notices its admission carried follow
  it. A Submission that settled before it ever ran still shows its prompt.
- The model's words are ``text``; each call it made is a ``tool-call``, shown when the
  model made it. A call the Harness sent to the Orchestrator as a pick (``pick-sent``)
  adds a ``pick`` (its payload, the event) and its answer is the ``receipt``; any other
  call's answer is a ``tool-result``.
- Tool results and arguments longer than ``TRIM_CHARS`` are trimmed (start and end
  kept), the count cut in ``data["trimmed"]``: a transcript is for reading, and a tool
  can answer megabytes; the Harness's log keeps every character.
- Model requests and projection records say nothing a reader of the conversation needs;
  they are left out.

The projection of a log's first events is the start of the projection of more of it
(a follower emits only what is new). Pure: no IO, no clock.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kubeturn.api.status import TurnHistoryRecord
from kubeturn.errors import UnknownTarget
from kubeturn.orchestrator import ids
from kubeturn.transcripts.model import Entry, EntryKind
from kubeturn.transcripts.source import Query
from kubeturn_harness.wire import EventType, Message, MessageStatus, Role, StreamEvent

TRIM_CHARS = 2000
"""The most characters of a tool's result (or of a call's arguments) a transcript shows:
about 25 terminal lines, enough to see what a command printed and how it ended; a file
read whole or a test run's log would bury the conversation."""
_TRIM_HEAD = 1500
"""Of ``TRIM_CHARS``, those kept from the start; the rest come from the end, where a
command says how it ended."""


@dataclass(frozen=True)
class Settled:
    """How a Turn ended, from its record."""

    outcome: str
    cause: str | None
    message: str | None
    tokens: Mapping[str, int | str] | None
    """Its usage by field; ``cost`` (decimal text) only where its models had a price."""
    at: float


@dataclass(frozen=True)
class TurnView:
    """One Turn of a Run, as its status shows it."""

    name: str
    number: int
    state: str
    agent: str
    instance_id: str
    submissions: tuple[str, ...]
    """Its Submissions' ids, in admission order."""
    started_at: float
    settled: Settled | None = None
    """None while the Turn is live (or being swept)."""


def timestamp(seconds: float) -> str:
    """Unix seconds as RFC 3339 in UTC, to the millisecond."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def turns_of(status: Mapping[str, Any]) -> list[TurnView]:
    """Every Turn a Run's status shows, settled or live, in number order. A Turn the
    status's bounded history dropped is not there (``droppedTurns`` counts them)."""
    found: dict[str, TurnView] = {}
    for raw in status.get("turns") or []:
        try:
            record = TurnHistoryRecord.model_validate(raw)
            number = ids.turn_seq(record.name)
        except (ValidationError, ValueError):
            continue
        found[record.name] = TurnView(
            name=record.name,
            number=number,
            state=record.state,
            agent=record.agent,
            instance_id=record.instanceId,
            submissions=tuple(s.id for s in record.submissions),
            started_at=record.startedAt,
            settled=Settled(
                outcome=record.outcome.value,
                cause=record.cause,
                message=record.message,
                tokens=record.tokens.model_dump(exclude_none=True) if record.tokens else None,
                at=record.settledAt,
            ),
        )
    for raw in (status.get("snapshot") or {}).get("turns") or []:
        view = _live(raw)
        if view is not None and view.name not in found:
            found[view.name] = view
    return sorted(found.values(), key=lambda view: view.number)


def _live(raw: Any) -> TurnView | None:
    """A live Turn of the snapshot (``kubeturn.orchestrator.turns.Turn`` as JSON); None
    for one that is not of that shape."""
    try:
        return TurnView(
            name=str(raw["id"]),
            number=ids.turn_seq(str(raw["id"])),
            state=str(raw["state"]),
            agent=str(raw["agent"]),
            instance_id=str(raw["instanceId"]),
            submissions=tuple(str(s["id"]) for s in raw.get("submissions") or []),
            started_at=float(raw["startedAt"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def chosen(turns: Iterable[TurnView], query: Query) -> list[TurnView]:
    """The Turns ``query`` asks for."""
    return [
        turn
        for turn in turns
        if (query.turn is None or turn.name == query.turn)
        and (query.agent is None or turn.agent == query.agent)
        and (query.since_turn is None or turn.number >= query.since_turn)
    ]


def trimmed(text: str, limit: int = TRIM_CHARS) -> tuple[str, int]:
    """``text`` within ``limit`` characters (its start and its end around a note), and
    how many characters were cut."""
    if len(text) <= limit:
        return text, 0
    tail = limit - _TRIM_HEAD * limit // TRIM_CHARS
    head = limit - tail
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… {cut} characters cut …]\n{text[len(text) - tail :]}", cut


def arguments(raw: str) -> tuple[Any, int]:
    """A call's arguments as data: parsed JSON when it parses and fits ``TRIM_CHARS``,
    else the text (trimmed); and how many characters were cut."""
    text, cut = trimmed(raw)
    if cut:
        return text, cut
    try:
        return json.loads(raw), 0
    except ValueError:
        return raw, 0


def project(turn: TurnView, events: Sequence[StreamEvent]) -> list[Entry]:
    """The entries of ``turn``, from its conversation's events (any of the conversation's
    events; those of other Turns are passed by)."""
    return _Projection(turn).run(events)


class _Projection:
    def __init__(self, turn: TurnView) -> None:
        self.turn = turn
        self.entries: list[Entry] = []
        self.requests: dict[str, Mapping[str, Any]] = {}
        """Submission id → its admission's request."""
        self.prompted: set[str] = set()
        """Submissions whose prompt is shown."""
        self.calls: dict[str, tuple[str, str]] = {}
        """Call id → (tool name, arguments), of calls not answered yet."""
        self.picks: dict[str, dict[str, Any]] = {}
        """Call id → how its pick went (``pick-sent``), until its receipt."""

    def add(
        self, kind: EntryKind, at: str, text: str = "", name: str | None = None, **data: Any
    ) -> None:
        self.entries.append(
            Entry(
                turn=self.turn.name,
                number=self.turn.number,
                state=self.turn.state,
                agent=self.turn.agent,
                kind=kind,
                at=at,
                text=text,
                name=name,
                data={key: value for key, value in data.items() if value is not None},
            )
        )

    def run(self, events: Sequence[StreamEvent]) -> list[Entry]:
        turn = self.turn
        # Only what never changes while the Turn goes on: a follower shows it first.
        self.add(EntryKind.TURN, timestamp(turn.started_at), instanceId=turn.instance_id)
        mine = set(turn.submissions)
        for event in events:
            if _submission(event) in mine:
                self.event(event)
        if turn.settled is not None:
            settled = turn.settled
            self.add(
                EntryKind.SETTLEMENT,
                timestamp(settled.at),
                settled.outcome,
                outcome=settled.outcome,
                cause=settled.cause,
                message=settled.message,
                usage=dict(settled.tokens) if settled.tokens else None,
            )
        return self.entries

    def event(self, event: StreamEvent) -> None:
        sid = _submission(event)
        if event.type is EventType.SUBMISSION_ADMITTED:
            self.requests[sid] = event.data.get("request") or {}
        elif event.type is EventType.MESSAGE_APPENDED:
            self.message(Message.model_validate(event.data["message"]), event.at)
        elif event.type is EventType.PICK_SENT:
            self.pick(event)
        elif event.type is EventType.SUBMISSION_SETTLED and sid not in self.prompted:
            prompt = str((self.requests.get(sid) or {}).get("prompt", ""))
            self.prompt(sid, prompt, None, event.at)

    def prompt(self, sid: str, text: str, briefing: str | None, at: str) -> None:
        first = self.turn.submissions[0] == sid
        kind = EntryKind.PROMPT if first else EntryKind.NUDGE
        self.add(kind, at, text, briefing=briefing, submissionId=sid)
        self.prompted.add(sid)
        for notice in (self.requests.get(sid) or {}).get("notices") or []:
            self.add(EntryKind.NOTICE, at, str(notice.get("text", "")), str(notice.get("kind")))

    def message(self, message: Message, at: str) -> None:
        if message.role is Role.USER:
            if message.content and message.submissionId not in self.prompted:
                self.prompt(message.submissionId, message.content, message.briefing, at)
            elif message.content or message.briefing:
                text = message.content or message.briefing or ""
                self.add(EntryKind.NOTICE, at, text, "harness")
        elif message.role is Role.ASSISTANT:
            status = None if message.status is MessageStatus.COMPLETE else message.status.value
            if message.content or status:
                self.add(EntryKind.TEXT, at, message.content, status=status)
            for call in message.toolCalls:
                self.calls[call.id] = (call.name, call.arguments or "{}")
                shown, cut = arguments(call.arguments or "{}")
                self.add(
                    EntryKind.TOOL_CALL,
                    at,
                    name=call.name,
                    id=call.id,
                    arguments=shown,
                    trimmed=cut or None,
                )
        elif message.role is Role.TOOL:
            call_id = message.toolCallId or ""
            name, _ = self.calls.pop(call_id, (None, ""))
            sent = self.picks.pop(call_id, None)
            if sent is not None:
                self.add(EntryKind.RECEIPT, at, message.content, name, id=call_id, **sent)
            else:
                text, cut = trimmed(message.content)
                self.add(EntryKind.TOOL_RESULT, at, text, name, id=call_id or None, trimmed=cut)
        else:
            self.add(EntryKind.NOTICE, at, message.content, message.role.value)

    def pick(self, event: StreamEvent) -> None:
        """A pick the Harness sent: the latest call of that event not answered yet."""
        picked = str(event.data.get("event", ""))
        call_id = next(
            (
                call_id
                for call_id, (name, _) in reversed(self.calls.items())
                if name == picked and call_id not in self.picks
            ),
            None,
        )
        payload, cut = arguments(self.calls[call_id][1]) if call_id else ({}, 0)
        self.add(
            EntryKind.PICK, event.at, name=picked, id=call_id, payload=payload, trimmed=cut or None
        )
        if call_id is not None:
            self.picks[call_id] = {
                "result": event.data.get("result"),
                "deliveryId": event.data.get("deliveryId"),
                "turnComplete": bool(event.data.get("turnComplete")),
            }


def _submission(event: StreamEvent) -> str:
    """The Submission an event is of."""
    if event.type is EventType.MESSAGE_APPENDED:
        return str((event.data.get("message") or {}).get("submissionId", ""))
    return str(event.data.get("submissionId", ""))


def query_for(
    target: str | None,
    status: Mapping[str, Any],
    agents: Iterable[str],
    *,
    since_turn: int | None = None,
    follow: bool = False,
) -> Query:
    """The query of ``kubeturn logs RUN [TURN | AGENT]``: ``target`` is a Turn when one of
    the Run's Turns has that name, else an Agent slot when the Run has one of that name
    (a Turn's name wins: Turns are ``t<n>``, which a slot may be named too). Raises
    ``UnknownTarget`` naming the Turns and slots there are."""
    if target is None:
        return Query(since_turn=since_turn, follow=follow)
    names = [turn.name for turn in turns_of(status)]
    if target in names:
        return Query(turn=target, since_turn=since_turn, follow=follow)
    slots = sorted(agents)
    if target in slots:
        return Query(agent=target, since_turn=since_turn, follow=follow)
    turns_said = ", ".join(names) if names else "none yet"
    raise UnknownTarget(
        f"the run has no Turn and no Agent named {target!r}; its Turns: {turns_said}; "
        f"its Agents: {', '.join(slots) or 'none'}"
    )
