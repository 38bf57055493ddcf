"""The local runner's pure parts and its files (``kubeturn.local``), without processes.

Cases:
- ``Inbox``: signals appended line by line are read once each, a torn last line waits for
  its end, a line that is not a signal is reported (once) and skipped, and ``cancel`` is
  seen once its file exists;
- ``write_atomic`` replaces the file and leaves no temporary behind;
- ``Workdir.check_fresh``: an absent or empty workdir is fresh; a used one is refused,
  pointing at ``--resume`` when it holds the same run;
- ``view``: durations, the history table in start order with tokens and the message of a
  failed Submission, the AgentTurn phase of each Turn phase, status lines;
- ``repos``: remote URLs are kept, paths made absolute from the base; ``--repo`` adds or
  replaces slots; a default ``ref`` is not "written";
- a Harness refusal becomes one line quoting its message and field;
- with ``--model scripted:``, every provider the Run names is routed to the scripted
  model; with ``--providers``, a missing provider is refused naming the manifest path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api.workspace import Repo
from kubeturn.errors import CommandError
from kubeturn.local import repos, runner, view
from kubeturn.local.turns import _one_line
from kubeturn.local.workdir import Inbox, Workdir, write_atomic
from kubeturn.machine.load import load_run_yaml
from kubeturn.orchestrator.turns import Turn, TurnPhase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_inbox_reads_each_signal_once(tmp_path: Path) -> None:
    files = Workdir.at(tmp_path).run("r")
    files.directory.mkdir(parents=True)
    inbox = Inbox(files)
    assert inbox.signals() == []
    files.append_signal({"id": "a", "event": "approve", "data": {}})
    with open(files.signals, "a") as handle:
        handle.write('not json\n{"id": "b", "event": "rej')
    assert inbox.signals() == [{"id": "a", "event": "approve", "data": {}}]
    assert inbox.problems == [
        f"{files.signals}: ignored a line that is not a signal {{id, event, data}}: not json"
    ]
    with open(files.signals, "a") as handle:
        handle.write('ect", "data": {"notes": "x"}}\n')
    assert inbox.signals() == [{"id": "b", "event": "reject", "data": {"notes": "x"}}]
    assert inbox.signals() == []
    assert len(inbox.problems) == 1
    assert not inbox.cancelled()
    files.request_cancel()
    assert inbox.cancelled()


def test_write_atomic_replaces_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "snapshot.json"
    write_atomic(target, "one\n")
    write_atomic(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]


def test_a_used_workdir_is_not_fresh(tmp_path: Path) -> None:
    workdir = Workdir.at(tmp_path / "w")
    workdir.check_fresh("r")
    workdir.root.mkdir()
    workdir.check_fresh("r")
    (workdir.root / "x").write_text("")
    with pytest.raises(CommandError, match="is not empty; a new run needs an empty one"):
        workdir.check_fresh("r")
    files = workdir.run("r")
    files.directory.mkdir(parents=True)
    files.snapshot.write_text("{}")
    with pytest.raises(CommandError, match=r"continue it with `kubeturn run --resume r`"):
        workdir.check_fresh("r")


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
            record("t10", 5.0, tokens={"promptTokens": 9, "completionTokens": 2}),
            record("t2", 1.0, outcome="aborted", cause=None, submissions=[failed]),
        ]
    )
    assert lines == [
        "TURN  AGENT  STATE  OUTCOME  CAUSE  TOKENS  DURATION  MESSAGE",
        "t2    coder  s      aborted  -      -       1.5s      failed: the Harness restarted",
        "t10   coder  s      ended    pick   9/2     1.5s      -",
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


def test_repo_slots_resolve_paths_and_keep_urls(tmp_path: Path) -> None:
    manifest = {
        "target": Repo(url="."),
        "docs": Repo(url="git@example.com:team/docs.git", ref="v2"),
    }
    found = repos.slots(manifest, {"extra": "../other"}, tmp_path)
    assert found["target"] == repos.Slot("target", str(tmp_path), "main", False)
    assert found["docs"] == repos.Slot("docs", "git@example.com:team/docs.git", "v2", True)
    assert found["extra"].url == str(tmp_path.parent / "other")
    assert repos.slots(manifest, {"target": "https://x/y.git"}, tmp_path)["target"].url == (
        "https://x/y.git"
    )


def test_a_harness_refusal_is_one_line() -> None:
    body = json.dumps({"error": "invalid", "field": "model", "message": "unknown provider 'x'"})
    said = _one_line(f"the Harness refused the admission (HTTP 400): {body}")
    assert said == (
        "the Harness refused the admission (HTTP 400): unknown provider 'x' (field model)"
    )
    assert _one_line("could not\n be reached") == "could not be reached"


def test_providers_for_the_scripted_model_and_a_missing_provider(tmp_path: Path) -> None:
    loaded = load_run_yaml((EXAMPLES / "task-with-review.yaml").read_text())
    routed = runner._scripted_providers(loaded, "http://127.0.0.1:1/v1")
    assert routed == "scripted:\n  baseUrl: http://127.0.0.1:1/v1\n  type: openai\n"
    hello = load_run_yaml((EXAMPLES / "hello.yaml").read_text())
    assert "openai:" in runner._scripted_providers(hello, "u")
    providers = tmp_path / "providers.yaml"
    providers.write_text("local: {baseUrl: 'http://127.0.0.1:1/v1'}\n")
    with pytest.raises(CommandError) as refused:
        runner._check_models(hello, providers, None)
    assert str(refused.value).startswith(
        "spec.agents.greeter.model: unknown model provider 'openai' in 'openai/gpt-4.1'"
    )
    with pytest.raises(CommandError, match="no model, and no default model"):
        runner._check_models(loaded, providers, None)
