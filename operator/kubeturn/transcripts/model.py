"""What a transcript is made of: ``Entry``, one line of what an Agent's Turn did, and
``EntryKind``, what that line is.

An entry is the unit of every way a transcript is read: ``kubeturn logs -o json`` prints
one per line, and the transcript endpoint streams the same objects as NDJSON, so a reader
of either needs no other shape. Nothing here does IO.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EntryKind(StrEnum):
    """What an entry says; the values are the JSON words."""

    TURN = "turn"
    """A Turn's header: its number, state, Agent slot and when it started."""
    PROMPT = "prompt"
    """The Turn's prompt; ``data["briefing"]`` holds the Harness's turn block after it."""
    TEXT = "text"
    """The model's words."""
    TOOL_CALL = "tool-call"
    """A call of a tool: ``name`` and ``data["arguments"]`` (parsed JSON when it parses)."""
    TOOL_RESULT = "tool-result"
    """What a Working tool answered, trimmed (``data["trimmed"]``: characters cut)."""
    PICK = "pick"
    """An event the Agent picked (a Menu tool it called): ``data["payload"]``."""
    RECEIPT = "receipt"
    """The Orchestrator's answer to a pick, as the model read it; ``data`` says how the
    pick went (``result``, ``deliveryId``, ``turnComplete``)."""
    NUDGE = "nudge"
    """Another Submission in the same Turn: the model stopped while a pick was awaited."""
    NOTICE = "notice"
    """A line the Harness's Briefing carried to the model (``name``: the notice's kind)."""
    SETTLEMENT = "settlement"
    """How the Turn ended: ``data``: ``outcome``, ``cause``, ``message``, ``usage``."""


class Entry(BaseModel):
    """One line of a Turn's transcript."""

    model_config = ConfigDict(frozen=True)

    turn: str = Field(description="The Turn's name within its Run (t1, t2, ...).")
    number: int = Field(description="The Turn's number in the Run (1-based).")
    state: str = Field(description="The state that asked for the Turn (dotted path).")
    agent: str = Field(description="The Agent slot.")
    kind: EntryKind
    at: str = Field(description="When it happened (RFC 3339, UTC).")
    text: str = ""
    name: str | None = Field(
        default=None, description="A tool's, a picked event's or a notice's name."
    )
    data: dict[str, Any] = Field(default_factory=dict)
