"""The interpreter: one pure ``step`` per event, returning everything it did, with causes.

Semantics (ADR 0010 records them):

- The configuration is one active leaf (an atomic or final state) and its ancestors;
  the root is always active.
- An event selects the first transition whose guard holds, from the leaf up to the
  root, in document order on each state: inner states win.
- A transition exits every active state inside its domain (innermost first), then
  applies its ``assign`` (all values evaluated before any is written), then enters the
  states down to its target and on through initial children (outermost first). Its
  domain is its source when the target is inside the source (the source is not left),
  else the nearest common ancestor. A target equal to the source moves nothing.
- Exiting a state cancels its timers and stops its invoke; entering one arms its timers
  and starts its invoke. Each stop and start carries the cause of the macrostep.
- Reaching a final child raises that parent's done event inside the macrostep; reaching
  a top-level final ends the Run (``failed`` finals fail it); eventless (``always``)
  transitions run until none is enabled, at most ``MAX_MICROSTEPS`` per macrostep.
- An expression that fails (a guard, an assign, a final's output; ADR 0068) abandons
  the microstep it was evaluated in: a failing guard selects nothing, a failing assign
  takes no part of its transition (every value is evaluated before anything moves).
  The Machine then hears the internal event ``error.expression`` (``event.state``,
  ``event.expression``, ``event.where``, ``event.message`` and, for a missing map key,
  ``event.key``), which the active states handle with ``on`` as any event, from the
  leaf outward. Unhandled, or failing again while it is handled, it faults the Run:
  every state is exited with no cause, the message naming the state, the expression
  and the key. So does an invoke's error that nothing handles (a defect no state
  catches), and a chain of eventless transitions that never settles.
- A Run that ends (a top-level final, CANCEL, a fault) exits every state, so its leaf is
  the root; ``ended_in`` keeps the leaf that was active when it ended, for display
  (ADR 0022).
- An invoke's result whose invocation no longer runs is stale and dropped, as is the
  event of a cancelled timer.

A cause is a set of pick references; it rides each event (never the event's payload),
and timers and invocations keep the cause of the macrostep that armed or started them.
No IO, no clock: ``now`` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from kubeturn.errors import ExpressionError
from kubeturn.machine import model
from kubeturn.machine.model import ROOT, Chart, Kind, State, StatePath, Timer, Transition

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
class Config:
    """The Machine's whole run state: JSON-serialisable through ``snapshot``."""

    leaf: StatePath
    context: Mapping[str, Any]
    timers: tuple[TimerEntry, ...] = ()
    invokes: tuple[InvokeEntry, ...] = ()
    status: Status = Status.RUNNING
    output: Any = None
    message: str | None = None
    seq: int = 0
    ended_in: StatePath | None = None
    """The leaf that was active when the Run ended (its final state, or where CANCEL or a
    fault found it); None while it runs. The leaf itself is the root by then."""


@dataclass(frozen=True)
class Event:
    """An event for the Machine.

    ``fields`` are what ``event`` holds in expressions besides ``type`` (a pick's or a
    signal's payload, an invoke's ``output`` or ``error``). ``origin`` names the timer
    or invocation that sent it, so a stale one is dropped.
    """

    type: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    cause: Cause = NO_CAUSE
    origin: str | None = None

    def activation(self) -> dict[str, Any]:
        return {**self.fields, "type": self.type}


@dataclass(frozen=True)
class Scope:
    """What expressions see beside ``context`` and ``event``; fixed for a Run."""

    input: Any = None
    workspace: Mapping[str, Any] = field(default_factory=dict)


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


@dataclass
class _Macro:
    """The running state of one macrostep; becomes a ``Step``."""

    chart: Chart
    scope: Scope
    now: float
    cause: Cause
    leaf: StatePath
    context: dict[str, Any]
    timers: list[TimerEntry]
    invokes: list[InvokeEntry]
    seq: int
    status: Status = Status.RUNNING
    output: Any = None
    message: str | None = None
    ended_in: StatePath | None = None
    exited: list[StatePath] = field(default_factory=list)
    entered: list[StatePath] = field(default_factory=list)
    started: list[InvokeEntry] = field(default_factory=list)
    stopped: list[Stopped] = field(default_factory=list)
    armed: list[TimerEntry] = field(default_factory=list)
    cancelled: list[TimerEntry] = field(default_factory=list)
    internal: list[Event] = field(default_factory=list)
    fault: str | None = None
    moves: list[Move] = field(default_factory=list)

    def config(self) -> Config:
        return Config(
            leaf=self.leaf,
            context=self.context,
            timers=tuple(self.timers),
            invokes=tuple(self.invokes),
            status=self.status,
            output=self.output,
            message=self.message,
            seq=self.seq,
            ended_in=self.ended_in,
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
    macro = _macro(chart, Config(leaf=ROOT, context=dict(chart.context)), scope, now, NO_CAUSE)
    try:
        try:
            _enter_from(macro, ROOT, _initial_path(chart, ROOT))
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
            transition = _select(macro, event)
            if transition is None:
                if event.type == CANCEL:
                    _end(macro, Status.CANCELLED, message="cancelled")
                    return macro.result(event, taken=True)
                unhandled = _unhandled_error(macro, event)
                if unhandled is not None:
                    # A defect that no state catches is never a pick's: no stop has a cause.
                    macro.cause = NO_CAUSE
                    _end(macro, Status.FAILED, message=unhandled)
                    return macro.result(event, taken=True)
                return macro.result(event, taken=False)
            _take(macro, transition, event)
        except _Failed as failed:
            macro.internal.append(_error_event(macro, failed))
        _settle(macro)
    except ExpressionError as error:
        return _fault(macro, event, error)
    return macro.result(event, taken=True)


# --------------------------------------------------------------------------- queries


def active(chart: Chart, config: Config) -> list[StatePath]:
    """The active states, innermost first (the root last)."""
    return chart.ancestors(config.leaf)


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
    """The events the active states handle now, innermost state first, each once, with
    the description and schema of the first of its transitions that gives them (as an
    Agent's Menu takes them); guard-blind: a guard may still refuse one. Events the
    Machine raises itself (``agent.fault``, ``error.expression``, ``CANCEL``) are not
    among them, nor anything once the Run has ended."""
    if config.status is not Status.RUNNING:
        return []
    found: dict[str, Accepted] = {}
    for path in active(chart, config):
        for name, transitions in chart.states[path].on.items():
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
    for path in active(chart, config):
        if not chart.is_within(path, state):
            continue
        for name in chart.states[path].on:
            if name not in names:
                names.append(name)
    return names


def at_rest(chart: Chart, config: Config, state: StatePath) -> bool:
    """Rest for the Agent of ``state``: nothing strictly below it runs an invoke, and no
    pending timer would move the workflow to another state inside it."""
    for entry in config.invokes:
        if entry.state != state and chart.is_within(entry.state, state):
            return False
    live = set(active(chart, config))
    for armed in config.timers:
        if armed.state not in live or not chart.is_within(armed.state, state):
            continue
        timer = _timer(chart, armed)
        for transition in timer.transitions:
            target = transition.target
            if target is not None and target != state and chart.is_within(target, state):
                return False
    return True


def activation(config: Config, event: Event | None, scope: Scope) -> dict[str, Any]:
    """What expressions and templates see."""
    return {
        "context": config.context,
        "event": event.activation() if event is not None else {},
        "input": scope.input,
        "workspace": scope.workspace,
    }


# --------------------------------------------------------------------------- selection


def _macro(chart: Chart, config: Config, scope: Scope, now: float, cause: Cause) -> _Macro:
    return _Macro(
        chart=chart,
        scope=scope,
        now=now,
        cause=cause,
        leaf=config.leaf,
        context=dict(config.context),
        timers=list(config.timers),
        invokes=list(config.invokes),
        seq=config.seq,
        status=config.status,
        output=config.output,
        message=config.message,
        ended_in=config.ended_in,
    )


def _select(macro: _Macro, event: Event) -> Transition | None:
    chart = macro.chart
    if event.type in (DONE_INVOKE, ERROR_INVOKE):
        entry = next((i for i in macro.invokes if i.id == event.origin), None)
        if entry is None:
            return None
        invoke = chart.states[entry.state].invoke
        assert invoke is not None
        if entry.kind is not InvokeKind.AGENT:
            # An exec or a delivery that answered is no longer running; an Agent's Turn runs on
            # until its state exits, whatever its fault route does.
            macro.invokes.remove(entry)
        candidates = invoke.on_done if event.type == DONE_INVOKE else invoke.on_error
        chosen = _first_enabled(macro, candidates, event)
        if chosen is None and event.type == ERROR_INVOKE and entry.kind is InvokeKind.AGENT:
            return _bubble(macro, Event(AGENT_FAULT, event.fields, event.cause, event.origin))
        return chosen
    if event.origin is not None and event.type.startswith("after:"):
        entry_t = next((t for t in macro.timers if t.origin == event.origin), None)
        if entry_t is None:
            return None
        macro.timers.remove(entry_t)
        return _first_enabled(macro, _timer(chart, entry_t).transitions, event)
    return _bubble(macro, event)


def _bubble(macro: _Macro, event: Event) -> Transition | None:
    for path in active(macro.chart, macro.config()):
        chosen = _first_enabled(macro, macro.chart.states[path].on.get(event.type, ()), event)
        if chosen is not None:
            return chosen
    return None


def _unhandled_error(macro: _Macro, event: Event) -> str | None:
    """An invoke's error that nothing handles fails the Run; say which and why."""
    if event.type not in (ERROR_INVOKE, AGENT_FAULT):
        return None
    state, _, _ = (event.origin or "").partition("#")
    if (
        event.type == ERROR_INVOKE
        and state
        and StatePath(state) not in active(macro.chart, macro.config())
    ):
        return None
    message = event.fields.get("message") or event.fields.get("reason") or "it failed"
    return f"the invoke of state '{state}' failed and no onError handles it: {message}"


def _first_enabled(
    macro: _Macro, transitions: Iterable[Transition], event: Event | None
) -> Transition | None:
    for transition in transitions:
        if transition.guard is None:
            return transition
        verdict = _evaluate(macro, transition.guard, transition.source, event)
        if verdict is True:
            return transition
    return None


def _evaluate(
    macro: _Macro, expression: model.Expression, state: StatePath, event: Event | None
) -> Any:
    """``expression``'s value; ``_Failed`` (of ``state``) when it fails."""
    try:
        return expression.evaluate(_activation(macro, event))
    except ExpressionError as error:
        raise _Failed(state, error) from error


def _activation(macro: _Macro, event: Event | None) -> dict[str, Any]:
    return activation(macro.config(), event, macro.scope)


# --------------------------------------------------------------------------- transitions


def _take(macro: _Macro, transition: Transition, event: Event) -> None:
    chart = macro.chart
    updates = [
        (path, _evaluate(macro, value, transition.source, event))
        for path, value in transition.assign
    ]
    target = transition.target
    if target is None or target == transition.source:
        _assign(macro, updates)
        return
    source = transition.source
    domain = source if chart.is_within(target, source) else _common_ancestor(chart, source, target)
    _exit_below(macro, domain)
    _assign(macro, updates)
    macro.moves.append(Move(source, transition.event, target))
    _enter_from(macro, domain, target)


def _assign(macro: _Macro, updates: list[tuple[str, Any]]) -> None:
    for path, value in updates:
        keys = path.split(".")[1:]
        node = macro.context
        for key in keys[:-1]:
            child = node.get(key)
            node[key] = dict(child) if isinstance(child, Mapping) else {}
            node = node[key]
        node[keys[-1]] = value


def _common_ancestor(chart: Chart, a: StatePath, b: StatePath) -> StatePath:
    mine = chart.ancestors(a)
    for path in chart.ancestors(b)[1:]:
        if path in mine and path != a:
            return path
    return ROOT


def _exit_below(macro: _Macro, domain: StatePath) -> None:
    """Exit every active state strictly inside ``domain``, innermost first."""
    chart = macro.chart
    for path in active(chart, macro.config()):
        if path == domain or not chart.is_within(path, domain):
            break
        _exit(macro, path)
    macro.leaf = domain


def _exit(macro: _Macro, path: StatePath) -> None:
    for timer in [t for t in macro.timers if t.state == path]:
        macro.timers.remove(timer)
        macro.cancelled.append(timer)
    for invoke in [i for i in macro.invokes if i.state == path]:
        macro.invokes.remove(invoke)
        macro.stopped.append(Stopped(invoke, macro.cause))
    macro.exited.append(path)


def _enter_from(macro: _Macro, domain: StatePath, target: StatePath) -> None:
    """Enter the states strictly inside ``domain`` down to ``target``, then its initials."""
    chart = macro.chart
    path = [
        p for p in reversed(chart.ancestors(target)) if p != domain and chart.is_within(p, domain)
    ]
    for state in path:
        _enter(macro, chart.states[state])
    current = chart.states[target]
    while current.kind is Kind.COMPOUND:
        assert current.initial is not None
        current = chart.states[current.initial]
        _enter(macro, current)
    macro.leaf = current.path
    if current.kind is Kind.FINAL:
        _reach_final(macro, current)


def _enter(macro: _Macro, state: State) -> None:
    macro.entered.append(state.path)
    macro.leaf = state.path
    for timer in state.after:
        macro.seq += 1
        entry = TimerEntry(timer.id, state.path, macro.now + timer.delay_s, macro.cause, macro.seq)
        macro.timers.append(entry)
        macro.armed.append(entry)
    if state.invoke is not None:
        macro.seq += 1
        kind = (
            InvokeKind.AGENT
            if state.invoke.agent is not None
            else InvokeKind.DELIVER
            if state.invoke.deliver is not None
            else InvokeKind.EXEC
        )
        entry_i = InvokeEntry(state.path, kind, macro.cause, macro.seq)
        macro.invokes.append(entry_i)
        macro.started.append(entry_i)


def _reach_final(macro: _Macro, final: State) -> None:
    output = _evaluate(macro, final.output, final.path, None) if final.output else None
    if final.failed:
        _end(
            macro, Status.FAILED, output=output, message=f"reached the failed final '{final.path}'"
        )
        return
    parent = final.parent
    if parent is None or parent == ROOT:
        _end(macro, Status.DONE, output=output)
        return
    macro.internal.append(Event(DONE_STATE, {"output": output}, macro.cause, origin=parent))


def _end(macro: _Macro, status: Status, *, output: Any = None, message: str | None = None) -> None:
    """The Run is over: every state is exited, every invoke stopped, every timer cancelled."""
    macro.ended_in = macro.leaf
    _exit_below(macro, ROOT)
    macro.status = status
    macro.output = output
    macro.message = message


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
                state = macro.chart.states[StatePath(event.origin or "")]
                if state.path in active(macro.chart, macro.config()):
                    chosen = _first_enabled(macro, state.on_done, event)
                    if chosen is not None:
                        _take(macro, chosen, event)
                continue
            chosen = None
            for path in active(macro.chart, macro.config()):
                chosen = _first_enabled(macro, macro.chart.states[path].always, None)
                if chosen is not None:
                    break
            if chosen is None:
                return
            _take(macro, chosen, Event("always", cause=macro.cause))
        except _Failed as failed:
            if handling is not None:
                _expression_fault(macro, failed, while_handling=True)
                return
            macro.internal.append(_error_event(macro, failed))
    raise ExpressionError(
        "always", f"more than {MAX_MICROSTEPS} eventless transitions in one step: a loop"
    )


def _error_event(macro: _Macro, failed: _Failed) -> Event:
    """``error.expression`` for an expression that failed in ``failed.state``."""
    error = failed.error
    fields: dict[str, Any] = {
        "state": failed.state,
        "expression": error.source,
        "where": error.where,
        "message": error.cause,
    }
    if error.key is not None:
        fields["key"] = error.key
    return Event(ERROR_EXPRESSION, fields, macro.cause, origin=failed.state)


def _handle_error(macro: _Macro, event: Event) -> None:
    """``error.expression`` to the active states, from the leaf outward; unhandled, the
    Run faults."""
    chosen = _bubble(macro, event)
    if chosen is None:
        _expression_fault(macro, _Failed(StatePath(event.origin or ""), _as_error(event)))
        return
    _take(macro, chosen, event)


def _as_error(event: Event) -> ExpressionError:
    fields = event.fields
    return ExpressionError(
        str(fields["expression"]),
        str(fields["message"]),
        where=str(fields.get("where") or ""),
        key=fields.get("key"),
    )


def _expression_fault(macro: _Macro, failed: _Failed, *, while_handling: bool = False) -> None:
    """The Run fails for an expression nothing handled: a defect, so no stop has a cause."""
    error = failed.error
    where = f" ({error.where})" if error.where else ""
    state = f" in state '{failed.state}'" if failed.state else ""
    why = (
        "it failed while error.expression was handled"
        if while_handling
        else "no state handles error.expression"
    )
    macro.cause = NO_CAUSE
    macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
    macro.fault = str(error)
    _end(macro, Status.FAILED, message=f"the Machine faulted{state}: {error}{where}; {why}")


def _fault(macro: _Macro, event: Event, error: ExpressionError) -> Step:
    macro.cause = NO_CAUSE
    macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
    macro.fault = str(error)
    _end(macro, Status.FAILED, message=f"the Machine faulted: {error}")
    return macro.result(event, taken=True)


def _timer(chart: Chart, entry: TimerEntry) -> Timer:
    return next(t for t in chart.states[entry.state].after if t.id == entry.timer)


def _initial_path(chart: Chart, path: StatePath) -> StatePath:
    initial = chart.states[path].initial
    assert initial is not None, "the loader checks every compound state has an initial"
    return initial


# --------------------------------------------------------------------------- snapshots


def snapshot(config: Config) -> dict[str, Any]:
    """The configuration as JSON; ``restore`` gives it back exactly."""
    return {
        "leaf": config.leaf,
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
        "endedIn": config.ended_in,
    }


def restore(data: Mapping[str, Any]) -> Config:
    return Config(
        leaf=StatePath(data["leaf"]),
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
        ended_in=StatePath(data["endedIn"]) if data.get("endedIn") is not None else None,
    )


def with_context(config: Config, context: Mapping[str, Any]) -> Config:
    return replace(config, context=context)
