"""What the console shows of a Run object, read from its status as any operator wrote it.

Cases:
- a Run not started (no status) is Pending, with no state, no Turns and no marks;
- the Turns are the settled records, then the live Turns of the snapshot, with their
  numbers, tokens summed over their Submissions and durations up to now;
- a cost shows beside tokens only where the usage has one: a live Turn's sums its
  Submissions' only when each is priced; an unpriced model shows tokens alone, never a
  cost of 0 or a dash; a cost that is not a number shows nothing; a Run's usage shows in
  all and per Agent slot, none before any Turn used tokens;
- durations and ages read as kubectl's (42s, 3m5s, 2h4m, 3d5h); a time that is not one
  shows nothing;
- a spec that does not load shows why instead of a diagram; the trail's marks are drawn;
- accepted events and received signals read with their defaults;
- a status whose state names several active leaves marks each, and its fan-out children
  (``status.children``) are listed, their states marked on the child Machine's template.
"""

from __future__ import annotations

from typing import Any

from kubeturn.console import views

SPEC = {
    "agents": {},
    "machine": {
        "initial": "waiting",
        "states": {"waiting": {"on": {"go": "done"}}, "done": {"type": "final"}},
    },
}


def run(status: dict[str, Any] | None) -> dict[str, Any]:
    made = {"metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": SPEC}
    return made if status is None else {**made, "status": status}


def test_a_run_not_started_is_pending_with_nothing_to_show() -> None:
    row = views.run_row(run(None), now=1767225600.0 + 42)
    assert row == views.RunRow("r", "default", "Pending", "", 0, "", "", "42s")
    assert views.run_usage(run(None)) is None
    assert views.turn_rows(run(None), 0.0) == []
    drawn = views.diagram(run(None), views.Charts()).mermaid
    assert drawn is not None
    assert [line for line in drawn.splitlines() if line.startswith("    class ")] == []


def test_turns_are_the_settled_then_the_live() -> None:
    status = {
        "turnCount": 1,
        "turns": [
            {
                "name": "t1",
                "agent": "a",
                "state": "waiting",
                "outcome": "ended",
                "cause": "pick",
                "startedAt": 0.0,
                "settledAt": 185.0,
            }
        ],
        "snapshot": {
            "turns": [
                {
                    "id": "t2",
                    "agent": "a",
                    "state": "waiting",
                    "phase": "live",
                    "startedAt": 200.0,
                    "submissions": [
                        {"usage": {"promptTokens": 10, "completionTokens": 2}},
                        {"usage": {"promptTokens": 5, "completionTokens": 1}},
                    ],
                }
            ]
        },
    }
    assert views.turn_rows(run(status), now=7640.0) == [
        views.TurnRow("t1", 1, "a", "waiting", "ended", "pick", "", "", "3m5s", False),
        views.TurnRow("t2", 2, "a", "waiting", "live", "", "15 in / 3 out", "", "2h4m", True),
    ]
    assert views.run_row(run(status), 0.0).turns == 2


def usage(prompt: int, completion: int, cost: str | None = None) -> dict[str, Any]:
    used: dict[str, Any] = {"promptTokens": prompt, "completionTokens": completion}
    return used if cost is None else {**used, "cost": cost}


def live(*submissions: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": "t2",
        "agent": "a",
        "state": "waiting",
        "startedAt": 0.0,
        "submissions": [{} if used is None else {"usage": used} for used in submissions],
    }


def test_a_cost_shows_beside_tokens_only_where_priced() -> None:
    settled = [
        {"name": "t1", "tokens": usage(1200, 300, "0.0048")},
        {"name": "t3", "tokens": usage(10, 2)},  # a model with no price
        {"name": "t4", "tokens": usage(10, 2, "0.00000001")},
        {"name": "t5", "tokens": usage(10, 2, "a lot")},  # not written by kubeturn
    ]
    turns = {"turns": settled}
    shown = [(t.name, t.tokens, t.cost) for t in views.turn_rows(run(turns), 0.0)]
    assert shown == [
        ("t1", "1200 in / 300 out", "$0.0048"),
        ("t3", "10 in / 2 out", ""),
        ("t4", "10 in / 2 out", "<$0.0001"),
        ("t5", "10 in / 2 out", ""),
    ]
    # A live Turn: its settled Submissions' costs summed; one running has no usage yet.
    priced = {"snapshot": {"turns": [live(usage(10, 2, "0.001"), usage(5, 1, "0.0005"), None)]}}
    (row,) = views.turn_rows(run(priced), 0.0)
    assert (row.tokens, row.cost) == ("15 in / 3 out", "$0.0015")
    # One Submission of an unpriced model: no cost, rather than part of it.
    partly = {"snapshot": {"turns": [live(usage(10, 2, "0.001"), usage(5, 1))]}}
    (row,) = views.turn_rows(run(partly), 0.0)
    assert (row.tokens, row.cost) == ("15 in / 3 out", "")


def test_a_runs_usage_in_all_and_per_agent() -> None:
    status = {
        "usage": {
            "tokens": 1520,
            "total": usage(1300, 220),
            "agents": {"reviewer": usage(300, 20, "0.002"), "coder": usage(1000, 200)},
        }
    }
    assert views.run_usage(run(status)) == views.RunUsage(
        total=views.Used("1300 in / 220 out", ""),
        agents=[
            ("coder", views.Used("1000 in / 200 out", "")),
            ("reviewer", views.Used("300 in / 20 out", "$0.0020")),
        ],
    )
    row = views.run_row(run(status), 0.0)
    assert (row.tokens, row.cost) == ("1300 in / 220 out", "")
    priced = {"usage": {"total": usage(3, 1, "12.34567"), "agents": "not a map"}}
    assert views.run_usage(run(priced)) == views.RunUsage(
        views.Used("3 in / 1 out", "$12.3457"), []
    )
    assert views.run_usage(run({"usage": {"total": usage(0, 0)}})) is None


def test_spans_and_ages_read_as_kubectls() -> None:
    assert [views.span(s) for s in (42, 185, 7440, 277200)] == ["42s", "3m5s", "2h4m", "3d5h"]
    assert views.age("not a time", 0.0) == ""
    assert views.age(None, 0.0) == ""
    assert views.duration(None, 3.0) == ""


def test_a_spec_that_does_not_load_says_why_and_a_trail_is_marked() -> None:
    broken = {**run(None), "spec": {"agents": {}, "machine": {"initial": "nowhere"}}}
    drawn = views.diagram(broken, views.Charts())
    assert drawn.mermaid is None
    assert drawn.problem == "spec.machine.states: is required; add it"
    trail = [{"from": "waiting", "event": "go", "to": "done", "at": 1.0}]
    ended = run({"phase": "Succeeded", "state": "done", "trail": trail, "droppedTrail": 3})
    marked = views.diagram(ended, views.Charts())
    assert marked.mermaid is not None
    assert marked.mermaid.endswith("    class s0 visited\n    class s1 active\n")
    assert "s0 --> s1 : go ✓" in marked.mermaid


def test_accepted_and_received_signals_read_with_their_defaults() -> None:
    status = {
        "acceptedEvents": [{"event": "go", "state": "waiting"}, "not an object"],
        "processedSignals": [{"id": "s1"}, {"id": "s2", "result": "ignored", "message": "no"}],
    }
    assert views.accepted(run(status)) == [{"event": "go", "state": "waiting", "description": ""}]
    assert views.processed(run(status)) == [
        {"id": "s1", "result": "handled", "message": ""},
        {"id": "s2", "result": "ignored", "message": "no"},
    ]


PARALLEL_SPEC = {
    "agents": {},
    "input": {"items": ["a", "b"]},
    "machine": {
        "initial": "review",
        "states": {
            "review": {
                "type": "parallel",
                "onDone": "fix",
                "states": {
                    "left": {"on": {"ok": "done"}},
                    "right": {"on": {"ok": "done"}},
                },
            },
            "fix": {
                "invoke": {
                    "forEach": {
                        "items": "input.items",
                        "machine": {
                            "initial": "work",
                            "states": {
                                "work": {"on": {"finish": "finished"}},
                                "finished": {"type": "final"},
                            },
                        },
                    },
                    "onDone": "done",
                },
            },
            "done": {"type": "final"},
        },
    },
}


def test_every_active_state_is_marked_and_fan_out_children_are_listed() -> None:
    regions = {**run({"phase": "Running", "state": "review.left, review.right"})}
    drawn = views.diagram({**regions, "spec": PARALLEL_SPEC}, views.Charts()).mermaid
    assert drawn is not None
    assert drawn.splitlines()[-1] == "    class s0,s1,s2 active"
    children = [
        {"fanOut": "fix", "key": "a", "status": "succeeded"},
        {"fanOut": "fix", "key": "b", "status": "running", "state": "fix[b].work"},
        "not a child",
    ]
    fanning = {**run({"phase": "Running", "state": "fix", "children": children})}
    fanning["spec"] = PARALLEL_SPEC
    assert views.children(fanning) == [
        views.ChildRow("fix", "a", "succeeded", "", ""),
        views.ChildRow("fix", "b", "running", "fix[b].work", ""),
    ]
    drawn = views.diagram(fanning, views.Charts()).mermaid
    assert drawn is not None
    assert drawn.splitlines()[-2:] == ["    class s0,s1,s2 visited", "    class s3,s4 active"]
    assert views.children(run(None)) == []
