"""The four examples of ``examples/``, run as a user runs them against a model server on
their machine: ``kubeturn run FILE --providers FILE``, the providers file naming the
examples' provider ``openai`` at llama.cpp's server (through the fault proxy, which
steers the tiny model's picks, one per request).

Cases:
- ``hello``, as README.md's "A model server on your machine" runs it (its providers
  file, with the proxy's address): the greeter writes with a Working tool, then picks
  ``done``: one Turn ``ended`` by its pick; Succeeded; the server received exactly two
  requests; the summary's tokens are the sum of what the server reported;
- ``exec-tests``: ``run_tests`` is answered with the command's output once the Machine
  is back at Rest, then ``finish`` ends the Turn; Succeeded; two requests, the second
  carrying the test command's output;
- ``timeout``: the model's first answer stalls; the state's 2 s timer ends the Turn,
  ``aborted`` with no cause; the Run Failed at ``timedOut``, exit 1; the proxy received
  one request and forwarded none after the Turn ended;
- ``task-with-review``: the coder submits, the reviewer approves (``review_verdict``
  with ``verdict: approve``), the Run waits at ``humanReview`` until ``kubeturn send``
  approves; Succeeded with both Turns ``ended`` by their picks; two requests.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.cli.support import EXAMPLES, Background, kubeturn, status, summary_rows
from tests.provider.conftest import RUN_S, local_run
from tests.provider.faults import FaultProxy, Stall, Steer

README = Path(__file__).parents[2] / "README.md"
README_SERVER = "http://127.0.0.1:8080/v1"


def tool_results(body: dict[str, object]) -> list[str]:
    messages = body["messages"]
    assert isinstance(messages, list)
    return [str(m["content"]) for m in messages if m["role"] == "tool"]


def readme_providers(proxy: FaultProxy, path: Path) -> Path:
    """The providers file README.md shows for a server on your machine, at the proxy."""
    section = README.read_text().split("### A model server on your machine", 1)[1]
    shown = re.search(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert shown is not None, "README.md shows no providers file for a local server"
    assert README_SERVER in shown.group(1)
    path.write_text(shown.group(1).replace(README_SERVER, proxy.url))
    return path


async def test_hello(proxy: FaultProxy, project: Path, tmp_path: Path) -> None:
    proxy.steer(Steer("write"), Steer("done"))
    providers = readme_providers(proxy, tmp_path / "providers.yaml")
    code, output = await local_run(EXAMPLES / "hello.yaml", providers, project)
    assert code == 0, output
    reported = [e.usage for e in proxy.exchanges if e.usage]
    prompt = sum(u["prompt_tokens"] for u in reported)
    completion = sum(u["completion_tokens"] for u in reported)
    (row,) = [line.split() for line in output.splitlines() if line.startswith("t1 ")][-1:]
    assert row[:6] == ["t1", "greeter", "greeting", "ended", "pick", f"{prompt}/{completion}"]
    assert "run hello: Succeeded in state finished after " in output
    assert 'output: "greeted"' in output
    assert [e.status for e in proxy.exchanges] == [200, 200]
    assert [s["model"] for s in proxy.sent] == ["gpt-4.1", "gpt-4.1"]
    worktree = project / ".kubeturn-work" / "hello" / "target" / "kubeturn-hello"
    assert (worktree / "hello").read_text() == "hello"


async def test_exec_tests(proxy: FaultProxy, providers: Path, project: Path) -> None:
    proxy.steer(Steer("run_tests"), Steer("finish"))
    code, output = await local_run(EXAMPLES / "exec-tests.yaml", providers, project)
    assert code == 0, output
    assert summary_rows(output) == [("t1", "coder", "coding", "ended", "pick")]
    assert "run exec-tests: Succeeded in state done after " in output
    assert len(proxy.exchanges) == 2
    (answer,) = tool_results(proxy.sent[1])
    assert "Your pick `run_tests` was delivered" in answer
    assert "1 failed (VERSION.txt is missing or empty)" in answer


async def test_timeout(proxy: FaultProxy, providers: Path, project: Path) -> None:
    proxy.queue(Stall())
    code, output = await local_run(EXAMPLES / "timeout.yaml", providers, project)
    assert code == 1, output
    assert summary_rows(output) == [("t1", "investigator", "investigating", "aborted", "-")]
    assert "run timeout: Failed in state timedOut after " in output
    assert "message: reached the failed final 'timedOut'" in output
    (exchange,) = proxy.exchanges
    assert exchange.forwarded is None
    assert exchange.events == []


async def test_task_with_review(
    proxy: FaultProxy, providers: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBETURN_DEFAULT_MODEL", "openai/gpt-4.1")  # its Agents name none
    proxy.steer(Steer("submit"), Steer("review_verdict", "approve"))
    manifest = EXAMPLES / "task-with-review.yaml"
    running = Background.start("run", manifest, "--providers", providers, cwd=project)
    try:
        await asyncio.to_thread(
            running.wait_line,
            r"^run task-with-review: state humanReview, phase Running$",
            timeout=RUN_S,
        )
        sent = await asyncio.to_thread(
            kubeturn, "send", "task-with-review", "approve", "--id", "approve-1", cwd=project
        )
        assert sent.returncode == 0, sent.stderr
        code, output, errors = await asyncio.to_thread(running.wait, timeout=RUN_S)
    finally:
        running.stop()
    assert (code, errors) == (0, ""), output
    assert summary_rows(output) == [
        ("t1", "coder", "implementing", "ended", "pick"),
        ("t2", "reviewer", "reviewing", "ended", "pick"),
    ]
    assert 'output: {"rounds": 0, "summary": "hello"}' in output
    final = status(project / ".kubeturn-work" / "task-with-review", "task-with-review")
    assert final["phase"] == "Succeeded"
    assert len(proxy.exchanges) == 2
    calls = [json.dumps(e.events) for e in proxy.exchanges]
    assert '"name": "submit"' in calls[0]
    assert '"name": "review_verdict"' in calls[1]
