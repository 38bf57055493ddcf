"""``Run.spec.machine`` as written: states, transitions, invocations.

These models check the shape of each object; what needs the whole machine (targets,
reachability, Menus, expressions) is checked by ``kubeturn.machine.load``, which turns
a ``MachineSpec`` into the ``Chart`` the interpreter walks. Nothing here does IO.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from kubeturn.api.common import Spec, check_model_name
from kubeturn.api.durations import parse_duration
from kubeturn_harness.wire import ThinkingLevel

MAX_ITEMS = 100
"""Children of one fan-out (``kubeturn.machine.interpreter.MAX_ITEMS``; a test keeps the
two equal): each is a section of the Run's status (ADR 0112)."""
DEFAULT_CONCURRENCY = 4
"""Fan-out children running at once, unless the manifest says: a Workspace runs this many
Agents side by side without one starving the others."""

TRANSITION_SHAPES = ("<target>", "<transition>", "<list>")
"""The tags that tell a transition's three written forms apart. pydantic puts them in an
error's location; the loader drops them, so paths name only what the user wrote."""


class Transition(Spec):
    """A move to another state when its event comes and its guard holds."""

    target: str | None = Field(
        default=None,
        description=(
            "The state to enter: a sibling's name, else the nearest ancestor's child of that "
            "name; 'a.b' goes on down from there; '.b' is a child of this state. Absent: "
            "stay, and only run assign."
        ),
    )
    guard: str | None = Field(
        default=None,
        description=(
            "A CEL condition over input, context, event and workspace; the transition is "
            "taken only when it is true. The first transition of an event whose guard holds "
            "wins."
        ),
    )
    assign: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Context updates: 'context.<path>' to a CEL value, e.g. "
            "{context.rounds: 'context.rounds + 1'}. All values are computed before any "
            "is stored."
        ),
    )
    description: str | None = Field(
        default=None,
        description=(
            "What taking this transition means. Required on an event an Agent is offered: "
            "it becomes the description of the Agent's tool of that name."
        ),
    )
    schema_: dict[str, Any] | None = Field(
        default=None,
        alias="schema",
        description=(
            "JSON Schema of the event's payload (an object). For an event an Agent is "
            "offered it is the tool's parameters; absent means no parameters."
        ),
    )


def _transition_shape(value: Any) -> str | None:
    if isinstance(value, str):
        return "<target>"
    if isinstance(value, dict | Transition):
        return "<transition>"
    if isinstance(value, list):
        return "<list>"
    return None


OneTransition = Annotated[
    Annotated[str, Tag("<target>")] | Annotated[Transition, Tag("<transition>")],
    Discriminator(
        _transition_shape,
        custom_error_type="transition_shape",
        custom_error_message="a transition is a target state's name or a transition object",
    ),
]

TransitionSpec = Annotated[
    Annotated[str, Tag("<target>")]
    | Annotated[Transition, Tag("<transition>")]
    | Annotated[list[OneTransition], Tag("<list>")],
    Discriminator(
        _transition_shape,
        custom_error_type="transition_shape",
        custom_error_message=(
            "a transition is a target state's name, a transition object, or a list of them"
        ),
    ),
]
"""A target's name, one transition, or several tried in order (the first whose guard
holds is taken)."""


class RetryReason(StrEnum):
    """A fault reason a retry policy may name: the ``reason`` of the ``agent.fault`` (and
    ``error.invoke``) the Machine hears otherwise."""

    RUNAWAY = "runaway"
    SUBMISSION_FAILED = "submission_failed"
    HARNESS_RESTARTED = "harness_restarted"
    CONVERSATION_LOST = "conversation_lost"
    STALLED = "stalled"
    NO_PICK = "no-pick"
    ADMISSION_FAILED = "admission-failed"


MAX_RETRIES = 10
"""Retries one policy may ask for: a Turn that failed ten times will not pass an eleventh."""


class AgentRetry(Spec):
    """How a Turn that faulted is tried again before its state hears the fault (ADR 0115)."""

    limit: int = Field(
        default=1, ge=1, le=MAX_RETRIES, strict=True, description="Retries at most, 1 to 10."
    )
    when: list[RetryReason] = Field(
        min_length=1,
        description=(
            "The fault reasons retried: runaway, submission_failed, harness_restarted, "
            "conversation_lost, stalled, no-pick, admission-failed."
        ),
    )
    backoff: str = Field(
        default="0s",
        description="How long after the fault the retry starts (its state still active), e.g. 30s.",
    )
    freshConversation: bool = Field(
        default=False,
        strict=True,
        description=(
            "A Turn with continue: true is retried only when this is true: the identical prompt "
            "on a fresh conversation (the next epoch's); false: its state hears the fault at once."
        ),
    )

    @field_validator("backoff")
    @classmethod
    def _backoff(cls, value: str) -> str:
        parse_duration(value)
        return value


class AgentInvoke(Spec):
    """Ask an Agent for a Turn: it lasts from the state's entry until the state exits."""

    slot: str = Field(min_length=1, description="The agent slot (a key of spec.agents).")
    prompt: str = Field(
        min_length=1,
        description=(
            "What the Agent is asked, with {{ <CEL> }} holes over input, context, event "
            "and workspace. The Agent answers by calling the tools of the events this state "
            "(and the states inside it) handles."
        ),
    )
    cwd: str | None = Field(
        default=None,
        description=(
            "Absolute directory the Agent works in (a template). Absent: the worktree of "
            "the Workspace's only repo slot, or /work without a Workspace."
        ),
    )
    continue_: bool = Field(
        default=False,
        alias="continue",
        description=(
            "true: continue this Agent's one conversation in the Run, keeping what it did "
            "in earlier Turns; false: start a fresh conversation."
        ),
    )
    model: str | None = Field(
        default=None,
        description="'provider/model' for this Turn only; the slot's model when absent.",
    )
    thinkingLevel: ThinkingLevel | None = Field(
        default=None, description="Reasoning effort for this Turn only; the slot's when absent."
    )
    retry: AgentRetry | None = Field(
        default=None,
        description=(
            "Retry a Turn whose fault reason is listed, as a new Turn with the identical "
            "prompt; absent: the state hears every fault at once."
        ),
    )

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return check_model_name(value)


class ExecInvoke(Spec):
    """Run a command in the Workspace; its result is the done event's output."""

    command: str = Field(
        min_length=1,
        description="A bash command line (a template), run with the Workspace's tools.",
    )
    cwd: str | None = Field(
        default=None,
        description="Absolute directory to run it in (a template); as for an Agent when absent.",
    )
    timeout: str = Field(
        default="10m",
        description="How long it may run before it fails (error), e.g. 30s, 10m, 1h30m.",
    )


DEFAULT_AUTHOR_NAME = "kubeturn"
DEFAULT_AUTHOR_EMAIL = "kubeturn@users.noreply.kubeturn.dev"
"""Who a delivered commit is by when the manifest names no author (ADR 0063)."""


class Author(Spec):
    """Who a delivered commit is by (its author and committer)."""

    name: str = Field(
        min_length=1, max_length=200, pattern=r"^[^<>\n\x00]+$", description="The name."
    )
    email: str = Field(
        min_length=3,
        max_length=254,
        pattern=r"^[^<>\s\x00]+@[^<>\s\x00]+$",
        description="The email.",
    )


class DeliverInvoke(Spec):
    """Commit the Run's worktree of a repo slot on its branch ``kubeturn/<run>`` and, with
    push, push that branch to the slot's repository (ADR 0063)."""

    slot: str = Field(
        min_length=1, description="The repo slot (a key of the Workspace's repos) to deliver."
    )
    message: str = Field(
        min_length=1,
        description=(
            "The commit message, with {{ <CEL> }} holes over input, context, event and workspace."
        ),
    )
    push: bool = Field(
        default=False,
        description=(
            "true: push the branch to the slot's url with its secretRef, from a container "
            "that alone holds the credential; false: commit only."
        ),
    )
    author: Author | None = Field(
        default=None,
        description=(
            f"The commit's author and committer; {DEFAULT_AUTHOR_NAME} "
            f"<{DEFAULT_AUTHOR_EMAIL}> when absent."
        ),
    )


class ForEachInvoke(Spec):
    """A child Machine for each item of a list, a few at a time (ADR 0112)."""

    items: str = Field(
        min_length=1,
        description=(
            "A CEL list, evaluated when the state is entered (e.g. context.packages): one "
            f"child Machine per item, at most {MAX_ITEMS}."
        ),
    )
    key: str | None = Field(
        default=None,
        description=(
            "A CEL value naming each child from its item (input), e.g. input.name: the "
            "child's states are <state>[<key>]. Absent: the item itself when it is a "
            "name (letters, digits, '_', '-'), else its index."
        ),
    )
    concurrency: int = Field(
        default=DEFAULT_CONCURRENCY,
        ge=1,
        le=MAX_ITEMS,
        description="How many children run at once; the others wait their turn.",
    )
    worktree: Literal["shared", "per-child"] = Field(
        default="shared",
        description=(
            "'per-child': each child works in its own worktrees, on the branch "
            "kubeturn/<run>-<state>-<key> (workspace.repos in the child names them); "
            "'shared': in the Run's."
        ),
    )
    failFast: bool = Field(
        default=True,
        description=(
            "true: the first child that fails is the invoke's error (onError), and the "
            "state's exit sweeps the others. false: every child runs to its end, and "
            "onDone's event.results says which failed."
        ),
    )
    machine: MachineSpec = Field(
        description=(
            "The child Machine. Its expressions read its item as input, and its own "
            "context; its top-level final's output is the child's output."
        )
    )


class InvokeSpec(Spec):
    """The state's one invocation, running while the state is active: an Agent, a command,
    or a delivery of the work."""

    agent: AgentInvoke | None = Field(default=None, description="Ask an Agent for a Turn.")
    exec: ExecInvoke | None = Field(default=None, description="Run a command in the Workspace.")
    deliver: DeliverInvoke | None = Field(
        default=None,
        description=(
            "Commit a repo slot's worktree on the Run's branch kubeturn/<run>, and push it "
            "with push: true."
        ),
    )
    forEach: ForEachInvoke | None = Field(
        default=None,
        description="Run a child Machine for each item of a list (a fan-out).",
    )
    onDone: TransitionSpec | None = Field(
        default=None,
        description=(
            "Taken when the command, the delivery or every fan-out child succeeds; "
            "event.output is its result (a delivery's: commit, branch, changed, pushed, "
            "remote; a fan-out's: the children's outputs in item order, with "
            "event.results their keys and statuses). Not for an agent: a Turn ends by the "
            "Agent's picks or by the state's exit."
        ),
    )
    onError: TransitionSpec | None = Field(
        default=None,
        description="Taken when the invocation fails; event.message says why.",
    )


class Outcome(StrEnum):
    """What reaching a final state does to the Run."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class StateSpec(Spec):
    """A state: atomic, compound (it has states), parallel (type: parallel) or final
    (type: final)."""

    type: Literal["final", "parallel"] | None = Field(
        default=None,
        description=(
            "'final' for a state that ends its parent (or the Run, at the top); "
            "'parallel' for a state whose child states (regions) are all active at once. "
            "Otherwise the state is compound when it has states and atomic when it has "
            "none."
        ),
    )
    initial: str | None = Field(
        default=None, description="For a compound state: the child entered first."
    )
    states: dict[str, StateSpec] | None = Field(
        default=None, description="The child states, by name; makes this state compound."
    )
    on: dict[str, TransitionSpec] = Field(
        default_factory=dict,
        description=(
            "Event name to transition(s). Events handled here or in states inside an "
            "Agent's state are that Agent's Menu: it picks one by calling its tool."
        ),
    )
    after: dict[str, TransitionSpec] = Field(
        default_factory=dict,
        description=(
            "Timers: a duration (e.g. 30m) to the transition taken when the state has been "
            "active that long. Armed on entry, cancelled on exit."
        ),
    )
    always: TransitionSpec | None = Field(
        default=None,
        description="Transitions taken without an event as soon as their guard holds.",
    )
    invoke: InvokeSpec | None = Field(
        default=None,
        description="What runs while the state is active: an Agent, a command or a delivery.",
    )
    onDone: TransitionSpec | None = Field(
        default=None,
        description=(
            "For a compound state: taken when one of its final children is reached; for a "
            "parallel state, when every region has reached a final child (event.output "
            "holds each region's output by name)."
        ),
    )
    output: str | None = Field(
        default=None,
        description=(
            "For a final state: a CEL value carried by its parent's done event (or the "
            "Run's output, at the top)."
        ),
    )
    outcome: Outcome | None = Field(
        default=None,
        description=(
            "For a final state: 'failed' fails the Run when the state is reached; "
            "'succeeded' is the default."
        ),
    )


class MachineSpec(Spec):
    """The Run's state machine (SCXML/xstate-like); no user code runs in the operator."""

    initial: str = Field(min_length=1, description="The top-level state entered first.")
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="The initial context: free JSON that transitions' assign updates.",
    )
    on: dict[str, TransitionSpec] = Field(
        default_factory=dict,
        description="Event name to transition(s) handled in every state, e.g. CANCEL.",
    )
    states: dict[str, StateSpec] = Field(description="The top-level states, by name.")
