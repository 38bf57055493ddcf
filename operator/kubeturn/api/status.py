"""Status models of kubeturn's resources: what the operator writes and kubectl shows.

Conditions follow the Kubernetes API conventions (``type``, ``status``, ``reason``,
``message``, ``observedGeneration``, ``lastTransitionTime``); their types and reasons
live in ``conditions``. Nothing here does IO.

Every status the operator writes is built from these models and dumped by their CRD
names, so a field exists on both sides or on neither. Every message in them (a
condition's, a Turn's, a Submission's, the Run's) is a ``Message``: cut by ``bounded``
when it is built, so a provider's megabyte of error text never reaches etcd.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from kubeturn_harness.wire import Outcome, Usage

MESSAGE_LIMIT = 2048
"""Bytes (UTF-8) one message may take in a status. What a person reads in ``kubectl``
(a provider's error, why a Turn failed) says what it needs in its first lines; a
provider's error body, a stack trace or a command's output can be megabytes, and etcd
refuses an object over 1.5 MiB. 2 KiB keeps the start and the end of any message, and
keeps a Turn record (its message and its Submissions') a few KiB, so the history's budget
(``kubeturn.orchestrator.history.HISTORY_BYTES``) holds tens of failed Turns."""

_CUT_HEAD = 0.75
"""The share of a cut message kept from its start (the rest is its end): an error says
what failed first, and often why last."""


def bounded(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` if its UTF-8 form fits in ``limit`` bytes; otherwise its start and its end
    around a note of how many bytes were cut, all within ``limit`` (never splitting a
    character). The one cut of every message a status holds; ``bounded(bounded(t)) ==
    bounded(t)``."""
    data = text.encode()
    if len(data) <= limit:
        return text
    # The note's widest form (every byte cut) is set aside, so the real one fits too.
    room = limit - len(_note(len(data)).encode())
    if room < 2:
        raise ValueError(f"a limit of {limit} bytes leaves no room for a cut message")
    head = data[: int(room * _CUT_HEAD)].decode(errors="ignore")
    tail_bytes = room - len(head.encode())
    tail = data[len(data) - tail_bytes :].decode(errors="ignore") if tail_bytes else ""
    cut = len(data) - len(head.encode()) - len(tail.encode())
    return head + _note(cut) + tail


def _note(cut: int) -> str:
    return f" […{cut} bytes cut…] "


Message = Annotated[str, AfterValidator(bounded)]
"""A message in a status: at most ``MESSAGE_LIMIT`` bytes, cut by ``bounded``."""


class Status(BaseModel):
    """A status part: camelCase, unknown fields kept (older operators may have written them)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Condition(Status):
    """One aspect of the object's state, in the Kubernetes conventions."""

    type: str = Field(description="What this condition is about, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="A CamelCase word saying why, e.g. Invalid.")
    message: Message = Field(
        default="",
        description="What a person needs to know, and do (at most 2 KiB; a longer one is cut).",
    )
    observedGeneration: int | None = Field(
        default=None, description="The .metadata.generation this condition was set for."
    )
    lastTransitionTime: str = Field(description="When status last changed (RFC 3339).")


class RunPhase(StrEnum):
    """Where a Run is in its life (``Run.status.phase``); Succeeded, Failed and Cancelled
    say it has ended (``finished``)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        """The Run has ended: its phase is one of ``FINISHED``."""
        return self in FINISHED


FINISHED = frozenset({RunPhase.SUCCEEDED, RunPhase.FAILED, RunPhase.CANCELLED})
"""The phases a Run ends in. A phase read from a status as text is found here too (a
``RunPhase`` is a ``str``): ``status.get("phase") in FINISHED``."""


class SubmissionRecord(Status):
    id: str = Field(description="The Submission's id on its Harness.")
    outcome: Outcome | None = Field(default=None, description="How it settled.")
    admittedAt: float = Field(description="When it was admitted (Unix seconds).")
    settledAt: float | None = Field(default=None, description="When it settled (Unix seconds).")
    usage: Usage | None = Field(default=None, description="Tokens its provider reported.")
    message: Message | None = Field(
        default=None,
        description="What its Harness said of how it settled, e.g. a provider's error "
        "(at most 2 KiB; a longer one is cut).",
    )


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
    message: Message | None = Field(
        default=None,
        description="Why, when it did not simply end (at most 2 KiB; a longer one is cut).",
    )
    submissions: list[SubmissionRecord] = Field(
        default_factory=list, description="Its Submissions (a nudge adds one)."
    )
    startedAt: float = Field(description="When its state was entered (Unix seconds).")
    settledAt: float = Field(description="When its sweep came back (Unix seconds).")
    tokens: Usage | None = Field(default=None, description="Tokens its provider reported.")


class DeliveryRecord(Status):
    """One delivery of a repo slot's work (a ``deliver`` invoke), as it ended."""

    state: str = Field(description="The state that asked for it.")
    slot: str = Field(description="The repo slot delivered.")
    branch: str | None = Field(default=None, description="The branch, kubeturn/<run>.")
    commit: str | None = Field(default=None, description="The commit the branch points at.")
    changed: bool = Field(
        default=False, description="A new commit was made (false: nothing to commit)."
    )
    pushed: bool = Field(default=False, description="The branch was pushed to remote.")
    remote: str | None = Field(default=None, description="The repository URL it was pushed to.")
    error: Message | None = Field(
        default=None, description="Why it failed, when it did (at most 2 KiB)."
    )
    time: float = Field(description="When it ended (Unix seconds).")


class TrailEntry(Status):
    """A transition a Run's Machine took that moved it (ADR 0109)."""

    from_: str = Field(alias="from", description="The state the transition is written on.")
    event: str | None = Field(
        default=None, description="The event it handled; absent for an always transition."
    )
    to: str = Field(description="Its target state (dotted path).")
    at: float = Field(description="When it was taken (Unix seconds).")


class RunSnapshot(Status):
    """What the operator resumes a Run from, as the Run's core wrote it
    (``kubeturn.orchestrator.core.RunCore.snapshot``; its format is
    ``kubeturn.orchestrator.snapshots``). Not for users: only the operator reads it."""

    version: int = Field(
        default=0,
        description=(
            "The snapshot's format: an operator restores every version it knows and refuses "
            "a newer one, saying so in the Ready condition. Absent: written before snapshots "
            "had versions (version 0)."
        ),
    )
    phase: Any = Field(default=None, description="The core's phase.")
    message: Any = Field(default=None, description="Why the Run failed, as the core said it.")
    machine: Any = Field(
        default=None, description="The Machine's configuration: leaf, context, timers, invokes."
    )
    turns: Any = Field(default=None, description="The Turns whose state is active or sweeping.")
    deliveries: Any = Field(default=None, description="Picks delivered and their answers.")
    epochs: Any = Field(default=None, description="Each continued conversation's epoch.")
    notices: Any = Field(default=None, description="Notices for each Agent's next Turn.")
    recorded: Any = Field(default=None, description="Turns recorded over the Run's life.")
    signals: Any = Field(default=None, description="Ids of the outside signals already sent.")
    ignoredSignals: Any = Field(
        default=None, description="Of those, the ones the machine did not take, and why."
    )
    execs: Any = Field(default=None, description="Commands started and not yet answered.")
    delivering: Any = Field(default=None, description="Deliveries started and not yet ended.")
    cancelled: Any = Field(default=None, description="CANCEL was sent.")
    turnSeq: Any = Field(default=None, description="Turns started over the Run's life.")
    moves: Any = Field(default=None, description="Transitions taken over the Run's life.")
    deliverySeq: Any = Field(default=None, description="Picks delivered over the Run's life.")
    usage: Any = Field(default=None, description="Each Agent slot's summed usage.")
    worktrees: Any = Field(
        default=None,
        description="The worktrees of fan-out children that work in their own (ADR 0113).",
    )
    retries: Any = Field(
        default=None, description="Retries of faulted Turns waiting for their backoff (ADR 0115)."
    )
    startedAt: Any = Field(
        default=None,
        description="When the Run started (Unix seconds): its wallTime counts from then.",
    )


class SignalResult(StrEnum):
    HANDLED = "handled"
    IGNORED = "ignored"


class ProcessedSignal(Status):
    """What became of one of ``spec.signals`` (ADR 0067)."""

    id: str = Field(description="The signal's id.")
    result: SignalResult = Field(
        default=SignalResult.HANDLED,
        description=(
            "handled: the machine took it; ignored: no active state accepted it (or its data "
            "did not fit, or no guard held) when it arrived, and it was not kept for later."
        ),
    )
    message: Message | None = Field(
        default=None, description="Why it was ignored, naming the events the Run accepted."
    )


class AcceptedEvent(Status):
    """An event the Run's active states take now: what a signal may send."""

    event: str = Field(description="The event's name, e.g. approve.")
    state: str = Field(description="The innermost active state that handles it.")
    description: Message | None = Field(
        default=None, description="What it means, as the Machine describes it."
    )
    schema_: dict[str, Any] | None = Field(
        default=None,
        alias="schema",
        description="JSON Schema its data must fit (left out above 4 KiB; still checked).",
    )


CHILD_TEXT_LIMIT = 512
"""Bytes (UTF-8) a fan-out child's state or message may take in a status: a Run may show
hundreds of children at once (``CHILDREN_LIMIT``), so each says its part in a line; the
failed child's Turn record keeps the whole message."""
CHILDREN_LIMIT = 200
"""Fan-out children a Run's status lists at most: two fan-outs of the most items a fan-out
takes (``kubeturn.api.machine.MAX_ITEMS``) at once; more (nested fan-outs) are counted in
``droppedChildren``."""


def _child_text(text: str) -> str:
    return bounded(text, CHILD_TEXT_LIMIT)


ChildText = Annotated[str, AfterValidator(_child_text)]
"""A fan-out child's state or message in a status: at most ``CHILD_TEXT_LIMIT`` bytes."""


class ChildPhase(StrEnum):
    """Where a fan-out child is: waiting for a place (``concurrency``), running, or done."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class FanOutChild(Status):
    """One child Machine of a running fan-out (``invoke.forEach``), as kubectl shows it."""

    fanOut: str = Field(description="The fan-out state (dotted path).")
    key: str = Field(description="The child's key: its item's, in its states' paths fanOut[key].")
    status: ChildPhase = Field(description="pending, running, succeeded or failed.")
    state: ChildText | None = Field(
        default=None,
        description="Its active states, joined by ', ', while it runs (e.g. fix[pkg-a].work).",
    )
    message: ChildText | None = Field(
        default=None, description="Why it failed, when it did (at most 512 bytes)."
    )


class WorktreeStatus(Status):
    path: str = Field(description="The worktree's path in the sandbox.")
    branch: str = Field(description="Its branch.")


def token_total(usage: Usage) -> int:
    """Prompt and completion tokens: what a ``Tokens`` column counts (cached tokens are
    of the prompt, counted there)."""
    return usage.promptTokens + usage.completionTokens


class LimitUse(Status):
    """How much of a Run's or an Agent slot's limit is spent (ADR 0117)."""

    limit: str = Field(description="The limit's path in the manifest, e.g. spec.limits.cost.")
    used: str = Field(
        description="What is spent against it: tokens, or USD as decimal text; 'unpriced' "
        "when a model used had no price (a cost limit then counts as reached)."
    )
    of: str = Field(description="The limit, as the manifest sets it.")
    reached: bool = Field(description="Whether it is reached: no Turn it covers runs or starts.")


class RunUsage(Status):
    """Tokens and cost of a Run's Turns so far, in all and per Agent slot (ADR 0114): the
    settled ones', and what the live ones have used up to now."""

    tokens: int = Field(default=0, description="Prompt and completion tokens of all its Turns.")
    cost: str | None = Field(
        default=None,
        description="What they cost in USD (decimal text) at the providers file's prices; "
        "absent when a model used had no price.",
    )
    total: Usage = Field(description="Its Turns' tokens by kind, and cost.")
    agents: dict[str, Usage] = Field(
        default_factory=dict,
        description="The same per Agent slot (one entry per slot of the Run's spec).",
    )
    limits: list[LimitUse] = Field(
        default_factory=list,
        description="How much of each token and cost limit of the Run and of its Agent slots "
        "is spent (spec.limits, spec.agents.<slot>.limits; ADR 0117).",
    )


class RunStatus(Status):
    """What the operator knows of a Run."""

    phase: RunPhase = Field(
        default=RunPhase.PENDING, description="Pending, Running, Succeeded, Failed or Cancelled."
    )
    state: str | None = Field(default=None, description="The active state (dotted path).")
    turnCount: int = Field(default=0, description="Turns settled over the Run's life.")
    turns: list[TurnHistoryRecord] = Field(
        default_factory=list,
        description=(
            "The most recent settled Turns, oldest first: at most 200, within 128 KiB. "
            "The operator resumes from them with the snapshot."
        ),
    )
    usage: RunUsage | None = Field(
        default=None,
        description="Tokens and cost of its settled Turns, every Turn since it started "
        "counted (turns keeps only the last ones); absent before any Turn used tokens.",
    )
    droppedTurns: int = Field(
        default=0,
        description=(
            "Settled Turns dropped from turns, the oldest first, to keep the status small; "
            "turnCount counts them. Each was posted as a TurnRecorded Event on the Run when "
            "it settled (the API server keeps Events for an hour by default)."
        ),
    )
    output: Any = Field(default=None, description="The final state's output.")
    message: Message | None = Field(
        default=None,
        description="Why the Run failed, when it did (at most 2 KiB; a longer one is cut).",
    )
    trail: list[TrailEntry] = Field(
        default_factory=list,
        description=(
            "The most recent transitions that moved the machine, oldest first: at most 100. "
            "The states it visited and the transitions it took are read from them."
        ),
    )
    droppedTrail: int = Field(
        default=0, description="Transitions dropped from trail, the oldest first."
    )
    deliveries: list[DeliveryRecord] = Field(
        default_factory=list,
        description=(
            "The most recent deliveries of the Agents' work (deliver invokes), newest last: "
            "at most 20. The operator resumes from them with the snapshot."
        ),
    )
    snapshot: RunSnapshot | None = Field(
        default=None,
        description=(
            "The machine's durable state but its settled Turns (those are turns); the "
            "operator resumes from both. Not for users."
        ),
    )
    children: list[FanOutChild] = Field(
        default_factory=list,
        description=(
            "The child Machines of the running fan-outs, by fan-out and in item order: each "
            "one's key, status, active states and why it failed. At most 200; a fan-out's "
            "children go with its state."
        ),
    )
    droppedChildren: int = Field(
        default=0, description="Fan-out children left out of children, the last ones."
    )
    childProgress: str | None = Field(
        default=None,
        description=(
            "How the running fan-outs' children stand, e.g. '1 succeeded, 2 running, "
            "2 pending', for kubectl get -o wide; each fan-out's named when several run."
        ),
    )
    processedSignals: list[ProcessedSignal] = Field(
        default_factory=list,
        description=("spec.signals already processed, in order: each handled, or ignored and why."),
    )
    acceptedEvents: list[AcceptedEvent] = Field(
        default_factory=list,
        description=(
            "What the Run waits for: the events its active states accept now, with their "
            "descriptions and data schemas (at most 16). A signal of another event is ignored."
        ),
    )
    waitingFor: str | None = Field(
        default=None, description="The accepted events' names, for kubectl get -o wide."
    )
    cancelProcessed: bool = Field(default=False, description="spec.cancel was sent.")
    worktrees: dict[str, WorktreeStatus] = Field(
        default_factory=dict,
        description=(
            "Repo slot → the Run's worktree in its Workspace (path and branch), once the "
            "Harness made them. They stay until the Run is deleted."
        ),
    )
    conditions: list[Condition] = Field(default_factory=list, description="Ready, and why.")
    observedGeneration: int | None = Field(
        default=None, description="The .metadata.generation last acted on."
    )

    @field_validator("processedSignals", mode="before")
    @classmethod
    def _ids_of_earlier_versions(cls, value: Any) -> Any:
        """A status written before signals had results lists their ids: handled."""
        if isinstance(value, list):
            return [{"id": item} if isinstance(item, str) else item for item in value]
        return value


class WorkspacePhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"
    TERMINATING = "Terminating"


class RepoStatus(Status):
    path: str = Field(description="Where the slot's clone is in the sandbox.")
    commit: str | None = Field(default=None, description="The commit the clone checked out.")


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
    runCount: int = Field(
        default=0,
        description=(
            "How many Runs name this Workspace (each has its worktrees on its volume once "
            "made), as of its last look: within 20 s while Ready. Each Run reports its own "
            "worktrees in its status.worktrees."
        ),
    )
    activeRunCount: int = Field(
        default=0,
        description=(
            "How many of them are not finished (not Succeeded, Failed or Cancelled), as of "
            "its last look."
        ),
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
