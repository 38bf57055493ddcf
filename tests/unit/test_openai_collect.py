"""Reading one streamed answer (``openai_models._collect``), over the SDK's own chunk types.

Cases:
- each ``finish_reason`` in the loop's words: ``stop``, ``tool_calls``, ``length``; any
  other (``content_filter``) is ``other``;
- calls are assembled from their pieces by index, in index order; arguments stay as
  written, empty ones too;
- a stream that ends with no ``finish_reason`` fails, retryable, and keeps its partial;
- a stream that breaks midway (an error, or a cancellation) leaves the text, the calls as
  far as they streamed and the usage reported in the ``Partial``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import Finish, Partial
from kubeturn_harness.openai_models import _collect
from kubeturn_harness.wire import ToolCall, Usage


def chunk(delta: dict[str, Any] | None = None, **fields: Any) -> ChatCompletionChunk:
    finish = fields.pop("finish", None)
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
    )
    return ChatCompletionChunk.model_validate(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": choices,
            **fields,
        }
    )


def call(
    index: int, *, id_: str | None = None, name: str = "", arguments: str = ""
) -> dict[str, Any]:
    piece: dict[str, Any] = {"index": index, "function": {"name": name, "arguments": arguments}}
    if id_ is not None:
        piece |= {"id": id_, "type": "function"}
    return {"tool_calls": [piece]}


USAGE = {"usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}


async def stream(
    *chunks: ChatCompletionChunk, then: BaseException | None = None
) -> AsyncIterator[ChatCompletionChunk]:
    for each in chunks:
        await asyncio.sleep(0)
        yield each
    if then is not None:
        raise then


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("stop", Finish.STOP),
        ("tool_calls", Finish.TOOL_CALLS),
        ("length", Finish.LENGTH),
        ("content_filter", Finish.OTHER),
    ],
)
async def test_each_finish_reason(reason: str, finish: Finish) -> None:
    answer = await _collect(
        stream(chunk({"role": "assistant", "content": "Hi"}), chunk({}, finish=reason)),
        Partial(),
    )
    assert (answer.text, answer.finish) == ("Hi", finish)


async def test_calls_are_assembled_by_index_and_kept_as_written() -> None:
    partial = Partial()
    answer = await _collect(
        stream(
            chunk(call(1, id_="b", name="finish")),
            chunk(call(0, id_="a", name="bash")),
            chunk(call(0, arguments='{"command"')),
            chunk(call(0, arguments=': "ls"}')),
            chunk({}, finish="tool_calls"),
            chunk(**USAGE),
        ),
        partial,
    )
    assert answer.tool_calls == [
        ToolCall(id="a", name="bash", arguments='{"command": "ls"}'),
        ToolCall(id="b", name="finish", arguments=""),
    ]
    assert answer.usage == Usage(promptTokens=7, completionTokens=3)
    assert partial.tool_calls == dict(enumerate(answer.tool_calls))


async def test_a_stream_with_no_finish_reason_fails_and_keeps_its_partial() -> None:
    partial = Partial()
    with pytest.raises(ProviderFailure, match="no finish_reason came") as raised:
        await _collect(
            stream(chunk({"content": "Half"}), chunk(call(0, id_="a", name="x"))), partial
        )
    assert raised.value.retryable
    assert (partial.content, partial.tool_calls) == (
        "Half",
        {0: ToolCall(id="a", name="x", arguments="")},
    )


@pytest.mark.parametrize("cause", [ConnectionError("reset"), asyncio.CancelledError()])
async def test_a_stream_that_breaks_keeps_what_came(cause: BaseException) -> None:
    partial = Partial()
    with pytest.raises(type(cause)):
        await _collect(
            stream(
                chunk({"content": "Running "}),
                chunk({"content": "it."}),
                chunk(call(0, id_="a", name="bash", arguments='{"comm')),
                chunk(**USAGE),
                then=cause,
            ),
            partial,
        )
    assert partial.content == "Running it."
    assert partial.tool_calls == {0: ToolCall(id="a", name="bash", arguments='{"comm')}
    assert partial.usage == Usage(promptTokens=7, completionTokens=3)
