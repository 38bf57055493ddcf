"""The interpreter: one pure ``step`` per event, returning everything it did, with causes.

Semantics (ADR 0010 records them; ADR 0112 parallel states and fan-out):

- The configuration is a set of active states: its leaves (atomic or final states) and
  their ancestors; the root is always active. A compound state has one active child; a
  parallel state has every child (its regions) active at once.
- An event is offered to the active leaves its scope holds (``Event.scope``: the whole
  Machine for a signal, the picking Turn's state for a pick), in document order; each
  leaf selects the first transition whose guard holds from itself up to the root, in
  document order on each state: inner states win. Transitions whose exit sets overlap
  conflict: one whose source is inside the other's wins, else the earlier in document
  order (SCXML's rules). The rest are taken together as one microstep.
- A microstep evaluates every ``assign`` of its transitions first (all or nothing), exits
  every active state inside each transition's domain (reverse document order), applies
  the assigns in document order, then enters the targets, their ancestors down from the
  domain, initial children and every region of an entered parallel state (document
  order). A domain is the source when the source is compound and the target inside it
  (the source is not left), else the nearest compound ancestor holding both (never a
  parallel state). A target equal to the source moves nothing.
- Exiting a state cancels its timers and stops its invoke; entering one arms its timers
  and starts its invoke. Each stop and start carries the cause of the macrostep.
- Reaching a final child raises that parent's ``done.state`` inside the macrostep; once
  every region of a parallel state is in a final child, the parallel state's
  ``done.state`` follows, its ``output`` each region's final output by region name.
  Reaching a top-level final ends the Run (``failed`` finals fail it); eventless
  (``always``) transitions run until none is enabled, at most ``MAX_MICROSTEPS`` per
  macrostep.
- A fan-out invoke (``forEach``) starts a child Machine for each item of its list, at most
  ``concurrency`` at once; a child is an instance ``<state>[<key>]`` with its own context
  and its item as ``input``, and hears only the events of its own states. A child ends
  at its top-level final (``failed`` ones fail it) or on a fault of its own. When every
  child has ended the state hears ``done.invoke`` (``output``: the children's outputs in
  item order; ``results``: each child's key, status, output and message); with
  ``failFast``, the first child that fails is the invoke's ``error.invoke``. Exiting the
  state exits every child, and stops each invoke inside.
- An expression that fails (a guard, an assign, a final's output; ADR 0068) abandons
  the microstep it was evaluated in: a failing guard selects nothing, a failing assign
  takes no part of its transition (every value is evaluated before anything moves).
  The Machine then hears the internal event ``error.expression`` (``event.state``,
  ``event.expression``, ``event.where``, ``event.message`` and, for a missing map key,
  ``event.key``), which the active states in and around the failing state handle with
  ``on`` as any event. Unhandled, or failing again while it is handled, it faults its
  Machine (the Run, or a fan-out child): every state of it is exited with no cause, the
  message naming the state, the expression and the key. So does an invoke's error that
  nothing handles (a defect no state catches), and a chain of eventless transitions that
  never settles (that one always the Run's).
- A Run that ends (a top-level final, CANCEL, a fault) exits every state; ``ended_in``
  keeps the leaves that were active when it ended, for display (ADR 0022).
- An invoke's result whose invocation no longer runs is stale and dropped, as is the
  event of a cancelled timer.

A cause is a set of pick references; it rides each event (never the event's payload),
and timers and invocations keep the cause of the macrostep that armed or started them.
No IO, no clock: ``now`` is an argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from kubeturn.errors import ExpressionError
from kubeturn.machine import model
from kubeturn.machine.model import (
    ROOT,
    Chart,
    FanOut,
    Kind,
    State,
    StatePath,
    Timer,
    Transition,
    instance,
    machine_of,
    parent_of,
    within,
)

MAX_MICROSTEPS = 256
"""Eventless transitions that keep enabling each other are a definition bug; 256
microsteps is far beyond any Machine that settles, and bounds the one that does not."""
MAX_ITEMS = 100
"""Children of one fan-out: each holds its item and context in the Run's status, which
the API server keeps under 1.5 MiB (ADR 0112)."""
KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$")
"""A fan-out child's key: one segment of its states' paths and of its Instance IDs."""

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


Chosen = tuple[StatePath, Transition]
"""A transition selected, with the instance of its source."""


@dataclass
class _Macro:
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


class _Failed(Exception):
    """An expression failed in a microstep: the microstep is abandoned, and the Machine
    hears ``error.expression``."""

    def __init__(self, state: StatePath, error: ExpressionError) -> None:
        super().__init__(str(error))
        self.state = state
        self.error = error


# --------------------------------------------------------------------------- entry points


def start(chart: Chart, scope: Scope, now: float) -> Step:
    """Enter the Machine's initial configuration."""
    event = Event("start")
    macro = _macro(chart, Config(active=(), context=dict(chart.context)), scope, now, NO_CAUSE)
    try:
        try:
            into: dict[StatePath, None] = {}
            _add_descendants(chart, _initial(chart, ROOT), into)
            _enter_states(macro, into)
        except _Failed as failed:
            macro.internal.append(_error_event(macro, failed))
        _settle(macro)
    except ExpressionError as error:
        return _fault(macro, event, error)
    return macro.result(event, taken=True)


def step(chart: Chart, config: Config, event: Event, scope: Scope, now: float) -> Step:
    """Process one event to the end of its macrostep."""
    macro = _macro(chart, config, scope, now, event.cause)
    if config.status is not Status.RUNNING:
        return macro.result(event, taken=False)
    if event.type in (DONE_INVOKE, ERROR_INVOKE) and all(
        entry.id != event.origin for entry in config.invokes
    ):
        # The result of an invocation that no longer runs (its state exited, or was
        # entered again since) is stale: dropped, as a cancelled timer's event is.
        return macro.result(event, taken=False)
    try:
        try:
            chosen = _select(macro, event)
            if not chosen:
                if event.type == CANCEL:
                    _end(macro, Status.CANCELLED, message="cancelled")
                    return macro.result(event, taken=True)
                if not _unhandled_error(macro, event):
                    return macro.result(event, taken=False)
                _settle(macro)
                return macro.result(event, taken=True)
            _microstep(macro, chosen, event)
        except _Failed as failed:
            macro.internal.append(_error_event(macro, failed))
        _settle(macro)
    except ExpressionError as error:
        return _fault(macro, event, error)
    return macro.result(event, taken=True)


# --------------------------------------------------------------------------- queries


def active(chart: Chart, config: Config) -> list[StatePath]:
    """Every active state (of the Run's Machine and its children), in document order."""
    return _sorted(chart, config.children, _all_active(config.active))


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
    for path in _offered_states(chart, config.leaves, ROOT):
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
    for path in _offered_states(chart, config.active, state):
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
    live = _all_active(config.active)
    for armed in config.timers:
        if armed.state not in live or not within(armed.state, state):
            continue
        for transition in _timer(chart, armed).transitions:
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
    return {
        "context": child.context if child is not None else config.context,
        "event": event.activation() if event is not None else {},
        "input": child.item if child is not None else scope.input,
        "workspace": scope.workspace_at(at),
    }


# --------------------------------------------------------------------------- document order


def _all_active(leaves: Iterable[StatePath]) -> set[StatePath]:
    """The leaves and every ancestor of each (through fan-out states), the root included."""
    states: set[StatePath] = {ROOT}
    for leaf in leaves:
        current: StatePath | None = leaf
        while current is not None and current not in states:
            states.add(current)
            current = parent_of(current)
    return states


def _place(chart: Chart, indices: Mapping[StatePath, int], path: StatePath) -> tuple[int, ...]:
    """Where an instance stands in document order: its ancestors' places, outermost
    first; a fan-out's children (``indices``: child root → item index) in item order."""
    places: list[int] = []
    current: StatePath | None = path
    while current is not None and current != ROOT:
        if current.endswith("]"):
            places.append(indices.get(current, 0))
        else:
            places.append(chart.order[model.template(current)])
        current = parent_of(current)
    return tuple(reversed(places))


def _sorted(
    chart: Chart, children: Iterable[Child], paths: Iterable[StatePath], *, reverse: bool = False
) -> list[StatePath]:
    listed = list(paths)
    if len(listed) < 2:
        return listed
    indices = {child.scope: child.index for child in children}
    return sorted(listed, key=lambda path: _place(chart, indices, path), reverse=reverse)


def _leaves_in(leaves: Iterable[StatePath], scope: StatePath) -> list[StatePath]:
    """The leaves ``scope`` holds that belong to its own Machine."""
    machine = machine_of(scope)
    return [leaf for leaf in leaves if within(leaf, scope) and machine_of(leaf) == machine]


def _offered_states(chart: Chart, leaves: Iterable[StatePath], scope: StatePath) -> list[StatePath]:
    """The states an event in ``scope`` is offered to, leaf by leaf and inner first, each
    once."""
    seen: dict[StatePath, None] = {}
    for leaf in _leaves_in(leaves, scope):
        for path in chart.chain(leaf):
            seen.setdefault(path, None)
    return list(seen)


# --------------------------------------------------------------------------- selection


def _macro(chart: Chart, config: Config, scope: Scope, now: float, cause: Cause) -> _Macro:
    return _Macro(
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


def _select(macro: _Macro, event: Event) -> list[Chosen]:
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
            return _broadcast(macro, fault)
        return [(entry.state, chosen)] if chosen is not None else []
    if event.origin is not None and event.type.startswith("after:"):
        entry_t = next((t for t in macro.timers if t.origin == event.origin), None)
        if entry_t is None:
            return []
        macro.timers.remove(entry_t)
        chosen = _first_enabled(macro, _timer(chart, entry_t).transitions, entry_t.state, event)
        return [(entry_t.state, chosen)] if chosen is not None else []
    if event.type == DONE_STATE:
        state = StatePath(event.origin or "")
        if state not in _all_active(macro.active):
            return []
        chosen = _first_enabled(macro, chart.state(state).on_done, state, event)
        return [(state, chosen)] if chosen is not None else []
    return _broadcast(macro, event)


def _broadcast(macro: _Macro, event: Event) -> list[Chosen]:
    """Each active leaf in the event's scope selects the first enabled transition from
    itself outward; conflicts are then removed."""
    enabled: list[Chosen] = []
    leaves = _leaves_in(macro.active, event.scope)
    for leaf in _sorted(macro.chart, macro.children.values(), leaves):
        for path in macro.chart.chain(leaf):
            group = macro.chart.state(path).on.get(event.type, ())
            chosen = _first_enabled(macro, group, path, event)
            if chosen is not None:
                if (path, chosen) not in enabled:
                    enabled.append((path, chosen))
                break
    return _without_conflicts(macro, enabled)


def _eventless(macro: _Macro) -> list[Chosen]:
    enabled: list[Chosen] = []
    for leaf in macro.active:
        for path in macro.chart.chain(leaf):
            chosen = _first_enabled(macro, macro.chart.state(path).always, path, None)
            if chosen is not None:
                if (path, chosen) not in enabled:
                    enabled.append((path, chosen))
                break
    return _without_conflicts(macro, enabled)


def _without_conflicts(macro: _Macro, enabled: list[Chosen]) -> list[Chosen]:
    """SCXML's conflict resolution: of two transitions whose exit sets overlap, the one
    whose source is inside the other's wins, else the one selected first."""
    if len(enabled) < 2:
        return enabled
    kept: list[tuple[Chosen, set[StatePath]]] = []
    for chosen in enabled:
        exits = _exit_set(macro, *chosen)
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


def _unhandled_error(macro: _Macro, event: Event) -> bool:
    """An invoke's error that nothing handles fails the Machine it was in (a defect no
    state catches, so no stop has a cause): the Run's, or a fan-out child's."""
    if event.type not in (ERROR_INVOKE, AGENT_FAULT):
        return False
    state = StatePath((event.origin or "").partition("#")[0])
    if event.type == ERROR_INVOKE and state and state not in _all_active(macro.active):
        return False
    message = event.fields.get("message") or event.fields.get("reason") or "it failed"
    why = f"the invoke of state '{state}' failed and no onError handles it: {message}"
    _defect(macro, machine_of(state), why)
    return True


def _first_enabled(
    macro: _Macro, transitions: Iterable[Transition], source: StatePath, event: Event | None
) -> Transition | None:
    for transition in transitions:
        if transition.guard is None:
            return transition
        verdict = _evaluate(macro, transition.guard, source, event)
        if verdict is True:
            return transition
    return None


def _evaluate(
    macro: _Macro, expression: model.Expression, state: StatePath, event: Event | None
) -> Any:
    """``expression``'s value in ``state``'s Machine; ``_Failed`` (of ``state``) when it
    fails."""
    try:
        return expression.evaluate(_activation(macro, event, state))
    except ExpressionError as error:
        raise _Failed(state, error) from error


def _activation(macro: _Macro, event: Event | None, at: StatePath) -> dict[str, Any]:
    """``activation``, of the macrostep's own state."""
    child = macro.children.get(machine_of(at))
    return {
        "context": child.context if child is not None else macro.context,
        "event": event.activation() if event is not None else {},
        "input": child.item if child is not None else macro.scope.input,
        "workspace": macro.scope.workspace_at(at),
    }


# --------------------------------------------------------------------------- transitions


def _target(source: StatePath, transition: Transition) -> StatePath | None:
    """The instance a transition from ``source`` moves to; None when it moves nothing."""
    if transition.target is None:
        return None
    target = instance(machine_of(source), transition.target)
    return None if target == source else target


def _domain(macro: _Macro, source: StatePath, target: StatePath) -> StatePath:
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


def _exit_set(macro: _Macro, source: StatePath, transition: Transition) -> set[StatePath]:
    target = _target(source, transition)
    if target is None:
        return set()
    domain = _domain(macro, source, target)
    return {s for s in _all_active(macro.active) if s != domain and within(s, domain)}


def _microstep(macro: _Macro, chosen: Sequence[Chosen], event: Event) -> None:
    updates = [
        (source, [(key, _evaluate(macro, value, source, event)) for key, value in t.assign])
        for source, t in chosen
    ]
    moving = [
        (source, t, target) for source, t in chosen if (target := _target(source, t)) is not None
    ]
    exits: set[StatePath] = set()
    for source, t, _ in moving:
        exits |= _exit_set(macro, source, t)
    _exit_states(macro, exits)
    for source, values in updates:
        _assign(macro, machine_of(source), values)
    into: dict[StatePath, None] = {}
    for source, t, target in moving:
        macro.moves.append(Move(source, t.event, target))
        _add_descendants(macro.chart, target, into)
        _add_ancestors(macro.chart, target, _domain(macro, source, target), into)
    _enter_states(macro, into)


def _assign(macro: _Macro, machine: StatePath, updates: list[tuple[str, Any]]) -> None:
    if not updates:
        return
    child = macro.children.get(machine) if machine != ROOT else None
    context = dict(child.context) if child is not None else macro.context
    for path, value in updates:
        keys = path.split(".")[1:]
        node = context
        for key in keys[:-1]:
            inner = node.get(key)
            node[key] = dict(inner) if isinstance(inner, Mapping) else {}
            node = node[key]
        node[keys[-1]] = value
    if child is not None:
        macro.children[machine] = replace(child, context=context)


def _initial(chart: Chart, path: StatePath) -> StatePath:
    initial = chart.state(path).initial
    assert initial is not None, "the loader checks every compound state has an initial"
    return _child_instance(chart, path, initial)


def _child_instance(chart: Chart, path: StatePath, child: StatePath) -> StatePath:
    name = chart.states[child].name
    return StatePath(f"{path}.{name}" if path != ROOT else name)


def _add_descendants(chart: Chart, path: StatePath, into: dict[StatePath, None]) -> None:
    """``path``, and what entering it enters below: initial children, every region."""
    into[path] = None
    kind = chart.state(path).kind
    if kind is Kind.COMPOUND:
        _add_descendants(chart, _initial(chart, path), into)
    elif kind is Kind.PARALLEL:
        for region in chart.regions(path):
            if not any(within(s, region) for s in into):
                _add_descendants(chart, region, into)


def _add_ancestors(
    chart: Chart, path: StatePath, domain: StatePath, into: dict[StatePath, None]
) -> None:
    """The ancestors of ``path`` strictly inside ``domain``, and the other regions of each
    parallel one."""
    for ancestor in chart.ancestors(path)[1:]:
        if ancestor == domain or not within(ancestor, domain):
            return
        into[ancestor] = None
        if chart.state(ancestor).kind is Kind.PARALLEL:
            for region in chart.regions(ancestor):
                if not any(within(s, region) for s in into):
                    _add_descendants(chart, region, into)


def _exit_states(macro: _Macro, states: Iterable[StatePath]) -> None:
    """Exit ``states``, innermost and latest first."""
    for path in _sorted(macro.chart, macro.children.values(), states, reverse=True):
        _exit(macro, path)


def _exit(macro: _Macro, path: StatePath) -> None:
    for timer in [t for t in macro.timers if t.state == path]:
        macro.timers.remove(timer)
        macro.cancelled.append(timer)
    for invoke in [i for i in macro.invokes if i.state == path]:
        macro.invokes.remove(invoke)
        macro.stopped.append(Stopped(invoke, macro.cause))
    if any(parent_of(scope) == path for scope in macro.children):
        macro.children = {k: c for k, c in macro.children.items() if parent_of(k) != path}
    if path in macro.active:
        macro.active.remove(path)
    macro.finals.pop(path, None)
    macro.exited.append(path)


def _enter_states(macro: _Macro, states: Iterable[StatePath]) -> None:
    """Enter ``states`` in document order; then what reaching a final state does."""
    reached: list[StatePath] = []
    for path in _sorted(macro.chart, macro.children.values(), states):
        state = macro.chart.state(path)
        _enter(macro, path, state)
        if state.kind is Kind.FINAL:
            reached.append(path)
    for path in reached:
        if path in macro.active and macro.running(machine_of(path)):
            _reach_final(macro, path, macro.chart.state(path))


def _enter(macro: _Macro, path: StatePath, state: State) -> None:
    macro.entered.append(path)
    if state.kind in (Kind.ATOMIC, Kind.FINAL):
        macro.active.append(path)
        macro.active = _sorted(macro.chart, macro.children.values(), macro.active)
    for timer in state.after:
        macro.seq += 1
        entry = TimerEntry(timer.id, path, macro.now + timer.delay_s, macro.cause, macro.seq)
        macro.timers.append(entry)
        macro.armed.append(entry)
    invoke = state.invoke
    if invoke is None:
        return
    macro.seq += 1
    kind = (
        InvokeKind.AGENT
        if invoke.agent is not None
        else InvokeKind.DELIVER
        if invoke.deliver is not None
        else InvokeKind.FAN_OUT
        if invoke.fan_out is not None
        else InvokeKind.EXEC
    )
    entry_i = InvokeEntry(path, kind, macro.cause, macro.seq)
    macro.invokes.append(entry_i)
    macro.started.append(entry_i)
    if invoke.fan_out is not None:
        _fan_out(macro, entry_i, invoke.fan_out)


def _reach_final(macro: _Macro, path: StatePath, final: State) -> None:
    output = _evaluate(macro, final.output, path, None) if final.output else None
    parent = parent_of(path)
    assert parent is not None
    machine = machine_of(path)
    if final.failed:
        _end_machine(
            macro,
            machine,
            Status.FAILED,
            output=output,
            message=f"reached the failed final '{path}'",
        )
        return
    if parent == machine:
        _end_machine(macro, machine, Status.DONE, output=output)
        return
    macro.finals[path] = output
    macro.internal.append(Event(DONE_STATE, {"output": output}, macro.cause, origin=parent))
    grandparent = parent_of(parent)
    if (
        grandparent is not None
        and macro.chart.state(grandparent).kind is Kind.PARALLEL
        and _in_final(macro, grandparent)
    ):
        outputs = {
            macro.chart.state(region).name: _region_output(macro, region)
            for region in macro.chart.regions(grandparent)
        }
        macro.internal.append(
            Event(DONE_STATE, {"output": outputs}, macro.cause, origin=grandparent)
        )


def _in_final(macro: _Macro, path: StatePath) -> bool:
    """SCXML's ``isInFinalState``: a compound state whose active child is final; a
    parallel state whose every region is."""
    kind = macro.chart.state(path).kind
    if kind is Kind.COMPOUND:
        return any(
            parent_of(leaf) == path and macro.chart.state(leaf).kind is Kind.FINAL
            for leaf in macro.active
        )
    if kind is Kind.PARALLEL:
        return all(_in_final(macro, region) for region in macro.chart.regions(path))
    return False


def _region_output(macro: _Macro, region: StatePath) -> Any:
    """The output of the final a region (or a parallel region's regions) reached."""
    if macro.chart.state(region).kind is Kind.PARALLEL:
        return {
            macro.chart.state(inner).name: _region_output(macro, inner)
            for inner in macro.chart.regions(region)
        }
    return next((v for p, v in macro.finals.items() if parent_of(p) == region), None)


def _end_machine(
    macro: _Macro,
    machine: StatePath,
    status: Status,
    *,
    output: Any = None,
    message: str | None = None,
) -> None:
    if machine == ROOT:
        _end(macro, status, output=output, message=message)
        return
    child = macro.children.get(machine)
    if child is None or child.status is not ChildStatus.RUNNING:
        return
    _exit_states(macro, {s for s in _all_active(macro.active) if within(s, machine)})
    ended = ChildStatus.SUCCEEDED if status is Status.DONE else ChildStatus.FAILED
    macro.children[machine] = replace(child, status=ended, output=output, message=message)
    _progress(macro, child.invocation)


def _end(macro: _Macro, status: Status, *, output: Any = None, message: str | None = None) -> None:
    """The Run is over: every state is exited, every invoke stopped, every timer cancelled."""
    macro.ended_in = tuple(leaf for leaf in macro.active if machine_of(leaf) == ROOT)
    _exit_states(macro, _all_active(macro.active) - {ROOT})
    macro.status = status
    macro.output = output
    macro.message = message


# --------------------------------------------------------------------------- fan-out


def _fan_out(macro: _Macro, entry: InvokeEntry, fan: FanOut) -> None:
    """Make the children of a fan-out just started, and start the first of them."""
    children = _children(macro, entry, fan)
    if isinstance(children, str):
        fields = {"reason": "items", "message": children}
        macro.internal.append(Event(ERROR_INVOKE, fields, macro.cause, origin=entry.id))
        return
    for child in children:
        macro.children[child.scope] = child
    _progress(macro, entry.id)


def _children(macro: _Macro, entry: InvokeEntry, fan: FanOut) -> list[Child] | str:
    """The children of ``fan``'s items, or why there are none."""
    where = fan.items.source
    try:
        items = fan.items.evaluate(_activation(macro, None, entry.state))
    except ExpressionError as error:
        return f"forEach.items ({where}) failed: {error}"
    if not isinstance(items, list):
        return f"forEach.items ({where}) is a {type(items).__name__}, not a list"
    if len(items) > MAX_ITEMS:
        return f"forEach.items ({where}) has {len(items)} items; a fan-out takes {MAX_ITEMS}"
    children: list[Child] = []
    keys: set[str] = set()
    for index, item in enumerate(items):
        key = _key(fan, item, index)
        if not KEY.match(key):
            return (
                f"item {index}'s key {key!r} is not a key: letters, digits, '_' and '-' "
                "(at most 63); say one with forEach.key"
            )
        if key in keys:
            return f"items {index} and another have the key {key!r}; say one with forEach.key"
        keys.add(key)
        children.append(
            Child(
                scope=StatePath(f"{entry.state}[{key}]"),
                invocation=entry.id,
                key=key,
                index=index,
                item=item,
                context=dict(fan.context),
            )
        )
    return children


def _key(fan: FanOut, item: Any, index: int) -> str:
    if fan.key is None:
        text = str(item) if isinstance(item, str | int) and not isinstance(item, bool) else ""
        return text if KEY.match(text) else str(index)
    try:
        value = fan.key.evaluate({"input": item, "context": {}, "event": {}, "workspace": {}})
    except ExpressionError as error:
        return f"<{error.cause}>"
    return str(value)


def _progress(macro: _Macro, invocation: str) -> None:
    """Start pending children while the fan-out has room; once none runs or waits (or one
    failed, with ``failFast``), tell the state."""
    if invocation in macro.progressing:
        return
    entry = next((i for i in macro.invokes if i.id == invocation), None)
    if entry is None:
        return
    invoke = macro.chart.state(entry.state).invoke
    fan = invoke.fan_out if invoke is not None else None
    assert fan is not None
    macro.progressing.add(invocation)
    try:
        while True:
            mine = [c for c in macro.children.values() if c.invocation == invocation]
            failed = next((c for c in mine if c.status is ChildStatus.FAILED), None)
            if failed is not None and fan.fail_fast:
                fields = {
                    "reason": "child-failed",
                    "key": failed.key,
                    "message": f"the child {failed.key!r} failed: {failed.message}",
                }
                macro.internal.append(Event(ERROR_INVOKE, fields, macro.cause, origin=invocation))
                return
            running = sum(c.status is ChildStatus.RUNNING for c in mine)
            pending = [c for c in mine if c.status is ChildStatus.PENDING]
            if pending and running < fan.concurrency:
                _start_child(macro, pending[0])
                continue
            if not pending and not running:
                macro.internal.append(_fan_out_done(mine, macro.cause, invocation))
            return
    finally:
        macro.progressing.discard(invocation)


def _start_child(macro: _Macro, child: Child) -> None:
    macro.children[child.scope] = replace(child, status=ChildStatus.RUNNING)
    into: dict[StatePath, None] = {}
    _add_descendants(macro.chart, child.scope, into)
    _enter_states(macro, into)


def _fan_out_done(children: list[Child], cause: Cause, invocation: str) -> Event:
    results = [
        {"key": c.key, "status": c.status.value, "output": c.output, "message": c.message}
        for c in sorted(children, key=lambda c: c.index)
    ]
    fields = {"output": [r["output"] for r in results], "results": results}
    return Event(DONE_INVOKE, fields, cause, origin=invocation)


# --------------------------------------------------------------------------- settling


def _settle(macro: _Macro) -> None:
    """Run internal events and eventless transitions until the configuration is stable."""
    for _ in range(MAX_MICROSTEPS):
        if macro.status is not Status.RUNNING:
            return
        handling: Event | None = None
        try:
            if macro.internal:
                event = macro.internal.pop(0)
                if event.type == ERROR_EXPRESSION:
                    handling = event
                    _handle_error(macro, event)
                    continue
                if event.type in (DONE_INVOKE, ERROR_INVOKE) and all(
                    entry.id != event.origin for entry in macro.invokes
                ):
                    continue  # its fan-out answered already (two children failed at once)
                chosen = _select(macro, event)
                if chosen:
                    _microstep(macro, chosen, event)
                else:
                    _unhandled_error(macro, event)
                continue
            chosen = _eventless(macro)
            if not chosen:
                return
            _microstep(macro, chosen, Event("always", cause=macro.cause))
        except _Failed as failed:
            if handling is not None:
                _expression_fault(macro, failed, while_handling=True)
                continue
            macro.internal.append(_error_event(macro, failed))
    raise ExpressionError(
        "always", f"more than {MAX_MICROSTEPS} eventless transitions in one step: a loop"
    )


def _error_event(macro: _Macro, failed: _Failed) -> Event:
    """``error.expression`` for an expression that failed in ``failed.state``, offered to
    the active states in and around it."""
    error = failed.error
    fields: dict[str, Any] = {
        "state": failed.state,
        "expression": error.source,
        "where": error.where,
        "message": error.cause,
    }
    if error.key is not None:
        fields["key"] = error.key
    scope = failed.state if _leaves_in(macro.active, failed.state) else machine_of(failed.state)
    return Event(ERROR_EXPRESSION, fields, macro.cause, origin=failed.state, scope=scope)


def _handle_error(macro: _Macro, event: Event) -> None:
    """``error.expression`` to the active states around the failing one; unhandled, its
    Machine faults."""
    if not macro.running(machine_of(event.scope)):
        return
    chosen = _broadcast(macro, event)
    if not chosen:
        _expression_fault(macro, _Failed(StatePath(event.origin or ""), _as_error(event)))
        return
    _microstep(macro, chosen, event)


def _as_error(event: Event) -> ExpressionError:
    fields = event.fields
    return ExpressionError(
        str(fields["expression"]),
        str(fields["message"]),
        where=str(fields.get("where") or ""),
        key=fields.get("key"),
    )


def _expression_fault(macro: _Macro, failed: _Failed, *, while_handling: bool = False) -> None:
    """The state's Machine fails for an expression nothing handled: a defect, so no stop
    has a cause."""
    error = failed.error
    where = f" ({error.where})" if error.where else ""
    state = f" in state '{failed.state}'" if failed.state else ""
    why = (
        "it failed while error.expression was handled"
        if while_handling
        else "no state handles error.expression"
    )
    machine = machine_of(failed.state)
    if machine == ROOT:
        macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
        macro.fault = str(error)
    _defect(macro, machine, f"the Machine faulted{state}: {error}{where}; {why}")


def _defect(macro: _Macro, machine: StatePath, message: str) -> None:
    """A Machine fails for a defect no state catches: the pick that led there is no cause
    of the stops it makes."""
    cause, macro.cause = macro.cause, NO_CAUSE
    _end_machine(macro, machine, Status.FAILED, message=message)
    if machine != ROOT:
        macro.cause = cause


def _fault(macro: _Macro, event: Event, error: ExpressionError) -> Step:
    macro.cause = NO_CAUSE
    macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
    macro.fault = str(error)
    _end(macro, Status.FAILED, message=f"the Machine faulted: {error}")
    return macro.result(event, taken=True)


def _timer(chart: Chart, entry: TimerEntry) -> Timer:
    return next(t for t in chart.state(entry.state).after if t.id == entry.timer)


# --------------------------------------------------------------------------- snapshots


def snapshot(config: Config) -> dict[str, Any]:
    """The configuration as JSON; ``restore`` gives it back exactly."""
    return {
        "active": list(config.active),
        "context": config.context,
        "timers": [
            {
                "timer": t.timer,
                "state": t.state,
                "fireAt": t.fire_at,
                "cause": sorted(t.cause),
                "seq": t.seq,
            }
            for t in config.timers
        ],
        "invokes": [
            {"state": i.state, "kind": i.kind.value, "cause": sorted(i.cause), "seq": i.seq}
            for i in config.invokes
        ],
        "status": config.status.value,
        "output": config.output,
        "message": config.message,
        "seq": config.seq,
        "endedIn": list(config.ended_in),
        "finals": dict(config.finals),
        "children": [
            {
                "scope": c.scope,
                "invocation": c.invocation,
                "key": c.key,
                "index": c.index,
                "item": c.item,
                "context": c.context,
                "status": c.status.value,
                "output": c.output,
                "message": c.message,
            }
            for c in config.children
        ],
    }


def restore(data: Mapping[str, Any]) -> Config:
    return Config(
        active=tuple(StatePath(path) for path in data["active"]),
        context=dict(data["context"]),
        timers=tuple(
            TimerEntry(
                t["timer"],
                StatePath(t["state"]),
                float(t["fireAt"]),
                frozenset(t["cause"]),
                t["seq"],
            )
            for t in data["timers"]
        ),
        invokes=tuple(
            InvokeEntry(
                StatePath(i["state"]), InvokeKind(i["kind"]), frozenset(i["cause"]), i["seq"]
            )
            for i in data["invokes"]
        ),
        status=Status(data["status"]),
        output=data.get("output"),
        message=data.get("message"),
        seq=int(data["seq"]),
        ended_in=tuple(StatePath(path) for path in data.get("endedIn") or ()),
        finals={StatePath(k): v for k, v in (data.get("finals") or {}).items()},
        children=tuple(
            Child(
                scope=StatePath(c["scope"]),
                invocation=c["invocation"],
                key=c["key"],
                index=int(c["index"]),
                item=c.get("item"),
                context=dict(c["context"]),
                status=ChildStatus(c["status"]),
                output=c.get("output"),
                message=c.get("message"),
            )
            for c in data.get("children") or ()
        ),
    )


def with_context(config: Config, context: Mapping[str, Any]) -> Config:
    return replace(config, context=context)
