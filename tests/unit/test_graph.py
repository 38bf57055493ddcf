"""A Machine drawn as mermaid and as dot, with a Run's marks.

Cases:
- the mermaid of a machine with a compound state: states nested, each initial and final
  drawn, every moving transition an edge labelled with its event (``always``, ``after
  5m``), a targetless one not drawn; exactly;
- what mermaid cannot take as written in a label: a ``;`` in an event is drawn as its
  fullwidth form (so no ``#word;`` is read as an entity either), a tab as a space;
- marks from a trail: the active leaf and its ancestors, the states entered (a compound
  target's initial chain too, and the start's), the transitions taken; mermaid classes
  them and ends a taken edge's label with ✓; entries naming unknown states are passed by;
  a Run not started has no marks;
- the dot of the same machine: a cluster for the compound, edges to it clipped at it,
  marked nodes and taken edges classed and coloured; exactly.
"""

from __future__ import annotations

from kubeturn.machine import graph
from kubeturn.machine.graph import Marks
from kubeturn.machine.model import StatePath
from tests.unit.cores import loaded

CHART = loaded("drawn").chart
TRAIL = [
    {"from": "work.write", "event": "written", "to": "work.check", "at": 1.0},
    {"from": "work.check", "event": None, "to": "work.finished", "at": 1.0},
    {"from": "work", "event": "done.state", "to": "review", "at": 1.0},
    {"from": "review", "event": "reject", "to": "work", "at": 2.0},
    {"from": "nowhere", "event": "x", "to": "review", "at": 3.0},
]


def test_mermaid_nests_compound_states_and_labels_each_transition_with_its_event() -> None:
    assert graph.mermaid(CHART) == (
        "stateDiagram-v2\n"
        '    state "work" as s0\n'
        "    state s0 {\n"
        '        state "write" as s1\n'
        '        state "check" as s2\n'
        '        state "finished" as s3\n'
        "        [*] --> s1\n"
        "        s3 --> [*]\n"
        "    }\n"
        '    state "review" as s4\n'
        '    state "done" as s5\n'
        '    state "failed" as s6\n'
        "    [*] --> s0\n"
        "    s5 --> [*]\n"
        "    s6 --> [*]\n"
        "    s0 --> s4 : done.state\n"
        "    s1 --> s2 : written\n"
        "    s2 --> s3 : always\n"
        '    s4 --> s5 : approve "now"\n'
        "    s4 --> s0 : reject\n"
        "    s4 --> s6 : after 5m\n"
        "    classDef active fill:#fde68a,stroke:#b45309,stroke-width:3px\n"
        "    classDef visited fill:#dbeafe,stroke:#1d4ed8\n"
    )


def test_marks_come_from_the_state_and_the_trail() -> None:
    marks = graph.marks(CHART, "work.write", TRAIL)
    assert marks.active == {"work", "work.write"}
    assert marks.visited == {"work", "work.write", "work.check", "work.finished", "review"}
    assert marks.taken == {
        ("work.write", "written", "work.check"),
        ("work.check", None, "work.finished"),
        ("work", "done.state", "review"),
        ("review", "reject", "work"),
    }
    assert graph.marks(CHART, None, TRAIL) == Marks()
    assert graph.marks(CHART, "review", []).visited == {"work", "work.write", "review"}


def test_mermaid_classes_the_marks_and_ticks_the_transitions_taken() -> None:
    drawn = graph.mermaid(CHART, graph.marks(CHART, "work.write", TRAIL))
    assert drawn.splitlines()[-10:] == [
        "    s0 --> s4 : done.state ✓",
        "    s1 --> s2 : written ✓",
        "    s2 --> s3 : always ✓",
        '    s4 --> s5 : approve "now"',
        "    s4 --> s0 : reject ✓",
        "    s4 --> s6 : after 5m",
        "    classDef active fill:#fde68a,stroke:#b45309,stroke-width:3px",
        "    classDef visited fill:#dbeafe,stroke:#1d4ed8",
        "    class s2,s3,s4 visited",
        "    class s0,s1 active",
    ]


def test_dot_draws_a_compound_state_as_a_cluster_with_the_marks() -> None:
    marks = Marks(
        active=frozenset({StatePath("review")}),
        visited=frozenset({StatePath("work"), StatePath("work.write")}),
        taken=frozenset({(StatePath("work"), "done.state", StatePath("review"))}),
    )
    assert graph.dot(CHART, marks) == (
        'digraph "machine" {\n'
        "  compound=true;\n"
        "  rankdir=LR;\n"
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
        'fontname="sans-serif"];\n'
        '  edge [fontname="sans-serif", fontsize=10];\n'
        '  start [shape=point, width=0.15, label=""];\n'
        "  subgraph cluster_s0 {\n"
        '    label="work";\n'
        '    style="rounded,filled";\n'
        '    class="visited"; fillcolor="#dbeafe"; color="#1d4ed8";\n'
        '    s1 [label="write", class="visited", fillcolor="#dbeafe", color="#1d4ed8"];\n'
        '    s2 [label="check"];\n'
        '    s3 [label="finished", peripheries=2];\n'
        "  }\n"
        '  s4 [label="review", class="active", fillcolor="#fde68a", color="#b45309"];\n'
        '  s5 [label="done", peripheries=2];\n'
        '  s6 [label="failed", peripheries=2];\n'
        "  start -> s1 [lhead=cluster_s0];\n"
        '  s1 -> s4 [label="done.state", class="taken", color="#1d4ed8", penwidth=2] '
        "[ltail=cluster_s0];\n"
        '  s1 -> s2 [label="written"];\n'
        '  s2 -> s3 [label="always"];\n'
        '  s4 -> s5 [label="approve \\"now\\""];\n'
        '  s4 -> s1 [label="reject"] [lhead=cluster_s0];\n'
        '  s4 -> s6 [label="after 5m"];\n'
        "}\n"
    )


def test_what_mermaid_cannot_take_is_drawn_alike() -> None:
    assert graph._mermaid_label("go;stop #x;") == "go\uff1bstop #x\uff1b"
    assert graph._mermaid_label("a\tb") == "a b"


def test_an_edge_says_its_event_always_or_its_timer() -> None:
    assert [graph.label(e) for e in ("submit", None, "after:review:5m")] == [
        "submit",
        "always",
        "after 5m",
    ]
