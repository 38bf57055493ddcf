"""Each example of ``examples/`` run as a user runs it: ``kubeturn run FILE --model
scripted:SCRIPT`` in a directory holding a git repository (the examples' ``url: .``),
offline, to its expected end.

Cases:
- ``hello``, run as the README's quickstart (no flags: the script beside the manifest
  answers): one Turn, ``ended`` by its own pick; Succeeded, exit 0; the Agent's file is
  in the Run's worktree of the project (branch ``kubeturn/hello``); the live lines show
  the Turn's phases; ``kubeturn status`` and ``kubeturn turns`` read the result;
- ``exec-tests``: the ``run_tests`` pick is answered at Rest with the command's output
  (``1 passed``), then ``finish`` ends the Turn; Succeeded;
- ``timeout``: the state's ``after`` ends the Turn mid-work, ``aborted`` with no cause,
  its held model call cut; the Run Failed at ``timedOut``, exit 1;
- ``task-with-review``: four Turns, each ``ended`` by its own pick; the Run waits at
  ``humanReview`` until ``kubeturn send task-with-review approve`` moves it; Succeeded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from tests.cli.support import (
    EXAMPLES,
    Background,
    conversations,
    kubeturn,
    last_line,
    status,
    summary_rows,
)


def example(name: str) -> tuple[Path, str]:
    return EXAMPLES / f"{name}.yaml", f"scripted:{EXAMPLES / f'{name}.script.yaml'}"


def test_hello_ends_its_one_turn_with_its_pick(project: Path) -> None:
    manifest, _ = example("hello")
    result = kubeturn("run", manifest, cwd=project)  # the README's quickstart

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == ""
    assert (
        "kubeturn: no model providers given: every Agent answers from the scripted model's "
        f"script {EXAMPLES / 'hello.script.yaml'} (pass --providers FILE for real models)"
    ) in result.stdout.splitlines()
    assert summary_rows(result.stdout) == [("t1", "greeter", "greeting", "ended", "pick")]
    assert last_line(result.stdout, "run hello: ").startswith(
        "run hello: Succeeded in state finished after "
    )
    assert 'output: "greeted"' in result.stdout
    live = result.stdout.splitlines()
    assert "run hello: state greeting, phase Running" in live
    phases = [line.split()[3:5] for line in live if re.match(r"t1 +greeter +greeting +[A-Z]", line)]
    assert phases[0] == ["Pending", "-"]
    assert phases[-1] == ["Settled", "ended"]

    workdir = project / ".kubeturn-work" / "hello"
    worktree = workdir / "target" / "kubeturn-hello"
    assert (worktree / "GREETING.md").read_text() == "Hello from kubeturn!\n"
    assert (worktree / "README.md").read_text() == "# a project\n"  # url: . is the project
    assert f"worktree target: {worktree} (branch kubeturn/hello)" in result.stdout

    shown = kubeturn("status", "hello", cwd=project)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[:4] == [
        "run: hello",
        "phase: Succeeded",
        "state: finished",
        "turns: 1",
    ]
    turns = kubeturn("turns", "hello", "-o", "json", cwd=project)
    (record,) = json.loads(turns.stdout)
    assert (record["name"], record["outcome"], record["cause"]) == ("t1", "ended", "pick")
    assert [s["outcome"] for s in record["submissions"]] == ["ended"]


def test_exec_tests_answers_the_pick_with_the_commands_output(project: Path) -> None:
    manifest, model = example("exec-tests")
    result = kubeturn("run", manifest, "--model", model, cwd=project)

    assert result.returncode == 0, result.stdout + result.stderr
    assert summary_rows(result.stdout) == [("t1", "coder", "coding", "ended", "pick")]
    assert "run exec-tests: state coding.testing, phase Running" in result.stdout.splitlines()
    workdir = project / ".kubeturn-work" / "exec-tests"
    assert (workdir / "target" / "kubeturn-exec-tests" / "VERSION.txt").read_text() == "0.1.0\n"
    (conversation,) = conversations(workdir)
    answers = [
        m["message"]["content"]
        for m in conversation.of("message-appended")
        if m["message"]["role"] == "tool"
    ]
    assert "Your pick `run_tests` was delivered" in answers[1]
    assert '"output": "1 passed"' in answers[1]
    assert conversation.outcomes == ["ended"]


def test_timeout_aborts_the_turn_mid_work(project: Path) -> None:
    manifest, model = example("timeout")
    result = kubeturn("run", manifest, "--model", model, cwd=project)

    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""
    assert summary_rows(result.stdout) == [("t1", "investigator", "investigating", "aborted", "-")]
    assert last_line(result.stdout, "run timeout: ").startswith(
        "run timeout: Failed in state timedOut after "
    )
    assert "message: reached the failed final 'timedOut'" in result.stdout
    workdir = project / ".kubeturn-work" / "timeout"
    (record,) = status(workdir, "timeout")["turns"]
    assert record["settledAt"] - record["startedAt"] >= 2.0
    (conversation,) = conversations(workdir)
    assert conversation.outcomes == ["aborted"]
    # The held answer was cut: no tool call of it ran, no pick reached the workflow.
    assert conversation.of("pick-sent") == []


def test_task_with_review_waits_at_the_gate_until_a_signal_moves_it(
    project: Path, background: Callable[..., Background]
) -> None:
    manifest, model = example("task-with-review")
    running = background("run", manifest, "--model", model, cwd=project)
    running.wait_line(r"^run task-with-review: state humanReview, phase Running$")

    shown = kubeturn("status", "task-with-review", cwd=project)
    assert "state: humanReview" in shown.stdout.splitlines(), shown.stdout + shown.stderr
    sent = kubeturn("send", "task-with-review", "approve", "--id", "approve-1", cwd=project)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "sent approve to run task-with-review (signal approve-1)\n"

    code, output, errors = running.wait()
    assert (code, errors) == (0, ""), output
    assert summary_rows(output) == [
        ("t1", "coder", "implementing", "ended", "pick"),
        ("t2", "reviewer", "reviewing", "ended", "pick"),
        ("t3", "coder", "fixing", "ended", "pick"),
        ("t4", "reviewer", "reviewing", "ended", "pick"),
    ]
    assert 'output: {"rounds": 1, "summary": "added tests"}' in output
    final = status(project / ".kubeturn-work" / "task-with-review", "task-with-review")
    assert (final["phase"], final["processedSignals"], final["turnCount"]) == (
        "Succeeded",
        [{"id": "approve-1", "result": "handled"}],
        4,
    )
    again = kubeturn("send", "task-with-review", "approve", cwd=project)
    assert again.returncode == 1
    assert again.stderr == (
        "kubeturn: the run 'task-with-review' is Succeeded: it takes no more signals\n"
    )
