"""The Run resource: one execution of a state machine whose states ask Agents for Turns.

``Run.spec`` is what a user writes; ``kubeturn.machine.load`` checks it as a whole and
compiles its machine. ``status`` belongs to the operator. Nothing here does IO.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kubeturn.api.common import (
    GROUP_VERSION,
    GroupVersion,
    ObjectMeta,
    Spec,
    check_model_name,
    check_object_name,
    check_slot_names,
)
from kubeturn.api.durations import parse_duration
from kubeturn.api.machine import MachineSpec
from kubeturn.api.status import RunStatus
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn_harness.wire import ThinkingLevel, WorkspaceAccess

MAX_SIGNALS = 200
"""Signals one Run may carry. The API server checks that none is removed by comparing every
old signal's id with every new one's, and it prices that check before it runs it: 200
signals of 63-character ids cost about 6·10⁵ units, under the 10⁶ it allows one
expression per request, so an update is never refused for cost. Runs carry a handful."""

MAX_SIGNAL_ID_LENGTH = 63
"""A signal id's length: a DNS label's, room for a CI run id; it bounds the price above."""


COST_TEXT = r"^[0-9]+(\.[0-9]+)?$"
"""A cost limit: USD as decimal text, as ``Usage.cost`` is (ADR 0114), never a float."""


def _cost_text(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(
            f'write a cost as text in quotes, e.g. "{value}": a cost is decimal text, kept '
            "exact, where a bare YAML number may be a float"
        )
    return value


def _some_cost(value: str | None) -> str | None:
    if value is not None and Decimal(value) <= 0:
        raise ValueError(f'cost {value!r} allows nothing; write e.g. "0.50", or leave it out')
    return value


def _some_time(value: str | None) -> str | None:
    if value is not None and parse_duration(value) <= 0:
        raise ValueError(f"{value!r} is no time at all; write e.g. 30m, or leave it out")
    return value


class TurnLimits(Spec):
    """What one Turn may spend before it is swept (ADR 0117)."""

    tokens: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Tokens (prompt and completion, of every model request) one Turn may use.",
    )
    cost: str | None = Field(
        default=None,
        pattern=COST_TEXT,
        description="USD one Turn may cost, as decimal text (e.g. '0.50'), at the prices of "
        "the Harness's providers file; a Turn on a model with no price there is swept.",
    )
    wallTime: str | None = Field(
        default=None, description="How long one Turn may take from its start, e.g. 15m."
    )

    _cost_is_text = field_validator("cost", mode="before")(_cost_text)
    _cost = field_validator("cost")(_some_cost)
    _wall_time = field_validator("wallTime")(_some_time)


class RunLimits(TurnLimits):
    """What the whole Run may spend: every Turn of every Agent, retries included; and how
    long it may run from its start (ADR 0117)."""


class AgentLimits(Spec):
    """What an Agent slot's Turns may spend together over the Run, and each of them
    (ADR 0117)."""

    tokens: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="Tokens every Turn of this slot may use together over the Run.",
    )
    cost: str | None = Field(
        default=None,
        pattern=COST_TEXT,
        description="USD every Turn of this slot may cost together over the Run (decimal text).",
    )
    perTurn: TurnLimits | None = Field(
        default=None, description="What each Turn of this slot may spend."
    )

    _cost_is_text = field_validator("cost", mode="before")(_cost_text)
    _cost = field_validator("cost")(_some_cost)


class AgentSlot(Spec):
    """A named Agent: who it is and what it may touch. Each state asks it for a Turn."""

    model: str | None = Field(
        default=None,
        description="'provider/model' the Agent runs on; the Harness's default when absent.",
    )
    instructions: str = Field(
        min_length=1, description="The Agent's system prompt: its role in every Turn."
    )
    workspace: WorkspaceAccess = Field(
        default=WorkspaceAccess.WRITE,
        description=(
            "What it may do in the Workspace: write (every Working tool), read (read, grep, "
            "glob) or none (no Working tool)."
        ),
    )
    thinkingLevel: ThinkingLevel | None = Field(
        default=None, description="Reasoning effort; the model's default when absent."
    )
    description: str | None = Field(
        default=None, description="What this Agent is for, for people reading the Run."
    )
    limits: AgentLimits | None = Field(
        default=None,
        description="Tokens, cost and time this slot's Turns may spend; a Turn that reaches "
        "one is swept and its state hears agent.fault with reason budget (ADR 0117).",
    )
    stallAfter: str | None = Field(
        default=None,
        description=(
            "How long a live Turn may go without progress (no model request, output "
            "streamed, answer, tool call or pick) before it is swept as stalled and its "
            "state hears agent.fault with reason stalled, e.g. 5m. Absent: never (ADR 0115)."
        ),
    )

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        return check_model_name(value)

    @field_validator("stallAfter")
    @classmethod
    def _stall_after(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) <= 0:
            raise ValueError(
                f"stallAfter {value!r} is no time at all; write e.g. 5m, or leave it out"
            )
        return value


class WorkspaceRef(Spec):
    """Where the Run's Agents work: an existing Workspace, or one the Run owns."""

    name: str | None = Field(
        default=None,
        min_length=1,
        description="An existing Workspace in the Run's namespace, shared with other Runs.",
    )
    template: WorkspaceSpec | None = Field(
        default=None,
        description="A Workspace made for this Run and deleted with it.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_object_name(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkspaceRef:
        if (self.name is None) == (self.template is None):
            raise ValueError("a workspace has exactly one of name or template")
        return self


class Signal(Spec):
    """An event from outside (a person, a CI system), delivered once to the machine."""

    id: str = Field(
        min_length=1,
        max_length=MAX_SIGNAL_ID_LENGTH,
        description=(
            "Unique in this Run (at most 63 characters); a signal whose id was processed is "
            "never sent again."
        ),
    )
    event: str = Field(min_length=1, description="The event name, e.g. approve.")
    data: dict[str, Any] = Field(
        default_factory=dict,
        description="The event's payload (an object); expressions read its fields as event.<name>.",
    )


class RunSpec(Spec):
    """What the Run does: its Agents, its machine, and where the Agents work."""

    workspace: WorkspaceRef | None = Field(
        default=None,
        description="Where the Agents work and commands run. Required on a cluster when a "
        "state invokes an Agent or a command; the local runner gives a Run without one its "
        "workdir.",
    )
    agents: dict[str, AgentSlot] = Field(
        description="Agent slots by name; a state's invoke.agent.slot names one."
    )
    machine: MachineSpec = Field(description="The state machine the Run executes.")
    input: Any = Field(
        default_factory=dict,
        description="Free JSON the expressions read as input, e.g. the task to do.",
    )
    signals: list[Signal] = Field(
        default_factory=list,
        # Defaulted by the API server too, so a JSON patch can append to it at once.
        json_schema_extra={"default": []},
        max_length=MAX_SIGNALS,
        description=(
            "Outside events, append-only (at most 200); each is sent to the machine once, in order."
        ),
    )
    cancel: bool = Field(
        default=False,
        description=(
            "true sends the machine CANCEL once; when no active state handles it, the Run "
            "is Cancelled."
        ),
    )
    limits: RunLimits | None = Field(
        default=None,
        description="Tokens, cost and time the whole Run may spend. Once one is reached, every "
        "live Turn is swept (its state hears agent.fault with reason budget) and no Turn "
        "starts again (ADR 0117).",
    )
    turnRetention: str | None = Field(
        default=None,
        description="On a cluster: how long a Turn's AgentTurn stays visible, Settled, "
        "after its Turn ended, e.g. 30m, 24h; 0s lets it go at once. Absent: the "
        "operator's --turn-retention (the chart's turnRetention, 1h by default). Deleting "
        "the Run lets its Turns go at once.",
    )

    @field_validator("agents")
    @classmethod
    def _slot_names(cls, agents: dict[str, AgentSlot]) -> dict[str, AgentSlot]:
        check_slot_names("an agent slot", agents)
        return agents

    @field_validator("turnRetention")
    @classmethod
    def _retention(cls, retention: str | None) -> str | None:
        if retention is not None:
            parse_duration(retention)
        return retention

    @field_validator("signals")
    @classmethod
    def _unique_signal_ids(cls, signals: list[Signal]) -> list[Signal]:
        seen: set[str] = set()
        for signal in signals:
            if signal.id in seen:
                raise ValueError(f"signal id {signal.id!r} appears twice; ids are unique")
            seen.add(signal.id)
        return signals


class Run(Spec):
    """One execution of a state machine whose states ask coding Agents for Turns."""

    apiVersion: GroupVersion = Field(description=f"Always {GROUP_VERSION}.")
    kind: Literal["Run"] = Field(description="Always Run.")
    metadata: ObjectMeta = Field(description="The Run's name, namespace, labels.")
    spec: RunSpec = Field(description="What the Run does.")
    status: RunStatus | None = Field(
        default=None,
        description="Written by the operator: phase, active state, Turns. Never written by users.",
    )
