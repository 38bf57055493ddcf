"""Status models of kubeturn's resources: what the operator writes and kubectl shows.

Conditions follow the Kubernetes API conventions (``type``, ``status``, ``reason``,
``message``, ``observedGeneration``, ``lastTransitionTime``); their types and reasons
live in ``conditions``. Nothing here does IO.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kubeturn_harness.wire import Outcome, Usage


class Status(BaseModel):
    """A status part: camelCase, unknown fields kept (older operators may have written them)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Condition(Status):
    """One aspect of the object's state, in the Kubernetes conventions."""

    type: str = Field(description="What this condition is about, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word saying why, e.g. Invalid.")
    message: str = Field(default="", description="What a person needs to know, and do.")
    observedGeneration: int | None = Field(
        default=None, description="The .metadata.generation this condition was set for."
    )
    lastTransitionTime: str = Field(description="When status last changed (RFC 3339).")


class RunPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class SubmissionRecord(Status):
    id: str = Field(description="The Submission's id on its Harness.")
    outcome: Outcome | None = Field(default=None, description="How it settled.")
    admittedAt: float = Field(description="When it was admitted (Unix seconds).")
    settledAt: float | None = Field(default=None, description="When it settled (Unix seconds).")


class TurnHistoryRecord(Status):
    """One settled Turn: who, where, how it ended and why."""

    name: str = Field(description="The Turn's name within the Run (its AgentTurn's suffix).")
    agent: str = Field(description="The Agent slot.")
    state: str = Field(description="The state that asked for the Turn.")
    instanceId: str = Field(description="The conversation's address on the Harness.")
    outcome: Outcome = Field(description="ended, aborted, completed or failed.")
    cause: str | None = Field(
        default=None, description="pick when the Turn's own pick ended it; absent otherwise."
    )
    message: str | None = Field(default=None, description="Why, when it did not simply end.")
    submissions: list[SubmissionRecord] = Field(
        default_factory=list, description="Its Submissions (a nudge adds one)."
    )
    startedAt: float = Field(description="When its state was entered (Unix seconds).")
    settledAt: float = Field(description="When its sweep came back (Unix seconds).")
    tokens: Usage | None = Field(default=None, description="Tokens its provider reported.")


class RunStatus(Status):
    """What the operator knows of a Run."""

    phase: RunPhase = Field(
        default=RunPhase.PENDING, description="Pending, Running, Succeeded, Failed or Cancelled."
    )
    state: str | None = Field(default=None, description="The active state (dotted path).")
    turnCount: int = Field(default=0, description="Turns settled over the Run's life.")
    turns: list[TurnHistoryRecord] = Field(
        default_factory=list, description="The most recent settled Turns, oldest first."
    )
    output: Any = Field(default=None, description="The final state's output.")
    message: str | None = Field(default=None, description="Why the Run failed, when it did.")
    snapshot: dict[str, Any] | None = Field(
        default=None,
        description="The machine's durable state; the operator resumes from it. Not for users.",
    )
    processedSignals: list[str] = Field(
        default_factory=list, description="Ids of spec.signals already sent to the machine."
    )
    cancelProcessed: bool = Field(default=False, description="spec.cancel was sent.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, and why.")
    observedGeneration: int | None = Field(
        default=None, description="The .metadata.generation last acted on."
    )


class WorkspacePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"
    TERMINATING = "Terminating"


class RepoStatus(Status):
    path: str = Field(description="Where the slot's clone is in the sandbox.")
    commit: str | None = Field(default=None, description="The commit the clone checked out.")


class WorktreeStatus(Status):
    path: str = Field(description="The worktree's path in the sandbox.")
    branch: str = Field(description="Its branch.")


class WorkspaceStatus(Status):
    """What the operator knows of a Workspace."""

    phase: WorkspacePhase = Field(
        default=WorkspacePhase.PENDING, description="Pending, Ready, Failed or Terminating."
    )
    podName: str | None = Field(default=None, description="The sandbox Pod.")
    endpoint: str | None = Field(default=None, description="The Harness's URL.")
    repos: dict[str, RepoStatus] = Field(default_factory=dict, description="Repo slot → clone.")
    repoCount: int = Field(
        default=0,
        description=(
            "How many repo slots are cloned (the entries of repos): kubectl get shows it as "
            "Repos, since a printer column cannot count a map."
        ),
    )
    worktrees: dict[str, dict[str, WorktreeStatus]] = Field(
        default_factory=dict, description="Run name → repo slot → worktree."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description=(
            "Ready (the Harness answers), SandboxCurrent (the sandbox Pod runs the current "
            "spec; a changed one is made again when no Turn runs) and VolumeCurrent (the "
            "volume matches spec.storage; it is never resized), each with why."
        ),
    )
    observedGeneration: int | None = Field(
        default=None, description="The .metadata.generation last acted on."
    )
