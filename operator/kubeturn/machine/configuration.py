"""What the interpreter keeps and returns: the configuration (a Run's whole run state,
its timers, invocations and fan-out children), the events it hears, and the Step each
event makes. Plain frozen data, JSON-serialisable through ``kubeturn.machine.snapshots``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kubeturn.machine import model
from kubeturn.machine.model import ROOT, StatePath, machine_of, parent_of

MAX_MICROSTEPS = 256
"""Eventless transitions that keep enabling each other are a definition bug; 256
microsteps is far beyond any Machine that settles, and bounds the one that does not."""


DONE_INVOKE = "done.invoke"


ERROR_INVOKE = "error.invoke"


DONE_STATE = "done.state"


AGENT_FAULT = "agent.fault"


ERROR_EXPRESSION = model.ERROR_EXPRESSION


CANCEL = "CANCEL"


MACHINE_EVENTS = frozenset({AGENT_FAULT, ERROR_EXPRESSION, CANCEL})
"""Events the Machine raises itself (CANCEL: ``spec.cancel``), never accepted as a signal."""


Cause = frozenset[str]


NO_CAUSE: Cause = frozenset()


class Status(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class InvokeKind(StrEnum):
    AGENT = "agent"
    EXEC = "exec"
    DELIVER = "deliver"
    FAN_OUT = "fan-out"


class ChildStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class TimerEntry:
    """An armed ``after`` timer: absolute fire time, and the cause that armed it."""

    timer: str
    state: StatePath
    fire_at: float
    cause: Cause
    seq: int

    @property
    def origin(self) -> str:
        return f"{self.timer}#{self.seq}"


@dataclass(frozen=True)
class InvokeEntry:
    """A running invocation of a state's invoke."""

    state: StatePath
    kind: InvokeKind
    cause: Cause
    seq: int

    @property
    def id(self) -> str:
        return f"{self.state}#{self.seq}"


@dataclass(frozen=True)
class Child:
    """One child Machine of a fan-out: an item, and how far its Machine got."""

    scope: StatePath
    """Its root: ``<fan-out state>[<key>]``, the prefix of its states' paths."""
    invocation: str
    """The fan-out invocation it belongs to (``InvokeEntry.id``)."""
    key: str
    index: int
    item: Any
    context: Mapping[str, Any]
    status: ChildStatus = ChildStatus.PENDING
    output: Any = None
    message: str | None = None


@dataclass(frozen=True)
class Config:
    """The Machine's whole run state: JSON-serialisable through ``snapshot``."""

    active: tuple[StatePath, ...]
    """The active leaves, of the Run's Machine and of every running child, in document
    order; empty once the Run ended."""
    context: Mapping[str, Any]
    timers: tuple[TimerEntry, ...] = ()
    invokes: tuple[InvokeEntry, ...] = ()
    status: Status = Status.RUNNING
    output: Any = None
    message: str | None = None
    seq: int = 0
    ended_in: tuple[StatePath, ...] = ()
    """The leaves of the Run's Machine that were active when it ended (its final state,
    or where CANCEL or a fault found it); empty while it runs."""
    finals: Mapping[StatePath, Any] = field(default_factory=dict)
    """The outputs of the active final states inside a region (a parallel state's done
    event carries them)."""
    children: tuple[Child, ...] = ()
    """The children of the running fan-outs, in the order they were made."""

    @property
    def leaves(self) -> tuple[StatePath, ...]:
        """The active leaves of the Run's own Machine (no fan-out child's)."""
        return tuple(leaf for leaf in self.active if machine_of(leaf) == ROOT)


@dataclass(frozen=True)
class Event:
    """An event for the Machine.

    ``fields`` are what ``event`` holds in expressions besides ``type`` (a pick's or a
    signal's payload, an invoke's ``output`` or ``error``). ``origin`` names the timer
    or invocation that sent it, so a stale one is dropped. ``scope`` is the state whose
    active leaves are offered it: a pick's is its Turn's state; a signal's, the root.
    """

    type: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    cause: Cause = NO_CAUSE
    origin: str | None = None
    scope: StatePath = ROOT

    def activation(self) -> dict[str, Any]:
        return {**self.fields, "type": self.type}


@dataclass(frozen=True)
class Scope:
    """What expressions see beside ``context`` and ``event``."""

    input: Any = None
    workspace: Mapping[str, Any] = field(default_factory=dict)
    workspaces: Mapping[StatePath, Mapping[str, Any]] = field(default_factory=dict)
    """A fan-out child's own ``workspace`` by its root (per-child worktrees, ADR 0113):
    its states and those of the Machines it fans out see it."""

    def workspace_at(self, at: StatePath) -> Mapping[str, Any]:
        """The ``workspace`` the state ``at`` sees: its nearest Machine's own, else the
        Run's."""
        if not self.workspaces:
            return self.workspace
        machine = machine_of(at)
        while machine != ROOT:
            if machine in self.workspaces:
                return self.workspaces[machine]
            machine = machine_of(parent_of(machine) or ROOT)
        return self.workspace

    def activation(
        self,
        context: Mapping[str, Any],
        child: Child | None,
        event: Event | None,
        at: StatePath,
    ) -> dict[str, Any]:
        """What expressions and templates of the state ``at`` see: its Machine's context
        and input (``child``, the fan-out child it is in, has its own context, and its
        item as input), the event, and its ``workspace``."""
        return {
            "context": child.context if child is not None else context,
            "event": event.activation() if event is not None else {},
            "input": child.item if child is not None else self.input,
            "workspace": self.workspace_at(at),
        }


@dataclass(frozen=True)
class Stopped:
    invoke: InvokeEntry
    cause: Cause


@dataclass(frozen=True)
class Move:
    """A transition taken that moved the Machine: from its source to its target, on its
    event (None for ``always``). A Run's trail of them shows where it has been (ADR 0109)."""

    source: StatePath
    event: str | None
    target: StatePath


@dataclass(frozen=True)
class Step:
    """What one event did."""

    config: Config
    event: Event
    taken: bool
    """A transition was selected (a targetless one included)."""
    exited: tuple[StatePath, ...] = ()
    entered: tuple[StatePath, ...] = ()
    started: tuple[InvokeEntry, ...] = ()
    stopped: tuple[Stopped, ...] = ()
    armed: tuple[TimerEntry, ...] = ()
    cancelled: tuple[TimerEntry, ...] = ()
    fault: str | None = None
    moves: tuple[Move, ...] = ()
    """The transitions taken that moved the Machine, in the order they were."""
