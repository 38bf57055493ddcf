"""The fault proxy does what its docstring says, against llama.cpp's real server.

Cases:
- with no fault queued, a streamed answer passes through whole: a tool call, its
  ``finish_reason`` and the usage the server reported are recorded;
- ``Answer`` answers alone (500; 429 with its ``Retry-After``): nothing is forwarded;
- ``Delay`` forwards after waiting; ``Steer(text=True)`` makes the model answer text,
  and the request recorded as sent carries no ``logit_bias``;
- ``Stall`` sends the headers and then nothing; the client gives up;
- ``Cut`` closes the connection after N events: the client sees the stream break;
- ``Rewrite`` replaces a streamed call's arguments and its ``finish_reason``;
- ``Steer(repeat=True)`` has the model repeat its call in one answer, cut at
  ``max_tokens``: two whole ``done`` calls, ``finish_reason: length``;
- llama.cpp's Anthropic Messages route (``/v1/messages``) streams a tool call through it,
  steered by narrowing the tools forwarded (that route drops ``logit_bias``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.provider.faults import Answer, Cut, Delay, FaultProxy, Rewrite, Stall, Steer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "done", "description": "Finish.", "parameters": {"type": "object"}},
    },
]


def chat(**extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Write hello, then call done."}],
        "tools": TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, list[dict[str, Any]]]:
    """The status and the JSON events of one streamed request."""
    async with session.post(url, json=body) as response:
        events = []
        async for line in response.content:
            text = line.decode().strip()
            if text.startswith("data: ") and text != "data: [DONE]":
                events.append(json.loads(text.removeprefix("data: ")))
        return response.status, events


def call_of(events: list[dict[str, Any]]) -> tuple[str, str, str | None]:
    """The streamed tool call (name, arguments) and the finish reason."""
    name, arguments, finish = "", "", None
    for event in events:
        for choice in event.get("choices", []):
            for call in choice["delta"].get("tool_calls") or []:
                name += call["function"].get("name") or ""
                arguments += call["function"].get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return name, arguments, finish


async def test_a_streamed_answer_passes_through_whole(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.steer(Steer("write"))
    status, events = await stream(session, f"{proxy.url}/chat/completions", chat())
    assert status == 200
    assert call_of(events) == ("write", '{"path": "hello", "content": "hello"}', "tool_calls")
    (exchange,) = proxy.exchanges
    assert exchange.finished
    assert exchange.events == events
    assert exchange.usage == events[-1]["usage"]
    assert exchange.usage["completion_tokens"] > 0
    assert exchange.sent == chat()
    assert exchange.forwarded == {**chat(), "logit_bias": {"write": 20.0}}


async def test_an_answer_is_given_alone(proxy: FaultProxy, session: aiohttp.ClientSession) -> None:
    proxy.queue(Answer(500), Answer(429, headers={"Retry-After": "7"}))
    async with session.post(f"{proxy.url}/chat/completions", json=chat()) as response:
        assert response.status == 500
    async with session.post(f"{proxy.url}/chat/completions", json=chat()) as response:
        assert response.status == 429
        assert response.headers["Retry-After"] == "7"
    assert [(e.status, e.forwarded) for e in proxy.exchanges] == [(500, None), (429, None)]


async def test_a_delayed_request_is_forwarded_and_text_can_be_steered(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.queue(Delay(0.1))
    proxy.steer(Steer(text=True))
    status, events = await stream(session, f"{proxy.url}/chat/completions", chat())
    assert status == 200
    text = "".join(c["delta"].get("content") or "" for e in events for c in e["choices"])
    assert text == "hello"
    assert call_of(events) == ("", "", "stop")
    assert "logit_bias" not in proxy.exchanges[0].sent


async def test_a_stalled_stream_sends_headers_and_nothing(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.queue(Stall())
    async with session.post(f"{proxy.url}/chat/completions", json=chat()) as response:
        assert response.status == 200
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await response.content.readany()
    assert proxy.exchanges[0].events == []


async def test_a_cut_stream_breaks_after_n_events(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.queue(Cut(after=3))
    with pytest.raises(aiohttp.ClientPayloadError):
        await stream(session, f"{proxy.url}/chat/completions", chat())
    (exchange,) = proxy.exchanges
    assert len(exchange.events) == 3
    assert not exchange.finished


async def test_a_rewrite_replaces_the_arguments_and_the_finish_reason(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.queue(Rewrite(arguments='{"path": "hel', finish_reason="length"))
    proxy.steer(Steer("write"))
    status, events = await stream(session, f"{proxy.url}/chat/completions", chat())
    assert status == 200
    assert call_of(events) == ("write", '{"path": "hel', "length")


async def test_a_repeating_steer_gives_several_identical_calls_in_one_answer(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.steer(Steer("done", repeat=True, max_tokens=28))
    status, events = await stream(session, f"{proxy.url}/chat/completions", chat())
    assert status == 200
    calls: dict[int, str] = {}
    for event in events:
        for choice in event.get("choices", []):
            for call in choice["delta"].get("tool_calls") or []:
                name = call["function"].get("name") or ""
                calls[call["index"]] = calls.get(call["index"], "") + name
    assert calls == {0: "done", 1: "done"}
    assert call_of(events)[2] == "length"
    assert "max_tokens" not in proxy.exchanges[0].sent


async def test_the_anthropic_messages_route_streams_a_steered_tool_call(
    proxy: FaultProxy, session: aiohttp.ClientSession
) -> None:
    proxy.steer(Steer("review_verdict", "reject"))
    verdict = {"type": "string", "enum": ["approve", "reject"]}
    tools = [
        {"name": "done", "description": "Finish.", "input_schema": {"type": "object"}},
        {
            "name": "review_verdict",
            "description": "Your verdict.",
            "input_schema": {
                "type": "object",
                "properties": {"verdict": verdict},
                "required": ["verdict"],
            },
        },
    ]
    body = {
        "model": "tiny",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "Give your verdict."}],
        "tools": tools,
    }
    status, events = await stream(session, f"{proxy.url}/messages", body)
    assert status == 200
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    (block,) = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert (block["type"], block["name"]) == ("tool_use", "review_verdict")
    arguments = "".join(
        e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"
    )
    assert json.loads(arguments) == {"verdict": "reject"}
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"
    (exchange,) = proxy.exchanges
    assert exchange.usage == delta["usage"]
    assert exchange.sent == body
    assert exchange.forwarded is not None
    assert [t["name"] for t in exchange.forwarded["tools"]] == ["review_verdict"]
