"""Where states stand in document order, and which states an event reaches: active
sets from leaves, sorting (a fan-out's children in item order), the leaves a scope
holds, and the states each of them offers an event to, inner first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kubeturn.machine import model
from kubeturn.machine.configuration import Child
from kubeturn.machine.model import ROOT, Chart, StatePath, machine_of, parent_of, within


def all_active(leaves: Iterable[StatePath]) -> set[StatePath]:
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


def in_document_order(
    chart: Chart, children: Iterable[Child], paths: Iterable[StatePath], *, reverse: bool = False
) -> list[StatePath]:
    listed = list(paths)
    if len(listed) < 2:
        return listed
    indices = {child.scope: child.index for child in children}
    return sorted(listed, key=lambda path: _place(chart, indices, path), reverse=reverse)


def leaves_in(leaves: Iterable[StatePath], scope: StatePath) -> list[StatePath]:
    """The leaves ``scope`` holds that belong to its own Machine."""
    machine = machine_of(scope)
    return [leaf for leaf in leaves if within(leaf, scope) and machine_of(leaf) == machine]


def offered_states(chart: Chart, leaves: Iterable[StatePath], scope: StatePath) -> list[StatePath]:
    """The states an event in ``scope`` is offered to, leaf by leaf and inner first, each
    once."""
    seen: dict[StatePath, None] = {}
    for leaf in leaves_in(leaves, scope):
        for path in chart.chain(leaf):
            seen.setdefault(path, None)
    return list(seen)
