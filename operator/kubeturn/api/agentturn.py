"""The AgentTurn resource: one Agent's answer to one state, visible with kubectl.

Created and deleted by the Run controller only. Its finalizer (``kubeturn.dev/sweep``)
sends the sweep when it is deleted and records how the Turn ended; a second one
(``kubeturn.dev/retain``) keeps the settled Turn visible for its ``spec.retention``
(ADR 0106). Nothing here does IO.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from kubeturn.api.common import GROUP, GROUP_VERSION, GroupVersion, ObjectMeta, Spec
from kubeturn.api.status import Condition, Message, Status, SubmissionRecord, token_total
from kubeturn_harness.wire import Outcome, ThinkingLevel, Usage, WorkspaceAccess, total_usage

SWEEP_FINALIZER = f"{GROUP}/sweep"
RETAIN_FINALIZER = f"{GROUP}/retain"
"""Holds a settled AgentTurn for its ``spec.retention`` after the settlement (ADR 0106):
present from its creation (a finalizer cannot be added to an object being deleted),
removed by the operator when the retention passes, when its Run goes, or at once when
its Turn did not end by its state's exit (a ``kubectl delete`` by a person)."""


class ObjectRef(Spec):
    name: str = Field(min_length=1, description="The object's name in the same namespace.")


class AgentDefinition(Spec):
    slot: str = Field(description="The Agent slot's name in the Run.")
    instructions: str = Field(description="The slot's system prompt.")
    workspace: WorkspaceAccess = Field(description="write, read or none.")


class MenuEntry(Spec):
    name: str = Field(description="The event name; the Agent's tool of the same name.")
    description: str = Field(description="What the pick means: the tool's manual.")
    schema_: dict[str, Any] = Field(
        alias="schema", default_factory=dict, description="JSON Schema of the pick's payload."
    )


class AgentTurnSpec(Spec):
    """The Turn's input, as the Run resolved it at its state's entry."""

    runRef: ObjectRef = Field(description="The Run that asked for the Turn.")
    workspaceRef: ObjectRef | None = Field(
        default=None, description="The Workspace whose Harness runs it."
    )
    turn: str = Field(description="The Turn's name within its Run.")
    agent: AgentDefinition = Field(description="The Agent slot, resolved.")
    statePath: str = Field(description="The state that asked for the Turn.")
    instanceId: str = Field(description="The conversation's address on the Harness.")
    prompt: str = Field(description="The state's words for the Agent.")
    cwd: str = Field(description="Where the Agent's tools are rooted.")
    continue_: bool = Field(
        alias="continue", default=False, description="Whether it continues the slot's conversation."
    )
    model: str | None = Field(default=None, description="'provider/model' for this Turn.")
    thinkingLevel: ThinkingLevel | None = Field(default=None, description="Reasoning effort.")
    menu: list[MenuEntry] = Field(default_factory=list, description="The picks it may make.")
    retention: str | None = Field(
        default=None,
        description="How long it stays, settled, after its settlement (a duration: the "
        "Run's spec.turnRetention or the operator's --turn-retention); absent: it goes at "
        "once.",
    )


class TurnPhase(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    IDLE = "Idle"
    SETTLING = "Settling"
    SETTLED = "Settled"


class PendingReason(StrEnum):
    """Why a Pending Turn waits to be admitted (ADR 0116)."""

    WORKSPACE_FULL = "WorkspaceFull"
    """Its Workspace has its ``spec.maxLiveTurns`` live Turns."""
    NAMESPACE_FULL = "NamespaceFull"
    """Its namespace has the operator's ``--namespace-max-live-turns``."""
    RESUMING = "Resuming"
    """The operator restarted and finds the Turns that were live before going on."""


class Exit(Status):
    """Written by the Run controller before it deletes the AgentTurn."""

    cause: str | None = Field(default=None, description="pick when the Turn's own pick ended it.")
    submissionId: str | None = Field(default=None, description="The Submission running at exit.")
    at: str = Field(description="When the state exited (RFC 3339).")


class Settlement(Status):
    outcome: Outcome = Field(description="ended, aborted, completed or failed.")
    cause: str | None = Field(default=None, description="pick, or absent.")
    message: Message | None = Field(
        default=None,
        description="Why, when it did not simply end (at most 2 KiB; a longer one is cut).",
    )
    sweptAt: str | None = Field(default=None, description="When the sweep was sent.")
    settledAt: str = Field(description="When the settlement was recorded.")


class Picks(Status):
    count: int = Field(default=0, description="Picks delivered in this Turn.")
    last: str | None = Field(default=None, description="The last pick's event.")


class AgentTurnStatus(Status):
    phase: TurnPhase = Field(
        default=TurnPhase.PENDING,
        description="Pending, Admitted, Running, Idle, Settling or Settled.",
    )
    submissions: list[SubmissionRecord] = Field(
        default_factory=list, description="Its Submissions."
    )
    reason: PendingReason | None = Field(
        default=None,
        description="Why it is Pending: WorkspaceFull, NamespaceFull (a cap on live Turns) "
        "or Resuming; absent once it is admitted.",
    )
    message: Message | None = Field(
        default=None, description="The reason, said in full; absent once it is admitted."
    )
    usage: Usage | None = Field(
        default=None,
        description="Tokens (and cost, where the model has a price) of its settled Submissions.",
    )
    tokens: int | None = Field(
        default=None,
        description="Of usage, the prompt and completion tokens in all (the Tokens column).",
    )
    exit: Exit | None = Field(default=None, description="Why its state exited.")
    settlement: Settlement | None = Field(default=None, description="How the Turn ended.")
    picks: Picks = Field(default_factory=Picks, description="Its picks so far.")
    conditions: list[Condition] = Field(default_factory=list, description="Conditions.")


def used(submissions: Iterable[SubmissionRecord]) -> dict[str, Any]:
    """The ``usage`` and ``tokens`` of an AgentTurnStatus listing ``submissions``: the sum
    of theirs and its total, always written together (both None before any is settled)."""
    usage = total_usage(record.usage for record in submissions)
    return {"usage": usage, "tokens": None if usage is None else token_total(usage)}


class AgentTurn(Spec):
    """One Agent's Turn: created when a state asks for it, deleted when the state exits."""

    apiVersion: GroupVersion = Field(description=f"Always {GROUP_VERSION}.")
    kind: Literal["AgentTurn"] = Field(description="Always AgentTurn.")
    metadata: ObjectMeta = Field(description="Its name (<run>-<turn>), namespace, owner.")
    spec: AgentTurnSpec = Field(description="The Turn's input.")
    status: AgentTurnStatus | None = Field(default=None, description="Written by the operator.")
