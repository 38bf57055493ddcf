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
  ``done.state`` follows, its ``output`` each region's final output by region name
  (a region that is a parallel state completes when all of its own regions do, and its
  done event is followed by its parent's). Reaching a top-level final ends the Run
  (``failed`` finals fail it); eventless (``always``) transitions run until none is
  enabled, at most ``MAX_MICROSTEPS`` per macrostep.
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

This module runs macrosteps (``start``, ``step``: internal events, eventless transitions,
expression errors and faults) and is the interpreter's one public face. The rest lives
beside it: ``configuration`` (what a Run keeps, the events, the Step), ``selection``
(which transitions an event takes), ``microsteps`` (exiting, entering, finals, a
Machine's end, a fan-out starting its children), ``fan_outs`` (children and keys from
items), ``document_order``, ``macrostep`` (one macrostep's running state), ``queries``
and ``snapshots``.
"""

from __future__ import annotations

from typing import Any

from kubeturn.errors import ExpressionError
from kubeturn.machine.configuration import (
    AGENT_FAULT,
    CANCEL,
    DONE_INVOKE,
    DONE_STATE,
    ERROR_EXPRESSION,
    ERROR_INVOKE,
    MACHINE_EVENTS,
    MAX_MICROSTEPS,
    NO_CAUSE,
    Cause,
    Child,
    ChildStatus,
    Config,
    Event,
    InvokeEntry,
    InvokeKind,
    Move,
    Scope,
    Status,
    Step,
    Stopped,
    TimerEntry,
)
from kubeturn.machine.document_order import all_active, leaves_in
from kubeturn.machine.fan_outs import KEY, MAX_ITEMS
from kubeturn.machine.macrostep import Failed, Macro, new_macro
from kubeturn.machine.microsteps import (
    add_descendants,
    end_machine,
    end_run,
    enter_states,
    initial_of,
    microstep,
)
from kubeturn.machine.model import ROOT, Chart, StatePath, machine_of
from kubeturn.machine.queries import (
    Accepted,
    accepted,
    activation,
    active,
    at_rest,
    due,
    handled_below,
    next_fire,
    timer_event,
)
from kubeturn.machine.selection import broadcast, eventless, select
from kubeturn.machine.snapshots import restore, snapshot, with_context

__all__ = [
    "AGENT_FAULT",
    "CANCEL",
    "DONE_INVOKE",
    "DONE_STATE",
    "ERROR_EXPRESSION",
    "ERROR_INVOKE",
    "KEY",
    "MACHINE_EVENTS",
    "MAX_ITEMS",
    "MAX_MICROSTEPS",
    "NO_CAUSE",
    "Accepted",
    "Cause",
    "Child",
    "ChildStatus",
    "Config",
    "Event",
    "InvokeEntry",
    "InvokeKind",
    "Move",
    "Scope",
    "Status",
    "Step",
    "Stopped",
    "TimerEntry",
    "accepted",
    "activation",
    "active",
    "at_rest",
    "due",
    "handled_below",
    "next_fire",
    "restore",
    "snapshot",
    "start",
    "step",
    "timer_event",
    "with_context",
]


def start(chart: Chart, scope: Scope, now: float) -> Step:
    """Enter the Machine's initial configuration."""
    event = Event("start")
    macro = new_macro(chart, Config(active=(), context=dict(chart.context)), scope, now, NO_CAUSE)
    try:
        try:
            into: dict[StatePath, None] = {}
            add_descendants(chart, initial_of(chart, ROOT), into)
            enter_states(macro, into)
        except Failed as failed:
            macro.internal.append(_error_event(macro, failed))
        _settle(macro)
    except ExpressionError as error:
        return _fault(macro, event, error)
    return macro.result(event, taken=True)


def step(chart: Chart, config: Config, event: Event, scope: Scope, now: float) -> Step:
    """Process one event to the end of its macrostep."""
    macro = new_macro(chart, config, scope, now, event.cause)
    if config.status is not Status.RUNNING:
        return macro.result(event, taken=False)
    if _stale(macro, event):
        # The result of an invocation that no longer runs (its state exited, or was
        # entered again since) is stale: dropped, as a cancelled timer's event is.
        return macro.result(event, taken=False)
    try:
        try:
            chosen = select(macro, event)
            if not chosen:
                if event.type == CANCEL:
                    end_run(macro, Status.CANCELLED, message="cancelled")
                    return macro.result(event, taken=True)
                if not _unhandled_error(macro, event):
                    return macro.result(event, taken=False)
                _settle(macro)
                return macro.result(event, taken=True)
            microstep(macro, chosen, event)
        except Failed as failed:
            macro.internal.append(_error_event(macro, failed))
        _settle(macro)
    except ExpressionError as error:
        return _fault(macro, event, error)
    return macro.result(event, taken=True)


def _settle(macro: Macro) -> None:
    """Run internal events and eventless transitions until the configuration is stable."""
    for _ in range(MAX_MICROSTEPS):
        if macro.status is not Status.RUNNING:
            return
        handling: Event | None = None
        try:
            if macro.internal:
                event = macro.internal.pop(0)
                if _stale(macro, event):
                    # A fan-out that answered already (two children ended in one
                    # microstep, the first failing): its later answers are stale.
                    continue
                if event.type == ERROR_EXPRESSION:
                    handling = event
                    _handle_error(macro, event)
                    continue
                chosen = select(macro, event)
                if chosen:
                    microstep(macro, chosen, event)
                else:
                    _unhandled_error(macro, event)
                continue
            chosen = eventless(macro)
            if not chosen:
                return
            microstep(macro, chosen, Event("always", cause=macro.cause))
        except Failed as failed:
            if handling is not None:
                _expression_fault(macro, failed, while_handling=True)
                continue
            macro.internal.append(_error_event(macro, failed))
    raise ExpressionError(
        "always", f"more than {MAX_MICROSTEPS} eventless transitions in one step: a loop"
    )


def _stale(macro: Macro, event: Event) -> bool:
    """An invocation's result, when that invocation no longer runs."""
    return event.type in (DONE_INVOKE, ERROR_INVOKE) and all(
        entry.id != event.origin for entry in macro.invokes
    )


def _error_event(macro: Macro, failed: Failed) -> Event:
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
    scope = failed.state if leaves_in(macro.active, failed.state) else machine_of(failed.state)
    return Event(ERROR_EXPRESSION, fields, macro.cause, origin=failed.state, scope=scope)


def _handle_error(macro: Macro, event: Event) -> None:
    """``error.expression`` to the active states around the failing one; unhandled, its
    Machine faults."""
    if not macro.running(machine_of(event.scope)):
        return
    chosen = broadcast(macro, event)
    if not chosen:
        _expression_fault(macro, Failed(StatePath(event.origin or ""), _as_error(event)))
        return
    microstep(macro, chosen, event)


def _as_error(event: Event) -> ExpressionError:
    fields = event.fields
    return ExpressionError(
        str(fields["expression"]),
        str(fields["message"]),
        where=str(fields.get("where") or ""),
        key=fields.get("key"),
    )


def _expression_fault(macro: Macro, failed: Failed, *, while_handling: bool = False) -> None:
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
        macro.fault = str(error)
    _defect(macro, machine, f"the Machine faulted{state}: {error}{where}; {why}")


def _defect(macro: Macro, machine: StatePath, message: str) -> None:
    """A Machine fails for a defect no state catches: the pick that led there is no cause
    of the stops it makes. When that Machine is the Run's, no stop of the whole macrostep
    has one (ADR 0068), as for a fault; a child's defect leaves the stops the pick made
    before it theirs."""
    if machine == ROOT:
        macro.cause = NO_CAUSE
        macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
    end_machine(macro, machine, Status.FAILED, message=message, defect=True)


def _fault(macro: Macro, event: Event, error: ExpressionError) -> Step:
    macro.cause = NO_CAUSE
    macro.stopped = [Stopped(s.invoke, NO_CAUSE) for s in macro.stopped]
    macro.fault = str(error)
    end_run(macro, Status.FAILED, message=f"the Machine faulted: {error}")
    return macro.result(event, taken=True)


def _unhandled_error(macro: Macro, event: Event) -> bool:
    """An invoke's error that nothing handles fails the Machine it was in (a defect no
    state catches, so no stop has a cause): the Run's, or a fan-out child's."""
    if event.type not in (ERROR_INVOKE, AGENT_FAULT):
        return False
    state = StatePath((event.origin or "").partition("#")[0])
    if event.type == ERROR_INVOKE and state and state not in all_active(macro.active):
        return False
    message = event.fields.get("message") or event.fields.get("reason") or "it failed"
    why = f"the invoke of state '{state}' failed and no onError handles it: {message}"
    _defect(macro, machine_of(state), why)
    return True
