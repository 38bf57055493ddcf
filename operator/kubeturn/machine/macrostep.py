"""The running state of one macrostep (it becomes a ``Step``), and how an expression is
evaluated in it: in its state's Machine (the Run's, or a fan-out child's, with its own
context and its item as ``input``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubeturn.errors import ExpressionError
from kubeturn.machine import model
from kubeturn.machine.configuration import (
    Cause,
    Child,
    ChildStatus,
    Config,
    Event,
    InvokeEntry,
    Move,
    Scope,
    Status,
    Step,
    Stopped,
    TimerEntry,
)
from kubeturn.machine.model import ROOT, Chart, StatePath, machine_of


@dataclass
class Macro:
    """The running state of one macrostep; becomes a ``Step``."""

    chart: Chart
    scope: Scope
    now: float
    cause: Cause
    active: list[StatePath]
    context: dict[str, Any]
    timers: list[TimerEntry]
    invokes: list[InvokeEntry]
    seq: int
    finals: dict[StatePath, Any]
    children: dict[StatePath, Child]
    status: Status = Status.RUNNING
    output: Any = None
    message: str | None = None
    ended_in: tuple[StatePath, ...] = ()
    exited: list[StatePath] = field(default_factory=list)
    entered: list[StatePath] = field(default_factory=list)
    started: list[InvokeEntry] = field(default_factory=list)
    stopped: list[Stopped] = field(default_factory=list)
    armed: list[TimerEntry] = field(default_factory=list)
    cancelled: list[TimerEntry] = field(default_factory=list)
    internal: list[Event] = field(default_factory=list)
    fault: str | None = None
    moves: list[Move] = field(default_factory=list)
    progressing: set[str] = field(default_factory=set)
    """Fan-outs whose children are being started up the stack: a child that ends as it
    starts leaves the next start to that loop."""

    def config(self) -> Config:
        return Config(
            active=tuple(self.active),
            context=self.context,
            timers=tuple(self.timers),
            invokes=tuple(self.invokes),
            status=self.status,
            output=self.output,
            message=self.message,
            seq=self.seq,
            ended_in=self.ended_in,
            finals=dict(self.finals),
            children=tuple(self.children.values()),
        )

    def result(self, event: Event, *, taken: bool) -> Step:
        return Step(
            config=self.config(),
            event=event,
            taken=taken,
            exited=tuple(self.exited),
            entered=tuple(self.entered),
            started=tuple(self.started),
            stopped=tuple(self.stopped),
            armed=tuple(self.armed),
            cancelled=tuple(self.cancelled),
            fault=self.fault,
            moves=tuple(self.moves),
        )

    def running(self, machine: StatePath) -> bool:
        """Whether the Machine instance ``machine`` (the Run's, or a child's) still runs."""
        if self.status is not Status.RUNNING:
            return False
        if machine == ROOT:
            return True
        child = self.children.get(machine)
        return child is not None and child.status is ChildStatus.RUNNING


class Failed(Exception):
    """An expression failed in a microstep: the microstep is abandoned, and the Machine
    hears ``error.expression``."""

    def __init__(self, state: StatePath, error: ExpressionError) -> None:
        super().__init__(str(error))
        self.state = state
        self.error = error


def new_macro(chart: Chart, config: Config, scope: Scope, now: float, cause: Cause) -> Macro:
    return Macro(
        chart=chart,
        scope=scope,
        now=now,
        cause=cause,
        active=list(config.active),
        context=dict(config.context),
        timers=list(config.timers),
        invokes=list(config.invokes),
        seq=config.seq,
        finals=dict(config.finals),
        children={child.scope: child for child in config.children},
        status=config.status,
        output=config.output,
        message=config.message,
        ended_in=config.ended_in,
    )


def evaluate(
    macro: Macro, expression: model.Expression, state: StatePath, event: Event | None
) -> Any:
    """``expression``'s value in ``state``'s Machine; ``Failed`` (of ``state``) when it
    fails."""
    try:
        return expression.evaluate(activation_of(macro, event, state))
    except ExpressionError as error:
        raise Failed(state, error) from error


def activation_of(macro: Macro, event: Event | None, at: StatePath) -> dict[str, Any]:
    """``activation``, of the macrostep's own state."""
    return macro.scope.activation(macro.context, macro.children.get(machine_of(at)), event, at)
