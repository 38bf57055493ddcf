"""A ``kubeturn run`` that is interrupted: killed, and continued with ``--resume``; or
stopped with Ctrl-C, which cancels the Run.

Cases:
- SIGKILL mid-Turn (its model call held), then ``kubeturn run --resume NAME``: the killed
  run's Harness went with it (its held call cut); the resumed run follows the Turn's
  Submission, which the restarted Harness settled ``failed`` (``harness_restarted``); the
  Machine hears the Agent's fault and retries in a new Turn, which ends the Run
  Succeeded; the cut Turn is recorded ``failed`` (ADR 0015). No Turn is admitted twice
  (one admission per key at the Harness), and the history holds each Turn once;
- SIGINT with two live Turns (their model calls held): CANCEL sweeps both before
  kubeturn exits 130; both are recorded ``aborted`` with no cause, the Run is Cancelled,
  the Harness's conversations show each Submission settled ``aborted``, and both model
  calls were cut;
- ``kubeturn cancel NAME`` from another terminal: the running ``kubeturn run`` sends
  CANCEL, both Turns are ``aborted``, the Run is Cancelled, exit 1;
- the killed run's ``status`` says no ``kubeturn run`` drives it; a ``kubeturn send`` of
  an event it does not accept is refused, naming what it accepts, and nothing is
  delivered on ``--resume`` (a queued signal's delivery: ``test_signals.py``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cli.support import (
    MACHINES,
    Background,
    ScriptedModel,
    conversations,
    kubeturn,
    status,
    summary_rows,
    wait_status,
)


def held(match: str, count: int = 1) -> Callable[[list[dict[str, Any]]], bool]:
    def check(requests: list[dict[str, Any]]) -> bool:
        return len([r for r in requests if r["conversation"] == match and r["held"]]) >= count

    return check


def all_closed(requests: list[dict[str, Any]]) -> bool:
    return bool(requests) and all(r["closedAt"] is not None for r in requests)


def test_resume_after_a_kill_mid_turn_admits_nothing_twice(
    project: Path,
    tmp_path: Path,
    background: Callable[..., Background],
    scripted_model: Callable[[str], ScriptedModel],
) -> None:
    model = scripted_model(
        """
conversations:
  - match: "(attempt 1)"
    steps: [{text: "Working.", hold: true}]
  - match: "(attempt 2)"
    steps: [{toolCalls: [{name: done}]}]
"""
    )
    providers = model.providers(tmp_path / "providers.yaml", "openai")
    workdir = project / ".kubeturn-work" / "retry"
    running = background("run", MACHINES / "retry.yaml", "--providers", providers, cwd=project)
    model.wait_for(held("(attempt 1)"), "the first Turn's model call, held")
    wait_status(
        workdir,
        "retry",
        lambda s: any(t["submissions"] for t in s["snapshot"]["turns"]),
        "the first Turn's admission in the snapshot",
    )

    running.signal(signal.SIGKILL)
    code, _, _ = running.wait()
    assert code == -signal.SIGKILL
    # The Harness ended with its parent: its model call was cut.
    model.wait_for(all_closed, "the killed run's model call to be cut")
    shown = kubeturn("status", "retry", cwd=project)
    assert shown.stdout.splitlines()[1:3] == [
        "phase: Stopped (saved Running; no `kubeturn run` drives it: `kubeturn run --resume "
        "retry` continues it)",
        "state: working",
    ], shown.stdout
    refused = kubeturn("send", "retry", "ping", "--id", "ping-1", cwd=project)
    assert refused.stderr == (
        "kubeturn: not sent to run retry: no active state accepts ping; the Run accepts now: "
        "done (working)\n"
    )

    resumed = kubeturn("run", "--resume", "retry", cwd=project)

    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert summary_rows(resumed.stdout) == [
        ("t1", "coder", "working", "failed", "-"),
        ("t2", "coder", "retrying", "ended", "pick"),
    ]
    # The Turn's message: its failed Submission's (the Turn failed).
    assert "the Harness restarted while this Submission ran" in resumed.stdout
    final = status(workdir, "retry")
    assert (final["phase"], final["processedSignals"]) == ("Succeeded", [])
    assert [r["name"] for r in final["turns"]] == ["t1", "t2"]
    assert final["turnCount"] == 2
    first, second = final["turns"]
    assert [(s["outcome"], s["message"]) for s in first["submissions"]] == [
        ("failed", "the Harness restarted while this Submission ran")
    ]
    recorded = {c.instance_id: c for c in conversations(workdir)}
    assert recorded[first["instanceId"]].admission_keys == ["t1.1"]
    assert recorded[first["instanceId"]].outcomes == ["failed"]
    assert recorded[second["instanceId"]].admission_keys == ["t2.1"]
    assert recorded[second["instanceId"]].outcomes == ["ended"]
    assert len(recorded) == 2
    # The first attempt's call was made once (the killed run's); nothing re-sent it.
    assert [r["conversation"] for r in model.requests()] == ["(attempt 1)", "(attempt 2)"]


def test_ctrl_c_sweeps_and_settles_every_live_turn_before_exit(
    project: Path,
    tmp_path: Path,
    background: Callable[..., Background],
    scripted_model: Callable[[str], ScriptedModel],
) -> None:
    model = scripted_model(
        """
conversations:
  - match: "Write the change"
    steps: [{text: "Writing.", hold: true}]
  - match: "Watch the coder"
    steps: [{text: "Watching.", hold: true}]
"""
    )
    providers = model.providers(tmp_path / "providers.yaml", "openai")
    running = background("run", MACHINES / "pair.yaml", "--providers", providers, cwd=project)
    model.wait_for(held("Write the change"), "the coder's model call, held")
    model.wait_for(held("Watch the coder"), "the reviewer's model call, held")

    running.signal(signal.SIGINT)
    code, output, errors = running.wait()

    assert (code, errors) == (130, ""), output
    assert "kubeturn: interrupted: cancelling the Run and settling its Turns" in output
    assert sorted(summary_rows(output)) == [
        ("t1", "coder", "pairing", "aborted", "-"),
        ("t2", "reviewer", "pairing.watching", "aborted", "-"),
    ]
    assert "run pair: Cancelled in state pairing.watching after " in output
    workdir = project / ".kubeturn-work" / "pair"
    final = status(workdir, "pair")
    assert (final["phase"], final["liveTurns"], final["turnCount"]) == ("Cancelled", 0, 2)
    recorded = conversations(workdir)
    assert sorted(c.agent for c in recorded) == ["coder", "reviewer"]
    for conversation in recorded:
        assert conversation.outcomes == ["aborted"], conversation.agent
    requests = model.requests()
    assert all(r["disconnected"] and not r["released"] for r in requests), requests


def test_kubeturn_cancel_cancels_a_running_run(
    project: Path,
    tmp_path: Path,
    background: Callable[..., Background],
    scripted_model: Callable[[str], ScriptedModel],
) -> None:
    model = scripted_model(
        """
conversations:
  - match: ""
    steps: [{text: "Working.", hold: true}]
"""
    )
    providers = model.providers(tmp_path / "providers.yaml", "openai")
    running = background("run", MACHINES / "pair.yaml", "--providers", providers, cwd=project)
    model.wait_for(held("", 2), "both model calls, held")

    asked = kubeturn("cancel", "pair", cwd=project)
    assert asked.stdout == "cancel requested for run pair\n", asked.stderr
    code, output, errors = running.wait()

    assert (code, errors) == (1, ""), output
    assert sorted(summary_rows(output)) == [
        ("t1", "coder", "pairing", "aborted", "-"),
        ("t2", "reviewer", "pairing.watching", "aborted", "-"),
    ]
    final = status(project / ".kubeturn-work" / "pair", "pair")
    assert (final["phase"], final["cancelProcessed"]) == ("Cancelled", True)
