"""The port every reader of transcripts uses: a source bound to one Run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from kubeturn.transcripts.model import Entry


@dataclass(frozen=True)
class Query:
    """Which entries: one Turn's (by name), or one Agent slot's, from a Turn number on;
    ``follow`` keeps going until the Run is finished."""

    turn: str | None = None
    agent: str | None = None
    since_turn: int | None = None
    follow: bool = False


class TranscriptSource(Protocol):
    def entries(self, query: Query) -> AsyncIterator[Entry]: ...
