"""A transcript's entries: one JSON object per line is both ``kubeturn logs -o json`` and
the NDJSON wire of the console's transcript endpoint."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class EntryKind(StrEnum):
    """What an entry is; the values are the JSON words."""

    TURN = "turn"
    PROMPT = "prompt"
    TEXT = "text"
    TOOL_CALL = "tool-call"
    TOOL_RESULT = "tool-result"
    PICK = "pick"
    RECEIPT = "receipt"
    NUDGE = "nudge"
    NOTICE = "notice"
    SETTLEMENT = "settlement"


class Entry(BaseModel):
    """One thing that happened in a Turn, in the order it did."""

    model_config = ConfigDict(frozen=True)

    turn: str
    number: int
    state: str
    agent: str
    kind: EntryKind
    at: str
    text: str = ""
    name: str | None = None
    data: dict[str, Any] = {}
