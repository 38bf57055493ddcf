"""A Machine written inline as a manifest's ``spec.machine`` and driven a step at a time,
as the parallel-state and fan-out unit tests drive it (real loader, real CEL)."""

from __future__ import annotations

from typing import Any

from kubeturn.machine import interpreter as it
from kubeturn.machine.interpreter import (
    DONE_INVOKE,
    ERROR_INVOKE,
    NO_CAUSE,
    Event,
    InvokeEntry,
    Step,
    TimerEntry,
)
from kubeturn.machine.load import load_run
from kubeturn.machine.model import ROOT, Chart, StatePath

SCOPE = it.Scope()


def document(machine: dict[str, Any], agents: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "t", "namespace": "dev"},
        "spec": {"agents": agents or {}, "machine": machine},
    }


def chart(machine: dict[str, Any]) -> Chart:
    return load_run(document(machine)).chart


class Machine:
    """One inline Machine, started at ``now``; each call sends one event."""

    def __init__(self, machine: dict[str, Any] | Chart, now: float = 0.0) -> None:
        self.chart = machine if isinstance(machine, Chart) else chart(machine)
        self.first = it.start(self.chart, SCOPE, now)
        self.config = self.first.config
        self.steps: list[Step] = [self.first]

    def send(
        self,
        type_: str,
        now: float = 0.0,
        cause: frozenset[str] = NO_CAUSE,
        scope: str = ROOT,
        **fields: Any,
    ) -> Step:
        return self.event(Event(type_, fields, cause, scope=StatePath(scope)), now)

    def event(self, event: Event, now: float = 0.0) -> Step:
        step = it.step(self.chart, self.config, event, SCOPE, now)
        self.config = step.config
        self.steps.append(step)
        return step

    def fire(self, entry: TimerEntry) -> Step:
        return self.event(it.timer_event(entry), entry.fire_at)

    def invoke(self, state: str) -> InvokeEntry:
        return next(i for i in self.config.invokes if i.state == state)

    def timer(self, state: str) -> TimerEntry:
        return next(t for t in self.config.timers if t.state == state)

    def done(self, state: str, output: Any = None) -> Step:
        entry = self.invoke(state)
        return self.event(Event(DONE_INVOKE, {"output": output}, entry.cause, entry.id))

    def error(self, state: str, **fields: Any) -> Step:
        entry = self.invoke(state)
        return self.event(Event(ERROR_INVOKE, fields, entry.cause, entry.id))

    @property
    def active(self) -> tuple[str, ...]:
        return tuple(self.config.active)


def moved(step: Step) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A step's exits then entries, each in the order they happened."""
    return tuple(step.exited), tuple(step.entered)


EXEC = {"exec": {"command": "make"}}
"""An invoke that runs while its state is active, answered by ``Machine.done``."""
