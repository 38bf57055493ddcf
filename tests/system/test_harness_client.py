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
- a follower whose Harness is replaced by one on a fresh, empty data dir (the volume was
  replaced) reads 404s: past ``LOST_AFTER_S`` it gives up, and ``settlement`` answers the
  Submission settled ``failed``/``conversation_lost`` saying the Harness lost the
  conversation; the refusal is logged once, not at every try;
- the lost rule, at a server answering a script of statuses: a 400 (an offset past the
  log) counts as a 404 does; any other refusal (a 503) or an answered read between two of
  them starts the count again; each run of one refusal is logged once;
- how each raising call (``send_admit``, ``read``, ``send_sweep``, ``send_exec``,
  ``worktrees``) fails: a closed client and a refused connection are
  ``HarnessUnreachable`` that sent nothing; a connection cut before any answer is
  ``HarnessUnreachable`` that may have reached the Harness; an error status is
  ``HarnessRefused`` with the status and the Harness's own words; a body not of the
  wire is ``HarnessRefused``, and so is one nested 200,000 deep (arrays or objects), as
  an answer or as an error body (never ``RecursionError``); the port calls do not
  raise: ``sweep`` answers no settlement, ``run`` an exec result whose error says why;
  ``admit`` raises ``AdmitFailed`` saying what the call's failure says, with it chained
  (not reached, refused);
- a sweep reads back the conversation's settlements from its stream's
  ``submission-settled`` events alone (no history view), a page at a time until the
  stream says it is up to date; an event of another type (from a Harness that sends
  every type) is no settlement;
- 150 long-polls parked at a Harness (more than aiohttp's default cap of 100
  connections) hold no sweep back: it reaches the server and is answered while every
  read stays parked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.errors import AdmitFailed, HarnessCallFailed, HarnessRefused, HarnessUnreachable
from kubeturn.orchestrator import harness_client
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.harness_client import HarnessClient
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
    spawn: Callable[..., Awaitable[tuple[HarnessProcess, HarnessClient]]]
    """Spawn a Harness on the data dir named (``data`` unless told), and its client."""
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
            key="t1.1",
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

    async def spawn(data: str = "data") -> tuple[HarnessProcess, HarnessClient]:
        process = await spawn_harness(tmp_path / data, env, tmp_path / "harness.log")
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
    submission = await old.admit(effect)
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
    submission = await old.admit(effect)
    await harnesses.model.wait_requests(1, held=True)
    await old_process.kill()

    _, new = await harnesses.spawn()
    assert await new.admit(effect) == submission
    assert await new.admit(replace(effect, key="t1.2")) != submission


async def test_a_follower_gives_up_on_a_conversation_its_new_harness_does_not_have(
    harnesses: Harnesses, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(harness_client, "LOST_AFTER_S", 0.5)
    monkeypatch.setattr(harness_client, "RETRY_S", 0.05)
    old_process, old = await harnesses.spawn()
    harnesses.serving.append(old)
    effect = harnesses.admission()
    submission = await old.admit(effect)
    await harnesses.model.wait_requests(1, held=True)

    async with asyncio.timeout(WAIT_S):
        settling = asyncio.create_task(
            harness_client.settlement(harnesses.current, effect, submission)
        )
        # The follower has read some of the log before its Harness goes.
        while not (await old.read(AGENT, IID, 0))[0]:
            await asyncio.sleep(0.01)
        await old_process.kill()
        await old.close()
        _, new = await harnesses.spawn("empty")
        harnesses.serving.append(new)
        settled = await settling

    assert (settled.submission, settled.outcome, settled.reason) == (
        submission,
        Outcome.FAILED,
        "conversation_lost",
    )
    assert settled.message is not None
    assert settled.message.startswith(f"the Harness lost the conversation {IID!r}: for 0.5 s ")
    assert "HTTP 404" in settled.message
    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.name == harness_client.__name__ and r.levelno == logging.WARNING
    ]
    assert len(refusals) == 1, refusals
    assert "HTTP 404" in refusals[0]


ADMISSION = Admit(
    "t1", AGENT, "working", IID, PROMPT, "/work", False, None, None, "Work.", "write", "t1.1"
)


@contextlib.asynccontextmanager
async def scripted(statuses: list[int]) -> AsyncIterator[tuple[str, list[int]]]:
    """A server on 127.0.0.1 answering its n-th request with the n-th status of
    ``statuses`` (the last one for ever after; 200 with no events, else an error body),
    and the statuses it answered."""
    answered: list[int] = []

    async def handler(_: web.Request) -> web.Response:
        status = statuses[min(len(answered), len(statuses) - 1)]
        answered.append(status)
        if status == 200:
            return web.json_response([], headers={"stream-next-offset": "0"})
        body = {"error": "invalid", "message": f"said with {status}"}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", answered
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("statuses", "read"),
    [
        ([400, 400], [400, 400]),
        ([404, 503, 404, 404], [404, 503, 404, 404]),
        ([503, 503, 404, 200, 404, 400], [503, 503, 404, 200, 404, 400]),
    ],
)
async def test_the_lost_rule_counts_only_unbroken_refusals_of_the_log(
    statuses: list[int],
    read: list[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # With no time allowed, the second refusal in a row that says "not there" is the end.
    monkeypatch.setattr(harness_client, "LOST_AFTER_S", 0.0)
    monkeypatch.setattr(harness_client, "RETRY_S", 0.0)
    async with scripted(statuses) as (url, answered):
        client = HarnessClient(url, TOKEN)
        try:
            async with asyncio.timeout(WAIT_S):
                settled = await client.settlement(ADMISSION, "sub-1")
        finally:
            await client.close()
    assert answered == read
    assert (settled.submission, settled.outcome, settled.reason) == (
        "sub-1",
        Outcome.FAILED,
        "conversation_lost",
    )
    assert f"HTTP {read[-1]}" in (settled.message or "")
    logged = [
        r.getMessage()
        for r in caplog.records
        if r.name == harness_client.__name__ and r.levelno == logging.WARNING
    ]
    runs = [s for i, s in enumerate(read) if s != 200 and (i == 0 or read[i - 1] != s)]
    assert len(logged) == len(runs), logged


# ----------------------------------------------------------------------------- failures

Call = Callable[[HarnessClient], Awaitable[Any]]
EXEC = StartExec("work#1", "true", "/work", 5.0)
CALLS: dict[str, Call] = {
    "send_admit": lambda c: c.send_admit(ADMISSION),
    "read": lambda c: c.read(AGENT, IID, 0),
    "send_sweep": lambda c: c.send_sweep(Sweep("t1", AGENT, IID, None, None)),
    "send_exec": lambda c: c.send_exec(EXEC),
    "worktrees": lambda c: c.worktrees("run-1", "kubeturn/run-1", ["target"]),
    "forget_run": lambda c: c.forget_run("default.run-1", "kubeturn/run-1", seconds=5),
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


async def failure(url: str, call: Call, *, closed: bool = False) -> HarnessCallFailed:
    client = HarnessClient(url, TOKEN)
    try:
        if closed:
            await client.close()
        with pytest.raises(HarnessCallFailed) as raised:
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

    @pytest.mark.parametrize("status", [200, 503])
    @pytest.mark.parametrize(
        "body",
        [b"[" * 200_000 + b"]" * 200_000, b'{"a":' * 200_000 + b"1" + b"}" * 200_000],
        ids=["arrays", "objects"],
    )
    async def test_an_answer_nested_200000_deep_is_a_refusal(
        self, name: str, status: int, body: bytes
    ) -> None:
        async with answering(status, body) as url:
            error = await failure(url, CALLS[name])
        assert isinstance(error, HarnessRefused)
        assert error.status == status

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


async def test_a_failed_admission_is_an_admit_failed_with_the_call_s_failure_chained() -> None:
    closed = HarnessClient(f"http://127.0.0.1:{free_port()}", TOKEN)
    await closed.close()
    with pytest.raises(AdmitFailed) as unreached:
        await closed.admit(ADMISSION)
    assert isinstance(unreached.value.__cause__, HarnessUnreachable)
    assert str(unreached.value) == str(unreached.value.__cause__)
    assert str(unreached.value).startswith("the Harness could not be reached for the admission")
    body = json.dumps({"error": "invalid", "message": "no such model"}).encode()
    async with answering(400, body) as url:
        client = HarnessClient(url, TOKEN)
        try:
            with pytest.raises(AdmitFailed) as refused:
                await client.admit(ADMISSION)
        finally:
            await client.close()
    assert isinstance(refused.value.__cause__, HarnessRefused)
    assert refused.value.__cause__.said == "no such model"
    assert str(refused.value) == str(refused.value.__cause__)


PARKED = 150
"""More parked reads than aiohttp's default connection cap (100)."""


async def test_a_sweep_is_not_queued_behind_parked_long_polls() -> None:
    parked, release = asyncio.Event(), asyncio.Event()
    reads: list[str] = []
    swept: list[str] = []

    async def read(request: web.Request) -> web.Response:
        if "live" not in request.query:  # the sweep's read back: no conversation kept
            return web.json_response({"error": "not-found", "message": "none"}, status=404)
        reads.append("parked")
        if len(reads) == PARKED:
            parked.set()
        await release.wait()  # parked until the test ends
        return web.Response(status=204, headers={"stream-next-offset": "0"})

    async def abort(request: web.Request) -> web.Response:
        swept.append(request.match_info["iid"])
        return web.json_response({"aborted": True})

    app = web.Application()
    app.router.add_get("/agents/{agent}/{iid}", read)
    app.router.add_post("/agents/{agent}/{iid}/abort", abort)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = HarnessClient(f"http://127.0.0.1:{runner.addresses[0][1]}", "t")
    polls = [asyncio.create_task(client.read("worker", f"default.r/{n}", 0)) for n in range(PARKED)]
    try:
        async with asyncio.timeout(30):
            await parked.wait()
            await client.send_sweep(
                Sweep("t1", "worker", "default.r/x", cause="pick", submission=None)
            )
        assert swept == ["default.r/x"]
        assert not any(poll.done() for poll in polls)
    finally:
        release.set()
        await asyncio.gather(*polls, return_exceptions=True)
        await client.close()
        await runner.cleanup()


async def test_a_sweep_reads_the_settlements_alone_page_by_page() -> None:
    asked: list[dict[str, str]] = []

    def settled(offset: int, submission: str) -> dict[str, Any]:
        data = {"submissionId": submission, "outcome": "ended", "at": "2026-12-02T00:00:00Z"}
        return {"offset": offset, "type": "submission-settled", "at": "t", "data": data}

    pages = {
        0: ([settled(7, "s1")], {"stream-next-offset": "1000"}),
        1000: (
            [settled(1003, "s2"), {**settled(1004, "s2"), "type": "pick-sent"}],
            {"stream-next-offset": "1005", "stream-up-to-date": "true"},
        ),
    }

    async def read(request: web.Request) -> web.Response:
        asked.append(dict(request.query))
        events, headers = pages[int(request.query["offset"])]
        return web.json_response(events, headers=headers)

    async def abort(_: web.Request) -> web.Response:
        return web.json_response({"aborted": True})

    app = web.Application()
    app.router.add_get("/agents/{agent}/{iid}", read)
    app.router.add_post("/agents/{agent}/{iid}/abort", abort)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = HarnessClient(f"http://127.0.0.1:{runner.addresses[0][1]}", "t")
    try:
        swept = await client.send_sweep(Sweep("t1", "worker", "default.r/x", "pick", None))
    finally:
        await client.close()
        await runner.cleanup()
    assert [(s.submission, s.outcome) for s in swept] == [
        ("s1", Outcome.ENDED),
        ("s2", Outcome.ENDED),
    ]
    assert asked == [
        {"offset": "0", "types": "submission-settled"},
        {"offset": "1000", "types": "submission-settled"},
    ]
