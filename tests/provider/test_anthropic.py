"""The Harness on a ``type: anthropic`` provider: llama.cpp's real server, through its
Messages route (``/v1/messages``), behind the fault proxy.

Cases:
- a Turn with tools, streamed: the model calls a Working tool (``write``), then the
  Menu pick ``done``, which ends the Turn: the Submission settles ``ended``; the server
  received exactly two Messages requests and none after; the first carries the system
  block, the tools and the prompt with their cache breakpoints; the second carries the
  call as a ``tool_use`` block and its result as a ``tool_result`` block; the usage in
  the record is what llama.cpp reported (input, cache reads, output), request by request
  and in total, its cache reads counted on the second request;
- a sweep while the answer streams (the response held open after its headers): the
  Submission settles ``aborted``, the proxy sees its client close the connection, and
  no request follows;
- a refusal (400): the Submission fails with the API's message, after one request;
- Anthropic's 529 (overloaded) is retried by kubeturn's policy: the second request's
  answer ends the Turn by its pick.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.harness.support import (
    HarnessClient,
    StubOrchestrator,
)
from tests.provider.conftest import StartProviderWorld
from tests.provider.faults import Answer, Exchange, FaultProxy, Stall, Steer

MODEL = "claude/tiny"
IID = "iid-anthropic-1"
PROMPT = "Write a greeting to hello, then call done."
CACHE = {"type": "ephemeral"}


def done_surface(iid: str) -> dict[str, Any]:
    return {
        "instanceId": iid,
        "runId": "default.hello",
        "menu": [{"name": "done", "description": "The greeting is written.", "input": {}}],
        "allowed": ["done"],
    }


class ClosingProxy(FaultProxy):
    """The fault proxy, counting in ``gone`` the stalled responses whose client closed
    the connection."""

    gone = 0

    async def _stall(self, request: web.Request, exchange: Exchange) -> web.StreamResponse:
        try:
            return await super()._stall(request, exchange)
        except asyncio.CancelledError:  # the client closed the connection
            self.gone += 1
            raise


@pytest.fixture
async def proxy(llama_url: str) -> AsyncIterator[ClosingProxy]:
    started = await ClosingProxy(llama_url).start()
    yield started
    await started.close()


class World:
    def __init__(self, proxy: ClosingProxy, stub: StubOrchestrator, harness: HarnessClient):
        self.proxy = proxy
        self.orchestrator = stub
        self.harness = harness

    async def admit(self, prompt: str = PROMPT) -> str:
        return await self.harness.admit(IID, prompt, model=MODEL)


@pytest.fixture
async def world(provider_world: StartProviderWorld, proxy: ClosingProxy) -> World:
    """The real Harness with ``{claude: {type: anthropic, baseUrl: <proxy>}}``."""
    root = proxy.url.removesuffix("/v1")  # the SDK adds /v1/messages
    started = await provider_world(providers=f"claude:\n  type: anthropic\n  baseUrl: {root}\n")
    started.orchestrator.surfaces[IID] = done_surface(IID)
    return World(proxy, started.orchestrator, started.harness)


async def test_a_turn_with_tools_streams_and_ends_by_its_pick(world: World) -> None:
    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        await world.harness.abort(iid, {"cause": "pick", "submissionId": sid})
        return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

    world.orchestrator.on_pick = on_pick
    world.proxy.steer(Steer("write"), Steer("done"))
    sid = await world.admit()
    settled = await world.harness.settlement(IID, sid, timeout=60)

    assert settled["outcome"] == "ended"
    assert world.orchestrator.picks == [(IID, {"type": "done"})]
    assert (world.harness.workdir / "hello").read_text() == "hello"
    exchanges = world.proxy.exchanges
    assert [(e.path, e.status, e.finished) for e in exchanges] == [("/v1/messages", 200, True)] * 2
    first, second = world.proxy.sent
    assert first["model"] == "tiny"
    assert first["stream"] is True
    assert first["system"][-1]["cache_control"] == CACHE
    assert {t["name"] for t in first["tools"]} >= {"write", "done"}
    assert first["tools"][-1]["cache_control"] == CACHE
    assert first["messages"][0]["content"][-1]["cache_control"] == CACHE
    call = second["messages"][-2]["content"][-1]
    assert (call["type"], call["name"], call["input"]) == (
        "tool_use",
        "write",
        {"path": "hello", "content": "hello"},
    )
    (result,) = second["messages"][-1]["content"]
    assert (result["type"], result["tool_use_id"]) == ("tool_result", call["id"])
    assert result["cache_control"] == CACHE

    history = await world.harness.history(IID)
    answers = [m for m in history["messages"] if m["role"] == "assistant"]
    assert len(answers) == 2
    reported = [e.usage for e in exchanges]
    started = [e.events[0]["message"]["usage"] for e in exchanges]
    wanted = [
        {
            "promptTokens": s["input_tokens"]
            + s.get("cache_read_input_tokens", 0)
            + s.get("cache_creation_input_tokens", 0),
            "completionTokens": r["output_tokens"],
            "cacheReadTokens": s.get("cache_read_input_tokens", 0),
            "cacheWriteTokens": s.get("cache_creation_input_tokens", 0),
            "cost": None,  # the providers file gives this model no price
        }
        for s, r in zip(started, reported, strict=True)
        if r is not None
    ]
    assert [m["usage"] for m in answers] == wanted
    assert wanted[1]["cacheReadTokens"] > 0  # the second request reused the first's prefix
    summed = {key: sum(u[key] for u in wanted) for key in wanted[0] if key != "cost"}
    assert settled["usage"] == {**summed, "cost": None}


async def test_a_sweep_closes_the_stream_and_no_request_follows(world: World) -> None:
    world.proxy.queue(Stall())
    sid = await world.admit()
    async with asyncio.timeout(30):
        while not world.proxy.exchanges:
            await asyncio.sleep(0.02)
    await world.harness.abort(IID, {"cause": None, "submissionId": sid})
    settled = await world.harness.settlement(IID, sid, timeout=30)
    assert settled["outcome"] == "aborted"
    async with asyncio.timeout(10):
        while not world.proxy.gone:
            await asyncio.sleep(0.02)
    assert world.proxy.gone == 1
    assert len(world.proxy.exchanges) == 1  # the run settled: nothing more can be asked
    assert world.proxy.exchanges[0].path == "/v1/messages"


async def test_a_refusal_fails_the_submission_after_one_request(world: World) -> None:
    refusal = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    world.proxy.queue(Answer(400, refusal))
    sid = await world.admit()
    settled = await world.harness.settlement(IID, sid, timeout=30)
    assert settled["outcome"] == "failed"
    root = world.proxy.url.removesuffix("/v1")
    assert settled["error"]["message"] == (
        f"provider 'claude' ({root}), model 'tiny' answered HTTP 400 (bad request) to 1 "
        "request, which kubeturn does not retry: no"
    )
    assert len(world.proxy.exchanges) == 1


async def test_an_overloaded_answer_is_retried_by_the_policy(world: World) -> None:
    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        await world.harness.abort(iid, {"cause": "pick", "submissionId": sid})
        return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

    world.orchestrator.on_pick = on_pick
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    world.proxy.queue(Answer(529, overloaded))
    world.proxy.steer(Steer("done"))
    sid = await world.admit()
    settled = await world.harness.settlement(IID, sid, timeout=60)
    assert settled["outcome"] == "ended"
    assert [e.status for e in world.proxy.exchanges] == [529, 200]
    assert world.orchestrator.picks == [(IID, {"type": "done"})]
