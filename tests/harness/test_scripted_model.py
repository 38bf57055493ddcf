"""The scripted model: the script format, step selection, and the server through the SDK.

Cases:

- Script: a valid script parses; an unknown key is refused naming its path; arguments
  that are neither a mapping nor a string are refused; an error step with text is
  refused; an error step with a finish reason or a cut is refused; a finish reason other
  than OpenAI's is refused; a conversation without steps is refused; bad YAML and a
  missing file raise ScriptError.
- Selection (pure): the step index is the number of assistant messages; the match is a
  substring of the first user message (string or list-of-parts content, after a system
  message); the first matching conversation wins; no match gives None; ``repeat: true``
  repeats the last step, ``repeat: false`` answers the exhausted text.
- Completions (pure): text pieces join back to the text.
- Server, through the official ``openai`` SDK: non-stream text and tool calls; stream
  with usage; the SDK's stream helper accumulates tool calls; tool-call arguments
  roundtrip (mapping as JSON, string verbatim); a continued conversation gets the next
  step; exhausted steps answer with ``stop``; no match is a 400 quoting the message; an
  error step is that HTTP error; a non-JSON body is a 400 and recorded; ``delayMs``
  delays; ``finishReason: length`` is sent as the finish, whole and streamed; a ``cut``
  drops the connection after its chunks, or sends its error as an event, and is
  recorded; a history holding a call whose arguments are not one JSON object is a 400
  naming it, as real servers refuse it; ``/v1/models`` and ``/_health``.
- Holding: a held stream sends its text, waits for ``POST /_release``, then its tool
  calls; release by ``match`` releases only that conversation; a held non-stream answers
  after release; a client disconnect while held is recorded (``disconnected``,
  ``closedAt``) and leaves no task running; stopping the runner ends held responses
  promptly; a bad ``/_release`` body is a 400.
- Record: ``GET /_requests`` lists every request in order with its fields; ``DELETE``
  clears it and indexes keep counting.
- CLI: ``--port 0`` prints the bound URL first and serves until terminated; a bad
  script exits 2 naming the path.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from kubeturn_harness.errors import ScriptError
from kubeturn_harness.scripted import (
    EXHAUSTED_TEXT,
    JOURNAL,
    bodies,
    completions,
    load_script,
    parse_script,
    selection,
    serve,
)
from kubeturn_harness.scripted import __main__ as cli

SCRIPT = """
conversations:
  - match: "Review the change"
    steps:
      - text: "Looking at it."
        toolCalls:
          - name: review_verdict
            arguments: {verdict: approve, notes: "LGTM, nothing to add here"}
      - text: "Done."
  - match: "Broken JSON"
    steps:
      - toolCalls:
          - name: review_verdict
            arguments: '{"verdict": '
  - match: "Keep going"
    repeat: true
    steps:
      - text: "first"
      - text: "again"
  - match: "Hold on"
    steps:
      - text: "Thinking about it."
        hold: true
        toolCalls:
          - name: finish
            arguments: {}
  - match: "Hold two"
    steps:
      - text: "second"
        hold: true
  - match: "Fail"
    steps:
      - error: {status: 503, message: "provider overloaded"}
  - match: "Slow"
    steps:
      - text: "late"
        delayMs: 50
  - match: "Out of room"
    steps:
      - text: "A long answer that"
        toolCalls:
          - name: write
            arguments: '{"path": "a.txt", "content": "ab'
        finishReason: length
  - match: "Dropped"
    steps:
      - text: "one two three four"
        cut: {afterChunks: 3}
  - match: "Broke midway"
    steps:
      - text: "one two"
        toolCalls:
          - name: finish
            arguments: {verdict: approve}
        cut: {afterChunks: 4, error: {status: 500, message: "the backend crashed"}}
"""

WAIT = 5.0
"""Seconds a test waits for the server to reach a state before failing."""


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


@dataclass
class Model:
    """A running scripted model with an SDK client and a plain HTTP client for control."""

    runner: web.AppRunner
    url: str
    sdk: AsyncOpenAI
    http: aiohttp.ClientSession

    async def requests(self) -> list[dict[str, Any]]:
        async with self.http.get("/_requests") as response:
            records: list[dict[str, Any]] = await response.json()
            return records

    async def release(self, body: dict[str, Any] | None = None) -> int:
        async with self.http.post("/_release", json=body) as response:
            assert response.status == 200
            released: int = (await response.json())["released"]
            return released

    async def until(
        self, condition: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        """Poll the record until ``condition`` holds on it."""
        deadline = time.monotonic() + WAIT
        while True:
            records = await self.requests()
            if condition(records):
                return records
            assert time.monotonic() < deadline, f"record never reached the state: {records}"
            await asyncio.sleep(0.01)


@pytest.fixture
async def model() -> AsyncIterator[Model]:
    runner, url = await serve(parse_script(SCRIPT), "127.0.0.1", 0)
    sdk = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
    http = aiohttp.ClientSession(base_url=url.removesuffix("/v1"))
    try:
        yield Model(runner=runner, url=url, sdk=sdk, http=http)
    finally:
        await http.close()
        await sdk.close()
        await runner.cleanup()


async def others_settled() -> None:
    """Wait until no task but the current one is running, or fail."""
    deadline = time.monotonic() + WAIT
    while True:
        running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not running:
            return
        assert time.monotonic() < deadline, f"tasks left running: {running}"
        await asyncio.sleep(0.01)


class TestScript:
    def test_valid_script_parses(self) -> None:
        script = parse_script(SCRIPT)
        first = script.conversations[0]
        assert first.match == "Review the change"
        assert first.repeat is False
        assert first.steps[0].tool_calls[0].arguments_text() == json.dumps(
            {"verdict": "approve", "notes": "LGTM, nothing to add here"}
        )
        assert script.conversations[1].steps[0].tool_calls[0].arguments_text() == '{"verdict": '
        assert script.conversations[6].steps[0].delay_ms == 50

    def test_unknown_key_is_refused_naming_its_path(self) -> None:
        text = "conversations:\n  - match: a\n    steps:\n      - text: x\n        tolCalls: []\n"
        with pytest.raises(
            ScriptError, match=r"conversations\[0\]\.steps\[0\]\.tolCalls: unknown key"
        ):
            parse_script(text, source="demo.yaml")

    def test_arguments_must_be_a_mapping_or_a_string(self) -> None:
        text = (
            "conversations:\n  - match: a\n    steps:\n      - toolCalls:\n"
            "          - {name: f, arguments: [1, 2]}\n"
        )
        with pytest.raises(ScriptError, match=r"toolCalls\[0\]\.arguments: .*mapping or a string"):
            parse_script(text)

    def test_error_step_answers_only_the_error(self) -> None:
        text = (
            "conversations:\n  - match: a\n    steps:\n"
            "      - {text: x, error: {status: 500, message: boom}}\n"
        )
        with pytest.raises(ScriptError, match=r"steps\[0\]: .*drop text"):
            parse_script(text)

    def test_an_error_step_takes_no_finish_reason_or_cut(self) -> None:
        for extra in ("finishReason: length", "cut: {afterChunks: 1}"):
            text = (
                "conversations: [{match: x, steps: [{"
                f"error: {{status: 500, message: m}}, {extra}"
                "}]}]"
            )
            with pytest.raises(ScriptError, match="answers only the error"):
                parse_script(text)

    def test_a_finish_reason_is_one_of_openais(self) -> None:
        with pytest.raises(ScriptError, match=r"steps\[0\]\.finishReason"):
            parse_script("conversations: [{match: x, steps: [{finishReason: tired}]}]")

    def test_a_conversation_needs_steps(self) -> None:
        with pytest.raises(ScriptError, match=r"conversations\[0\]\.steps: a conversation needs"):
            parse_script("conversations:\n  - {match: a, steps: []}\n")

    def test_bad_yaml_and_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ScriptError, match="not valid YAML"):
            parse_script("conversations: [")
        with pytest.raises(ScriptError, match="cannot read the script"):
            load_script(tmp_path / "absent.yaml")


class TestSelection:
    script = parse_script(SCRIPT)

    def select(self, messages: list[dict[str, Any]]) -> selection.Selection | None:
        parsed = [bodies.Message.model_validate(message) for message in messages]
        return selection.select(self.script, parsed)

    def test_step_index_is_the_number_of_assistant_messages(self) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Review the change"}]
        chosen = self.select(messages)
        assert chosen is not None
        assert (chosen.index, chosen.step.text) == (0, "Looking at it.")
        messages += [
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "tool_call_id": "call_0_0", "content": "ok"},
        ]
        chosen = self.select(messages)
        assert chosen is not None
        assert (chosen.index, chosen.step.text) == (1, "Done.")

    def test_match_is_a_substring_of_the_first_user_message(self) -> None:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "Keep going is not a user message"},
            {"role": "user", "content": [{"type": "text", "text": "Please: Slow down"}]},
            {"role": "user", "content": "Review the change"},
        ]
        chosen = self.select(messages)
        assert chosen is not None
        assert chosen.conversation.match == "Slow"

    def test_first_matching_conversation_wins(self) -> None:
        chosen = self.select([{"role": "user", "content": "Fail to Review the change"}])
        assert chosen is not None
        assert chosen.conversation.match == "Review the change"

    def test_no_match(self) -> None:
        assert self.select([{"role": "user", "content": "Something else"}]) is None
        assert self.select([]) is None

    def test_repeat_repeats_the_last_step(self) -> None:
        assistants = [{"role": "assistant", "content": "x"}] * 5
        chosen = self.select([{"role": "user", "content": "Keep going"}, *assistants])
        assert chosen is not None
        assert (chosen.index, chosen.step.text) == (5, "again")

    def test_without_repeat_the_script_runs_out(self) -> None:
        assistants = [{"role": "assistant", "content": "x"}] * 2
        chosen = self.select([{"role": "user", "content": "Review the change"}, *assistants])
        assert chosen is not None
        assert (chosen.index, chosen.step.text) == (2, EXHAUSTED_TEXT)
        assert chosen.step.tool_calls == ()


@pytest.mark.parametrize("text", ["", "one", "Looking at it.", "  lead and trail  ", "a\n\nb"])
def test_text_pieces_join_back(text: str) -> None:
    pieces = completions.text_pieces(text)
    assert "".join(pieces) == text
    assert all(pieces)


class TestCompletions:
    async def test_non_stream_text_and_tool_calls(self, model: Model) -> None:
        messages = user("Review the change")
        reply = await model.sdk.chat.completions.create(model="any-name", messages=messages)
        assert reply.id == "chatcmpl-scripted-0"
        assert reply.model == "any-name"
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == "Looking at it."
        [call] = choice.message.tool_calls or []
        assert call.type == "function"
        assert (call.id, call.function.name) == ("call_0_0", "review_verdict")
        arguments = {"verdict": "approve", "notes": "LGTM, nothing to add here"}
        assert json.loads(call.function.arguments) == arguments
        said = len("Looking at it.") + len(json.dumps(arguments))
        assert reply.usage is not None
        assert reply.usage.prompt_tokens == len(json.dumps(messages)) // 4
        assert reply.usage.completion_tokens == said // 4 + 1

    async def test_stream_with_usage(self, model: Model) -> None:
        stream = await model.sdk.chat.completions.create(
            model="m",
            messages=user("Review the change"),
            tools=[{"type": "function", "function": {"name": "review_verdict"}}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Looking at it."
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
        arguments = "".join(
            call.function.arguments or ""
            for c in chunks
            if c.choices
            for call in c.choices[0].delta.tool_calls or []
            if call.function is not None
        )
        assert json.loads(arguments)["verdict"] == "approve"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        assert chunks[-1].choices == []
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.total_tokens > 0

    async def test_stream_without_usage_ends_with_the_finish(self, model: Model) -> None:
        stream = await model.sdk.chat.completions.create(
            model="m", messages=user("Keep going"), stream=True
        )
        chunks = [chunk async for chunk in stream]
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert all(chunk.usage is None for chunk in chunks)

    @pytest.mark.parametrize("stream", [False, True])
    async def test_arguments_roundtrip(self, model: Model, stream: bool) -> None:
        mapping = await tool_arguments(model, "Review the change", stream=stream)
        assert json.loads(mapping) == {"verdict": "approve", "notes": "LGTM, nothing to add here"}
        assert await tool_arguments(model, "Broken JSON", stream=stream) == '{"verdict": '

    async def test_continued_conversation_and_exhausted_script(self, model: Model) -> None:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "Review the change"},
            {
                "role": "assistant",
                "content": "Looking at it.",
                "tool_calls": [
                    {
                        "id": "call_0_0",
                        "type": "function",
                        "function": {"name": "review_verdict", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0_0", "content": "recorded"},
        ]
        second = await model.sdk.chat.completions.create(model="m", messages=messages)
        assert second.choices[0].message.content == "Done."
        assert second.choices[0].finish_reason == "stop"
        messages.append({"role": "assistant", "content": "Done."})
        third = await model.sdk.chat.completions.create(model="m", messages=messages)
        assert third.choices[0].message.content == EXHAUSTED_TEXT
        assert third.choices[0].finish_reason == "stop"
        assert [r["step"] for r in await model.requests()] == [1, 2]

    async def test_no_match_is_a_400_quoting_the_message(self, model: Model) -> None:
        text = "Unscripted " + "x" * 300
        with pytest.raises(openai.BadRequestError) as raised:
            await model.sdk.chat.completions.create(model="m", messages=user(text))
        assert raised.value.status_code == 400
        message = raised.value.message
        assert "no conversation matches" in message
        assert repr(text[:200]) in message
        assert "x" * 201 not in message
        [record] = await model.requests()
        assert (record["conversation"], record["step"]) == (None, None)
        assert record["closedAt"] is not None

    async def test_error_step_answers_the_http_error(self, model: Model) -> None:
        with pytest.raises(openai.APIStatusError) as raised:
            await model.sdk.chat.completions.create(model="m", messages=user("Fail"))
        assert raised.value.status_code == 503
        assert "provider overloaded" in raised.value.message

    async def test_body_that_is_not_json_is_a_400(self, model: Model) -> None:
        async with model.http.post("/v1/chat/completions", data=b"{nope") as response:
            assert response.status == 400
            error = (await response.json())["error"]
        assert error["type"] == "invalid_request_error"
        assert "not a chat-completions request" in error["message"]
        [record] = await model.requests()
        assert record["body"] is None

    async def test_delay(self, model: Model) -> None:
        reply = await model.sdk.chat.completions.create(model="m", messages=user("Slow"))
        assert reply.choices[0].message.content == "late"
        [record] = await model.requests()
        assert record["closedAt"] - record["receivedAt"] >= 0.05

    async def test_finish_reason_length_with_a_truncated_call(self, model: Model) -> None:
        stream = await model.sdk.chat.completions.create(
            model="m", messages=user("Out of room"), stream=True
        )
        chunks = [chunk async for chunk in stream]
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        arguments = "".join(
            call.function.arguments or ""
            for c in chunks
            for call in c.choices[0].delta.tool_calls or []
            if call.function is not None
        )
        assert arguments == '{"path": "a.txt", "content": "ab'
        whole = await model.sdk.chat.completions.create(model="m", messages=user("Out of room"))
        assert whole.choices[0].finish_reason == "length"

    async def test_a_cut_drops_the_connection_after_its_chunks(self, model: Model) -> None:
        stream = await model.sdk.chat.completions.create(
            model="m", messages=user("Dropped"), stream=True
        )
        seen: list[str] = []
        with pytest.raises(openai.APIConnectionError):
            await read_text(stream, seen)
        assert "".join(seen) == "one two "
        [record] = await model.requests()
        assert record["cut"] is True
        assert record["closedAt"] is not None

    async def test_a_cut_with_an_error_sends_it_as_an_event(self, model: Model) -> None:
        stream = await model.sdk.chat.completions.create(
            model="m", messages=user("Broke midway"), stream=True
        )
        seen: list[str] = []
        with pytest.raises(openai.APIError, match="the backend crashed"):
            await read_text(stream, seen)
        assert "".join(seen) == "one two"
        [record] = await model.requests()
        assert record["cut"] is True

    async def test_a_history_with_arguments_that_are_no_object_is_refused(
        self, model: Model
    ) -> None:
        for arguments, problem in (('{"verdict": ', "not JSON"), ("[1]", "not a JSON object")):
            messages: list[ChatCompletionMessageParam] = [
                {"role": "user", "content": "Review the change"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0_0",
                            "type": "function",
                            "function": {"name": "review_verdict", "arguments": arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_0_0", "content": "not sent"},
            ]
            with pytest.raises(openai.BadRequestError) as raised:
                await model.sdk.chat.completions.create(model="m", messages=messages)
            assert raised.value.message.startswith(
                f"Error code: 400 - messages.1.tool_calls.0.function.arguments: {problem}"
            ), raised.value.message

    async def test_models_and_health(self, model: Model) -> None:
        listed = await model.sdk.models.list()
        assert [m.id for m in listed.data] == ["scripted"]
        async with model.http.get("/_health") as response:
            assert response.status == 200


async def read_text(stream: Any, seen: list[str]) -> None:
    """Read a stream's text pieces into ``seen`` until it ends or breaks."""
    async for chunk in stream:
        seen.extend(choice.delta.content or "" for choice in chunk.choices)


async def tool_arguments(model: Model, text: str, *, stream: bool) -> str:
    """The arguments text of the one tool call answering ``text``, as the SDK assembles it."""
    if stream:
        async with model.sdk.chat.completions.stream(model="m", messages=user(text)) as events:
            final = await events.get_final_completion()
        [streamed] = final.choices[0].message.tool_calls or []
        return streamed.function.arguments
    reply = await model.sdk.chat.completions.create(model="m", messages=user(text))
    [call] = reply.choices[0].message.tool_calls or []
    assert call.type == "function"
    return call.function.arguments


class TestHold:
    async def test_held_stream_sends_text_then_waits_for_release(self, model: Model) -> None:
        text_seen = asyncio.Event()

        async def consume() -> list[str]:
            names: list[str] = []
            stream = await model.sdk.chat.completions.create(
                model="m", messages=user("Hold on"), stream=True
            )
            async with stream:
                async for chunk in stream:
                    delta = chunk.choices[0].delta
                    if delta.content:
                        text_seen.set()
                    names += [
                        c.function.name
                        for c in delta.tool_calls or []
                        if c.function and c.function.name
                    ]
            return names

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(text_seen.wait(), WAIT)
        [record] = await model.until(lambda records: bool(records) and records[0]["held"])
        assert record["closedAt"] is None
        assert record["released"] is False
        assert not consumer.done()
        released_at = time.time()
        assert await model.release() == 1
        assert await asyncio.wait_for(consumer, WAIT) == ["finish"]
        [record] = await model.until(lambda records: records[0]["closedAt"] is not None)
        assert record["released"] is True
        assert record["disconnected"] is False
        assert record["closedAt"] >= released_at

    async def test_release_by_match(self, model: Model) -> None:
        calls = [
            asyncio.create_task(model.sdk.chat.completions.create(model="m", messages=user(text)))
            for text in ("Hold on", "Hold two")
        ]
        await model.until(lambda records: len(records) == 2 and all(r["held"] for r in records))
        assert await model.release({"match": "Hold two"}) == 1
        second = await asyncio.wait_for(calls[1], WAIT)
        assert second.choices[0].message.content == "second"
        assert not calls[0].done()
        assert await model.release({"match": "Hold two"}) == 0
        assert await model.release({}) == 1
        first = await asyncio.wait_for(calls[0], WAIT)
        assert first.choices[0].finish_reason == "tool_calls"
        records = await model.requests()
        assert [(r["conversation"], r["released"]) for r in records] == [
            ("Hold on", True),
            ("Hold two", True),
        ]

    async def test_disconnect_while_held_is_recorded(self, model: Model) -> None:
        text_seen = asyncio.Event()

        async def consume() -> None:
            stream = await model.sdk.chat.completions.create(
                model="m", messages=user("Hold on"), stream=True
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices[0].delta.content:
                        text_seen.set()

        consumer = asyncio.create_task(consume())
        await asyncio.wait_for(text_seen.wait(), WAIT)
        await model.until(lambda records: bool(records) and records[0]["held"])
        cut_at = time.time()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        [record] = await model.until(lambda records: records[0]["closedAt"] is not None)
        assert record["disconnected"] is True
        assert record["released"] is False
        assert record["closedAt"] >= cut_at
        assert await model.release() == 0
        # Close the clients' idle keep-alive connections, whose server tasks wait for a
        # next request; then nothing at all may be left running.
        await model.http.close()
        await model.sdk.close()
        await others_settled()

    async def test_stopping_the_runner_ends_held_responses(self) -> None:
        runner, url = await serve(parse_script(SCRIPT), "127.0.0.1", 0)
        app = runner.app
        async with AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as sdk:
            call = asyncio.create_task(
                sdk.chat.completions.create(model="m", messages=user("Hold on"))
            )
            journal = app[JOURNAL]
            deadline = time.monotonic() + WAIT
            while not any(record.held for record in journal.records()):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            started = time.monotonic()
            await runner.cleanup()
            assert time.monotonic() - started < WAIT
            with pytest.raises(openai.APIConnectionError):
                await call
        [record] = journal.records()
        assert record.disconnected is True
        assert record.closed_at is not None

    async def test_bad_release_body_is_a_400(self, model: Model) -> None:
        async with model.http.post("/_release", json={"conversation": "x"}) as response:
            assert response.status == 400
            assert "not a release request" in (await response.json())["error"]["message"]


async def test_request_record_and_clear(model: Model) -> None:
    before = time.time()
    await model.sdk.chat.completions.create(model="first", messages=user("Review the change"))
    stream = await model.sdk.chat.completions.create(
        model="second", messages=user("Keep going"), stream=True
    )
    async with stream:
        [_ async for _ in stream]
    records = await model.requests()
    assert [r["index"] for r in records] == [0, 1]
    assert [(r["conversation"], r["step"]) for r in records] == [
        ("Review the change", 0),
        ("Keep going", 0),
    ]
    assert records[0]["body"] == {"model": "first", "messages": user("Review the change")}
    assert records[1]["body"]["stream"] is True
    for record in records:
        assert before <= record["receivedAt"] <= record["closedAt"] <= time.time()
        assert (record["held"], record["released"], record["disconnected"]) == (False, False, False)
        assert record["cut"] is False
    async with model.http.delete("/_requests") as response:
        assert response.status == 200
    assert await model.requests() == []
    await model.sdk.chat.completions.create(model="third", messages=user("Keep going"))
    assert [r["index"] for r in await model.requests()] == [2]


class TestCli:
    async def test_port_zero_prints_the_bound_url(self, tmp_path: Path) -> None:
        script = tmp_path / "script.yaml"
        script.write_text(SCRIPT, encoding="utf-8")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kubeturn_harness.scripted",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--script",
            str(script),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            line = await asyncio.wait_for(process.stdout.readline(), WAIT * 2)  # type: ignore[union-attr]
            found = re.fullmatch(
                r"scripted model listening on (http://127\.0\.0\.1:(\d+)/v1)\n", line.decode()
            )
            assert found is not None, line
            assert int(found[2]) > 0
            async with AsyncOpenAI(base_url=found[1], api_key="x", max_retries=0) as sdk:
                reply = await sdk.chat.completions.create(model="m", messages=user("Keep going"))
            assert reply.choices[0].message.content == "first"
        finally:
            process.terminate()
            await asyncio.wait_for(process.communicate(), WAIT)
        assert process.returncode == 0

    def test_bad_script_exits_2_naming_the_path(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        script = tmp_path / "bad.yaml"
        script.write_text("conversations:\n  - mach: x\n", encoding="utf-8")
        assert cli.main(["--script", str(script)]) == 2
        error = capsys.readouterr().err
        assert str(script) in error
        assert "conversations[0].mach: unknown key" in error
