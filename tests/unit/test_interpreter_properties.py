"""Properties of the interpreter over random small machines and event sequences.

Machines are generated as manifests and loaded through ``load_run`` (real CEL): a few
uniquely named states, some compound, some parallel (a third of the machines start in
one; an atomic region is sometimes a small region that ``a`` finishes, with an output),
some final (``output`` and ``outcome: failed`` sometimes; never a region); ``on``
transitions among them with random targets (or none), simple guards on ``context.n``
(and one that fails on events without ``x``), ``context.n + 1`` assigns (and one that
fails likewise), ``error.expression`` handled by some states; ``after`` timers, guarded
``always`` transitions, exec invokes with or without ``onDone``/``onError``, fan-outs
over a two-item context list (concurrency 1 or 2, with or without ``failFast``) of a
small child Machine (finished by ``a``, failed by ``c``, faulted by ``b`` without ``x``,
sometimes with an exec), compound and parallel ``onDone``. A state no transition
reaches gets a machine-level jump to it, so every generated machine loads.

Scripts mix the machine's events (with and without a cause, with and without a payload),
picks scoped to one active leaf (the Run's, a region's or a fan-out child's), every
running child's pick in turn, machine-level jumps, time advancing (every due timer fired
in order, as the core does), exec results and errors (of a running exec, a child's too,
chosen by position, sometimes carrying a pick's cause), stale events (a cancelled
timer's, a stopped exec's result) and, rarely, CANCEL.

Cases:
- determinism: one script run twice gives equal Steps;
- restore: at every point, ``restore(json(snapshot(config)))`` then the rest of the
  script gives exactly the Steps of the run that never stopped;
- invariants of every Step: a running Machine's leaves are atomic or final, in document
  order, and the Run's own are ``leaves``; every active parallel state has every region
  active, every active compound state (the root and a child's root too) exactly one
  child; a running fan-out child is active under its active fan-out state, the others
  are not, at most ``concurrency`` run at once; a finished Run has no leaf, timer,
  invoke or child; every timer belongs to an active state that declares it, one per
  timer and state; every invoke to an active state that declares it, one per state;
  entering and exiting account exactly for the change of the active set (each state's
  entries minus exits); timers after = timers before + armed − cancelled − the one
  fired, and likewise invokes (− the exec that answered, − a fan-out that answered);
  armed timers fire at now + delay; starts and armed timers carry the event's cause,
  stops too unless the Run failed by a defect (no cause; a child's defect may stop its
  own invokes with none); new entries get fresh, increasing sequence numbers; an event
  not taken moves nothing; a finished Run takes nothing; a stale timer event or invoke
  result changes nothing.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubeturn.api.validation import validate_run
from kubeturn.machine import interpreter as it
from kubeturn.machine import reachability
from kubeturn.machine.compiler import compile_machine
from kubeturn.machine.interpreter import (
    DONE_INVOKE,
    ERROR_INVOKE,
    NO_CAUSE,
    ChildStatus,
    Config,
    Event,
    Status,
    Step,
)
from kubeturn.machine.load import load_run
from kubeturn.machine.model import ROOT, Chart, Kind, StatePath, machine_of, parent_of

SETTINGS = settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
EVENTS = ("a", "b", "c")
GUARDS = (None, None, None, "context.n < 2", "context.n % 2 == 0", "event.x == 1")
ASSIGNS = ("context.n + 1", "context.n + 1", "context.n + event.x")
"""Assigned values; the last fails on an event without ``x``."""
HANDLED = (*EVENTS, "error.expression")
"""Events a state may handle: the script's, and a failed expression."""
DELAYS = ("1s", "2s", "5s")
ASSIGN_N = {"assign": {"context.n": "context.n + 1"}}
CAUSE = frozenset({"t1"})

# --------------------------------------------------------------------------- machines


@st.composite
def transitions(draw: st.DrawFn, paths: list[str], *, targetless: bool = True) -> Any:
    def one() -> dict[str, Any]:
        written: dict[str, Any] = {}
        target = draw(st.sampled_from([None, *paths] if targetless else paths))
        if target is not None:
            written["target"] = target
        guard = draw(st.sampled_from(GUARDS))
        if guard is not None:
            written["guard"] = guard
        if draw(st.booleans()):
            written["assign"] = {"context.n": draw(st.sampled_from(ASSIGNS))}
        return written

    return [one() for _ in range(draw(st.integers(1, 2)))]


@st.composite
def child_machines(draw: st.DrawFn) -> dict[str, Any]:
    """A fan-out's child Machine: ``a`` finishes it, ``c`` fails it, ``b`` counts (or,
    with ``x``, finishes it; without, its guard fails and the child faults)."""
    work: dict[str, Any] = {
        "on": {
            "a": "done",
            "b": [{"guard": "event.x == 1", "target": "done"}, ASSIGN_N],
            "c": "broken",
        }
    }
    if draw(st.booleans()):
        work["invoke"] = {"exec": {"command": "make"}}
        if draw(st.booleans()):
            work["invoke"]["onDone"] = "done"
    return {
        "initial": "work",
        "context": {"n": 0},
        "states": {
            "work": work,
            "done": {"type": "final", "output": "string(input) + string(context.n)"},
            "broken": {"type": "final", "outcome": "failed"},
        },
    }


@st.composite
def manifests(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(2, 7))
    # A third of the machines start in a parallel state of two regions (or more).
    shaped = count > 2 and draw(st.integers(0, 2)) == 0
    parents: list[int | None] = [None, 0, 0] if shaped else [None]
    for index in range(len(parents), count):
        parents.append(draw(st.sampled_from([None, *range(index)])))
    children = {i: [j for j in range(count) if parents[j] == i] for i in range(count)}
    paths: list[str] = []
    for index, parent in enumerate(parents):
        paths.append(f"s{index}" if parent is None else f"{paths[parent]}.s{index}")
    parallel = {
        i
        for i in range(count)
        if len(children[i]) > 1 and ((shaped and i == 0) or draw(st.booleans()))
    }
    finals = {
        i
        for i in range(count)
        if not children[i] and parents[i] not in parallel and draw(st.integers(0, 3)) == 0
    }

    def state(index: int) -> dict[str, Any]:
        written: dict[str, Any] = {}
        if index in finals:
            written["type"] = "final"
            if draw(st.booleans()):
                written["output"] = "context.n"
            if draw(st.integers(0, 3)) == 0:
                written["outcome"] = "failed"
            return written
        if parents[index] in parallel and not children[index] and (shaped or draw(st.booleans())):
            # A region that finishes: ``a`` reaches its final.
            name = f"s{index}"
            return {
                "initial": f"{name}w",
                "states": {
                    f"{name}w": {"on": {"a": f"{name}f", "b": ASSIGN_N}},
                    f"{name}f": {"type": "final", "output": f"'{name}'"},
                },
            }
        if children[index]:
            if index in parallel:
                written["type"] = "parallel"
            else:
                written["initial"] = f"s{children[index][0]}"
            written["states"] = {f"s{c}": state(c) for c in children[index]}
            if draw(st.booleans()):
                written["onDone"] = draw(transitions(paths, targetless=False))
        events = draw(st.lists(st.sampled_from(HANDLED), max_size=2, unique=True))
        if events:
            written["on"] = {event: draw(transitions(paths)) for event in events}
        delays = draw(st.lists(st.sampled_from(DELAYS), max_size=2, unique=True))
        if delays:
            written["after"] = {delay: draw(transitions(paths)) for delay in delays}
        if draw(st.integers(0, 4)) == 0:
            written["always"] = {
                "guard": "context.n < 3",
                "target": draw(st.sampled_from(paths)),
                "assign": {"context.n": "context.n + 1"},
            }
        roll = 0 if index in parallel else draw(st.integers(0, 5))
        if roll in (1, 2, 3):
            invoke: dict[str, Any] = {"exec": {"command": "make"}}
        elif roll > 3 and not children[index]:
            invoke = {
                "forEach": {
                    "items": "context.items",
                    "concurrency": draw(st.integers(1, 2)),
                    "failFast": draw(st.booleans()),
                    "machine": draw(child_machines()),
                }
            }
        else:
            return written
        if draw(st.booleans()):
            invoke["onDone"] = draw(transitions(paths))
        if draw(st.booleans()):
            invoke["onError"] = draw(transitions(paths))
        written["invoke"] = invoke
        return written

    top = [i for i in range(count) if parents[i] is None]
    machine: dict[str, Any] = {
        "initial": f"s{top[0]}",
        "context": {"n": 0, "items": ["p", "q"]},
        "states": {f"s{i}": state(i) for i in top},
    }
    document = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "generated"},
        "spec": {"agents": {}, "machine": machine},
    }
    chart = compile_machine(validate_run(document).spec.machine, {}).chart
    reached = reachability.reachable(chart)
    jumps = {f"to_{path.rpartition('.')[2]}": path for path in paths if path not in reached}
    if jumps:
        machine["on"] = jumps
    return document


# --------------------------------------------------------------------------- scripts

Action = tuple[Any, ...]

ACTION_WEIGHTS = {
    "send": 25,
    "pick": 15,
    "jump": 9,
    "advance": 11,
    "done": 14,
    "error": 10,
    "stale": 5,
    "finish": 8,
}
"""How often each action is drawn, in percent; the rest is CANCEL, kept rare because it
ends the Run."""


@st.composite
def actions(draw: st.DrawFn) -> Action:
    roll = draw(st.integers(0, 99))
    bounds = zip(ACTION_WEIGHTS, itertools.accumulate(ACTION_WEIGHTS.values()), strict=True)
    kind = next((k for k, bound in bounds if roll < bound), "CANCEL")
    if kind == "CANCEL":
        return ("CANCEL",)
    if kind == "send":
        return ("send", draw(st.sampled_from(EVENTS)), draw(st.booleans()), draw(st.booleans()))
    if kind == "pick":
        leaf = draw(st.integers(0, 7))
        return (
            "pick",
            leaf,
            draw(st.sampled_from(EVENTS)),
            draw(st.booleans()),
            draw(st.booleans()),
        )
    if kind == "jump":
        return ("jump", draw(st.integers(0, 5)))
    if kind == "finish":
        return ("finish", draw(st.sampled_from(EVENTS)))
    if kind == "advance":
        return ("advance", draw(st.sampled_from([0.5, 1.0, 2.0, 5.0])))
    if kind in ("done", "error"):
        return (kind, draw(st.integers(0, 3)), draw(st.booleans()), draw(st.sampled_from([0, 1])))
    return ("stale", draw(st.booleans()), draw(st.booleans()))


scripts = st.lists(actions(), min_size=4, max_size=14)


@dataclass
class Point:
    """The configuration before one action, and what is needed to go on from it."""

    config: Config
    now: float
    cancelled: tuple[it.TimerEntry, ...]
    """Timers cancelled so far: their events are stale."""
    stopped: tuple[it.InvokeEntry, ...]
    """Invocations stopped so far: their results are stale."""


def events_of(chart: Chart, point: Point, action: Action) -> Iterator[tuple[Event, float]]:
    """The events one action sends from ``point``: a pure function of the configuration."""
    config, now = point.config, point.now
    kind = action[0]
    if kind == "send":
        _, name, caused, payload = action
        yield Event(name, {"x": 1} if payload else {}, CAUSE if caused else NO_CAUSE), now
    elif kind == "pick" and config.active:
        # A pick of the Turn of one active leaf: the Run's, a region's or a child's.
        _, leaf, name, caused, payload = action
        scope = config.active[leaf % len(config.active)]
        fields = {"x": 1} if payload else {}
        yield Event(name, fields, CAUSE if caused else NO_CAUSE, scope=scope), now
    elif kind == "finish":
        # Each running fan-out child's Turn picks, one after another.
        for leaf in config.active:
            if machine_of(leaf) != ROOT:
                yield Event(action[1], scope=leaf), now
    elif kind == "jump":
        jumps = sorted(chart.root.on)
        if jumps:
            yield Event(jumps[action[1] % len(jumps)]), now
    elif kind == "advance":
        yield Event("tick"), now + action[1]
    elif kind in ("done", "error") and (answering := _answering(config)):
        # The core sends a result with the cause its invocation started with; a result
        # the pick's work sent below an Agent's state carries the pick too.
        entry = answering[action[1] % len(answering)]
        cause = entry.cause | (CAUSE if action[2] else NO_CAUSE)
        if kind == "done":
            output = {"exitCode": action[3], "output": "", "timedOut": False}
            yield Event(DONE_INVOKE, {"output": output}, cause, entry.id), now
        else:
            fields = {"reason": "exec", "message": "boom"}
            yield Event(ERROR_INVOKE, fields, cause, entry.id), now
    elif kind == "stale" and action[1] and point.cancelled:
        yield it.timer_event(point.cancelled[-1]), now
    elif kind == "stale" and not action[1] and point.stopped:
        entry = point.stopped[-1]
        fields = {"reason": "exec", "message": "late", "output": {}}
        yield Event(ERROR_INVOKE if action[2] else DONE_INVOKE, fields, entry.cause, entry.id), now
    elif kind == "CANCEL":
        yield Event(it.CANCEL), now


def _answering(config: Config) -> list[it.InvokeEntry]:
    """The invocations a result may come for: a fan-out's come from its children."""
    return [i for i in config.invokes if i.kind is not it.InvokeKind.FAN_OUT]


def perform(chart: Chart, point: Point, action: Action) -> tuple[Point, list[Step]]:
    """Apply one action; time advancing fires every due timer in order, as the core does."""
    steps: list[Step] = []
    now = point.now
    for event, at in events_of(chart, point, action):
        if event.type == "tick":
            now = at
            while due := it.due(point.config, now):
                step = it.step(chart, point.config, it.timer_event(due[0]), it.Scope(), now)
                steps.append(step)
                point = _after(point, step, now)
            continue
        step = it.step(chart, point.config, event, it.Scope(), at)
        steps.append(step)
        point = _after(point, step, now)
    return point, steps


def _after(point: Point, step: Step, now: float) -> Point:
    return Point(
        step.config,
        now,
        point.cancelled + step.cancelled,
        point.stopped + tuple(s.invoke for s in step.stopped),
    )


def run(chart: Chart, script: list[Action], point: Point) -> tuple[list[Point], list[Step]]:
    """Every point (before each action, and the last) and every Step."""
    points, steps = [point], []
    for action in script:
        point, made = perform(chart, point, action)
        points.append(point)
        steps.extend(made)
    return points, steps


def begin(chart: Chart) -> tuple[Point, Step]:
    first = it.start(chart, it.Scope(), 0.0)
    return _after(Point(first.config, 0.0, (), ()), first, 0.0), first


def load(document: dict[str, Any]) -> Chart:
    return load_run(document).chart


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(manifests(), scripts)
def test_one_script_twice_gives_equal_steps(document: dict[str, Any], script: list[Action]) -> None:
    chart = load(document)
    first_point, first = begin(chart)
    again_point, again = begin(chart)
    assert first == again
    assert run(chart, script, first_point) == run(chart, script, again_point)


@SETTINGS
@given(manifests(), scripts)
def test_restore_at_any_point_continues_exactly(
    document: dict[str, Any], script: list[Action]
) -> None:
    chart = load(document)
    start, _ = begin(chart)
    points, _ = run(chart, script, start)
    for index, point in enumerate(points):
        data = json.loads(json.dumps(it.snapshot(point.config)))
        restored = Point(it.restore(data), point.now, point.cancelled, point.stopped)
        assert restored.config == point.config
        rest = script[index:]
        assert run(chart, rest, restored) == run(chart, rest, point)


@SETTINGS
@given(manifests(), scripts)
def test_every_step_keeps_the_invariants(document: dict[str, Any], script: list[Action]) -> None:
    chart = load(document)
    start, first = begin(chart)
    check(chart, Config(active=(), context=dict(chart.context)), first, 0.0)
    point = start
    for action in script:
        after, steps = perform(chart, point, action)
        before = point.config
        for step in steps:
            check(chart, before, step, _now_of(step, point, after))
            before = step.config
        point = after


def _now_of(step: Step, before: Point, after: Point) -> float:
    """The time a step ran at: a timer's fire time never exceeds the advanced clock, and
    the armed timers say exactly when (``fire_at - delay``)."""
    return after.now if step.event.type.startswith("after:") else before.now


def check(chart: Chart, before: Config, step: Step, now: float) -> None:
    config, event = step.config, step.event
    live_before = _active(chart, before)
    live = _active(chart, config)

    # The leaves, and the states around them.
    if config.status is Status.RUNNING:
        assert config.active
        assert config.active == tuple(
            it.active(chart, config)[i] for i in _leaf_places(chart, config)
        )
        assert all(chart.state(leaf).kind in (Kind.ATOMIC, Kind.FINAL) for leaf in config.active)
        assert config.leaves == tuple(leaf for leaf in config.active if machine_of(leaf) == ROOT)
        for path in {ROOT} | live:
            state = chart.state(path)
            inside = [c for c in chart.regions(path) if c in live] if state.children else []
            if state.kind is Kind.PARALLEL:
                assert inside == chart.regions(path), path
            elif state.kind is Kind.COMPOUND:
                assert len(inside) == 1, path
    else:
        assert config.active == ()
        assert config.timers == ()
        assert config.invokes == ()
        assert config.children == ()

    # A fan-out's children: a running one is active under its active fan-out state, at
    # most ``concurrency`` of them at once; the others are not.
    for child in config.children:
        assert parent_of(child.scope) in live
        assert (child.scope in live) == (child.status is ChildStatus.RUNNING), child
    roots = {child.scope for child in config.children}
    assert all(machine_of(path) in roots | {ROOT} for path in live)
    for invocation in {child.invocation for child in config.children}:
        fan_state = invocation.rpartition("#")[0]
        invoke = chart.state(StatePath(fan_state)).invoke
        assert invoke is not None
        assert invoke.fan_out is not None
        running = [
            c
            for c in config.children
            if c.invocation == invocation and c.status is ChildStatus.RUNNING
        ]
        assert len(running) <= invoke.fan_out.concurrency

    # Timers and invokes belong to active states that declare them, one each.
    for timer in config.timers:
        assert timer.state in live
        assert timer.timer in {t.id for t in chart.state(timer.state).after}
    assert len({(t.state, t.timer) for t in config.timers}) == len(config.timers)
    for entry in config.invokes:
        assert entry.state in live
        assert chart.state(entry.state).invoke is not None
    assert len({i.state for i in config.invokes}) == len(config.invokes)

    # Entering and exiting account exactly for the change of the active set.
    entered, exited = Counter(step.entered), Counter(step.exited)
    assert ROOT not in entered
    assert ROOT not in exited
    for path in live | live_before | set(entered) | set(exited):
        change = int(path in live) - int(path in live_before)
        assert entered[path] - exited[path] == change, path

    # Timers and invokes: before + new − ended (a fan-out that answered, once every
    # child ended or one failed, is no longer running: it ends within the step).
    fired = {t for t in before.timers if t.origin == event.origin}
    result = event.type in (DONE_INVOKE, ERROR_INVOKE)
    answered = {i for i in before.invokes if result and i.id == event.origin}
    stopped = {s.invoke for s in step.stopped}
    assert (
        set(config.timers) == (set(before.timers) | set(step.armed)) - set(step.cancelled) - fired
    )
    expected = (set(before.invokes) | set(step.started)) - stopped - answered
    fanned = {i for i in expected if i.kind is it.InvokeKind.FAN_OUT}
    assert set(config.invokes) - fanned == expected - fanned
    assert set(config.invokes) <= expected
    for timer in step.armed:
        delay = next(t.delay_s for t in chart.state(timer.state).after if t.id == timer.timer)
        assert timer.fire_at == now + delay

    # Causes: a child Machine that faults stops its invokes with none.
    for timer in step.armed:
        assert timer.cause == event.cause
    for entry in step.started:
        assert entry.cause == event.cause
    defect = config.status is Status.FAILED and not (config.message or "").startswith(
        "reached the failed final"
    )
    for stop in step.stopped:
        if defect:
            assert stop.cause == NO_CAUSE
        elif machine_of(stop.invoke.state) == ROOT:
            assert stop.cause == event.cause
        else:
            assert stop.cause in (event.cause, NO_CAUSE)
    if step.fault is not None:
        assert defect

    # Sequence numbers.
    new = [t.seq for t in step.armed] + [i.seq for i in step.started]
    assert len(set(new)) == len(new)
    assert all(before.seq < seq <= config.seq for seq in new)
    assert config.seq >= before.seq

    # Nothing taken, nothing moved; finished, nothing taken.
    if not step.taken:
        assert (step.entered, step.exited, step.started, step.stopped) == ((), (), (), ())
        assert (config.active, config.context, config.status) == (
            before.active,
            before.context,
            before.status,
        )
    if before.status is not Status.RUNNING:
        assert not step.taken
        assert config == before
    stale_timer = event.type.startswith("after:") and all(
        t.origin != event.origin for t in before.timers
    )
    stale_result = event.type in (DONE_INVOKE, ERROR_INVOKE) and all(
        i.id != event.origin for i in before.invokes
    )
    if stale_timer or stale_result:
        assert not step.taken
        assert config == before


def _leaf_places(chart: Chart, config: Config) -> list[int]:
    """Where the leaves stand among every active state (document order, children by item)."""
    every = it.active(chart, config)
    return [index for index, path in enumerate(every) if path in set(config.active)]


def _active(chart: Chart, config: Config) -> set[StatePath]:
    if config.status is not Status.RUNNING:
        return set()
    return set(it.active(chart, config)) - {ROOT}
