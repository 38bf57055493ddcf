"""Questions about a configuration that change nothing: its active states, due timers,
the events its states accept (what a signal may send), what a Turn's state handles
below it, whether an Agent is at rest, and what expressions of a state see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeturn.machine.configuration import MACHINE_EVENTS, Config, Event, Scope, Status, TimerEntry
from kubeturn.machine.document_order import all_active, in_document_order, offered_states
from kubeturn.machine.model import ROOT, Chart, StatePath, instance, machine_of, within
from kubeturn.machine.selection import timer_of


def active(chart: Chart, config: Config) -> list[StatePath]:
    """Every active state (of the Run's Machine and its children), in document order."""
    return in_document_order(chart, config.children, all_active(config.active))


def due(config: Config, now: float) -> list[TimerEntry]:
    """Timers whose fire time has come, in the order they fire."""
    return sorted((t for t in config.timers if t.fire_at <= now), key=lambda t: (t.fire_at, t.seq))


def next_fire(config: Config) -> float | None:
    return min((t.fire_at for t in config.timers), default=None)


def timer_event(entry: TimerEntry) -> Event:
    return Event(entry.timer, cause=entry.cause, origin=entry.origin)


@dataclass(frozen=True)
class Accepted:
    """An event the active states handle now: what a signal may send."""

    event: str
    state: StatePath
    """The innermost active state handling it."""
    description: str | None
    schema: Mapping[str, Any] | None
    """What its payload must be (the first transition's that says), if any."""


def accepted(chart: Chart, config: Config) -> list[Accepted]:
    """The events the active states of the Run's Machine handle now, each once, leaf by
    leaf in document order and inner states first, with the description and schema of the
    first of its transitions that gives them (as an Agent's Menu takes them);
    guard-blind: a guard may still refuse one. Events the Machine raises itself
    (``agent.fault``, ``error.expression``, ``CANCEL``) are not among them, nor anything
    once the Run has ended."""
    if config.status is not Status.RUNNING:
        return []
    found: dict[str, Accepted] = {}
    for path in offered_states(chart, config.leaves, ROOT):
        for name, transitions in chart.state(path).on.items():
            if name in found or name in MACHINE_EVENTS or not transitions:
                continue
            described = next((t for t in transitions if t.description), None)
            shaped = next((t for t in transitions if t.schema is not None), None)
            found[name] = Accepted(
                event=name,
                state=path,
                description=described.description if described else None,
                schema=shaped.schema if shaped else None,
            )
    return list(found.values())


def handled_below(chart: Chart, config: Config, state: StatePath) -> list[str]:
    """Events handled by active states at or below ``state`` (payload- and guard-blind),
    in the order an inner state offers them first."""
    names: list[str] = []
    for path in offered_states(chart, config.active, state):
        if not within(path, state):
            continue
        for name in chart.state(path).on:
            if name not in names:
                names.append(name)
    return names


def at_rest(chart: Chart, config: Config, state: StatePath) -> bool:
    """Rest for the Agent of ``state``: nothing strictly below it runs an invoke, and no
    pending timer would move the workflow to another state inside it."""
    for entry in config.invokes:
        if entry.state != state and within(entry.state, state):
            return False
    live = all_active(config.active)
    for armed in config.timers:
        if armed.state not in live or not within(armed.state, state):
            continue
        for transition in timer_of(chart, armed).transitions:
            if transition.target is None:
                continue
            target = instance(machine_of(armed.state), transition.target)
            if target != state and within(target, state):
                return False
    return True


def activation(
    config: Config, event: Event | None, scope: Scope, at: StatePath = ROOT
) -> dict[str, Any]:
    """What expressions and templates of the state ``at`` see: its Machine's context and
    input (a fan-out child's input is its item)."""
    machine = machine_of(at)
    child = next((c for c in config.children if c.scope == machine), None)
    return scope.activation(config.context, child, event, at)
