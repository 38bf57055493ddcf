"""The turn ledger: every Turn a Run started, its Submissions, its exit and its record.

These models are persisted in the Run's snapshot (``Run.status``), so a restarted
Orchestrator knows which Turns are live, which are being swept, which epoch each
continued conversation is at, and which history records were already written.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kubeturn_harness.wire import Notice, Outcome, Receipt, Usage


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
    id: str
    admittedAt: float
    outcome: Outcome | None = None
    settledAt: float | None = None
    usage: Usage | None = None
    message: str | None = None


class Delivery(_Model):
    """A pick delivered to the Machine, until it is answered."""

    id: str
    turn: str
    event: str
    outstanding: bool = True
    reply: Any = None
    """The last reply from the work below the Agent's state since the pick."""
    replied: bool = False
    receipt: Receipt | None = None


class Exit(_Model):
    cause: str | None
    submission: str | None
    """The Submission running at the exit, which the sweep names."""
    admitting: bool = False
    """A Submission was being admitted at the exit (a nudge in flight)."""
    at: float


class Turn(_Model):
    id: str
    agent: str
    state: str
    invocation: str
    instanceId: str
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
    outstanding: str | None = None
    """The delivery id of the pick being worked on below the Agent's state."""
    faulted: bool = False
    """The Machine was told this Turn failed; it is not nudged again."""
    exit: Exit | None = None
    startedAt: float
    notices: list[Notice] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def running(self) -> SubmissionEntry | None:
        return next((s for s in reversed(self.submissions) if s.outcome is None), None)

    @property
    def idle(self) -> bool:
        """Live, with no Submission running or being admitted: waiting for a nudge."""
        return self.phase is TurnPhase.LIVE and not self.admitting and self.running is None


class TurnRecord(_Model):
    """One settled Turn, as ``Run.status.turns`` shows it."""

    name: str
    agent: str
    state: str
    instanceId: str
    outcome: Outcome
    cause: str | None
    message: str | None = None
    submissions: list[SubmissionEntry]
    startedAt: float
    settledAt: float
    tokens: Usage | None = None


def total_usage(submissions: list[SubmissionEntry]) -> Usage | None:
    used = [s.usage for s in submissions if s.usage is not None]
    if not used:
        return None
    return Usage(
        promptTokens=sum(u.promptTokens for u in used),
        completionTokens=sum(u.completionTokens for u in used),
    )
