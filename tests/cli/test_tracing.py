"""OpenTelemetry traces of ``kubeturn run`` (ADR 0107), received by a real OTLP/HTTP
receiver on 127.0.0.1 that decodes the exporters' protobuf.

Cases:
- ``task-with-review`` on the scripted model, with ``OTEL_EXPORTER_OTLP_ENDPOINT`` set,
  stopped (SIGTERM) while it waits at ``humanReview`` and resumed, then approved: the
  exact span tree of its one trace (the trace id is the Run's uid), its Turns' spans
  written by the first process and the Run's by the second: the Run span; one
  ``invoke_agent`` span per Turn, with its state, agent, outcome and cause, and the sweep
  as its event; below each, written by the Harness process, one ``chat`` span per model
  request and one ``execute_tool`` span per tool call, in the GenAI conventions' words;
- ``hello`` with no endpoint set (other ``OTEL_*`` variables set): nothing reaches the
  receiver;
- the processes' tracing with no endpoint imports no SDK module and starts no exporter
  thread; with one, the exporter's thread runs (so the first check can see one).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import EXAMPLES, environment, kubeturn, summary_rows
from tests.otlp import OtlpReceiver, Span

pytestmark = pytest.mark.usefixtures("no_otel_environment")

SPAN_KIND_CLIENT = 3  # Span.SpanKind.SPAN_KIND_CLIENT
Tree = tuple[Any, ...]


@pytest.fixture
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' own ``OTEL_*`` variables only."""
    for name in list(environment()):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def traced(monkeypatch: pytest.MonkeyPatch, receiver: OtlpReceiver) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # milliseconds
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")


def tree(spans: list[Span], parent: str) -> list[Tree]:
    """The spans below ``parent`` in start order, each with what the test checks of it."""
    children = sorted((s for s in spans if s.parent_id == parent), key=lambda s: s.start_ns)
    return [(*summary(span), tree(spans, span.span_id)) for span in children]


def summary(span: Span) -> tuple[Any, ...]:
    a = span.attributes
    if span.name == "run":
        return (span.service, span.name, a["kubeturn.run"], a["kubeturn.phase"])
    if span.name.startswith("invoke_agent "):
        (sweep,) = span.events
        return (
            span.service,
            span.name,
            a["kubeturn.turn"],
            a["kubeturn.state"],
            a["kubeturn.agent"],
            a["kubeturn.outcome"],
            a.get("kubeturn.cause"),
            (sweep[0], sweep[1].get("kubeturn.cause")),
        )
    if span.name.startswith("chat "):
        return (
            span.service,
            span.name,
            a["gen_ai.operation.name"],
            a["gen_ai.provider.name"],
            a["gen_ai.request.model"],
            tuple(a["gen_ai.response.finish_reasons"]),
        )
    return (
        span.service,
        span.name,
        a["gen_ai.operation.name"],
        a["gen_ai.tool.name"],
        a["kubeturn.pick"],
    )


def test_task_with_review_is_one_trace_of_its_turns_model_requests_and_tool_calls(
    project: Path, background: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        traced(monkeypatch, receiver)
        manifest = EXAMPLES / "task-with-review.yaml"
        model = f"scripted:{EXAMPLES / 'task-with-review.script.yaml'}"
        running = background("run", manifest, "--model", model, cwd=project)
        running.wait_line(r"^run task-with-review: state humanReview, phase Running$")

        def turns_written(spans: list[Span]) -> bool:
            return len([s for s in spans if s.name.startswith("invoke_agent ")]) == 4

        # The first process writes the four Turns' spans as they are recorded; stopped
        # (SIGTERM) mid-Run, waiting for a person, it is resumed, and the resumed process
        # writes the Run's span.
        receiver.wait_for(turns_written, "span of each of the four Turns")
        running.signal(signal.SIGTERM)
        code, output, errors = running.wait()
        assert (code, errors) == (143, ""), output
        assert not [s for s in receiver.received() if s.name == "run"]
        resumed = background("run", "--resume", "task-with-review", cwd=project)
        resumed.wait_line(r"^run task-with-review: state humanReview, phase Running$")
        sent = kubeturn("send", "task-with-review", "approve", cwd=project)
        assert sent.returncode == 0, sent.stderr
        code, output, errors = resumed.wait()
        assert (code, errors) == (0, ""), output
        assert len(summary_rows(output)) == 4
        spans = receiver.received()

    uid = json.loads(
        (project / ".kubeturn-work/task-with-review/.kubeturn/runs/task-with-review")
        .joinpath("options.json")
        .read_text()
    )["uid"]
    assert {span.trace_id for span in spans} == {uid.replace("-", "")}
    ids = [span.span_id for span in spans]
    assert len(ids) == len(set(ids))
    assert all(span.parent_id in {"", *ids} for span in spans)  # no span left dangling
    assert {span.resource["deployment.environment.name"] for span in spans} == {"test"}
    assert {span.kind for span in spans if span.name.startswith("chat ")} == {SPAN_KIND_CLIENT}
    assert all(span.error is None for span in spans)

    operator, harness = "kubeturn", "kubeturn-harness"
    chat = (harness, "chat scripted", "chat", "openai", "scripted", ("tool_calls",), [])

    def tool(name: str, pick: bool) -> Tree:
        return (harness, f"execute_tool {name}", "execute_tool", name, pick, [])

    def turn(number: int, state: str, agent: str, children: list[Tree]) -> Tree:
        swept = ("kubeturn.sweep", "pick")
        return (operator, f"invoke_agent {agent}", f"t{number}", state, agent, "ended", "pick",
                swept, children)  # fmt: skip

    assert tree(spans, "") == [
        (operator, "run", "task-with-review", "Succeeded", [
            turn(1, "implementing", "coder",
                 [chat, tool("write", False), chat, tool("submit", True)]),
            turn(2, "reviewing", "reviewer",
                 [chat, tool("read", False), chat, tool("review_verdict", True)]),
            turn(3, "fixing", "coder",
                 [chat, tool("write", False), chat, tool("submit", True)]),
            turn(4, "reviewing", "reviewer", [chat, tool("review_verdict", True)]),
        ]),
    ]  # fmt: skip

    by_name = {span.attributes.get("kubeturn.turn"): span for span in spans}
    first = by_name["t1"]
    assert first.attributes["kubeturn.instance_id"] == "default.task-with-review/root/coder"
    assert first.attributes["kubeturn.submissions"] == 1
    chats = [s for s in spans if s.parent_id == first.span_id and s.name.startswith("chat ")]
    assert all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in chats)
    assert first.attributes["kubeturn.tokens.input"] == sum(
        s.attributes["gen_ai.usage.input_tokens"] for s in chats
    )
    assert first.attributes["kubeturn.tokens.output"] == sum(
        s.attributes["gen_ai.usage.output_tokens"] for s in chats
    )
    calls = [s for s in spans if s.parent_id == first.span_id and s.name.startswith("execute_")]
    assert [s.attributes["gen_ai.tool.call.id"] for s in calls] == ["call_0_0", "call_1_0"]
    (sweep,) = first.events
    submission = sweep[1]["kubeturn.submission"]
    assert {s.attributes["kubeturn.submission"] for s in chats + calls} == {submission}
    (run,) = (span for span in spans if span.name == "run")
    assert run.start_ns < first.start_ns  # the Run's start, kept across the restart
    # The Turn span is written when it settles, with its real start: before its children.
    assert first.start_ns <= min(s.start_ns for s in chats + calls)
    assert first.end_ns >= max(s.end_ns for s in chats + calls)


def test_with_no_endpoint_nothing_is_exported(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_SERVICE_NAME", "kubeturn-untraced")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"x-receiver={receiver.port}")
        result = kubeturn("run", EXAMPLES / "hello.yaml", cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr
    assert (receiver.requests, receiver.received()) == (0, [])


PROCESSES = """
import os, sys, threading
from kubeturn.tracing import Tracing
from kubeturn_harness.tracing import Tracing as HarnessTracing

operator = Tracing.of(os.environ)
harness = HarnessTracing.of(os.environ, service="kubeturn-harness")
print(operator is not None, harness.on, type(harness.tracer).__name__)
print(sorted(name for name in sys.modules if name.startswith("opentelemetry.sdk"))[:1])
print(sorted(thread.name for thread in threading.enumerate()))
for tracing in (operator, harness):
    if tracing is not None:
        tracing.shutdown()
"""


def test_tracing_off_loads_no_sdk_and_starts_no_exporter_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "kubeturn-untraced")

    def processes() -> list[str]:
        ran = subprocess.run(
            [sys.executable, "-c", PROCESSES],
            env=environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (ran.returncode, ran.stderr) == (0, ""), ran.stderr
        return ran.stdout.splitlines()

    assert processes() == ["False False NoOpTracer", "[]", "['MainThread']"]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    on, loaded, threads = processes()
    assert (on, loaded) == ("True True Tracer", "['opentelemetry.sdk']")
    assert (
        threads == "['MainThread', 'OtelBatchSpanRecordProcessor', 'OtelBatchSpanRecordProcessor']"
    )
