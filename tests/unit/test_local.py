"""The local runner's pure parts (``kubeturn.local``); its files are
``tests/cli/test_local_files.py``'s.

Cases:
- ``view``: durations, the history table in start order with tokens and the message of a
  failed Submission, the AgentTurn phase of each Turn phase, status lines;
- ``repos``: remote URLs are kept, paths made absolute from the base; ``--repo`` adds or
  replaces slots; a default ``ref`` is not "written";
- a Harness refusal becomes one line quoting its message and field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api.workspace import Repo
from kubeturn.local import repos, view
from kubeturn.local.turns import _one_line
from kubeturn.orchestrator.turns import Turn, TurnPhase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.04, "0.0s"), (2.5, "2.5s"), (42, "42s"), (185, "3m05s"), (7322, "2h02m")],
)
def test_durations(seconds: float, shown: str) -> None:
    assert view.duration(seconds) == shown


def record(name: str, started: float, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "agent": "coder",
        "state": "s",
        "outcome": "ended",
        "cause": "pick",
        "submissions": [],
        "startedAt": started,
        "settledAt": started + 1.5,
        **fields,
    }


def test_the_history_table_is_in_start_order_with_why() -> None:
    failed = {"id": "s1", "outcome": "failed", "message": "the Harness restarted"}
    lines = view.history_table(
        [
            record("t10", 5.0, tokens={"promptTokens": 9, "completionTokens": 2, "cost": "0.0125"}),
            record("t2", 1.0, outcome="aborted", cause=None, submissions=[failed]),
        ]
    )
    assert lines == [
        "TURN  AGENT  STATE  OUTCOME  CAUSE  TOKENS  COST     DURATION  MESSAGE",
        "t2    coder  s      aborted  -      -       -        1.5s      "
        "failed: the Harness restarted",
        "t10   coder  s      ended    pick   9/2     $0.0125  1.5s      -",
    ]


def test_turn_phases_read_as_agentturn_phases() -> None:
    def turn(**fields: Any) -> Turn:
        base = {"id": "t1", "agent": "a", "state": "s", "invocation": "s#1", "continue": False}
        return Turn.model_validate(
            {**base, "instanceId": "i", "prompt": "p", "cwd": "/w", "startedAt": 0, **fields}
        )

    running = [{"id": "s1", "admittedAt": 0}]
    done = [{"id": "s1", "admittedAt": 0, "outcome": "completed"}]
    assert view.phase_of(turn(admitting=True)) == "Pending"
    assert view.phase_of(turn(phase=TurnPhase.LIVE, submissions=running)) == "Running"
    assert view.phase_of(turn(phase=TurnPhase.LIVE, submissions=done)) == "Idle"
    assert view.phase_of(turn(phase=TurnPhase.SWEEPING, submissions=running)) == "Settling"


def test_status_lines() -> None:
    status = {"phase": "Failed", "state": "", "turnCount": 2, "message": "m", "output": {"a": 1}}
    assert view.status_lines("r", status) == [
        "run: r",
        "phase: Failed",
        "state: -",
        "turns: 2",
        "message: m",
        'output: {"a": 1}',
    ]
    running = {
        "phase": "Running",
        "state": "fix",
        "turnCount": 1,
        "liveTurns": 2,
        "childProgress": "1 succeeded, 2 running, 2 pending",
    }
    assert view.status_lines("r", running) == [
        "run: r",
        "phase: Running",
        "state: fix",
        "turns: 1",
        "live turns: 2",
        "children: 1 succeeded, 2 running, 2 pending",
    ]


def test_repo_slots_resolve_paths_and_keep_urls() -> None:
    base = Path("/nonexistent/kubeturn/project")  # a path only: nothing is made there
    manifest = {
        "target": Repo(url="."),
        "docs": Repo(url="git@example.com:team/docs.git", ref="v2"),
    }
    found = repos.slots(manifest, {"extra": "../other"}, base)
    assert found["target"] == repos.Slot("target", str(base), "main", False)
    assert found["docs"] == repos.Slot("docs", "git@example.com:team/docs.git", "v2", True)
    assert found["extra"].url == str(base.parent / "other")
    assert repos.slots(manifest, {"target": "https://x/y.git"}, base)["target"].url == (
        "https://x/y.git"
    )


def test_a_harness_refusal_is_one_line() -> None:
    body = json.dumps({"error": "invalid", "field": "model", "message": "unknown provider 'x'"})
    said = _one_line(f"the Harness refused the admission (HTTP 400): {body}")
    assert said == (
        "the Harness refused the admission (HTTP 400): unknown provider 'x' (field model)"
    )
    assert _one_line("could not\n be reached") == "could not be reached"
