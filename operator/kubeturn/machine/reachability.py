"""Which states of a Chart no run can ever enter: almost always a typo or a stale state.

Entering a state enters its ancestors and, through ``initial``, a chain of descendants
(every region of a parallel state, and a fan-out's child Machine); the root is always
active, so its transitions count from the start. Guards are not
evaluated: a state behind a guard that is never true still counts as reachable. No IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from kubeturn.machine import model


def transitions(state: model.State) -> Iterator[model.Transition]:
    """Every transition written on ``state``: on, always, after, invoke and onDone."""
    for group in state.on.values():
        yield from group
    yield from state.always
    for timer in state.after:
        yield from timer.transitions
    if state.invoke is not None:
        yield from state.invoke.on_done
        yield from state.invoke.on_error
    yield from state.on_done


def reachable(chart: model.Chart, assumed: Iterable[model.StatePath] = ()) -> set[model.StatePath]:
    """The states some sequence of events can enter, the root included, if the states
    ``assumed`` can be entered too (so one known problem is not reported again for
    every state behind it)."""
    reached: set[model.StatePath] = set()
    pending: list[model.StatePath] = []

    def enter(path: model.StatePath) -> None:
        pending.extend(chart.ancestors(path))
        for ancestor in chart.ancestors(path):
            if chart.states[ancestor].kind is model.Kind.PARALLEL:
                below(ancestor)
        below(path)

    def below(path: model.StatePath) -> None:
        """What entering ``path`` enters inside it: initial children, every region, and
        a fan-out's child Machine."""
        todo = [path]
        while todo:
            state = chart.states[todo.pop()]
            pending.append(state.path)
            if state.kind is model.Kind.PARALLEL:
                todo.extend(state.children)
            elif state.initial is not None:
                todo.append(state.initial)
            if state.invoke is not None and state.invoke.fan_out is not None:
                todo.append(state.invoke.fan_out.root)

    enter(model.ROOT)
    for path in assumed:
        enter(path)
    while pending:
        path = pending.pop()
        if path in reached:
            continue
        reached.add(path)
        for transition in transitions(chart.states[path]):
            if transition.target is not None:
                enter(transition.target)
    return reached


def unreachable(
    chart: model.Chart, assumed: Iterable[model.StatePath] = ()
) -> list[model.StatePath]:
    """The outermost states no run can enter, in document order (a state whose parent
    is unreachable adds nothing to know), if the states ``assumed`` can be entered."""
    reached = reachable(chart, assumed)
    return [
        path
        for path, state in chart.states.items()
        if path not in reached and state.parent in reached
    ]
