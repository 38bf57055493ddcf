"""A fault-injecting proxy between the Harness and llama.cpp's server, on 127.0.0.1.

The Harness's providers file points at ``proxy.url`` (``http://127.0.0.1:PORT/v1``); every
request is forwarded to the server unless the test queued a fault for it. Use::

    proxy.queue(Answer(429, headers={"Retry-After": "1"}), Cut(after=3), PassThrough())
    proxy.steer(Steer("write"), Steer("done"))
    ...                                   # the Harness asks its model
    assert [e.sent["model"] for e in proxy.exchanges] == ["tiny", "tiny", "tiny"]

- ``queue(*faults)``: each model request (``POST /v1/chat/completions`` or
  ``/v1/messages``) takes the next fault; with the queue empty, ``PassThrough``.
  ``Answer(status, body, headers)`` answers without forwarding (500, 429 with
  ``Retry-After``, 400); ``Delay(seconds)`` waits, then forwards; ``Stall()`` sends the
  response headers and then nothing, until the client gives up; ``Cut(after=N)`` forwards
  and closes the connection after N streamed events; ``Rewrite(arguments=...,
  finish_reason=...)`` forwards a streamed answer with its tool call's arguments replaced
  (truncated or invalid JSON: one delta carries the whole new text) and/or its
  ``finish_reason`` replaced (e.g. ``"length"``).
- ``steer(*steers)``: what the tiny model says is decided by a ``logit_bias`` the proxy
  adds to each model request (``tinymodel`` explains why it needs one): ``Steer("done")``
  makes it call ``done``; ``Steer("review_verdict", "approve")`` also picks that enum
  value; ``Steer(text=True)`` makes it answer text instead of a call;
  ``Steer("done", repeat=True, max_tokens=28)`` makes it call ``done`` twice in one
  answer (llama.cpp's own parallel calls). Each request takes the next steer; with none
  left, the last one given stays in force. On ``/v1/messages``, whose llama.cpp route
  drops ``logit_bias``, a steer forwards only its tool (and its value as the only one the
  tool's ``enum`` allows); text and repeats cannot be steered there.
- ``exchanges``: one ``Exchange`` per request received, in order: ``sent`` is the JSON
  body exactly as the Harness sent it (assert on this), ``forwarded`` what went to the
  server after steering (None when the fault answered alone), ``fault`` the fault
  applied, ``status`` the status answered, ``events`` the streamed events relayed,
  ``usage`` the usage the server reported in the stream, ``finished`` whether the answer
  reached its end (``data: [DONE]`` or the body) rather than being cut.

Requests other than model requests (``/health``) are forwarded and not recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.provider import tinymodel

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
"""llama.cpp's Anthropic Messages API."""
MODEL_PATHS = (CHAT, MESSAGES)
TEXT_BIAS = {"<tool_call>": False, '{"': False}
"""A ``logit_bias`` entry of ``false`` bans a token: with no call to open, the model answers
with text."""
NAME_BIAS = 20.0
"""Enough to win where the grammar allows a name, too little to matter where it does
not (the tiny model's own preferences there are worth ~100)."""


@dataclass(frozen=True)
class PassThrough:
    pass


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] = field(default_factory=lambda: {"error": {"message": "injected"}})
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    seconds: float


@dataclass(frozen=True)
class Stall:
    pass


@dataclass(frozen=True)
class Cut:
    after: int


@dataclass(frozen=True)
class Rewrite:
    arguments: str | None = None
    finish_reason: str | None = None


Fault = PassThrough | Answer | Delay | Stall | Cut | Rewrite


@dataclass(frozen=True)
class Steer:
    tool: str | None = None
    value: str | None = None
    text: bool = False
    repeat: bool = False
    """Ban the end of the answer: the model calls ``tool`` again and again, in one answer,
    until ``max_tokens`` (or the server's limit, 256) cuts it with ``finish_reason:
    length``. A ``done`` call with no arguments is 14 tokens: ``max_tokens=28`` gives two
    whole calls."""
    max_tokens: int | None = None

    def logit_bias(self) -> dict[str, Any]:
        if self.text:
            return dict(TEXT_BIAS)
        bias: dict[str, Any] = {word: NAME_BIAS for word in (self.tool, self.value) if word}
        if self.repeat:
            bias[str(tinymodel.END_OF_ANSWER)] = False
        return bias

    def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` as forwarded: steered, and ``max_tokens`` set if given."""
        forwarded = dict(body)
        if self.max_tokens is not None:
            forwarded["max_tokens"] = self.max_tokens
        if path == MESSAGES:
            return self._narrowed(forwarded)
        bias = self.logit_bias()
        if bias:
            forwarded["logit_bias"] = {**bias, **body.get("logit_bias", {})}
        return forwarded

    def _narrowed(self, body: dict[str, Any]) -> dict[str, Any]:
        """llama.cpp's Messages route drops ``logit_bias``: there the steered tool is the
        only tool forwarded, and the steered value the only one its ``enum`` allows."""
        if self.tool is None:
            return body
        tools = [dict(t) for t in body.get("tools", []) if t.get("name") == self.tool]
        for tool in tools:
            schema = json.loads(json.dumps(tool.get("input_schema", {})))
            for prop in schema.get("properties", {}).values():
                if self.value is not None and self.value in prop.get("enum", []):
                    prop["enum"] = [self.value]
            tool["input_schema"] = schema
        return {**body, "tools": tools}


@dataclass
class Exchange:
    path: str
    sent: dict[str, Any]
    fault: Fault
    forwarded: dict[str, Any] | None = None
    status: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finished: bool = False


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.url = ""
        self.exchanges: list[Exchange] = []
        self._faults: deque[Fault] = deque()
        self._steers: deque[Steer] = deque()
        self._steer = Steer()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._stalled: list[asyncio.Event] = []

    def queue(self, *faults: Fault) -> None:
        self._faults.extend(faults)

    def steer(self, *steers: Steer) -> None:
        self._steers.extend(steers)

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The bodies of every model request, as the Harness sent them."""
        return [exchange.sent for exchange in self.exchanges]

    async def start(self) -> FaultProxy:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def close(self) -> None:
        for stalled in self._stalled:
            stalled.set()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _next_steer(self) -> Steer:
        if self._steers:
            self._steer = self._steers.popleft()
        return self._steer

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST" or request.path not in MODEL_PATHS:
            return await self._forward_plain(request)
        sent = await request.json()
        fault = self._faults.popleft() if self._faults else PassThrough()
        exchange = Exchange(request.path, sent, fault)
        self.exchanges.append(exchange)
        if isinstance(fault, Answer):
            exchange.status = fault.status
            return web.json_response(fault.body, status=fault.status, headers=fault.headers)
        if isinstance(fault, Stall):
            return await self._stall(request, exchange)
        if isinstance(fault, Delay):
            await asyncio.sleep(fault.seconds)
        forwarded = self._next_steer().apply(request.path, sent)
        exchange.forwarded = forwarded
        return await self._relay(request, exchange, forwarded)

    async def _stall(self, request: web.Request, exchange: Exchange) -> web.StreamResponse:
        exchange.status = 200
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        released = asyncio.Event()
        self._stalled.append(released)
        await released.wait()  # the client disconnecting cancels this handler
        return response

    async def _relay(
        self, request: web.Request, exchange: Exchange, body: dict[str, Any]
    ) -> web.StreamResponse:
        assert self._session is not None
        async with self._session.post(self.upstream + request.path, json=body) as upstream:
            exchange.status = upstream.status
            if not body.get("stream") or upstream.status != 200:
                data = await upstream.read()
                exchange.finished = True
                if upstream.status == 200 and request.path == CHAT:
                    exchange.usage = json.loads(data).get("usage")
                return web.Response(
                    body=data, status=upstream.status, content_type=upstream.content_type
                )
            response = web.StreamResponse(
                status=upstream.status, headers={"Content-Type": "text/event-stream"}
            )
            await response.prepare(request)
            async for event in _events(upstream.content):
                if isinstance(exchange.fault, Cut) and len(exchange.events) >= exchange.fault.after:
                    _abort(request)
                    return response
                event = _rewritten(event, exchange.fault)
                data = _data(event)
                if data == "[DONE]":
                    exchange.finished = True
                elif data is not None:
                    parsed = json.loads(data)
                    exchange.events.append(parsed)
                    if parsed.get("usage"):
                        exchange.usage = parsed["usage"]
                await response.write(event)
            await response.write_eof()
            if request.path == MESSAGES:
                exchange.finished = True
            return response

    async def _forward_plain(self, request: web.Request) -> web.Response:
        assert self._session is not None
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=await request.read()
        ) as upstream:
            return web.Response(
                body=await upstream.read(),
                status=upstream.status,
                content_type=upstream.content_type,
            )


async def _events(stream: aiohttp.StreamReader) -> Any:
    """Server-sent events, each with its terminating blank line, as bytes."""
    buffer = b""
    async for line in stream:
        buffer += line
        if line in (b"\n", b"\r\n"):
            yield buffer
            buffer = b""
    if buffer.strip():
        yield buffer


def _data(event: bytes) -> str | None:
    for line in event.decode().splitlines():
        if line.startswith("data: "):
            return line.removeprefix("data: ")
    return None


def _rewritten(event: bytes, fault: Fault) -> bytes:
    """The event with a tool call's arguments and the finish reason rewritten; the whole
    new argument text goes in the call's first argument delta, later ones are emptied."""
    data = _data(event)
    if not isinstance(fault, Rewrite) or data is None or data == "[DONE]":
        return event
    chunk = json.loads(data)
    for choice in chunk.get("choices", []):
        for call in choice.get("delta", {}).get("tool_calls") or []:
            function = call.get("function") or {}
            if fault.arguments is not None and "arguments" in function:
                function["arguments"] = fault.arguments if "name" in function else ""
        if fault.finish_reason is not None and choice.get("finish_reason"):
            choice["finish_reason"] = fault.finish_reason
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _abort(request: web.Request) -> None:
    """Close the client's connection mid-stream, without the chunked body's end."""
    transport = request.transport
    if transport is not None:
        transport.abort()
