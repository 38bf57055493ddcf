"""Which transitions an event takes (SCXML's optimal enabled transition set): each
leaf's first enabled transition from itself outward, conflicts removed (a descendant
source wins, else document order); and where a transition goes: its target instance,
its domain (never a parallel state) and its exit set.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubeturn.machine.configuration import (
    AGENT_FAULT,
    DONE_INVOKE,
    DONE_STATE,
    ERROR_INVOKE,
    Event,
    InvokeKind,
    TimerEntry,
)
from kubeturn.machine.document_order import all_active, in_document_order, leaves_in
from kubeturn.machine.macrostep import Macro, evaluate
from kubeturn.machine.model import (
    Chart,
    Kind,
    StatePath,
    Timer,
    Transition,
    instance,
    machine_of,
    within,
)

Chosen = tuple[StatePath, Transition]
"""A transition selected, with the instance of its source."""


def select(macro: Macro, event: Event) -> list[Chosen]:
    """The transitions ``event`` takes, conflicts removed; empty when none."""
    chart = macro.chart
    if event.type in (DONE_INVOKE, ERROR_INVOKE):
        entry = next((i for i in macro.invokes if i.id == event.origin), None)
        if entry is None:
            return []
        invoke = chart.state(entry.state).invoke
        assert invoke is not None
        if entry.kind is not InvokeKind.AGENT:
            # An exec, a delivery or a fan-out that answered is no longer running; an
            # Agent's Turn runs on until its state exits, whatever its fault route does.
            macro.invokes.remove(entry)
        candidates = invoke.on_done if event.type == DONE_INVOKE else invoke.on_error
        chosen = _first_enabled(macro, candidates, entry.state, event)
        if chosen is None and event.type == ERROR_INVOKE and entry.kind is InvokeKind.AGENT:
            fault = Event(AGENT_FAULT, event.fields, event.cause, event.origin, entry.state)
            return broadcast(macro, fault)
        return [(entry.state, chosen)] if chosen is not None else []
    if event.origin is not None and event.type.startswith("after:"):
        entry_t = next((t for t in macro.timers if t.origin == event.origin), None)
        if entry_t is None:
            return []
        macro.timers.remove(entry_t)
        chosen = _first_enabled(macro, timer_of(chart, entry_t).transitions, entry_t.state, event)
        return [(entry_t.state, chosen)] if chosen is not None else []
    if event.type == DONE_STATE:
        state = StatePath(event.origin or "")
        if state not in all_active(macro.active):
            return []
        chosen = _first_enabled(macro, chart.state(state).on_done, state, event)
        return [(state, chosen)] if chosen is not None else []
    return broadcast(macro, event)


def broadcast(macro: Macro, event: Event) -> list[Chosen]:
    """Each active leaf in the event's scope selects the first enabled transition from
    itself outward; conflicts are then removed."""
    enabled: list[Chosen] = []
    leaves = leaves_in(macro.active, event.scope)
    for leaf in in_document_order(macro.chart, macro.children.values(), leaves):
        for path in macro.chart.chain(leaf):
            group = macro.chart.state(path).on.get(event.type, ())
            chosen = _first_enabled(macro, group, path, event)
            if chosen is not None:
                if (path, chosen) not in enabled:
                    enabled.append((path, chosen))
                break
    return _without_conflicts(macro, enabled)


def eventless(macro: Macro) -> list[Chosen]:
    enabled: list[Chosen] = []
    for leaf in macro.active:
        for path in macro.chart.chain(leaf):
            chosen = _first_enabled(macro, macro.chart.state(path).always, path, None)
            if chosen is not None:
                if (path, chosen) not in enabled:
                    enabled.append((path, chosen))
                break
    return _without_conflicts(macro, enabled)


def _without_conflicts(macro: Macro, enabled: list[Chosen]) -> list[Chosen]:
    """SCXML's conflict resolution: of two transitions whose exit sets overlap, the one
    whose source is inside the other's wins, else the one selected first."""
    if len(enabled) < 2:
        return enabled
    kept: list[tuple[Chosen, set[StatePath]]] = []
    for chosen in enabled:
        exits = exit_set(macro, *chosen)
        preempted = False
        beaten = []
        for other in kept:
            if exits & other[1]:
                if within(chosen[0], other[0][0]) and chosen[0] != other[0][0]:
                    beaten.append(other)
                else:
                    preempted = True
                    break
        if not preempted:
            kept = [k for k in kept if k not in beaten]
            kept.append((chosen, exits))
    return [chosen for chosen, _ in kept]


def _first_enabled(
    macro: Macro, transitions: Iterable[Transition], source: StatePath, event: Event | None
) -> Transition | None:
    for transition in transitions:
        if transition.guard is None:
            return transition
        verdict = evaluate(macro, transition.guard, source, event)
        if verdict is True:
            return transition
    return None


def target_of(source: StatePath, transition: Transition) -> StatePath | None:
    """The instance a transition from ``source`` moves to; None when it moves nothing."""
    if transition.target is None:
        return None
    target = instance(machine_of(source), transition.target)
    return None if target == source else target


def domain_of(macro: Macro, source: StatePath, target: StatePath) -> StatePath:
    """The compound state a transition stays inside: its source, when the source is
    compound and holds the target; else the nearest compound ancestor holding both (a
    target that is an ancestor of the source is left and entered again)."""
    chart = macro.chart
    if chart.state(source).kind is Kind.COMPOUND and within(target, source):
        return source
    for path in chart.chain(source)[1:]:
        if chart.state(path).kind is Kind.COMPOUND and within(target, path) and target != path:
            return path
    return machine_of(source)


def exit_set(macro: Macro, source: StatePath, transition: Transition) -> set[StatePath]:
    target = target_of(source, transition)
    if target is None:
        return set()
    domain = domain_of(macro, source, target)
    return {s for s in all_active(macro.active) if s != domain and within(s, domain)}


def timer_of(chart: Chart, entry: TimerEntry) -> Timer:
    return next(t for t in chart.state(entry.state).after if t.id == entry.timer)
