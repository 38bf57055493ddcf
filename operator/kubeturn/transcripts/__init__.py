"""Transcripts: what each Agent's Turn of a Run did, as a person reads it.

``model`` holds the ``Entry`` every reader gets, ``source`` the ``TranscriptSource`` port
and its ``Query``, ``project`` the pure projection of a Run's Turns and their Harness
conversation logs into entries, ``stream`` the one loop that reads (and follows) them
through a source's reader, and ``text`` the terminal rendering. No module here does IO
of its own: the shells (``kubeturn.local.transcripts``, ``kubeturn.k8s.transcripts``)
read the files or the cluster (ADR 0105).
"""

from kubeturn.transcripts.model import Entry, EntryKind
from kubeturn.transcripts.source import Query, TranscriptSource

__all__ = ["Entry", "EntryKind", "Query", "TranscriptSource"]
