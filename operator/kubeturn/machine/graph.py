"""A Machine drawn: as a mermaid ``stateDiagram-v2`` and as a Graphviz ``dot`` graph.

Compound states are drawn with their children inside, final states as ends, each
compound's ``initial`` as an arrow from its start, and every transition that moves the
Machine as an edge labelled with its event (``always`` for an eventless one, ``after
<delay>`` for a timer). A parallel state holds its regions side by side (mermaid's
concurrent regions, split by ``--``; a cluster each in dot); a fan-out state
(``invoke.forEach``) holds its child Machine, drawn once for every child and labelled
``<state> ×forEach``. Transitions written on a Machine itself (the Run's, or a child's:
it is always active) and targetless ones (they move nothing) are not edges. ``Marks``
say which states are active, which were visited and which transitions were taken, as a
Run's status shows them (``marks``; ADR 0109); a fan-out child's states mark its
template's. Both drawings style them with classes. Pure: no IO.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeturn.machine import reachability
from kubeturn.machine.model import ROOT, Chart, Kind, State, StatePath, template
from kubeturn.machine.targets import CHILD_ROOT

Edge = tuple[StatePath, str | None, StatePath]
"""A transition as the trail records it: its source, event (None: ``always``), target."""

STYLES = {
    "active": ("fill:#fde68a,stroke:#b45309,stroke-width:3px", "#fde68a", "#b45309"),
    "visited": ("fill:#dbeafe,stroke:#1d4ed8", "#dbeafe", "#1d4ed8"),
}
"""Mark → (mermaid classDef, dot fill colour, dot outline colour)."""
TAKEN_COLOUR = "#1d4ed8"
FAN_OUT_LABEL = "{name} ×forEach"
"""What a fan-out state's box says: its child Machine, inside, runs once per item."""


@dataclass(frozen=True)
class Marks:
    active: frozenset[StatePath] = frozenset()
    visited: frozenset[StatePath] = frozenset()
    taken: frozenset[Edge] = field(default_factory=frozenset)


def marks(chart: Chart, state: str | None, trail: Iterable[Mapping[str, Any]]) -> Marks:
    """The marks of a Run whose status says ``state``: its active leaves (or the last
    ones), joined by ``, `` as ``status.state`` joins them, a fan-out child's too
    (``fix[a].work`` marks ``fix[].work``); None before it started. ``trail`` is
    ``status.trail``. A state is visited when the trail enters it (a move's target, its
    ancestors and what entering it enters), or when the Run started in it; names the
    Machine lacks are passed by."""
    leaves = [StatePath(template(StatePath(p.strip()))) for p in (state or "").split(",")]
    leaves = [leaf for leaf in leaves if leaf and leaf in chart.states]
    if not leaves:
        return Marks()
    active = frozenset(p for leaf in leaves for p in chart.ancestors(leaf) if _drawn(p))
    visited = set(_entered(chart, ROOT)) | active
    taken: set[Edge] = set()
    for entry in trail:
        source = template(StatePath(str(entry.get("from"))))
        target = template(StatePath(str(entry.get("to"))))
        if source not in chart.states or target not in chart.states:
            continue
        event = entry.get("event")
        taken.add((source, None if event is None else str(event), target))
        visited.add(source)
        visited.update(p for p in chart.ancestors(target) if _drawn(p))
        visited.update(_entered(chart, target))
    return Marks(active, frozenset(p for p in visited if _drawn(p)), frozenset(taken))


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
        if not _drawn(state.path):
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
    first = _head(chart, ROOT)
    lines.append(f"  start -> {ids[first]}{_dot_clip(chart, ids, None, chart.root.initial)};")
    for source, event, target in edges(chart):
        attributes = [f"label={_dot_text(label(event))}"]
        if (source, event, target) in shown.taken:
            attributes += ['class="taken"', f'color="{TAKEN_COLOUR}"', "penwidth=2"]
        clip = _dot_clip(chart, ids, source, target)
        tail, head = ids[_leaf_of(chart, source)], ids[_head(chart, target)]
        lines.append(f"  {tail} -> {head} [{', '.join(attributes)}]{clip};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _ids(chart: Chart) -> dict[StatePath, str]:
    """Each drawn state's id in a drawing: ``s<n>`` in document order. A name (letters,
    digits, ``_`` and ``-``, as the loader checks) is unique only among its siblings."""
    return {path: f"s{n}" for n, path in enumerate(p for p in chart.states if _drawn(p))}


def _drawn(path: StatePath) -> bool:
    """A state drawn as a node: not the Run's root, nor a child Machine's (``fix[]``),
    whose states are drawn inside their fan-out state."""
    return path != ROOT and not path.endswith(CHILD_ROOT)


def _fan_out_root(state: State) -> StatePath | None:
    """The root of ``state``'s child Machine, when it fans out."""
    fan = state.invoke.fan_out if state.invoke is not None else None
    return fan.root if fan is not None else None


def _inside(chart: Chart, path: StatePath) -> tuple[StatePath, ...]:
    """The states drawn inside ``path``: a compound's or parallel's children, a fan-out's
    child Machine's top-level states; none for an atomic or final state."""
    root = _fan_out_root(chart.states[path])
    return chart.states[root if root is not None else path].children


def _initial(chart: Chart, path: StatePath) -> StatePath | None:
    """The state drawn as entered first inside ``path`` (none in a parallel state: every
    region is)."""
    root = _fan_out_root(chart.states[path])
    return chart.states[root if root is not None else path].initial


def _entered(chart: Chart, path: StatePath) -> list[StatePath]:
    """``path`` and what entering it enters: a compound's initial chain, every region of
    a parallel state. A fan-out's children are not counted: its list may be empty."""
    entered = [path]
    state = chart.states[path]
    if state.kind is Kind.COMPOUND:
        assert state.initial is not None, "the loader checks every compound state has an initial"
        entered += _entered(chart, state.initial)
    elif state.kind is Kind.PARALLEL:
        for region in state.children:
            entered += _entered(chart, region)
    return entered


def _head(chart: Chart, path: StatePath) -> StatePath:
    """The node an edge entering ``path`` is drawn to: the leaf entered first inside it
    (a parallel state's first region's, a fan-out's child Machine's initial one)."""
    while _inside(chart, path):
        path = _initial(chart, path) or _inside(chart, path)[0]
    return path


def _children(chart: Chart, parent: StatePath) -> Iterator[State]:
    return (chart.states[p] for p in _inside(chart, parent))


def _leaf_of(chart: Chart, path: StatePath) -> StatePath:
    """The node an edge leaving ``path`` is drawn from: its first leaf."""
    while _inside(chart, path):
        path = _inside(chart, path)[0]
    return path


def _name(state: State) -> str:
    return state.name if _fan_out_root(state) is None else FAN_OUT_LABEL.format(name=state.name)


def _mermaid_states(
    chart: Chart, parent: StatePath, ids: Mapping[StatePath, str], *, depth: int
) -> list[str]:
    """The states inside ``parent``; a parallel state's regions split by ``--``, as
    mermaid draws concurrent regions."""
    indent = "    " * depth
    lines = []
    concurrent = parent != ROOT and chart.states[parent].kind is Kind.PARALLEL
    for index, state in enumerate(_children(chart, parent)):
        if concurrent and index:
            lines.append(f"{indent}--")
        lines.append(f'{indent}state "{_name(state)}" as {ids[state.path]}')
        if _inside(chart, state.path):
            lines.append(f"{indent}state {ids[state.path]} {{")
            lines += _mermaid_states(chart, state.path, ids, depth=depth + 1)
            lines.append(f"{indent}}}")
    initial = _initial(chart, parent)
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
        if _inside(chart, state.path):
            parallel = state.kind is Kind.PARALLEL
            lines.append(f"{indent}subgraph cluster_{ids[state.path]} {{")
            lines.append(f"{indent}  label={_dot_text(_name(state))};")
            drawn = "rounded,dashed" if parallel else "rounded"
            lines.append(f'{indent}  style="{drawn}{",filled" if mark else ""}";')
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
        and _inside(chart, source)
        and (target is None or not chart.is_within(target, source))
    ):
        clips.append(f"ltail=cluster_{ids[source]}")
    if (
        target is not None
        and _inside(chart, target)
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
