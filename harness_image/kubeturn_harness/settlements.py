"""How a sweep settles the Submissions it finds: the Orchestrator's word, applied.

Pure functions only. The Harness never judges a Turn; it reads the sweep's body.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubeturn_harness import bodies
from kubeturn_harness.errors import NotJson
from kubeturn_harness.wire import Outcome, SubmissionId

PICK_CAUSE = "pick"


@dataclass(frozen=True)
class Sweep:
    """A sweep's body, read leniently: anything that does not parse names nothing."""

    cause: str | None
    submission_id: SubmissionId | None

    @classmethod
    def parse(cls, raw: bytes) -> Sweep:
        try:
            body = bodies.parse(raw) if raw.strip() else None
        except NotJson:
            return cls(None, None)
        if not isinstance(body, dict):
            return cls(None, None)
        cause = body.get("cause")
        named = body.get("submissionId")
        return cls(
            cause if isinstance(cause, str) else None,
            SubmissionId(named) if isinstance(named, str) else None,
        )


def running_outcome(sweep: Sweep, running: SubmissionId) -> Outcome:
    """The outcome of the running Submission under this sweep.

    ``ended`` exactly when the body says the Turn's own pick ended it and names this
    Submission; every other body (none, unparsable, unknown cause, another or no id)
    is ``aborted``.
    """
    if sweep.cause == PICK_CAUSE and sweep.submission_id == running:
        return Outcome.ENDED
    return Outcome.ABORTED


QUEUED_OUTCOME = Outcome.ABORTED
"""A Submission queued behind the running one never ran: ``aborted`` for every cause."""
