"""The Harness wire: every body that crosses HTTP to or from the Harness.

These pydantic models are the one source of truth for the Harness's routes, for the
calls it makes to the Orchestrator, and for ``/openapi.json``. Values that appear on the
wire are ``str`` enums. Nothing here does IO.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, NewType

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.config import JsonDict

SubmissionId = NewType("SubmissionId", str)
ConversationId = NewType("ConversationId", str)
DeliveryId = NewType("DeliveryId", str)

BEARER = re.compile(r"^[Bb][Ee][Aa][Rr][Ee][Rr] ([\x21-\x7e]+)$")
"""An ``Authorization`` header both APIs accept: the scheme, one space, and a token of
visible ASCII (RFC 6750's ``b64token`` is narrower still; every kubeturn token is ASCII)."""

SLOT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
"""An Agent slot's or a repo slot's name: one safe path segment (never ``.`` or ``..``)."""
RUN_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
"""A Run's name (a DNS subdomain)."""
BRANCH_NAME = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"
"""A Run's branch, as kubeturn names it."""
WORKTREE_BRANCH = r"^[A-Za-z0-9][A-Za-z0-9._/=-]{0,239}$"
"""A Run's branch or a fan-out child's: the Run's whole branch, ``_`` and the child's part
(its keys after ``=``; ADR 0113). At most 240 characters: its worktree's directory,
``.partial`` while it is made, fits in a file name's 255 bytes."""
MAX_INSTANCE_ID = 512
"""The longest Instance ID a route takes, in characters."""
ABSOLUTE: JsonDict = {"pattern": "^/[^\\u0000]*$"}
"""What the schema says of a ``cwd``: absolute, and no NUL, which no path or argument can
hold (its validator words the refusal)."""
NO_NUL: JsonDict = {"pattern": "^[^\\u0000]*$"}
"""What the schema says of a command: no NUL, which no argument of a process can hold."""


def _no_nul(value: str, what: str) -> str:
    if "\0" in value:
        raise ValueError(f"{what} holds a NUL character, which no path or command can; remove it")
    return value


MAX_EXEC_S = 86_400
"""The longest time limit an ``exec`` may ask for: a day; a Machine that waits longer
arms a timer."""

DEFAULT_CWD = "/work"
"""Where the Working tools are rooted when a Frame names no ``cwd`` (docs/turn-semantics.md §4)."""


class Outcome(StrEnum):
    """How a Submission ended. The Orchestrator judges; the Harness records."""

    ENDED = "ended"
    """The Turn's own pick ended the Turn, and the sweep named this Submission."""
    ABORTED = "aborted"
    """Something else ended the Turn, or the Submission never ran."""
    COMPLETED = "completed"
    """The run returned with the Turn still open (a nudge may follow)."""
    FAILED = "failed"
    """The run threw: provider failure, unreadable Menu, runaway, or a Harness restart."""


class ErrorType(StrEnum):
    """Typed errors carried by a ``failed`` settlement."""

    SUBMISSION_FAILED = "submission_failed"
    RUNAWAY = "runaway"
    HARNESS_RESTARTED = "harness_restarted"


class WorkspaceAccess(StrEnum):
    """What an Agent slot may do to its Workspace; filters the Working tools."""

    WRITE = "write"
    READ = "read"
    NONE = "none"


class InputPolicy(StrEnum):
    """What a Submission admitted while another runs on its conversation does.

    See docs/turn-semantics.md §6.
    """

    QUEUE = "queue"
    """Wait until every earlier Submission has settled."""
    INTERRUPT = "interrupt"
    """End the running one; its partial output is projected, marked as interrupted."""
    SUPERSEDE = "supersede"
    """End the running one; its partial output stays in the record, out of later prompts."""


class Projection(StrEnum):
    """How a partial reply that a stop cut is put into later prompts (docs/turn-semantics.md §6)."""

    ASSISTANT_MARKED = "assistant-marked"
    """As the assistant's own words, followed by a marker saying it was cut off."""
    SYSTEM_NOTE = "system-note"
    """As a note of context: the model did not commit to these words."""
    OMIT = "omit"
    """Not at all; the record keeps it."""


class MessageStatus(StrEnum):
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    """A stop (a sweep, or an ``interrupt`` admission) cut this reply."""
    SUPERSEDED = "superseded"
    """A ``supersede`` admission cut this reply; it is never projected."""
    FAILED = "failed"
    """The model's stream failed midway (a cut connection, an error mid-stream): the
    record keeps what had streamed; its calls never ran."""


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ThinkingLevel(StrEnum):
    OFF = "off"
    MINIMAL = "minimal"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


PICK_KEY_HEADER = "Idempotency-Key"
"""The header of a pick's idempotency key (the IETF HTTP draft's name): the Harness sends
a pick again with it while the Orchestrator cannot answer, and a repeat is answered as
the first send was (ADR 0047)."""
PICK_KEY_MAX = 200
"""The longest idempotency key the Orchestrator takes: a Harness sends 32 hex digits; the
key is kept in the Run's snapshot until its Turn is recorded, so a long one would grow
the status."""


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header; None for a missing
    header, another scheme, or one that is not visible ASCII. aiohttp hands header bytes
    that are not UTF-8 over as lone surrogates, which no str method may encode: such a
    header is simply no token (a 401), never an error."""
    found = BEARER.match(header or "")
    return found.group(1) if found else None


TRACEPARENT = r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"
"""A W3C ``traceparent`` of version 00: trace id, parent span id, flags."""


class _Body(BaseModel):
    """A wire body: camelCase on the wire, unknown fields refused. A request's booleans
    and numbers are ``strict``: their JSON type, as the schema says (pydantic's lax mode
    would take ``0`` for false and ``"5"`` for 5)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


# --------------------------------------------------------------------------- admission


class AgentDefinition(_Body):
    """The Agent slot's identity: who the Agent is, and what it may touch."""

    instructions: str = Field(description="The system prompt of the Agent slot.")
    workspace: WorkspaceAccess = Field(
        default=WorkspaceAccess.WRITE,
        description="write: every Working tool; read: read, grep, glob; none: no Working tool.",
    )


class Notice(_Body):
    """A line the Briefing carries to the model (e.g. the answer to the last Turn's pick)."""

    kind: str = Field(description="What the notice is about, e.g. 'pick-answer'.")
    text: str = Field(description="The words the model reads.")


class AdmitRequest(_Body):
    """``POST /agents/{name}/{id}``: one prompt for one conversation."""

    prompt: str = Field(min_length=1, description="The state's words; never rewritten.")
    cwd: str | None = Field(
        default=None,
        description="Absolute directory the Working tools are rooted at; /work.",
        json_schema_extra=ABSOLUTE,
    )
    continue_: bool = Field(
        default=False,
        strict=True,
        alias="continue",
        description="Land on the conversation's history (true) or start it clean (false).",
    )
    model: str | None = Field(
        default=None, description="Dial: 'provider/model' for this Submission only."
    )
    thinkingLevel: ThinkingLevel | None = Field(
        default=None, description="Dial: reasoning effort for this Submission only."
    )
    definition: AgentDefinition
    policy: InputPolicy = Field(
        default=InputPolicy.QUEUE,
        description="What to do when another Submission runs on this conversation.",
    )
    projection: Projection = Field(
        default=Projection.ASSISTANT_MARKED,
        description="How a reply this admission cuts (policy interrupt) reaches later prompts.",
    )
    notices: list[Notice] = Field(default_factory=list)
    key: str | None = Field(
        default=None,
        max_length=200,
        description="Idempotency key: admitting the same key again on this conversation "
        "answers the Submission it admitted first, and admits nothing.",
    )
    traceparent: str | None = Field(
        default=None,
        pattern=TRACEPARENT,
        description="W3C trace context of the Turn: the Submission's model requests and tool "
        "calls are traced as its children. Kept with the Submission, so it outlives a restart.",
    )

    @field_validator("cwd")
    @classmethod
    def _cwd_absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(
                f"the Frame's cwd must be an absolute path, got {value!r}; "
                "name the directory from / (e.g. /work/<slot>/<branch>)"
            )
        return value if value is None else _no_nul(value, "the Frame's cwd")

    @property
    def resolved_cwd(self) -> str:
        return self.cwd or DEFAULT_CWD


class AdmitResponse(_Body):
    submissionId: SubmissionId
    offset: int = Field(description="Stream offset of this Submission's admission event.")
    streamUrl: str = Field(description="Where to follow the conversation from that offset.")


class AbortRequest(_Body):
    """``POST /agents/{name}/{id}/abort``: the sweep. Parsed leniently by the server:
    any body that is not exactly this shape settles the running Submission ``aborted``."""

    cause: str | None = Field(
        default=None,
        description="'pick' when the Turn's own pick ended it; any other (the Orchestrator "
        "says 'budget' for a limit it reached) settles as no cause.",
    )
    submissionId: SubmissionId | None = Field(
        default=None, description="The running Submission the sweep names."
    )


class AbortResponse(_Body):
    aborted: bool = Field(description="Whether this sweep settled anything.")


class ExecRequest(_Body):
    """``POST /exec``: run one command in the Workspace, as the Agent's tools run."""

    command: str = Field(min_length=1, description="Run with bash -c.", json_schema_extra=NO_NUL)
    cwd: str = Field(
        default=DEFAULT_CWD, description="Absolute working directory.", json_schema_extra=ABSOLUTE
    )
    timeoutSeconds: float = Field(
        default=600.0, strict=True, gt=0, le=MAX_EXEC_S, description="Time limit."
    )

    @field_validator("cwd")
    @classmethod
    def _cwd_absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"cwd must be an absolute path, got {value!r}")
        return _no_nul(value, "cwd")

    @field_validator("command")
    @classmethod
    def _command_without_nul(cls, value: str) -> str:
        return _no_nul(value, "the command")


class ExecResponse(_Body):
    exitCode: int | None = Field(
        description="None when it timed out; negative: killed by a signal."
    )
    output: str = Field(description="The tail of stdout and stderr combined.")
    droppedBytes: int = Field(description="Output before the tail that was dropped.")
    timedOut: bool


class DeliveryAuthor(_Body):
    name: str = Field(
        min_length=1, max_length=200, pattern=r"^[^<>\n\u0000]+$", description="The name."
    )
    email: str = Field(
        min_length=3,
        max_length=254,
        pattern=r"^[^<>\s\u0000]+@[^<>\s\u0000]+$",
        description="The email address.",
    )


class DeliverRequest(_Body):
    """``POST /deliveries``: commit a Run's worktree of a repo slot on its branch (as the
    Agents' tools run) and bundle the branch where no Agent can write (a ``deliver``
    invoke)."""

    run: str = Field(pattern=RUN_NAME, description="The Run.")
    branch: str = Field(pattern=BRANCH_NAME, description="The Run's branch, kubeturn/<run>.")
    slot: str = Field(pattern=SLOT_NAME, description="The repo slot whose worktree to commit.")
    message: str = Field(
        min_length=1,
        max_length=65536,
        description="The commit message.",
        json_schema_extra=NO_NUL,
    )
    author: DeliveryAuthor = Field(description="The commit's author and committer.")

    @field_validator("message")
    @classmethod
    def _message_without_nul(cls, value: str) -> str:
        return _no_nul(value, "the message")


class DeliverResponse(_Body):
    commit: str = Field(description="The commit the branch points at.")
    changed: bool = Field(description="A new commit was made; false: nothing to commit.")
    bundle: str = Field(description="The branch's bundle, relative to the work root.")
    clone: str = Field(
        description="The slot's clone, relative to the work root: the bundle needs its objects."
    )


class WorktreesRequest(_Body):
    """``POST /worktrees``: a Run's worktrees, made from the Workspace's clones."""

    run: str = Field(pattern=RUN_NAME, description="The Run.")
    branch: str = Field(
        pattern=WORKTREE_BRANCH,
        description="The branch for the Run (no _), or for a fan-out child (the Run's, _, "
        "and more; with base).",
    )
    slots: list[Annotated[str, Field(pattern=SLOT_NAME)]] = Field(
        min_length=1, description="The repo slots to make worktrees of."
    )
    base: str | None = Field(
        default=None,
        pattern=WORKTREE_BRANCH,
        description="Make each worktree from the current commit of this branch's worktree "
        "of its slot (a fan-out child's, from the Run's), not from the clone's HEAD "
        "(ADR 0113).",
    )


class Worktree(_Body):
    path: str = Field(description="The worktree's absolute path.")
    branch: str = Field(description="Its branch.")


class WorktreesResponse(_Body):
    worktrees: dict[str, Worktree] = Field(description="Repo slot → worktree.")


class ForgetRunRequest(_Body):
    """``DELETE /runs/{run}?branch=…``: forget a Run that was deleted; its parameters."""

    run: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,315}[a-z0-9])?$",
        description="The Run's id, ``<namespace>.<name>``: every Instance ID of the Run "
        "begins with it and a ``/``.",
    )
    branch: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$",
        description="The branch its worktrees were made on (``POST /worktrees``); it stays.",
    )


class RunForgotten(_Body):
    """What forgetting a Run removed; nothing when it was forgotten already."""

    run: str = Field(description="The Run's id.")
    worktrees: dict[str, Worktree] = Field(
        description="Repo slot → the worktree removed; its branch stays in the clone."
    )
    conversations: int = Field(description="How many of the Run's conversations were forgotten.")


class Clone(_Body):
    path: str = Field(description="The clone's absolute path.")
    commit: str | None = Field(
        default=None, description="The commit it has checked out; null when git cannot say."
    )


class ReposResponse(_Body):
    """``GET /repos``: the Workspace's clones, one per repo slot."""

    repos: dict[str, Clone] = Field(description="Repo slot → clone.")


# --------------------------------------------------------------------------- records


class ToolCall(_Body):
    id: str
    name: str
    arguments: str = Field(description="The JSON text of the arguments, as the model wrote it.")


class Usage(_Body):
    """Tokens a provider reported."""

    promptTokens: int = Field(
        default=0,
        description="Tokens of the prompts sent, those read from or written to the cache included.",
    )
    completionTokens: int = Field(default=0, description="Tokens the model generated.")
    cacheReadTokens: int = Field(
        default=0, description="Of promptTokens, those the provider read from its prompt cache."
    )
    cacheWriteTokens: int = Field(
        default=0, description="Of promptTokens, those the provider wrote to its prompt cache."
    )
    cost: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="What these tokens cost in USD (decimal text), at the prices of the "
        "providers file; absent when any of them was of a model with no price.",
    )

    def plus(self, other: Usage) -> Usage:
        """The tokens of both, field by field; a cost only when both have one (a sum that
        left out unpriced tokens would read as the whole cost)."""
        cost = None
        if self.cost is not None and other.cost is not None:
            cost = decimal_text(Decimal(self.cost) + Decimal(other.cost))
        return Usage(
            promptTokens=self.promptTokens + other.promptTokens,
            completionTokens=self.completionTokens + other.completionTokens,
            cacheReadTokens=self.cacheReadTokens + other.cacheReadTokens,
            cacheWriteTokens=self.cacheWriteTokens + other.cacheWriteTokens,
            cost=cost,
        )


def total_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """The sum of those given (``Usage.plus``); None when none is."""
    total: Usage | None = None
    for usage in usages:
        if usage is not None:
            total = usage if total is None else total.plus(usage)
    return total


def decimal_text(value: Decimal) -> str:
    """Plain decimal text, no exponent and no trailing zeros after the point."""
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"


class Message(_Body):
    id: str
    submissionId: SubmissionId
    role: Role
    content: str = ""
    briefing: str | None = Field(
        default=None,
        description="The Harness's turn block that followed the prompt; with no content, "
        "a note of the Harness's own (an answer cut at the output limit goes on).",
    )
    toolCalls: list[ToolCall] = Field(default_factory=list)
    toolCallId: str | None = None
    status: MessageStatus = MessageStatus.COMPLETE
    projection: Projection | None = Field(
        default=None, description="For a cut reply: how later prompts carry it."
    )
    usage: Usage | None = None


class SettlementError(_Body):
    type: ErrorType
    message: str


class Settlement(_Body):
    submissionId: SubmissionId
    outcome: Outcome
    error: SettlementError | None = None
    message: str | None = Field(default=None, description="Why, for an aborted settlement.")
    usage: Usage | None = Field(default=None, description="Tokens the provider reported.")
    at: str


class Streamed(_Body):
    """The data of a ``model-streamed`` event: how far the model request in flight has
    streamed. Providers report usage only when a stream ends, and one answer may stream
    for minutes, so this is an estimate, for a follower that checks a budget or a stall
    before then; the request's ``message-appended`` carries the usage the provider
    reported, which supersedes every estimate of that request. None comes after its
    Submission settled."""

    submissionId: SubmissionId
    outputTokens: int = Field(
        ge=0,
        description="Output pieces streamed so far in this model request (text, reasoning "
        "and tool-call arguments), each counted as a token: one provider chunk piece is "
        "about one token. A request tried again counts from 0.",
    )
    usage: Usage = Field(
        description="What the request has used so far, as far as it is known: the prompt's "
        "tokens where the provider reported them as the stream began (Anthropic does), "
        "completionTokens at least outputTokens; cost: their price, absent when the model "
        "has no price."
    )


class ProjectionDecision(_Body):
    """What one prompt build did with one message that was not plainly the model's own."""

    messageId: str
    status: MessageStatus
    projectedAs: Projection | None = Field(description="None when left out of the prompt.")
    reason: str


class ProjectionRecord(_Body):
    submissionId: SubmissionId
    decisions: list[ProjectionDecision]


class SubmissionState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_FOR_SWEEP = "waiting-for-sweep"
    SETTLED = "settled"


class SubmissionView(_Body):
    submissionId: SubmissionId
    state: SubmissionState
    policy: InputPolicy
    model: str | None
    cwd: str
    admittedAt: str
    outcome: Outcome | None = None


class History(_Body):
    """``GET /agents/{name}/{id}?view=history``."""

    conversationId: ConversationId
    name: str
    instanceId: str
    messages: list[Message]
    settlements: list[Settlement]
    projections: list[ProjectionRecord]
    submissions: list[SubmissionView]


class EventType(StrEnum):
    SUBMISSION_ADMITTED = "submission-admitted"
    SUBMISSION_STARTED = "submission-started"
    MODEL_REQUESTED = "model-requested"
    MODEL_STREAMED = "model-streamed"
    """How far the model request in flight has streamed (``Streamed``), throttled."""
    MESSAGE_APPENDED = "message-appended"
    PICK_SENT = "pick-sent"
    PROJECTION_RECORDED = "projection-recorded"
    RUN_ENDED = "run-ended"
    SUBMISSION_SETTLED = "submission-settled"


class StreamEvent(BaseModel):
    """One record of a conversation's append-only log; ``data`` depends on ``type``."""

    model_config = ConfigDict(frozen=True)

    offset: int
    type: EventType
    at: str
    data: dict[str, Any]


# --------------------------------------------------------------------------- orchestrator


class MenuItem(BaseModel):
    """One event the Machine offers the Agent; becomes a tool of the same name."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    description: str
    input: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the pick's payload.",
    )


class Surface(BaseModel):
    """``GET {orchestrator}/agents/{iid}/surface``: the live Turn's Menu, read per Submission."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    instanceId: str
    runId: str | None = None
    menu: list[MenuItem] = Field(default_factory=list)
    allowed: list[str] = Field(default_factory=list)
    cwd: str | None = None
    notices: list[Notice] = Field(default_factory=list)


class Pick(BaseModel):
    """``POST {orchestrator}/agents/{iid}/events``: a pick, its payload's fields beside
    its event's name."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = Field(description="The event picked: a name from the surface's Menu.")


class Receipt(BaseModel):
    """The Orchestrator's answer to a pick (``POST …/events``) or to its poll."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    delivered: bool
    event: str
    turnComplete: bool = False
    deliveryId: DeliveryId | None = None
    outstanding: bool = Field(
        default=False, description="The pick's work runs below the Agent's state; poll for it."
    )
    answer: Any = Field(default=None, description="The last reply since the pick, if any.")
    allowed: list[str] | None = None
    stopped: bool = Field(
        default=False, description="An exit stopped the pick's work before it finished."
    )
    straightBack: bool = Field(
        default=False, description="The pick entered and left a state in its own send."
    )


class Refusal(BaseModel):
    """``409`` from the Orchestrator: the pick was not delivered."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    refused: str
    outstanding: str | None = None
    allowed: list[str] = Field(default_factory=list)
    message: str | None = None


class Status(_Body):
    """``/healthz`` and ``/readyz`` when all is well."""

    status: str


class ErrorBody(_Body):
    """Every 4xx/5xx the Harness answers: what is wrong, and where."""

    error: str
    field: str | None = None
    message: str
