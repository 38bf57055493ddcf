"""What real models answer, against llama.cpp's real server (docs/turn-semantics.md §8).

The fault proxy turns llama.cpp's own streams into what real models and servers produce;
each scenario asserts the requests the server received, that it accepted every one (no
500 for a conversation holding a broken call: llama.cpp's chat template parses every
call's arguments), the settlement and the record.

Cases:
- truncated JSON arguments of a Working tool call: the call does not run; the next
  request carries ``{}`` in their place and is accepted; a continued conversation's
  request too; the record keeps the text the model wrote;
- ``finish_reason: length`` on a call whose arguments parse: it does not run; the model
  reads why, calls ``done``, and the Turn ends ``ended`` after two accepted requests;
- ``finish_reason: length`` on a text answer: the next request ends with the note, and
  the Turn goes on to its pick;
- twelve identical ``done`` calls in one answer (llama.cpp's one call, repeated by a
  relay before the Harness, as a real model wrote them): the first ends the Turn, the
  rest are blocked; one request, one pick, ``ended``, one settlement, no runaway;
- a stream cut midway at every attempt of the retry policy (3): the Submission settles
  ``failed``; the record keeps the text and the call as far as llama.cpp streamed them in
  the last attempt, marked ``failed``, once; the call never runs; a continued
  conversation's request, without that call, is accepted.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn_harness.receipts import AFTER_TURN_END, CUT_AT_LIMIT_NOTE, cut_at_limit
from tests.provider.conftest import ProviderWorld, StartProviderWorld
from tests.provider.faults import Cut, FaultProxy, Rewrite, Steer

IID = "iid-provider-answers"
PROMPT = "Write a greeting to hello, then call done."
SETTLE_S = 60.0
"""A request to the tiny model takes about a second; a loaded CI machine may take more."""


def done_surface(iid: str) -> dict[str, Any]:
    return {
        "instanceId": iid,
        "runId": "default.hello",
        "menu": [{"name": "done", "description": "The greeting is written.", "input": {}}],
        "allowed": ["done"],
    }


async def start(provider_world: StartProviderWorld) -> ProviderWorld:
    """A world whose ``done`` pick ends the Turn, swept first as the Orchestrator does."""
    w = await provider_world()
    w.orchestrator.surfaces[IID] = done_surface(IID)

    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        history = await w.harness.history(iid)
        (running,) = [s for s in history["submissions"] if s["state"] == "running"]
        await w.harness.abort(iid, {"cause": "pick", "submissionId": running["submissionId"]})
        return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

    w.orchestrator.on_pick = on_pick
    return w


def calls_sent(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (call["function"]["name"], call["function"]["arguments"])
        for message in body["messages"]
        for call in message.get("tool_calls") or ()
    ]


def streamed(events: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str]]]:
    """The text and the calls (name, arguments) the events carried."""
    text = ""
    calls: dict[int, list[str]] = {}
    for event in events:
        for choice in event.get("choices", []):
            text += choice["delta"].get("content") or ""
            for call in choice["delta"].get("tool_calls") or []:
                slot = calls.setdefault(call["index"], ["", ""])
                slot[0] += call["function"].get("name") or ""
                slot[1] += call["function"].get("arguments") or ""
    return text, [(name, arguments) for name, arguments in calls.values()]


class Repeater:
    """A relay between the Harness and the fault proxy that repeats every streamed tool
    call ``times`` times in its answer, with ids of their own, as a real model wrote
    twelve ``done`` calls in one answer (llama.cpp's server makes one call per answer
    unless asked for parallel calls)."""

    def __init__(self, upstream: str, times: int) -> None:
        self.upstream = upstream
        self.times = times
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session = aiohttp.ClientSession()

    async def start(self) -> Repeater:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._relay)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self

    async def close(self) -> None:
        await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        url = f"{self.upstream}/chat/completions"
        async with self._session.post(url, data=body, headers=headers) as upstream:
            response = web.StreamResponse(
                status=upstream.status, headers={"Content-Type": "text/event-stream"}
            )
            await response.prepare(request)
            async for line in upstream.content:
                await response.write(self._repeated(line))
            await response.write_eof()
            return response

    def _repeated(self, line: bytes) -> bytes:
        text = line.decode()
        if not text.startswith("data: {"):
            return line
        chunk = json.loads(text.removeprefix("data: "))
        for choice in chunk.get("choices", []):
            calls = choice.get("delta", {}).get("tool_calls")
            if calls:
                choice["delta"]["tool_calls"] = [
                    {
                        **call,
                        "index": call["index"] * self.times + copy,
                        **({"id": f"{call['id']}-{copy}"} if call.get("id") else {}),
                    }
                    for call in calls
                    for copy in range(self.times)
                ]
        return f"data: {json.dumps(chunk)}\n".encode()


@pytest.fixture
async def repeated(proxy: FaultProxy) -> AsyncIterator[Repeater]:
    """Every tool call twelve times: the Harness is given the relay's URL as its provider's."""
    repeater = await Repeater(proxy.url, 12).start()
    proxy.url = repeater.url
    yield repeater
    await repeater.close()


async def settle(w: ProviderWorld, sid: str) -> dict[str, Any]:
    return await w.harness.settlement(IID, sid, timeout=SETTLE_S)


async def test_truncated_arguments_are_sent_back_as_an_empty_object_and_accepted(
    provider_world: StartProviderWorld,
) -> None:
    broken = '{"path": "hello", "content": "hel'
    w = await start(provider_world)
    w.proxy.queue(Rewrite(arguments=broken))
    w.proxy.steer(Steer("write"), Steer("done"))
    sid = await w.admit(IID, PROMPT)
    assert (await settle(w, sid))["outcome"] == "ended"
    assert not (w.harness.workdir / "hello").exists()
    malformed, receipt = await w.harness.tool_results(IID)
    assert malformed["content"].startswith(
        "This call of `write` did not run: the arguments object is not JSON"
    )
    assert receipt["content"].startswith("Your pick `done` was delivered")

    w.proxy.steer(Steer(text=True))
    again = await w.admit(IID, "Say hello once more.", **{"continue": True})
    assert (await settle(w, again))["outcome"] == "completed"
    assert [e.status for e in w.proxy.exchanges] == [200, 200, 200]
    assert all(e.finished for e in w.proxy.exchanges)
    assert [calls_sent(body) for body in w.proxy.sent] == [
        [],
        [("write", "{}")],
        [("write", "{}"), ("done", "{}")],
    ]
    history = await w.harness.history(IID)
    first = next(m for m in history["messages"] if m["role"] == "assistant")
    assert [(c["name"], c["arguments"]) for c in first["toolCalls"]] == [("write", broken)]


async def test_a_call_cut_at_the_output_limit_never_runs(
    provider_world: StartProviderWorld,
) -> None:
    w = await start(provider_world)
    w.proxy.queue(Rewrite(finish_reason="length"))
    w.proxy.steer(Steer("write"), Steer("done"))
    sid = await w.admit(IID, PROMPT)
    assert (await settle(w, sid))["outcome"] == "ended"
    assert not (w.harness.workdir / "hello").exists()
    cut, _ = await w.harness.tool_results(IID)
    assert cut["content"] == cut_at_limit("write", pick=False, placeholder=False)
    assert [e.status for e in w.proxy.exchanges] == [200, 200]
    _, written = streamed(w.proxy.exchanges[0].events)
    assert calls_sent(w.proxy.sent[1]) == written  # they parse: sent as written
    assert [name for name, _ in written] == ["write"]
    assert w.orchestrator.picks == [(IID, {"type": "done"})]


async def test_a_text_answer_cut_at_the_output_limit_is_asked_to_go_on(
    provider_world: StartProviderWorld,
) -> None:
    w = await start(provider_world)
    w.proxy.queue(Rewrite(finish_reason="length"))
    w.proxy.steer(Steer(text=True), Steer("done"))
    sid = await w.admit(IID, PROMPT)
    assert (await settle(w, sid))["outcome"] == "ended"
    assert [e.status for e in w.proxy.exchanges] == [200, 200]
    assert w.proxy.sent[1]["messages"][-2:] == [
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": CUT_AT_LIMIT_NOTE},
    ]


async def test_twelve_identical_picks_end_the_turn_by_the_first_and_are_no_runaway(
    provider_world: StartProviderWorld, repeated: Repeater
) -> None:
    w = await start(provider_world)
    w.proxy.steer(Steer("done"))
    sid = await w.admit(IID, PROMPT)
    settled = await settle(w, sid)
    assert (settled["outcome"], settled["error"], settled["message"]) == ("ended", None, None)
    history = await w.harness.history(IID)
    assert [s["submissionId"] for s in history["settlements"]] == [sid]
    (reply,) = [m for m in history["messages"] if m["role"] == "assistant"]
    assert [c["name"] for c in reply["toolCalls"]] == ["done"] * 12
    assert w.orchestrator.picks == [(IID, {"type": "done"})]
    results = [m["content"] for m in await w.harness.tool_results(IID)]
    assert results[1:] == [AFTER_TURN_END] * 11
    assert [e.status for e in w.proxy.exchanges] == [200]


async def test_a_stream_cut_midway_keeps_what_streamed_and_its_call_never_runs(
    provider_world: StartProviderWorld,
) -> None:
    w = await start(provider_world)
    w.proxy.queue(Cut(after=4), Cut(after=4), Cut(after=4))  # every attempt of the policy
    w.proxy.steer(Steer("write"))
    sid = await w.admit(IID, PROMPT)
    settled = await settle(w, sid)
    assert (settled["outcome"], settled["error"]["type"]) == ("failed", "submission_failed")
    assert [(e.status, e.finished) for e in w.proxy.exchanges] == [(200, False)] * 3
    text, calls = streamed(w.proxy.exchanges[-1].events)
    assert [name for name, _ in calls] == ["write"]
    history = await w.harness.history(IID)
    (reply,) = [m for m in history["messages"] if m["role"] == "assistant"]
    assert reply["status"] == "failed"
    assert reply["content"] == text
    assert [(c["name"], c["arguments"]) for c in reply["toolCalls"]] == calls
    assert await w.harness.tool_results(IID) == []
    assert not (w.harness.workdir / "hello").exists()

    w.proxy.steer(Steer(text=True))
    again = await w.admit(IID, "Say hello once more.", **{"continue": True})
    assert (await settle(w, again))["outcome"] == "completed"
    assert [e.status for e in w.proxy.exchanges] == [200] * 4
    assert w.proxy.exchanges[-1].finished
    assert calls_sent(w.proxy.sent[-1]) == []
