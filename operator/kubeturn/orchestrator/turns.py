"""The turn ledger: every Turn a Run started, its Submissions, its exit and its record.

These models are persisted in the Run's snapshot (``Run.status``), so a restarted
Orchestrator knows which Turns are live, which are being swept, which epoch each
continued conversation is at, and which history records were already written.
``outcome`` is the one judgment of a Turn whose state exited (ADR 0015), for the Run's
record and the AgentTurn's settlement alike. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kubeturn.api.status import Message, bounded
from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn_harness.wire import DeliveryId, Notice, Outcome, Receipt, SubmissionId, Usage
from kubeturn_harness.wire import total_usage as usage_sum

PICK = "pick"
"""The sweep's cause when the Turn's own pick ended it (docs/turn-semantics.md §2)."""
NO_SETTLEMENT = "no settlement came back from the sweep"
ADMITTED_LATE = "the Turn ended while its next Submission was being admitted"
NEVER_ADMITTED = (
    "the Turn ended before its first Submission was admitted (it may have waited for a slot "
    "under a cap on live Turns)"
)

Caused = Mapping[SubmissionId, tuple[Outcome, Usage | None, str | None]]
"""What a sweep settled: Submission id → its outcome, usage and message."""


class TurnPhase(StrEnum):
    PENDING = "pending"
    """Started by the Machine; its first admission has not been answered yet."""
    LIVE = "live"
    """Its state is active; Submissions run or wait for a nudge."""
    SWEEPING = "sweeping"
    """Its state exited; the sweep is out and the last settlement not yet known."""
    SETTLED = "settled"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmissionEntry(_Model):
    id: SubmissionId
    admittedAt: float
    outcome: Outcome | None = None
    settledAt: float | None = None
    usage: Usage | None = None
    message: Message | None = None
    """What the Harness said of how it settled, cut as a status holds it (``bounded``),
    so the record restored from ``Run.status.turns`` is the one written."""
    spent: Usage | None = None
    """While it runs: what its conversation's stream has shown it used so far, its answer
    being streamed included (``budgets``); ``usage`` supersedes it once it settled."""


class Delivery(_Model):
    """A pick delivered to the Machine, until it is answered."""

    id: DeliveryId
    turn: TurnId
    event: str
    outstanding: bool = True
    reply: Any = None
    """The last reply from the work below the Agent's state since the pick."""
    replied: bool = False
    receipt: Receipt | None = None
    key: str | None = None
    """The pick's idempotency key: a repeat of it is answered, not delivered again."""


class Exit(_Model):
    cause: str | None
    submission: SubmissionId | None
    """The Submission running at the exit, which the sweep names."""
    admitting: bool = False
    """A Submission was being admitted at the exit (a nudge in flight)."""
    at: float
    why: Message | None = None
    """Why the Orchestrator swept the Turn while its state was active: it stalled (ADR
    0115) or reached a limit (ADR 0117); the Turn's record says this."""


class Turn(_Model):
    id: TurnId
    agent: str
    state: str
    invocation: str
    instanceId: InstanceId
    continue_: bool = Field(alias="continue")
    epoch: int = 0
    prompt: str
    cwd: str
    model: str | None = None
    thinkingLevel: str | None = None
    phase: TurnPhase = TurnPhase.PENDING
    submissions: list[SubmissionEntry] = Field(default_factory=list)
    admitting: bool = False
    """An admission is out and not answered yet."""
    nudges: int = 0
    outstanding: DeliveryId | None = None
    """The delivery id of the pick being worked on below the Agent's state."""
    faulted: bool = False
    """The Machine was told this Turn failed; it is not nudged again."""
    exit: Exit | None = None
    startedAt: float
    notices: list[Notice] = Field(default_factory=list)
    retry: int | None = None
    """Which retry of its invoke's faulted Turn this Turn is (1, 2, ...; ADR 0115); None:
    no retry."""
    progressAt: float | None = None
    """When the Turn last made progress (a Submission admitted, a model request, an
    answer, a tool call, a pick answered): its stall clock (``stalls``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def running(self) -> SubmissionEntry | None:
        return next((s for s in reversed(self.submissions) if s.outcome is None), None)

    @property
    def idle(self) -> bool:
        """Live, with no Submission running or being admitted: waiting for a nudge."""
        return self.phase is TurnPhase.LIVE and not self.admitting and self.running is None


class TurnRecord(_Model):
    """One settled Turn, as ``Run.status.turns`` shows it (``kubeturn.api.status.
    TurnHistoryRecord`` has every field of it): the operator restores the record from there.
    A field that is None may be absent there (the API server drops a null)."""

    name: TurnId
    agent: str
    state: str
    instanceId: InstanceId
    outcome: Outcome
    cause: str | None = None
    message: Message | None = None
    submissions: list[SubmissionEntry]
    startedAt: float
    settledAt: float
    tokens: Usage | None = None


def total_usage(submissions: list[SubmissionEntry]) -> Usage | None:
    return usage_sum(s.usage for s in submissions)


def settle(submissions: Sequence[SubmissionEntry], caused: Caused, now: float) -> None:
    """Give each Submission that has no settlement yet the one the sweep reported."""
    for entry in submissions:
        reported = caused.get(entry.id)
        if reported is not None and entry.outcome is None:
            entry.outcome, entry.usage, message = reported
            entry.message = bounded(message) if message is not None else None
            entry.settledAt = now


def outcome(exit_: Exit, submissions: Sequence[SubmissionEntry]) -> tuple[Outcome, str | None]:
    """A Turn's recorded outcome and message, from how its state exited and its
    Submissions (in admission order) as they settled (ADR 0015).

    The one judgment of a Turn: the Run's record and its AgentTurn's settlement both come
    from here, so they never say different things.
    """
    if exit_.why is not None:
        return Outcome.ABORTED, exit_.why
    if exit_.submission is not None:
        # The Submission the sweep named settles as the sweep's body says.
        named = next((s for s in submissions if s.id == exit_.submission), None)
        if named is None or named.outcome is None:
            return Outcome.ABORTED, NO_SETTLEMENT
        return named.outcome, named.message
    if exit_.admitting:
        # It ran, if at all, after the Turn had ended, and the sweep settles it.
        late = [s for s in submissions if s.admittedAt >= exit_.at]
        settled = late[-1].outcome if late else None
        first = len(late) == len(submissions)
        return settled or Outcome.ABORTED, NEVER_ADMITTED if first else ADMITTED_LATE
    if exit_.cause == PICK:
        return Outcome.ENDED, None
    last = submissions[-1] if submissions else None
    if last is not None and last.outcome is Outcome.FAILED:
        # No pick ended it and its last Submission failed: the Turn failed.
        return Outcome.FAILED, last.message
    return Outcome.ABORTED, None
