"""The port every reader of transcripts uses: ``TranscriptSource``, bound to one Run, and
the ``Query`` that says which of its Turns to read and whether to follow them.

``kubeturn logs`` prints what a source yields; the console and the transcript endpoint
stream it. A source reads a local workdir (``kubeturn.local.transcripts``) or a Run on a
cluster (``kubeturn.k8s.transcripts``); both drive ``kubeturn.transcripts.stream``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from kubeturn.transcripts.model import Entry


@dataclass(frozen=True)
class Query:
    """Which Turns of the Run to read. ``turn`` and ``agent`` narrow it (one Turn by name,
    or every Turn of one Agent slot); ``since_turn`` leaves out Turns numbered below it."""

    turn: str | None = None
    agent: str | None = None
    since_turn: int | None = None
    follow: bool = False
    """Keep yielding as Turns go on and new ones start, until the Run is finished and
    every Turn's log is read to its end (one Turn named by ``turn``: until it is)."""


class TranscriptSource(Protocol):
    """The transcripts of one Run."""

    def entries(self, query: Query) -> AsyncIterator[Entry]:
        """The Turns' entries, Turn by Turn in number order; ``kubeturn.errors.NotFound``
        when the Run is gone (while following, too)."""
        ...
