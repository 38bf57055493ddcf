"""The Anthropic adapter against a strict Messages API stand-in on 127.0.0.1
(``messages_api``), one attempt per call.

Cases:
- a streamed answer with text and two tool calls: the ``Partial`` holds the text, the
  call begun (by index; its arguments come at the end) and the usage while the stream is
  held midway; the
  answer has the text, the calls with their JSON arguments, the usage with cache reads
  and writes (prompt tokens counting both), ``finish`` tool_calls; exactly one request;
- ``stop_reason`` → ``finish``: end_turn and stop_sequence stop, max_tokens length,
  refusal and none other;
- the request: system and tools with their cache breakpoints, ``max_tokens`` the default
  or the provider's ``maxTokens``, thinking's budget on top, no thinking when off;
- thinking: an answer's thinking blocks (and a redacted one) come back verbatim before
  its tool call in the next request, which thinks again; an adapter that no longer holds
  them sends that request without thinking, and the stand-in accepts both;
- failures, each one request and a ``ProviderFailure`` classified: 429 with Retry-After
  (seconds, milliseconds, an HTTP date), 529 overloaded and 500 retryable, 400 and 401
  not, the API's own message in the failure; nothing listening is retryable without a
  status; an ``error`` event mid-stream takes its status from its type; a connection
  broken mid-stream, and a stream ended before ``message_stop``, are retryable and the
  ``Partial`` keeps what came;
- a sweep: cancelling the task while the answer streams closes the connection at once
  (the server sees its client go), no request follows, and the ``Partial`` keeps the text;
- a stream silent for the provider's ``timeouts.idleSeconds`` fails the attempt,
  retryable, keeping what came.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubeturn_harness import retries
from kubeturn_harness.anthropic_models import MAX_TOKENS, AnthropicModels
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.providers import ModelName, Provider, ProviderSpec, ProviderType
from kubeturn_harness.wire import ThinkingLevel, ToolCall, Usage
from tests.harness.messages_api import Answer, Item, MessagesApi, Refusal, serving

SYSTEM = {"role": "system", "content": "You review changes."}
ASK = {"role": "user", "content": "Review the change."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "done", "parameters": {"type": "object"}}},
]
THOUGHT = {"type": "thinking", "thinking": "The diff first.", "signature": "sig-1"}
CALLS = [
    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}},
    {"type": "tool_use", "id": "toolu_2", "name": "done", "input": {}},
]


@pytest.fixture
async def models() -> AsyncIterator[AnthropicModels]:
    adapter = AnthropicModels()
    yield adapter
    await adapter.close()


def model_at(api: MessagesApi, **spec: Any) -> ModelName:
    provider = Provider(
        "claude", ProviderSpec(type=ProviderType.ANTHROPIC, baseUrl=api.url, **spec)
    )
    return ModelName(provider, "claude-test")


def request(
    api: MessagesApi,
    messages: list[dict[str, Any]] | None = None,
    thinking: ThinkingLevel | None = None,
    **spec: Any,
) -> ModelRequest:
    return ModelRequest(model_at(api, **spec), messages or [SYSTEM, ASK], TOOLS, thinking)


async def until_held(api: MessagesApi, task: asyncio.Task[ModelAnswer]) -> None:
    """Wait for the stand-in to hold its stream; fail at once if the call ended first."""
    held = asyncio.create_task(api.held.wait())
    await asyncio.wait([task, held], return_when=asyncio.FIRST_COMPLETED)
    if not held.done():
        held.cancel()
        pytest.fail(f"the call ended before the stream was held: {task.result()}")


async def answer_of(models: AnthropicModels, script: list[Item], **kw: Any) -> ModelAnswer:
    async with serving(script) as api:
        return await models.complete(request(api, **kw), Partial())


async def test_an_answer_streams_into_the_partial_and_comes_back_whole(
    models: AnthropicModels,
) -> None:
    usage = {
        "input_tokens": 40,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 60,
        "output_tokens": 25,
    }
    said = {"type": "text", "text": "Reading it."}
    streamed = Answer([said, *CALLS], stop_reason="tool_use", usage=usage, hold_after=7)
    partial = Partial()
    async with serving([streamed]) as api:
        task = asyncio.create_task(models.complete(request(api), partial))
        await until_held(api, task)
        assert partial.content == "Reading it."
        assert partial.tool_calls == {0: ToolCall(id="toolu_1", name="read", arguments="")}
        assert partial.usage == Usage(
            promptTokens=400, completionTokens=1, cacheReadTokens=300, cacheWriteTokens=60
        )
        api.release.set()
        answer = await task
        assert len(api.requests) == 1
    assert answer == ModelAnswer(
        text="Reading it.",
        tool_calls=[
            ToolCall(id="toolu_1", name="read", arguments='{"path": "a.py"}'),
            ToolCall(id="toolu_2", name="done", arguments="{}"),
        ],
        usage=Usage(
            promptTokens=400, completionTokens=25, cacheReadTokens=300, cacheWriteTokens=60
        ),
        finish=Finish.TOOL_CALLS,
    )


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", Finish.STOP),
        ("stop_sequence", Finish.STOP),
        ("max_tokens", Finish.LENGTH),
        ("refusal", Finish.OTHER),
        (None, Finish.OTHER),
    ],
)
async def test_the_stop_reason_is_the_finish(
    models: AnthropicModels, stop_reason: str | None, finish: Finish
) -> None:
    answer = await answer_of(models, [Answer([{"type": "text", "text": "Hm."}], stop_reason)])
    assert answer.finish is finish


async def test_the_request_carries_the_prompt_tools_limits_and_breakpoints(
    models: AnthropicModels,
) -> None:
    done = Answer([{"type": "text", "text": "Ok."}])
    async with serving([done, done, done]) as api:
        await models.complete(request(api), Partial())
        await models.complete(request(api, thinking=ThinkingLevel.OFF, maxTokens=1000), Partial())
        await models.complete(request(api, thinking=ThinkingLevel.LOW, maxTokens=1000), Partial())
    plain, limited, thinking = api.requests
    cache = {"type": "ephemeral"}
    assert plain == {
        "model": "claude-test",
        "max_tokens": MAX_TOKENS,
        "system": [{"type": "text", "text": "You review changes.", "cache_control": cache}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Review the change.", "cache_control": cache}],
            }
        ],
        "tools": [
            {
                "name": "read",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
            {"name": "done", "input_schema": {"type": "object"}, "cache_control": cache},
        ],
        "stream": True,
    }
    assert limited["max_tokens"] == 1000
    assert "thinking" not in limited
    assert thinking["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert thinking["max_tokens"] == 1000 + 2048


def continued(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prompt after an answer that made these calls, with their results."""
    return [
        SYSTEM,
        ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "{}"},
                }
                for c in tool_calls
            ],
        },
        *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in tool_calls),
    ]


async def test_thinking_blocks_go_back_before_their_tool_calls(models: AnthropicModels) -> None:
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    first = Answer([THOUGHT, redacted, CALLS[1]], stop_reason="tool_use")
    second = Answer([{"type": "text", "text": "Done."}])
    async with serving([first, second]) as api:
        await models.complete(request(api, thinking=ThinkingLevel.HIGH), Partial())
        then = request(api, continued([CALLS[1]]), ThinkingLevel.HIGH)
        answer = await models.complete(then, Partial())
    assert answer.text == "Done."
    sent = api.requests[1]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert sent["messages"][1]["content"] == [
        THOUGHT,
        redacted,
        {"type": "tool_use", "id": "toolu_2", "name": "done", "input": {}},
    ]


async def test_thinking_no_longer_held_is_left_off_rather_than_refused() -> None:
    first = Answer([THOUGHT, CALLS[1]], stop_reason="tool_use")
    second = Answer([{"type": "text", "text": "Done."}])
    async with serving([first, second]) as api:
        before, after = AnthropicModels(), AnthropicModels()
        try:
            await before.complete(request(api, thinking=ThinkingLevel.HIGH), Partial())
            then = request(api, continued([CALLS[1]]), ThinkingLevel.HIGH)
            answer = await after.complete(then, Partial())
        finally:
            await before.close()
            await after.close()
    assert answer.text == "Done."
    assert "thinking" not in api.requests[1]
    assert api.requests[1]["messages"][1]["content"][0]["type"] == "tool_use"


def refused(status: int, kind: str, headers: dict[str, str] | None = None) -> Refusal:
    body = {"type": "error", "error": {"type": kind, "message": f"the {kind} said so"}}
    return Refusal(status, body, headers or {})


IN_A_MINUTE = "in a minute"
"""Stands for an HTTP date a minute after the request, made when the test runs."""


@pytest.mark.parametrize(
    ("refusal", "retryable", "retry_after"),
    [
        (refused(429, "rate_limit_error", {"Retry-After": "7"}), True, 7.0),
        (refused(429, "rate_limit_error", {"retry-after-ms": "1500"}), True, 1.5),
        (refused(429, "rate_limit_error", {"Retry-After": IN_A_MINUTE}), True, 60.0),
        (refused(529, "overloaded_error"), True, None),
        (refused(500, "api_error"), True, None),
        (refused(408, "timeout_error"), True, None),
        (refused(400, "invalid_request_error"), False, None),
        (refused(401, "authentication_error"), False, None),
    ],
    ids=["429-seconds", "429-ms", "429-date", "529", "500", "408", "400", "401"],
)
async def test_a_refusal_is_one_request_and_a_classified_failure(
    models: AnthropicModels, refusal: Refusal, retryable: bool, retry_after: float | None
) -> None:
    if refusal.headers.get("Retry-After") == IN_A_MINUTE:
        date = email.utils.formatdate(time.time() + 60, usegmt=True)
        refusal = Refusal(refusal.status, refusal.body, {"Retry-After": date})
    async with serving([refusal]) as api:
        with pytest.raises(ProviderFailure) as failed:
            await models.complete(request(api), Partial())
        assert len(api.requests) == 1
    failure = failed.value
    kind = refusal.body["error"]["type"]
    assert failure.message == (
        f"provider 'claude' ({api.url}), model 'claude-test' answered "
        f"{retries.status_phrase(refusal.status)}: the {kind} said so"
    )
    assert (failure.status, failure.retryable) == (refusal.status, retryable)
    if retry_after is None:
        assert failure.retry_after_s is None
    else:
        assert failure.retry_after_s == pytest.approx(retry_after, abs=2)


async def test_nothing_listening_is_retryable_without_a_status(models: AnthropicModels) -> None:
    async with serving([]) as api:
        url = api.url
    spec = ProviderSpec(type=ProviderType.ANTHROPIC, baseUrl=url)
    asked = ModelRequest(ModelName(Provider("claude", spec), "claude-test"), [ASK], [], None)
    with pytest.raises(ProviderFailure) as failed:
        await models.complete(asked, Partial())
    assert (failed.value.status, failed.value.retryable) == (None, True)
    assert failed.value.message.startswith(
        f"provider 'claude' ({url}), model 'claude-test' could not be reached or dropped"
    )


async def test_an_error_event_mid_stream_is_classified_by_its_type(
    models: AnthropicModels,
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    broken = Answer([{"type": "text", "text": "Half of it"}], error_after=(4, error))
    partial = Partial()
    async with serving([broken]) as api:
        with pytest.raises(ProviderFailure) as failed:
            await models.complete(request(api), partial)
    assert (failed.value.status, failed.value.retryable) == (529, True)
    assert failed.value.message.endswith("reported overloaded_error in its stream: Overloaded")
    assert partial.content == "Half of it"


@pytest.mark.parametrize("how", ["cut", "ended"])
async def test_a_stream_that_stops_short_fails_retryable_and_keeps_what_came(
    models: AnthropicModels, how: str
) -> None:
    said = [{"type": "text", "text": "Half of it"}, CALLS[0]]
    short = Answer(said, cut_after=7) if how == "cut" else Answer(said, end_early=7)
    partial = Partial()
    async with serving([short]) as api:
        with pytest.raises(ProviderFailure) as failed:
            await models.complete(request(api), partial)
        assert len(api.requests) == 1
    assert (failed.value.status, failed.value.retryable) == (None, True)
    assert partial.content == "Half of it"
    assert partial.tool_calls == {0: ToolCall(id="toolu_1", name="read", arguments='{"path":')}
    assert partial.usage == Usage(promptTokens=10, completionTokens=1)


async def test_a_sweep_closes_the_stream_at_once(models: AnthropicModels) -> None:
    held = Answer([{"type": "text", "text": "Looking at it"}], hold_after=4)
    partial = Partial()
    async with serving([held]) as api:
        task = asyncio.create_task(models.complete(request(api), partial))
        await until_held(api, task)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        api.release.set()
        for _ in range(100):
            if api.closed_by_client:
                break
            await asyncio.sleep(0.01)
        assert api.closed_by_client == 1
        assert len(api.requests) == 1
    assert partial.content == "Looking at it"


async def test_a_silent_stream_fails_after_the_idle_timeout(models: AnthropicModels) -> None:
    held = Answer([{"type": "text", "text": "Thinking"}], hold_after=4)
    partial = Partial()
    async with serving([held]) as api:
        with pytest.raises(ProviderFailure) as failed:
            await models.complete(request(api, timeouts={"idleSeconds": 0.2}), partial)
        assert len(api.requests) == 1
    assert (failed.value.status, failed.value.retryable) == (None, True)
    assert failed.value.outcome == "sent nothing for 0.2 s (timeouts.idleSeconds)"
    assert partial.content == "Thinking"
