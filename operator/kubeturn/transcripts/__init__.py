"""A Run's transcripts: what its Agents were told, said and did, Turn by Turn."""

from kubeturn.transcripts.model import Entry, EntryKind
from kubeturn.transcripts.source import Query, TranscriptSource

__all__ = ["Entry", "EntryKind", "Query", "TranscriptSource"]
