"""The Orchestrator's Harness client across a Harness's replacement, and how its calls fail.

Real Harness processes (``python -m kubeturn_harness serve``) on one data dir, as a
sandbox Pod made again runs a new Harness on the Workspace's volume, with the scripted
model holding the model request of the Turn under way.

Cases:
- a conversation followed while its Harness is killed and another starts on the same
  data dir: the follower asks its ``CurrentHarness`` again after the failed read and
  reads on from its offset at the new Harness; it sees every event of the new Harness's
  stream once, in order, ending with the Submission settled ``failed``/
  ``harness_restarted``, which ``settlement`` answers too; the sweep sent again to the
  new Harness answers that settlement;
- an admission sent again with its key to the new Harness answers the same Submission;
- how each raising call (``admit``, ``read``, ``send_sweep``, ``send_exec``,
  ``worktrees``) fails: a closed client and a refused connection are
  ``HarnessUnreachable`` that sent nothing; a connection cut before any answer is
  ``HarnessUnreachable`` that may have reached the Harness; an error status is
  ``HarnessRefused`` with the status and the Harness's own words; a body not of the
  wire is ``HarnessRefused``; the port calls do not raise: ``sweep`` answers no
  settlement, ``run`` an exec result whose error says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.orchestrator import harness_client
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.harness_client import (
    HarnessClient,
    HarnessError,
    HarnessRefused,
    HarnessUnreachable,
)
from kubeturn_harness.scripted import parse_script, serve
from kubeturn_harness.wire import EventType, Outcome, StreamEvent
from tests.harness.support import HarnessProcess, ScriptedModel, spawn_harness

TOKEN = "client-test-token"
AGENT = "coder"
IID = "default.replaced/root/coder"
PROMPT = "Do the long task"
WAIT_S = 20.0
"""Bound of every wait here: far above a Harness's start and a stream read."""


@dataclass
class Harnesses:
    """Harness processes on one data dir, one at a time, and their clients."""

    model: ScriptedModel
    spawn: Callable[[], Awaitable[tuple[HarnessProcess, HarnessClient]]]
    workdir: Path
    serving: list[HarnessClient | None] = field(default_factory=list)
    """The client of the Harness serving now is the last; None while none is."""
    asked: int = 0

    async def current(self) -> HarnessClient:
        """A ``CurrentHarness``: waits while no Harness serves, as the operator's hub."""
        self.asked += 1
        while self.serving[-1] is None:
            await asyncio.sleep(0.01)
        return self.serving[-1]

    def admission(self) -> Admit:
        return Admit(
            turn="t1",
            agent=AGENT,
            state="working",
            instance_id=IID,
            prompt=PROMPT,
            cwd=str(self.workdir),
            continue_=True,
            model="scripted/any",
            thinking_level=None,
            instructions="Work.",
            workspace="write",
        )


@pytest.fixture
async def harnesses(tmp_path: Path) -> AsyncIterator[Harnesses]:
    """The scripted model holding the Turn's one model request; Harnesses to spawn."""
    script = {"conversations": [{"match": PROMPT, "steps": [{"text": "Working", "hold": True}]}]}
    runner, model_url = await serve(parse_script(json.dumps(script)))
    providers = tmp_path / "providers.yaml"
    providers.write_text(f"scripted:\n  type: openai\n  baseUrl: {model_url}\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    workdir.chmod(0o777)
    env = {
        "KUBETURN_HARNESS_TOKEN_SHA256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "KUBETURN_PROVIDERS": str(providers),
    }
    processes: list[HarnessProcess] = []
    clients: list[HarnessClient] = []

    async def spawn() -> tuple[HarnessProcess, HarnessClient]:
        process = await spawn_harness(tmp_path / "data", env, tmp_path / "harness.log")
        processes.append(process)
        clients.append(HarnessClient(process.url, TOKEN))
        return process, clients[-1]

    session = aiohttp.ClientSession()
    try:
        yield Harnesses(ScriptedModel(model_url, session), spawn, workdir)
    finally:
        for client in clients:
            await client.close()
        for process in processes:
            await process.kill()
        await session.close()
        await runner.cleanup()


async def test_a_follower_reads_on_from_its_offset_at_the_harness_that_replaced_its_own(
    harnesses: Harnesses,
) -> None:
    old_process, old = await harnesses.spawn()
    harnesses.serving.append(old)
    effect = harnesses.admission()
    submission = await old.admit(effect, "t1.1")
    await harnesses.model.wait_requests(1, held=True)

    seen: list[StreamEvent] = []
    read_before_the_kill = asyncio.Event()

    async def follow() -> None:
        async for event in harness_client.follow(harnesses.current, AGENT, IID):
            seen.append(event)
            if event.type is EventType.MODEL_REQUESTED:
                read_before_the_kill.set()
            if event.type is EventType.SUBMISSION_SETTLED:
                return

    async with asyncio.timeout(WAIT_S):
        following = asyncio.create_task(follow())
        settling = asyncio.create_task(
            harness_client.settlement(harnesses.current, effect, submission)
        )
        await read_before_the_kill.wait()
        before = len(seen)
        # The Pod goes: its Harness is killed, its client closed; none serves a while.
        await old_process.kill()
        harnesses.serving.append(None)
        await old.close()
        _, new = await harnesses.spawn()
        harnesses.serving.append(new)
        await following
        settled = await settling

    assert before > 0
    assert harnesses.asked > 2  # once each to start, and again after the failed reads
    whole, _ = await new.read(AGENT, IID, 0)
    assert [e.offset for e in seen] == list(range(len(seen)))
    assert seen == whole[: len(seen)]
    last = seen[-1].data
    assert (last["submissionId"], last["outcome"], last["error"]["type"]) == (
        submission,
        "failed",
        "harness_restarted",
    )
    assert (settled.submission, settled.outcome, settled.reason) == (
        submission,
        Outcome.FAILED,
        "harness_restarted",
    )
    assert settled.message == "the Harness restarted while this Submission ran"
    swept = await new.send_sweep(Sweep("t1", AGENT, IID, None, submission))
    assert [(s.submission, s.outcome, s.reason) for s in swept] == [
        (submission, Outcome.FAILED, "harness_restarted")
    ]


async def test_an_admission_sent_again_to_the_new_harness_is_the_same_submission(
    harnesses: Harnesses,
) -> None:
    old_process, old = await harnesses.spawn()
    effect = harnesses.admission()
    submission = await old.admit(effect, "t1.1")
    await harnesses.model.wait_requests(1, held=True)
    await old_process.kill()

    _, new = await harnesses.spawn()
    assert await new.admit(effect, "t1.1") == submission
    assert await new.admit(effect, "t1.2") != submission


# ----------------------------------------------------------------------------- failures

Call = Callable[[HarnessClient], Awaitable[Any]]
EXEC = StartExec("work#1", "true", "/work", 5.0)
CALLS: dict[str, Call] = {
    "admit": lambda c: c.admit(
        Admit("t1", AGENT, "working", IID, PROMPT, "/work", False, None, None, "Work.", "write"),
        "t1.1",
    ),
    "read": lambda c: c.read(AGENT, IID, 0),
    "send_sweep": lambda c: c.send_sweep(Sweep("t1", AGENT, IID, None, None)),
    "send_exec": lambda c: c.send_exec(EXEC),
    "worktrees": lambda c: c.worktrees("run-1", "kubeturn/run-1", ["target"]),
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def answering(status: int, body: bytes) -> AsyncIterator[str]:
    """A server on 127.0.0.1 answering every request with ``status`` and ``body``."""

    async def handler(_: web.Request) -> web.Response:
        return web.Response(status=status, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def cutting() -> AsyncIterator[str]:
    """A server on 127.0.0.1 that reads each request's head, then closes the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


async def failure(url: str, call: Call, *, closed: bool = False) -> HarnessError:
    client = HarnessClient(url, TOKEN)
    try:
        if closed:
            await client.close()
        with pytest.raises(HarnessError) as raised:
            await call(client)
    finally:
        await client.close()
    return raised.value


@pytest.mark.parametrize("name", CALLS)
class TestFailures:
    async def test_a_closed_client_sends_nothing(self, name: str) -> None:
        error = await failure(f"http://127.0.0.1:{free_port()}", CALLS[name], closed=True)
        assert isinstance(error, HarnessUnreachable)
        assert not error.sent
        assert "its client was closed" in str(error)

    async def test_a_refused_connection_sends_nothing(self, name: str) -> None:
        error = await failure(f"http://127.0.0.1:{free_port()}", CALLS[name])
        assert isinstance(error, HarnessUnreachable)
        assert not error.sent
        assert str(error).startswith("the Harness could not be reached for the ")

    async def test_a_connection_cut_before_an_answer_may_have_reached_it(self, name: str) -> None:
        async with cutting() as url:
            error = await failure(url, CALLS[name])
        assert isinstance(error, HarnessUnreachable)
        assert error.sent

    async def test_an_error_status_is_a_refusal_in_the_harness_s_words(self, name: str) -> None:
        body = json.dumps({"error": "not-ready", "message": "still rebuilding"}).encode()
        async with answering(503, body) as url:
            error = await failure(url, CALLS[name])
        assert isinstance(error, HarnessRefused)
        assert (error.status, error.said) == (503, "still rebuilding")
        assert "(HTTP 503)" in str(error)

    async def test_a_body_not_of_the_wire_is_a_refusal(self, name: str) -> None:
        async with answering(200, b'{"unexpected": true}') as url:
            error = await failure(url, CALLS[name])
        assert isinstance(error, HarnessRefused)
        assert error.status == 200
        assert "not of its wire" in str(error)


async def test_the_port_calls_say_a_failure_instead_of_raising() -> None:
    client = HarnessClient(f"http://127.0.0.1:{free_port()}", TOKEN)
    await client.close()
    assert await client.sweep(Sweep("t1", AGENT, IID, None, "sub-1")) == []
    result = await client.run(EXEC)
    assert (result.exit_code, result.output) == (None, "")
    assert result.error is not None
    assert result.error.startswith("the Harness could not be reached for the exec: ")
