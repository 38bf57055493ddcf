"""A strict stand-in for Anthropic's Messages API on 127.0.0.1, for the adapter's tests.

It refuses, with the API's 400 ``invalid_request_error``, what the real API refuses and a
converter could get wrong: roles that do not alternate or a first message not from the
user; empty text; a ``tool_use`` not answered at the start of the next user message, or
a ``tool_result`` answering no call of the message before it; a tool id outside
``[A-Za-z0-9_-]``; a tool ``input`` that is not an object; more than four cache
breakpoints, or one on a thinking block or empty text; a thinking budget under 1024 or
not under ``max_tokens``; thinking on while the prompt ends in a tool loop (answers and
user messages of tool results only) whose first answer does not start with thinking, as
the API's documentation reads; a tool without an object ``input_schema``.

Each request takes the next item of its script: an ``Answer`` to stream (its events may
be stopped before the end, or held until the test lets them go), or a ``Refusal`` (a
status, headers and body). Every request body is kept, and the server counts the
connections its clients closed while it was still writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

TOOL_ID = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Answer:
    """An answer streamed as the API streams one."""

    blocks: list[dict[str, Any]]
    """Content blocks, whole: text, thinking (with signature), tool_use (with input)."""
    stop_reason: str | None = "end_turn"
    usage: dict[str, int] = field(default_factory=lambda: {"input_tokens": 10, "output_tokens": 5})
    cut_after: int | None = None
    """Close the connection after this many events (a stream that breaks)."""
    error_after: tuple[int, dict[str, Any]] | None = None
    """After this many events, send an ``error`` event with this body and stop."""
    hold_after: int | None = None
    """After this many events, wait for ``MessagesApi.release`` before going on."""
    end_early: int | None = None
    """End the stream cleanly after this many events (no ``message_stop``)."""


@dataclass
class Refusal:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


Item = Answer | Refusal


def events_of(answer: Answer) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events of an answer, in the API's order."""
    usage = answer.usage
    start_usage = {key: value for key, value in usage.items() if key != "output_tokens"}
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-test",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**start_usage, "output_tokens": 1},
                },
            },
        )
    ]
    for index, block in enumerate(answer.blocks):
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": part} for part in _halves(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": part} for part in _halves(block["thinking"])
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "redacted_thinking":
            start, deltas = dict(block), []
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": part} for part in _halves(text)]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        events.extend(
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": answer.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


class MessagesApi:
    def __init__(self, script: list[Item]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.closed_by_client = 0
        """Streams whose client went away before the stream's end."""
        self.held = asyncio.Event()
        """Set when a stream reaches its ``hold_after``."""
        self.release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        keyed = "x-api-key" in request.headers or "Authorization" in request.headers
        if not keyed or "anthropic-version" not in request.headers:
            return _refuse(401, "authentication_error", "a key and anthropic-version needed")
        body = await request.json()
        self.requests.append(body)
        problem = check(body)
        if problem is not None:
            return _refuse(400, "invalid_request_error", problem)
        if not self.script:
            return _refuse(500, "api_error", "the script has no answer left")
        item = self.script.pop(0)
        if isinstance(item, Refusal):
            return web.json_response(item.body, status=item.status, headers=item.headers)
        return await self._stream(request, item)

    async def _stream(self, request: web.Request, answer: Answer) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for sent, (name, data) in enumerate(events_of(answer)):
                if sent == answer.hold_after:
                    self.held.set()
                    await self.release.wait()
                if sent == answer.cut_after:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if answer.error_after is not None and sent == answer.error_after[0]:
                    await _send(response, "error", answer.error_after[1])
                    return response
                if sent == answer.end_early:
                    break
                await _send(response, name, data)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.closed_by_client += 1
            raise
        return response


async def _send(response: web.StreamResponse, name: str, data: dict[str, Any]) -> None:
    await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())


def _refuse(status: int, kind: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status)


def check(body: dict[str, Any]) -> str | None:
    """What the real API would refuse in this request body, or None."""
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return f"{name}: Field required"
    messages = body["messages"]
    if not messages or messages[0]["role"] != "user":
        return "messages: the first message must use the user role"
    breakpoints = 0
    for tool in body.get("tools", []):
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools: {tool.get('name')}: input_schema must be an object schema"
        breakpoints += "cache_control" in tool
    for block in body.get("system", []):
        if not block.get("text"):
            return "system: text content blocks must be non-empty"
        breakpoints += "cache_control" in block
    asked: list[str] = []
    for index, message in enumerate(messages):
        if index and message["role"] == messages[index - 1]["role"]:
            return f"messages.{index}: roles must alternate between user and assistant"
        content = message["content"]
        if not content:
            return f"messages.{index}: all messages must have non-empty content"
        problem = _check_blocks(index, message["role"], content, asked)
        if problem is not None:
            return problem
        breakpoints += sum("cache_control" in block for block in content)
        asked = [b["id"] for b in content if b["type"] == "tool_use"]
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    return _check_thinking(body)


def _check_blocks(
    index: int, role: str, content: list[dict[str, Any]], asked: list[str]
) -> str | None:
    where = f"messages.{index}"
    results = [b["tool_use_id"] for b in content if b["type"] == "tool_result"]
    if role == "user":
        if set(results) - set(asked):
            return f"{where}: unexpected tool_use_id found in tool_result blocks: {results}"
        if set(asked) - set(results):
            return f"{where}: tool_use ids were found without tool_result blocks: {asked}"
        if [b["type"] for b in content[: len(results)]] != ["tool_result"] * len(results):
            return f"{where}: tool_result blocks must come before any other content"
    elif results:
        return f"{where}: tool_result blocks belong in user messages"
    for number, block in enumerate(content):
        kind = block["type"]
        if kind == "text" and not block.get("text"):
            return f"{where}.content.{number}: text content blocks must be non-empty"
        if kind in ("thinking", "redacted_thinking") and "cache_control" in block:
            return f"{where}.content.{number}: thinking blocks cannot have cache_control"
        if kind == "tool_use":
            if not TOOL_ID.match(block["id"]):
                return f"{where}.content.{number}.id: String should match pattern"
            if not isinstance(block.get("input"), dict):
                return f"{where}.content.{number}.input: Input should be a valid dictionary"
        if kind == "thinking" and not block.get("signature"):
            return f"{where}.content.{number}.signature: Field required"
    return None


def _check_thinking(body: dict[str, Any]) -> str | None:
    thinking = body.get("thinking")
    if thinking is None or thinking.get("type") != "enabled":
        return None
    budget = thinking["budget_tokens"]
    if budget < 1024:
        return "thinking.budget_tokens: Input should be greater than or equal to 1024"
    if budget >= body["max_tokens"]:
        return "`max_tokens` must be greater than `thinking.budget_tokens`"
    messages = body["messages"]
    index = len(messages) - 1
    opening = None
    while index >= 1 and all(b["type"] == "tool_result" for b in messages[index]["content"]):
        opening, index = messages[index - 1], index - 2
    if opening is not None:
        first = opening["content"][0]["type"]
        if first not in ("thinking", "redacted_thinking"):
            return (
                "Expected `thinking` or `redacted_thinking`, but found `" + first + "`. When "
                "`thinking` is enabled, a final `assistant` message must start with a thinking "
                "block."
            )
    return None


@contextlib.asynccontextmanager
async def serving(script: list[Item]) -> AsyncIterator[MessagesApi]:
    """The stand-in on a free port of 127.0.0.1; its ``url`` is the provider's baseUrl."""
    api = MessagesApi(script)
    app = web.Application()
    app.router.add_post("/v1/messages", api.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    api.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield api
    finally:
        api.release.set()
        await runner.cleanup()
