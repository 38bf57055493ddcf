"""One microstep's moves: exiting (reverse document order) and entering (document
order, every region of an entered parallel state), assigns, finals and their done events,
the end of a Machine (the Run's, or a fan-out child's), and a fan-out starting its
children a few at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kubeturn.machine.configuration import (
    DONE_STATE,
    ERROR_INVOKE,
    NO_CAUSE,
    Child,
    ChildStatus,
    Event,
    InvokeEntry,
    InvokeKind,
    Move,
    Status,
    Stopped,
    TimerEntry,
)
from kubeturn.machine.document_order import all_active, in_document_order
from kubeturn.machine.fan_outs import done_event, make_children
from kubeturn.machine.macrostep import Macro, activation_of, evaluate
from kubeturn.machine.model import (
    ROOT,
    Chart,
    FanOut,
    Kind,
    State,
    StatePath,
    machine_of,
    parent_of,
    within,
)
from kubeturn.machine.selection import Chosen, domain_of, exit_set, target_of


def microstep(macro: Macro, chosen: Sequence[Chosen], event: Event) -> None:
    updates = [
        (source, [(key, evaluate(macro, value, source, event)) for key, value in t.assign])
        for source, t in chosen
    ]
    moving = [
        (source, t, target) for source, t in chosen if (target := target_of(source, t)) is not None
    ]
    exits: set[StatePath] = set()
    for source, t, _ in moving:
        exits |= exit_set(macro, source, t)
    _exit_states(macro, exits)
    for source, values in updates:
        _assign(macro, machine_of(source), values)
    into: dict[StatePath, None] = {}
    for source, t, target in moving:
        macro.moves.append(Move(source, t.event, target))
        add_descendants(macro.chart, target, into)
        _add_ancestors(macro.chart, target, domain_of(macro, source, target), into)
    enter_states(macro, into)


def _assign(macro: Macro, machine: StatePath, updates: list[tuple[str, Any]]) -> None:
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


def initial_of(chart: Chart, path: StatePath) -> StatePath:
    initial = chart.state(path).initial
    assert initial is not None, "the loader checks every compound state has an initial"
    return _child_instance(chart, path, initial)


def _child_instance(chart: Chart, path: StatePath, child: StatePath) -> StatePath:
    name = chart.states[child].name
    return StatePath(f"{path}.{name}" if path != ROOT else name)


def add_descendants(chart: Chart, path: StatePath, into: dict[StatePath, None]) -> None:
    """``path``, and what entering it enters below: initial children, every region."""
    into[path] = None
    kind = chart.state(path).kind
    if kind is Kind.COMPOUND:
        add_descendants(chart, initial_of(chart, path), into)
    elif kind is Kind.PARALLEL:
        for region in chart.regions(path):
            if not any(within(s, region) for s in into):
                add_descendants(chart, region, into)


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
                    add_descendants(chart, region, into)


def _exit_states(macro: Macro, states: Iterable[StatePath]) -> None:
    """Exit ``states``, innermost and latest first."""
    for path in in_document_order(macro.chart, macro.children.values(), states, reverse=True):
        _exit(macro, path)


def _exit(macro: Macro, path: StatePath) -> None:
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


def enter_states(macro: Macro, states: Iterable[StatePath]) -> None:
    """Enter ``states`` in document order; then what reaching a final state does."""
    reached: list[StatePath] = []
    for path in in_document_order(macro.chart, macro.children.values(), states):
        state = macro.chart.state(path)
        _enter(macro, path, state)
        if state.kind is Kind.FINAL:
            reached.append(path)
    for path in reached:
        if path in macro.active and macro.running(machine_of(path)):
            _reach_final(macro, path, macro.chart.state(path))


def _enter(macro: Macro, path: StatePath, state: State) -> None:
    macro.entered.append(path)
    if state.kind in (Kind.ATOMIC, Kind.FINAL):
        macro.active.append(path)
        macro.active = in_document_order(macro.chart, macro.children.values(), macro.active)
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
        _start_fan_out(macro, entry_i, invoke.fan_out)


def _reach_final(macro: Macro, path: StatePath, final: State) -> None:
    output = evaluate(macro, final.output, path, None) if final.output else None
    parent = parent_of(path)
    assert parent is not None
    machine = machine_of(path)
    if final.failed:
        end_machine(
            macro,
            machine,
            Status.FAILED,
            output=output,
            message=f"reached the failed final '{path}'",
        )
        return
    if parent == machine:
        end_machine(macro, machine, Status.DONE, output=output)
        return
    macro.finals[path] = output
    macro.internal.append(Event(DONE_STATE, {"output": output}, macro.cause, origin=parent))
    # A parallel state whose every region is in a final hears its done event; so, in
    # turn, does a parallel state that holds it as a region and is now complete too.
    done = parent_of(parent)
    while (
        done is not None
        and macro.chart.state(done).kind is Kind.PARALLEL
        and _in_final(macro, done)
    ):
        outputs = {
            macro.chart.state(region).name: _region_output(macro, region)
            for region in macro.chart.regions(done)
        }
        macro.internal.append(Event(DONE_STATE, {"output": outputs}, macro.cause, origin=done))
        done = parent_of(done)


def _in_final(macro: Macro, path: StatePath) -> bool:
    """SCXML's ``isInFinalState``: a compound state whose final child has been reached
    (its output recorded: finals entered in one microstep are reached one by one, so the
    parallel state's done event comes once, with every output); a parallel state whose
    every region is."""
    kind = macro.chart.state(path).kind
    if kind is Kind.COMPOUND:
        return any(parent_of(final) == path for final in macro.finals)
    if kind is Kind.PARALLEL:
        return all(_in_final(macro, region) for region in macro.chart.regions(path))
    return False


def _region_output(macro: Macro, region: StatePath) -> Any:
    """The output of the final a region (or a parallel region's regions) reached."""
    if macro.chart.state(region).kind is Kind.PARALLEL:
        return {
            macro.chart.state(inner).name: _region_output(macro, inner)
            for inner in macro.chart.regions(region)
        }
    return next((v for p, v in macro.finals.items() if parent_of(p) == region), None)


def end_machine(
    macro: Macro,
    machine: StatePath,
    status: Status,
    *,
    output: Any = None,
    message: str | None = None,
    defect: bool = False,
) -> None:
    """The Machine ``machine`` ends: the Run, or a fan-out child (whose fan-out then
    starts its next child, or answers). A child's defect stops its own invokes with no
    cause; what its fan-out does next keeps the macrostep's."""
    if machine == ROOT:
        end_run(macro, status, output=output, message=message)
        return
    child = macro.children.get(machine)
    if child is None or child.status is not ChildStatus.RUNNING:
        return
    cause = macro.cause
    if defect:
        macro.cause = NO_CAUSE
    _exit_states(macro, {s for s in all_active(macro.active) if within(s, machine)})
    macro.cause = cause
    ended = ChildStatus.SUCCEEDED if status is Status.DONE else ChildStatus.FAILED
    macro.children[machine] = replace(child, status=ended, output=output, message=message)
    _progress(macro, child.invocation)


def end_run(
    macro: Macro, status: Status, *, output: Any = None, message: str | None = None
) -> None:
    """The Run is over: every state is exited, every invoke stopped, every timer cancelled."""
    macro.ended_in = tuple(leaf for leaf in macro.active if machine_of(leaf) == ROOT)
    _exit_states(macro, all_active(macro.active) - {ROOT})
    macro.status = status
    macro.output = output
    macro.message = message


def _start_fan_out(macro: Macro, entry: InvokeEntry, fan: FanOut) -> None:
    """Make the children of a fan-out just started, and start the first of them."""
    children = make_children(fan, entry, activation_of(macro, None, entry.state))
    if isinstance(children, str):
        fields = {"reason": "items", "message": children}
        macro.internal.append(Event(ERROR_INVOKE, fields, macro.cause, origin=entry.id))
        return
    for child in children:
        macro.children[child.scope] = child
    _progress(macro, entry.id)


def _progress(macro: Macro, invocation: str) -> None:
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
                macro.internal.append(done_event(mine, macro.cause, invocation))
            return
    finally:
        macro.progressing.discard(invocation)


def _start_child(macro: Macro, child: Child) -> None:
    macro.children[child.scope] = replace(child, status=ChildStatus.RUNNING)
    into: dict[StatePath, None] = {}
    add_descendants(macro.chart, child.scope, into)
    enter_states(macro, into)
