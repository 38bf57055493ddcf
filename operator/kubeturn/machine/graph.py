"""A Machine drawn: as a mermaid ``stateDiagram-v2`` and as a Graphviz ``dot`` graph.

Compound states are drawn with their children inside, final states as ends, each
compound's ``initial`` as an arrow from its start, and every transition that moves the
Machine as an edge labelled with its event (``always`` for an eventless one, ``after
<delay>`` for a timer). Transitions written on the Machine itself (it is always active)
and targetless ones (they move nothing) are not edges. ``Marks`` say which states are
active, which were visited and which transitions were taken, as a Run's status shows
them (``marks``; ADR 0109); both drawings style them with classes. Pure: no IO.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeturn.machine import reachability
from kubeturn.machine.model import ROOT, Chart, Kind, State, StatePath

Edge = tuple[StatePath, str | None, StatePath]
"""A transition as the trail records it: its source, event (None: ``always``), target."""

STYLES = {
    "active": ("fill:#fde68a,stroke:#b45309,stroke-width:3px", "#fde68a", "#b45309"),
    "visited": ("fill:#dbeafe,stroke:#1d4ed8", "#dbeafe", "#1d4ed8"),
}
"""Mark → (mermaid classDef, dot fill colour, dot outline colour)."""
TAKEN_COLOUR = "#1d4ed8"


@dataclass(frozen=True)
class Marks:
    active: frozenset[StatePath] = frozenset()
    visited: frozenset[StatePath] = frozenset()
    taken: frozenset[Edge] = field(default_factory=frozenset)


def marks(chart: Chart, state: str | None, trail: Iterable[Mapping[str, Any]]) -> Marks:
    """The marks of a Run whose status says ``state`` (its active or last leaf; None
    before it started) and ``trail`` (``status.trail``). A state is visited when the trail
    enters it (a move's target, its ancestors and the initial chain below it), or when
    the Run started in it; entries naming states the Machine lacks are passed by."""
    if state is None or state not in chart.states:
        return Marks()
    active = frozenset(p for p in chart.ancestors(StatePath(state)) if p != ROOT)
    visited = set(_entered(chart, ROOT)) | active
    taken: set[Edge] = set()
    for entry in trail:
        source, target = StatePath(str(entry.get("from"))), StatePath(str(entry.get("to")))
        if source not in chart.states or target not in chart.states:
            continue
        event = entry.get("event")
        taken.add((source, None if event is None else str(event), target))
        visited.add(source)
        visited.update(p for p in chart.ancestors(target) if p != ROOT)
        visited.update(_entered(chart, target))
    return Marks(active, frozenset(visited - {ROOT}), frozenset(taken))


def label(event: str | None) -> str:
    """What an edge of ``event`` says: the event, ``always``, or ``after <delay>``."""
    if event is None:
        return "always"
    if event.startswith("after:"):
        return f"after {event.rsplit(':', 1)[1]}"
    return event


def edges(chart: Chart) -> list[Edge]:
    """Every transition that moves the Machine, once each, in document order."""
    found: dict[Edge, None] = {}
    for state in chart.states.values():
        if state.path == ROOT:
            continue
        for transition in reachability.transitions(state):
            if transition.target is not None and transition.target != transition.source:
                found[(transition.source, transition.event, transition.target)] = None
    return list(found)


def mermaid(chart: Chart, shown: Marks = Marks()) -> str:
    """The Machine as a mermaid ``stateDiagram-v2``; a taken transition's label ends ``✓``
    (mermaid styles no edge of a state diagram)."""
    ids = _ids(chart)
    lines = ["stateDiagram-v2"]
    lines += _mermaid_states(chart, ROOT, ids, depth=1)
    for source, event, target in edges(chart):
        taken = " ✓" if (source, event, target) in shown.taken else ""
        lines.append(f"    {ids[source]} --> {ids[target]} : {_mermaid_label(label(event))}{taken}")
    for mark, (style, _, _) in STYLES.items():
        lines.append(f"    classDef {mark} {style}")
    for mark, states in (("visited", shown.visited - shown.active), ("active", shown.active)):
        named = [ids[p] for p in chart.states if p in states]
        if named:
            lines.append(f"    class {','.join(named)} {mark}")
    return "\n".join(lines) + "\n"


def dot(chart: Chart, shown: Marks = Marks(), *, name: str = "machine") -> str:
    """The Machine as a Graphviz digraph: a compound state is a cluster, an edge to or
    from it is drawn to its initial leaf (or from its first leaf) and clipped at the
    cluster (``lhead``/``ltail``). Nodes and edges carry ``class`` marks for SVG output."""
    ids = _ids(chart)
    lines = [
        f"digraph {_dot_text(name)} {{",
        "  compound=true;",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontname="sans-serif"];',
        '  edge [fontname="sans-serif", fontsize=10];',
        '  start [shape=point, width=0.15, label=""];',
    ]
    lines += _dot_states(chart, ROOT, ids, shown, depth=1)
    first = _entered(chart, ROOT)[-1]
    lines.append(f"  start -> {ids[first]}{_dot_clip(chart, ids, None, chart.root.initial)};")
    for source, event, target in edges(chart):
        attributes = [f"label={_dot_text(label(event))}"]
        if (source, event, target) in shown.taken:
            attributes += ['class="taken"', f'color="{TAKEN_COLOUR}"', "penwidth=2"]
        clip = _dot_clip(chart, ids, source, target)
        tail, head = ids[_leaf_of(chart, source)], ids[_entered(chart, target)[-1]]
        lines.append(f"  {tail} -> {head} [{', '.join(attributes)}]{clip};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _ids(chart: Chart) -> dict[StatePath, str]:
    """Each state's id in a drawing: ``s<n>`` in document order. A name (letters, digits,
    ``_`` and ``-``, as the loader checks) is unique only among its siblings."""
    return {path: f"s{n}" for n, path in enumerate(p for p in chart.states if p != ROOT)}


def _children(chart: Chart, parent: StatePath) -> Iterator[State]:
    return (chart.states[p] for p in chart.states[parent].children)


def _entered(chart: Chart, path: StatePath) -> list[StatePath]:
    """``path`` and the initial chain below it: what entering it enters."""
    chain = [path]
    while chart.states[chain[-1]].kind is Kind.COMPOUND:
        initial = chart.states[chain[-1]].initial
        assert initial is not None, "the loader checks every compound state has an initial"
        chain.append(initial)
    return chain


def _leaf_of(chart: Chart, path: StatePath) -> StatePath:
    """The node an edge leaving ``path`` is drawn from: its first leaf."""
    while chart.states[path].kind is Kind.COMPOUND:
        path = chart.states[path].children[0]
    return path


def _mermaid_states(
    chart: Chart, parent: StatePath, ids: Mapping[StatePath, str], *, depth: int
) -> list[str]:
    indent = "    " * depth
    lines = []
    for state in _children(chart, parent):
        lines.append(f'{indent}state "{state.name}" as {ids[state.path]}')
        if state.kind is Kind.COMPOUND:
            lines.append(f"{indent}state {ids[state.path]} {{")
            lines += _mermaid_states(chart, state.path, ids, depth=depth + 1)
            lines.append(f"{indent}}}")
    initial = chart.states[parent].initial
    if initial is not None:
        lines.append(f"{indent}[*] --> {ids[initial]}")
    lines += [
        f"{indent}{ids[s.path]} --> [*]" for s in _children(chart, parent) if s.kind is Kind.FINAL
    ]
    return lines


def _dot_states(
    chart: Chart,
    parent: StatePath,
    ids: Mapping[StatePath, str],
    shown: Marks,
    *,
    depth: int,
) -> list[str]:
    indent = "  " * depth
    lines = []
    for state in _children(chart, parent):
        mark = _mark(state.path, shown)
        if state.kind is Kind.COMPOUND:
            lines.append(f"{indent}subgraph cluster_{ids[state.path]} {{")
            lines.append(f"{indent}  label={_dot_text(state.name)};")
            lines.append(f'{indent}  style="rounded{",filled" if mark else ""}";')
            if mark:
                _, fill, outline = STYLES[mark]
                lines.append(f'{indent}  class="{mark}"; fillcolor="{fill}"; color="{outline}";')
            lines += _dot_states(chart, state.path, ids, shown, depth=depth + 1)
            lines.append(f"{indent}}}")
            continue
        attributes = [f"label={_dot_text(state.name)}"]
        if state.kind is Kind.FINAL:
            attributes.append("peripheries=2")
        if mark:
            _, fill, outline = STYLES[mark]
            attributes += [f'class="{mark}"', f'fillcolor="{fill}"', f'color="{outline}"']
        lines.append(f"{indent}{ids[state.path]} [{', '.join(attributes)}];")
    return lines


def _dot_clip(
    chart: Chart, ids: Mapping[StatePath, str], source: StatePath | None, target: StatePath | None
) -> str:
    """``ltail``/``lhead`` for an edge from or to a compound state: drawn to its border,
    unless the edge's other end is inside it (it could not be drawn there)."""
    clips = []
    if (
        source is not None
        and chart.states[source].kind is Kind.COMPOUND
        and (target is None or not chart.is_within(target, source))
    ):
        clips.append(f"ltail=cluster_{ids[source]}")
    if (
        target is not None
        and chart.states[target].kind is Kind.COMPOUND
        and (source is None or not chart.is_within(source, target))
    ):
        clips.append(f"lhead=cluster_{ids[target]}")
    return f" [{', '.join(clips)}]" if clips else ""


def _mark(path: StatePath, shown: Marks) -> str | None:
    if path in shown.active:
        return "active"
    return "visited" if path in shown.visited else None


def _mermaid_label(text: str) -> str:
    """A transition's label, which mermaid ends at a ``;``: drawn as its fullwidth form
    (；), so no ``#word;`` is left either; any space character as a space."""
    return re.sub(r"\s", " ", text).replace(";", "\uff1b")


def _dot_text(text: str) -> str:
    """A dot string: quoted, its backslashes and quotes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
