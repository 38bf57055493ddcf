"""The guarantee counter and the usage accounting of one conversation (ADR 0114).

Everything of the Harness's own is real (Conversation, its log in a temporary directory,
the tool loop, HarnessMetrics); the model is a fake whose request waits until the test
lets it answer.

Cases:
- a model adapter that swallows its cancellation (a bug kubeturn must survive) answers
  after the sweep settled its Submission, cut at the output limit, so the run goes on to
  ask again: that request is refused before it is sent, counted once in
  ``kubeturn_harness_model_requests_after_turn_end`` and logged; the model saw one
  request; the Submission settled once, ``aborted`` by the sweep; the checks every
  system and operator scenario ends with (``tests.guarantee``) fail on the counter and
  on the log;
- a priced model's answer: the assistant message on the conversation stream carries the
  request's tokens and cost, the settlement their sum over the run's two requests, and
  the tokens and cost counters count them by Agent and model;
- an unpriced model's answer carries tokens and no cost; the cost counter stays empty.
"""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal
from pathlib import Path

import pytest

from kubeturn_harness.clock import SystemClock
from kubeturn_harness.conversations import Conversation
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.pricing import Price
from kubeturn_harness.providers import Provider, Providers, ProviderSpec
from kubeturn_harness.sandbox.client import Toolbox
from kubeturn_harness.sandbox.protocol import Limits as ToolLimits
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.store import ConversationLog
from kubeturn_harness.tool_loop import REQUEST_AFTER_END, Limits, RunEnv
from kubeturn_harness.wire import (
    AdmitRequest,
    AgentDefinition,
    EventType,
    Message,
    Outcome,
    Settlement,
    SubmissionId,
    Usage,
    WorkspaceAccess,
)
from tests import guarantee

IID = "ns.run/s/coder"
LIMITS = Limits(max_steps=64, max_identical_calls=4, surface_retry_s=0.1, pick_retry_s=0.1)
NO_TOOLBOX = Toolbox(
    socket=Path("/nonexistent/toolbox.sock"),
    work_root=Path("/nonexistent"),
    limits=ToolLimits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8),
)
DEFINITION = AgentDefinition(instructions="You code.", workspace=WorkspaceAccess.NONE)
PRICED = ProviderSpec(
    baseUrl="http://127.0.0.1:1",
    pricing={"big": Price(input=Decimal("3"), output=Decimal("15"))},
)
PROVIDERS = Providers({"fake": Provider("fake", PRICED)})
USAGE = Usage(promptTokens=1000, completionTokens=100)
WAIT_S = 5.0


class HeldModel:
    """Each request waits until ``answers`` has one; a cancellation is swallowed when
    ``swallow`` is set, and the request answers as if it had not come."""

    def __init__(self, *, swallow: bool = False) -> None:
        self.swallow = swallow
        self.requests = 0
        self.asked = asyncio.Event()
        self.answers: asyncio.Queue[ModelAnswer] = asyncio.Queue()

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        self.requests += 1
        self.asked.set()
        try:
            return await self.answers.get()
        except asyncio.CancelledError:
            if not self.swallow:
                raise
            return ModelAnswer("cut", [], USAGE, Finish.LENGTH)


def conversation(directory: Path, model: HeldModel) -> tuple[Conversation, HarnessMetrics]:
    metrics = HarnessMetrics()
    env = RunEnv(
        model=model,
        orchestrator=None,
        providers=PROVIDERS,
        clock=SystemClock(),
        metrics=metrics,
        toolbox=NO_TOOLBOX,
        limits=LIMITS,
        default_model="fake/big",
    )
    log = ConversationLog(directory, "coder", IID, SystemClock())
    return Conversation(log, env, sweep_wait_s=1.0), metrics


def admit(conv: Conversation, model: str = "fake/big") -> None:
    conv.admit(
        SubmissionId("s-1"), AdmitRequest(prompt="Work.", definition=DEFINITION, model=model)
    )


async def idle(conv: Conversation) -> None:
    async with asyncio.timeout(WAIT_S):
        while not conv.idle:
            await asyncio.sleep(0.001)


def settlements(conv: Conversation) -> list[Settlement]:
    return [
        Settlement.model_validate(e.data)
        for e in conv.log.events
        if e.type is EventType.SUBMISSION_SETTLED
    ]


def assistant_usages(conv: Conversation) -> list[Usage | None]:
    messages = [
        Message.model_validate(e.data["message"])
        for e in conv.log.events
        if e.type is EventType.MESSAGE_APPENDED
    ]
    return [m.usage for m in messages if m.role == "assistant"]


def sample(metrics: HarnessMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_a_request_after_the_sweep_is_counted_and_never_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = HeldModel(swallow=True)
    conv, metrics = conversation(tmp_path, model)
    admit(conv)
    async with asyncio.timeout(WAIT_S):
        await model.asked.wait()
    with caplog.at_level(logging.ERROR, logger="kubeturn_harness.tool_loop"):
        assert await conv.sweep(Sweep(None, None)) is True
        await idle(conv)
    assert sample(metrics, "kubeturn_harness_model_requests_after_turn_end_total") == 1
    assert model.requests == 1
    assert [s.outcome for s in settlements(conv)] == [Outcome.ABORTED]
    assert [r.getMessage() for r in caplog.records] == [f"{REQUEST_AFTER_END}: Submission s-1"]
    await conv.close()
    # The checks every system and operator scenario ends with fail on it.
    with pytest.raises(pytest.fail.Exception, match="1 model request"):
        guarantee.check_counter(metrics.registry)
    harness_log = tmp_path / "harness.log"
    harness_log.write_text(caplog.text)
    with pytest.raises(pytest.fail.Exception, match="Submission s-1"):
        guarantee.check_logs([harness_log])


async def test_each_request_is_priced_on_the_stream_and_counted(tmp_path: Path) -> None:
    model = HeldModel()
    conv, metrics = conversation(tmp_path, model)
    model.answers.put_nowait(ModelAnswer("more", [], USAGE, Finish.LENGTH))
    model.answers.put_nowait(ModelAnswer("done", [], USAGE, Finish.STOP))
    admit(conv)
    await idle(conv)
    assert assistant_usages(conv) == [USAGE.model_copy(update={"cost": "0.0045"})] * 2
    [settled] = settlements(conv)
    assert settled.usage == Usage(promptTokens=2000, completionTokens=200, cost="0.009")
    labels = {"agent": "coder", "model": "fake/big"}
    assert sample(metrics, "kubeturn_harness_model_tokens_total", kind="prompt", **labels) == 2000
    assert (
        sample(metrics, "kubeturn_harness_model_tokens_total", kind="completion", **labels) == 200
    )
    assert sample(metrics, "kubeturn_harness_model_cost_usd_total", **labels) == pytest.approx(
        0.009
    )
    assert sample(metrics, "kubeturn_harness_model_requests_after_turn_end_total") == 0
    await conv.close()


async def test_an_unpriced_model_shows_tokens_and_no_cost(tmp_path: Path) -> None:
    model = HeldModel()
    conv, metrics = conversation(tmp_path, model)
    model.answers.put_nowait(ModelAnswer("done", [], USAGE, Finish.STOP))
    admit(conv, "fake/small")
    await idle(conv)
    assert assistant_usages(conv) == [USAGE]
    [settled] = settlements(conv)
    assert settled.usage == USAGE
    labels = {"agent": "coder", "model": "fake/small"}
    assert sample(metrics, "kubeturn_harness_model_tokens_total", kind="prompt", **labels) == 1000
    assert sample(metrics, "kubeturn_harness_model_cost_usd_total", **labels) is None
    await conv.close()
