"""How far a model answer has streamed: the ``model-streamed`` events of a conversation.

Cases:
- the OpenAI adapter counts one output piece per piece of text, of reasoning
  (``reasoning_content``, ``reasoning``) and of a tool call's arguments, none for the
  role, a call's opening or the finish, telling the ``Partial``'s hook each count; the
  Anthropic adapter one per text, thinking and tool-input delta, none for a signature;
- a long answer, through the real Harness and the scripted model, with reports due every
  5 pieces and no wait: one report per 5 pieces of the request (its tool call's argument
  pieces too), their counts rising, each after the request's ``model-requested`` and
  before its ``message-appended``; the estimate is priced at the model's output price,
  with no cost for a model with no price; the next request counts from 0, and its one
  piece makes no report;
- a request tried again (its stream cut midway, each time) counts each attempt from 0;
- a sweep while the answer is held: every report comes before ``submission-settled``,
  none after; and pieces the adapter reads after the sweep settled (what a stream had
  already buffered when its cut came) make none, though they are due;
- the time: with reports due every piece but only 10 s apart, by the Harness's clock,
  pieces make none while the clock stands still, one when it has moved 10 s, and none
  again until it moves 10 s more.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kubeturn_harness.anthropic_models import AnthropicModels
from kubeturn_harness.conversations import Conversation
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.providers import ModelName, Provider, Providers, ProviderSpec, ProviderType
from kubeturn_harness.sandbox.client import Toolbox
from kubeturn_harness.sandbox.protocol import Limits as ToolLimits
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.store import ConversationLog
from kubeturn_harness.tool_loop import Limits, RunEnv
from kubeturn_harness.wire import (
    AdmitRequest,
    AgentDefinition,
    EventType,
    StreamEvent,
    SubmissionId,
    Usage,
    WorkspaceAccess,
)
from tests.harness.messages_api import Answer, serving
from tests.harness.support import StartWorld, SteppedClock, World, script, streamed_completions

IID = "iid-1"
ARGUMENTS = '{"path": "a-long-file-name.txt"}'
"""32 characters: the scripted model streams them in two pieces of 16."""
WORDS = " ".join(f"w{n}" for n in range(1, 29))
"""28 words: 28 pieces of text."""
PRICING = "pricing:\n  any:\n    input: 3\n    output: 15"
COSTS = ["0.000075", "0.00015", "0.000225", "0.0003", "0.000375", "0.00045"]
"""5, 10 … 30 output tokens at 15 USD per million."""


# ----------------------------------------------------------------------------- adapters


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"} | {
        "choices": [choice]
    }


async def test_the_openai_adapter_counts_text_reasoning_and_argument_pieces() -> None:
    opening = {"index": 0, "id": "call_1", "type": "function"}
    chunks = [
        chunk({"role": "assistant"}),
        chunk({"reasoning_content": "Let me"}),
        chunk({"reasoning_content": " look."}),
        chunk({"reasoning": "Sure."}),
        chunk({"content": "Reading"}),
        chunk({"content": " it."}),
        chunk({"tool_calls": [opening | {"function": {"name": "read", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]}),
        chunk({}, finish="tool_calls"),
    ]

    told: list[int] = []
    partial = Partial(on_delta=told.append)
    models = OpenAIModels()
    async with streamed_completions(*(json.dumps(c).encode() for c in chunks)) as url:
        model = ModelName(Provider("local", ProviderSpec(baseUrl=url)), "m")
        try:
            answer = await models.complete(
                ModelRequest(model, [{"role": "user", "content": "Hi."}], [], None), partial
            )
        finally:
            await models.close()
    assert (answer.text, answer.tool_calls[0].arguments) == ("Reading it.", '{"path": "a.py"}')
    assert partial.output_tokens == 7
    assert told == [1, 2, 3, 4, 5, 6, 7]


async def test_the_anthropic_adapter_counts_text_thinking_and_input_deltas() -> None:
    blocks = [
        {"type": "thinking", "thinking": "The diff first.", "signature": "sig-1"},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
    ]
    models = AnthropicModels()
    told: list[int] = []
    partial = Partial(on_delta=told.append)
    try:
        async with serving([Answer(blocks, stop_reason="tool_use")]) as api:
            spec = ProviderSpec(type=ProviderType.ANTHROPIC, baseUrl=api.url)
            model = ModelName(Provider("claude", spec), "claude-test")
            request = ModelRequest(model, [{"role": "user", "content": "Review."}], [], None)
            answer = await models.complete(request, partial)
    finally:
        await models.close()
    assert answer.finish is Finish.TOOL_CALLS
    assert partial.output_tokens == 6  # two halves of each block; the signature not
    assert told == [1, 2, 3, 4, 5, 6]


async def test_mid_stream_an_anthropic_answer_has_used_its_prompt_and_its_pieces() -> None:
    models = AnthropicModels()
    partial = Partial()
    answer = Answer([{"type": "text", "text": "Reading it."}], hold_after=4)
    try:
        async with serving([answer]) as api:
            spec = ProviderSpec(type=ProviderType.ANTHROPIC, baseUrl=api.url)
            model = ModelName(Provider("claude", spec), "claude-test")
            request = ModelRequest(model, [{"role": "user", "content": "Review."}], [], None)
            task = asyncio.create_task(models.complete(request, partial))
            await asyncio.wait_for(api.held.wait(), 10)
            # message_start said the prompt's 10 tokens; two pieces of text streamed.
            assert partial.used == Usage(promptTokens=10, completionTokens=2)
            api.release.set()
            await task
    finally:
        await models.close()
    assert partial.used == Usage(promptTokens=10, completionTokens=5)


# ----------------------------------------------------------------------------- the Harness


async def events(w: World) -> list[dict[str, Any]]:
    status, _, body = await w.harness.stream(IID)
    assert status == 200, body
    return list(body)


def of_type(found: list[dict[str, Any]], kind: EventType) -> list[dict[str, Any]]:
    return [event for event in found if event["type"] == kind.value]


def assistant_offsets(found: list[dict[str, Any]]) -> list[int]:
    return [
        event["offset"]
        for event in of_type(found, EventType.MESSAGE_APPENDED)
        if event["data"]["message"]["role"] == "assistant"
    ]


async def test_a_long_answer_is_reported_every_few_pieces_priced(world: StartWorld) -> None:
    steps = [
        {"text": WORDS, "toolCalls": [{"name": "nope", "arguments": ARGUMENTS}]},
        {"text": "Done."},
    ]
    w = await world(
        script("Write", *steps),
        orchestrated=False,
        provider=PRICING,
        stream_progress_tokens=5,
        stream_progress_s=0.0,
    )
    sid = await w.harness.admit(IID, "Write it")
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    found = await events(w)
    reports = of_type(found, EventType.MODEL_STREAMED)
    assert [event["data"] for event in reports] == [
        {
            "submissionId": sid,
            "outputTokens": tokens,
            "usage": Usage(completionTokens=tokens, cost=cost).model_dump(mode="json"),
        }
        for tokens, cost in zip([5, 10, 15, 20, 25, 30], COSTS, strict=True)
    ]
    requested = [e["offset"] for e in of_type(found, EventType.MODEL_REQUESTED)]
    first_answer, second_answer = assistant_offsets(found)
    assert all(requested[0] < e["offset"] < first_answer for e in reports)
    assert requested[1] > first_answer
    answered = of_type(found, EventType.MESSAGE_APPENDED)
    final = next(e for e in answered if e["offset"] == first_answer)["data"]["message"]
    assert final["usage"]["completionTokens"] == (len(WORDS) + len(ARGUMENTS)) // 4 + 1
    assert second_answer > requested[1]


async def test_an_unpriced_model_s_estimate_has_no_cost(world: StartWorld) -> None:
    w = await world(
        script("Write", {"text": "one two three four"}),
        orchestrated=False,
        stream_progress_tokens=2,
        stream_progress_s=0.0,
    )
    sid = await w.harness.admit(IID, "Write it")
    await w.harness.settlement(IID, sid)
    reports = of_type(await events(w), EventType.MODEL_STREAMED)
    assert [event["data"]["usage"] for event in reports] == [
        Usage(completionTokens=tokens).model_dump(mode="json") for tokens in (2, 4)
    ]
    assert [event["data"]["usage"]["cost"] for event in reports] == [None, None]


async def test_a_request_tried_again_counts_from_nothing(world: StartWorld) -> None:
    cut = {"text": "one two three four", "cut": {"afterChunks": 3}}  # the role, two words
    w = await world(
        script("Write", cut), orchestrated=False, stream_progress_tokens=1, stream_progress_s=0.0
    )
    sid = await w.harness.admit(IID, "Write it")
    assert (await w.harness.settlement(IID, sid))["outcome"] == "failed"
    attempts = len(await w.model.requests())
    assert attempts == 3
    reports = of_type(await events(w), EventType.MODEL_STREAMED)
    assert [event["data"]["outputTokens"] for event in reports] == [1, 2] * attempts


async def test_no_report_follows_the_sweep_s_settlement(world: StartWorld) -> None:
    w = await world(
        script("Write", {"text": "one two three four five six", "hold": True}),
        orchestrated=False,
        stream_progress_tokens=1,
        stream_progress_s=0.0,
    )
    sid = await w.harness.admit(IID, "Write it")
    await w.model.wait_requests(1, held=True)
    async with asyncio.timeout(10):
        while len(of_type(await events(w), EventType.MODEL_STREAMED)) < 6:
            await asyncio.sleep(0.01)
    await w.harness.abort(IID)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "aborted"
    async with asyncio.timeout(10):
        while not assistant_offsets(found := await events(w)):
            await asyncio.sleep(0.01)
    reports = of_type(found, EventType.MODEL_STREAMED)
    assert [event["data"]["outputTokens"] for event in reports] == [1, 2, 3, 4, 5, 6]
    (settled,) = of_type(found, EventType.SUBMISSION_SETTLED)
    assert all(event["offset"] < settled["offset"] for event in reports)
    assert assistant_offsets(found)[0] > settled["offset"]  # the cut reply, recorded after


# ----------------------------------------------------------------------------- one conversation

NO_TOOLBOX = Toolbox(
    socket=Path("/nonexistent/toolbox.sock"),
    work_root=Path("/nonexistent"),
    limits=ToolLimits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8),
)
PROVIDERS = Providers({"fake": Provider("fake", ProviderSpec(baseUrl="http://127.0.0.1:1"))})
DEFINITION = AgentDefinition(instructions="You code.", workspace=WorkspaceAccess.NONE)


class BurstModel:
    """Streams pieces into the ``Partial`` in bursts the test sends (``None`` ends the
    answer); cut while it waits, it streams ``after_cut`` more, as an adapter reads what
    its stream had buffered before the cut reaches it."""

    def __init__(self, after_cut: int = 0) -> None:
        self.after_cut = after_cut
        self.bursts: asyncio.Queue[int | None] = asyncio.Queue()

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        try:
            while (burst := await self.bursts.get()) is not None:
                for _ in range(burst):
                    partial.delta()
                self.bursts.task_done()
        except asyncio.CancelledError:
            for _ in range(self.after_cut):
                partial.delta()
            raise
        self.bursts.task_done()
        return ModelAnswer("words", [], Usage(completionTokens=9), Finish.STOP)

    async def burst(self, pieces: int | None) -> None:
        """Send a burst, and wait until the model has streamed it."""
        await self.bursts.put(pieces)
        async with asyncio.timeout(5):
            await self.bursts.join()


def conversation(
    directory: Path, model: BurstModel, clock: SteppedClock, *, tokens: int, seconds: float
) -> Conversation:
    limits = Limits(
        max_steps=8,
        max_identical_calls=4,
        surface_retry_s=0.1,
        pick_retry_s=0.1,
        stream_progress_tokens=tokens,
        stream_progress_s=seconds,
    )
    env = RunEnv(
        model=model,
        orchestrator=None,
        providers=PROVIDERS,
        clock=clock,
        metrics=HarnessMetrics(),
        toolbox=NO_TOOLBOX,
        limits=limits,
        default_model="fake/any",
    )
    conv = Conversation(ConversationLog(directory, "coder", IID, clock), env, sweep_wait_s=1.0)
    conv.admit(SubmissionId("s-1"), AdmitRequest(prompt="Work.", definition=DEFINITION))
    return conv


def reported(conv: Conversation) -> list[int]:
    return [
        int(event.data["outputTokens"])
        for event in conv.log.events
        if event.type is EventType.MODEL_STREAMED
    ]


async def idle(conv: Conversation) -> None:
    async with asyncio.timeout(5):
        while not conv.idle:
            await asyncio.sleep(0.001)


async def test_reports_wait_for_the_harness_s_clock(tmp_path: Path) -> None:
    clock, model = SteppedClock(), BurstModel()
    conv = conversation(tmp_path, model, clock, tokens=1, seconds=10.0)
    await model.burst(6)
    assert reported(conv) == []
    clock.advance(9.9)
    await model.burst(1)
    assert reported(conv) == []
    clock.advance(0.1)
    await model.burst(2)
    assert reported(conv) == [8]
    clock.advance(9.0)
    await model.burst(3)
    assert reported(conv) == [8]
    clock.advance(1.0)
    await model.burst(1)
    await model.burst(None)
    await idle(conv)
    assert reported(conv) == [8, 13]
    await conv.close()


async def test_pieces_read_after_the_sweep_settled_make_no_report(tmp_path: Path) -> None:
    model = BurstModel(after_cut=3)
    conv = conversation(tmp_path, model, SteppedClock(), tokens=1, seconds=0.0)
    await model.burst(2)
    assert await conv.sweep(Sweep(cause=None, submission_id=None))
    await idle(conv)
    types = [event.type for event in conv.log.events]
    assert reported(conv) == [1, 2]
    assert types.index(EventType.SUBMISSION_SETTLED) > max(
        i for i, kind in enumerate(types) if kind is EventType.MODEL_STREAMED
    )
    cut: StreamEvent = conv.log.events[-1]
    assert cut.type is EventType.MESSAGE_APPENDED
    assert cut.data["message"]["status"] == "interrupted"
    await conv.close()
