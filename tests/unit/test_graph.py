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
  marked nodes and taken edges classed and coloured; exactly;
- a parallel state's regions drawn as mermaid's concurrent regions (split by ``--``) and
  as clusters in a dashed cluster in dot; a fan-out state as a composite labelled
  ``fix ×forEach`` holding its child Machine, edges to and from it drawn at its border;
  exactly;
- marks of a status whose state names several active leaves (``, ``-joined) and fan-out
  children's instance states: every active leaf and its ancestors, a child's marking its
  template (never the child Machine's root, which is not drawn); entering a parallel
  state visits every region's initial chain; a trail's child moves mark their templates.
"""

from __future__ import annotations

from kubeturn.machine import graph
from kubeturn.machine.graph import Marks
from kubeturn.machine.model import StatePath
from tests.unit.cores import loaded

CHART = loaded("drawn").chart
PARALLEL = loaded("drawn_parallel").chart
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


def test_mermaid_draws_regions_side_by_side_and_a_fan_out_around_its_child_machine() -> None:
    assert graph.mermaid(PARALLEL) == (
        "stateDiagram-v2\n"
        '    state "review" as s0\n'
        "    state s0 {\n"
        '        state "left" as s1\n'
        "        state s1 {\n"
        '            state "reading" as s2\n'
        '            state "approved" as s3\n'
        "            [*] --> s2\n"
        "            s3 --> [*]\n"
        "        }\n"
        "        --\n"
        '        state "right" as s4\n'
        "    }\n"
        '    state "fix ×forEach" as s5\n'
        "    state s5 {\n"
        '        state "work" as s6\n'
        '        state "finished" as s7\n'
        "        [*] --> s6\n"
        "        s7 --> [*]\n"
        "    }\n"
        '    state "done" as s8\n'
        '    state "failed" as s9\n'
        "    [*] --> s0\n"
        "    s8 --> [*]\n"
        "    s9 --> [*]\n"
        "    s0 --> s5 : done.state\n"
        "    s2 --> s3 : approve\n"
        "    s2 --> s9 : reject\n"
        "    s4 --> s9 : skip\n"
        "    s5 --> s8 : done.invoke\n"
        "    s6 --> s7 : finish\n"
        "    classDef active fill:#fde68a,stroke:#b45309,stroke-width:3px\n"
        "    classDef visited fill:#dbeafe,stroke:#1d4ed8\n"
    )


def test_dot_draws_regions_and_a_fan_out_as_clusters() -> None:
    drawn = graph.dot(PARALLEL, graph.marks(PARALLEL, "fix, fix[a].work", []))
    assert drawn.splitlines()[6:] == [
        "  subgraph cluster_s0 {",
        '    label="review";',
        '    style="rounded,dashed,filled";',
        '    class="visited"; fillcolor="#dbeafe"; color="#1d4ed8";',
        "    subgraph cluster_s1 {",
        '      label="left";',
        '      style="rounded,filled";',
        '      class="visited"; fillcolor="#dbeafe"; color="#1d4ed8";',
        '      s2 [label="reading", class="visited", fillcolor="#dbeafe", color="#1d4ed8"];',
        '      s3 [label="approved", peripheries=2];',
        "    }",
        '    s4 [label="right", class="visited", fillcolor="#dbeafe", color="#1d4ed8"];',
        "  }",
        "  subgraph cluster_s5 {",
        '    label="fix ×forEach";',
        '    style="rounded,filled";',
        '    class="active"; fillcolor="#fde68a"; color="#b45309";',
        '    s6 [label="work", class="active", fillcolor="#fde68a", color="#b45309"];',
        '    s7 [label="finished", peripheries=2];',
        "  }",
        '  s8 [label="done", peripheries=2];',
        '  s9 [label="failed", peripheries=2];',
        "  start -> s2 [lhead=cluster_s0];",
        '  s2 -> s6 [label="done.state"] [ltail=cluster_s0, lhead=cluster_s5];',
        '  s2 -> s3 [label="approve"];',
        '  s2 -> s9 [label="reject"];',
        '  s4 -> s9 [label="skip"];',
        '  s6 -> s8 [label="done.invoke"] [ltail=cluster_s5];',
        '  s6 -> s7 [label="finish"];',
        "}",
    ]


def test_every_active_leaf_is_marked_and_a_childs_states_mark_their_template() -> None:
    marks = graph.marks(PARALLEL, "review.left.reading, review.right", [])
    assert marks.active == {"review", "review.left", "review.left.reading", "review.right"}
    assert marks.visited == marks.active
    children = graph.marks(PARALLEL, "fix, fix[a].work, fix[b].finished", [])
    assert children.active == {"fix", "fix[].work", "fix[].finished"}
    drawn = graph.mermaid(PARALLEL, children).splitlines()
    assert drawn[-2:] == ["    class s0,s1,s2,s4 visited", "    class s5,s6,s7 active"]


def test_a_trail_through_regions_and_children_marks_their_templates() -> None:
    trail = [
        {"from": "review.left.reading", "event": "approve", "to": "review.left.approved"},
        {"from": "review", "event": "done.state", "to": "fix"},
        {"from": "fix[a].work", "event": "finish", "to": "fix[a].finished"},
    ]
    marks = graph.marks(PARALLEL, "fix, fix[b].work", trail)
    assert marks.taken == {
        ("review.left.reading", "approve", "review.left.approved"),
        ("review", "done.state", "fix"),
        ("fix[].work", "finish", "fix[].finished"),
    }
    assert marks.visited - marks.active == {
        "review",
        "review.left",
        "review.left.reading",
        "review.left.approved",
        "review.right",
        "fix[].finished",
    }
