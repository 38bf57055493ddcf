"""Parts of the conformance tier: the real Harness, the scripted model, and a stub
Orchestrator of the tests' own, all serving HTTP on 127.0.0.1.

The stub Orchestrator plays the Orchestrator API the Harness calls (surface, picks,
delivery polls). Like the real one, when a pick ends a Turn it sends the sweep (naming
the running Submission with ``cause: "pick"``) before it answers the pick.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from kubeturn_harness.__main__ import toolbox_client
from kubeturn_harness.anthropic_models import AnthropicModels
from kubeturn_harness.app import make_runner
from kubeturn_harness.clock import Clock, SystemClock
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import ProviderModels
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.orchestrator import OrchestratorClient
from kubeturn_harness.providers import Providers, ProviderType
from kubeturn_harness.service import Harness
from kubeturn_harness.settings import Settings

TOKEN = "harness-test-token"
ORCHESTRATOR_TOKEN = "orchestrator-test-token"
AGENT = "reviewer"
INSTRUCTIONS = "You review changes."


def agent_url(base: str, name: str, iid: str, *rest: str) -> str:
    return "/".join([base, "agents", name, quote(iid, safe=""), *rest])


# ----------------------------------------------------------------------------- model


def script(match: str, *steps: dict[str, Any], repeat: bool = False) -> str:
    """A script of one conversation: its match, and its steps."""
    return json.dumps({"conversations": [{"match": match, "repeat": repeat, "steps": list(steps)}]})


def scripts(conversations: dict[str, list[dict[str, Any]]]) -> str:
    """A script of several conversations: match → steps, the first match answering."""
    return json.dumps(
        {"conversations": [{"match": m, "steps": s} for m, s in conversations.items()]}
    )


@dataclass
class ScriptedModel:
    url: str
    session: aiohttp.ClientSession
    base: str = field(init=False)

    def __post_init__(self) -> None:
        self.base = self.url.removesuffix("/v1")

    async def requests(self) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.base}/_requests") as response:
            return list(await response.json())

    async def release(self, match: str | None = None) -> int:
        body = {"match": match} if match else {}
        async with self.session.post(f"{self.base}/_release", json=body) as response:
            return int((await response.json())["released"])

    async def wait_requests(self, count: int, *, held: bool = False, timeout: float = 10) -> None:
        """Wait until ``count`` requests arrived (and, with ``held``, are held)."""
        async with asyncio.timeout(timeout):
            while True:
                records = await self.requests()
                if len([r for r in records if r["held"] or not held]) >= count:
                    return
                await asyncio.sleep(0.01)


# ----------------------------------------------------------------------------- orchestrator

PickHandler = Callable[[str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


@dataclass
class StubOrchestrator:
    """A scripted Orchestrator API. Tests set ``surfaces`` and ``on_pick``."""

    surfaces: dict[str, Any] = field(default_factory=dict)
    """iid → surface body, or an int status (404, 503) to answer instead."""
    surface_failures: dict[str, int] = field(default_factory=dict)
    """iid → how many surface reads answer 503 before the surface is served."""
    on_pick: PickHandler | None = None
    deliveries: dict[str, asyncio.Future[tuple[int, dict[str, Any]]]] = field(default_factory=dict)
    picks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    cut: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
    """When set, answers every pick instead (a test that cuts connections)."""
    keys: list[str | None] = field(default_factory=list)
    """Each pick's ``Idempotency-Key`` header, in the order of ``picks``."""
    surface_reads: list[str] = field(default_factory=list)
    delivery_polls: list[str] = field(default_factory=list)
    """Delivery ids of every poll of an outstanding pick, in arrival order."""
    auth: list[str] = field(default_factory=list)
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/agents/{iid}/surface", self._surface)
        app.router.add_post("/agents/{iid}/events", self._pick)
        app.router.add_get("/agents/{iid}/deliveries/{delivery}", self._delivery)
        return app

    async def _surface(self, request: web.Request) -> web.Response:
        iid = request.match_info["iid"]
        self.auth.append(request.headers.get("Authorization", ""))
        self.surface_reads.append(iid)
        if self.surface_failures.get(iid, 0) > 0:
            self.surface_failures[iid] -= 1
            return web.json_response({"error": "not leader"}, status=503)
        surface = self.surfaces.get(iid, 404)
        if isinstance(surface, int):
            return web.json_response({"error": "no live surface"}, status=surface)
        return web.json_response(surface)

    async def _pick(self, request: web.Request) -> web.StreamResponse:
        if self.cut is not None:
            return await self.cut(request)
        iid = request.match_info["iid"]
        body = await request.json()
        self.picks.append((iid, body))
        self.keys.append(request.headers.get("Idempotency-Key"))
        if self.on_pick is None:
            return web.json_response({"error": "no live surface"}, status=404)
        status, answer = await self.on_pick(iid, body)
        return web.json_response(answer, status=status)

    async def _delivery(self, request: web.Request) -> web.Response:
        self.delivery_polls.append(request.match_info["delivery"])
        future = self.deliveries.get(request.match_info["delivery"])
        if future is None:
            return web.json_response({"error": "unknown delivery"}, status=404)
        try:
            status, answer = await asyncio.wait_for(asyncio.shield(future), 2)
        except TimeoutError:
            return web.Response(status=204)
        return web.json_response(answer, status=status)


def menu_surface(iid: str, *names: str, allowed: list[str] | None = None) -> dict[str, Any]:
    """A surface offering ``names`` as picks, each taking ``{verdict, notes?}``."""
    schema = {
        "type": "object",
        "properties": {"verdict": {"type": "string"}, "notes": {"type": "string"}},
        "required": ["verdict"],
    }
    return {
        "instanceId": iid,
        "runId": "default.review-1",
        "menu": [{"name": n, "description": f"Send {n}.", "input": schema} for n in names],
        "allowed": list(names) if allowed is None else allowed,
    }


# ----------------------------------------------------------------------------- harness


@dataclass
class HarnessClient:
    """The Orchestrator's side of the Harness wire, as the tests drive it."""

    url: str
    session: aiohttp.ClientSession
    harness: Harness | None
    """The in-process Harness; None when it serves from a process of its own."""
    data_dir: Path
    workdir: Path

    def headers(self, token: str = TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def body(self, prompt: str, **extra: Any) -> dict[str, Any]:
        return {
            "prompt": prompt,
            "cwd": str(self.workdir),
            "model": "scripted/any",
            "definition": {"instructions": INSTRUCTIONS, "workspace": "write"},
            **extra,
        }

    async def admit(self, iid: str, prompt: str, *, name: str = AGENT, **extra: Any) -> str:
        status, answer = await self.admit_raw(iid, self.body(prompt, **extra), name=name)
        assert status == 200, answer
        return str(answer["submissionId"])

    async def admit_raw(
        self, iid: str, body: Any, *, name: str = AGENT
    ) -> tuple[int, dict[str, Any]]:
        async with self.session.post(
            agent_url(self.url, name, iid), json=body, headers=self.headers()
        ) as response:
            return response.status, await response.json()

    async def abort(
        self, iid: str, body: Any = None, *, raw: bytes | None = None, name: str = AGENT
    ) -> dict[str, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        async with self.session.post(
            agent_url(self.url, name, iid, "abort"), data=data, headers=self.headers()
        ) as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def history(self, iid: str, *, name: str = AGENT) -> dict[str, Any]:
        async with self.session.get(
            agent_url(self.url, name, iid) + "?view=history", headers=self.headers()
        ) as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def settlement(self, iid: str, sid: str, *, timeout: float = 15) -> dict[str, Any]:
        """Wait for ``sid``'s settlement and return it."""
        async with asyncio.timeout(timeout):
            while True:
                for settled in (await self.history(iid))["settlements"]:
                    if settled["submissionId"] == sid:
                        return dict(settled)
                await asyncio.sleep(0.01)

    async def state(self, iid: str, sid: str) -> str:
        for sub in (await self.history(iid))["submissions"]:
            if sub["submissionId"] == sid:
                return str(sub["state"])
        raise AssertionError(f"no submission {sid}")

    async def wait_state(self, iid: str, sid: str, state: str, *, timeout: float = 10) -> None:
        async with asyncio.timeout(timeout):
            while await self.state(iid, sid) != state:
                await asyncio.sleep(0.01)

    async def tool_results(self, iid: str) -> list[dict[str, Any]]:
        """The ``tool`` messages of the conversation's record, in order."""
        return [m for m in (await self.history(iid))["messages"] if m["role"] == "tool"]

    async def metric(self, name: str) -> float:
        """One unlabelled sample of the Harness's ``/metrics`` (a counter's ``_total``)."""
        async with self.session.get(f"{self.url}/metrics", headers=self.headers()) as response:
            assert response.status == 200, await response.text()
            text = await response.text()
        for line in text.splitlines():
            sample, _, value = line.partition(" ")
            if sample == name:
                return float(value)
        raise AssertionError(f"no sample {name} in /metrics")

    async def stream(
        self,
        iid: str,
        offset: int | str = 0,
        *,
        live: str | None = None,
        types: str | None = None,
        name: str = AGENT,
    ) -> tuple[int, dict[str, str], Any]:
        """One stream read: (status, the ``stream-*`` headers, the JSON body or None)."""
        query = f"?offset={offset}" + (f"&live={live}" if live else "")
        query += f"&types={types}" if types else ""
        async with self.session.get(
            agent_url(self.url, name, iid) + query, headers=self.headers()
        ) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            stream_headers = {k: v for k, v in headers.items() if k.startswith("stream-")}
            body = await response.json() if response.status != 204 else None
            return response.status, stream_headers, body


@dataclass
class World:
    """One test's Harness, scripted model and stub Orchestrator."""

    model: ScriptedModel
    orchestrator: StubOrchestrator
    harness: HarnessClient


StartWorld = Callable[..., Awaitable[World]]


class SteppedClock:
    """A clock whose monotonic time moves only when a test advances it; wall-clock time
    (for records) is the system's. What the Harness decides by elapsed time (how long a
    conversation has been idle) is then decided by the test alone; so is a surface
    read's retry budget, which never runs out while the clock stands still."""

    def __init__(self) -> None:
        self._monotonic = 0.0

    def now(self) -> str:
        return SystemClock().now()

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        self._monotonic += seconds

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)


class NoWaitClock(SystemClock):
    """The system's clock, except that a wait takes no time and is written down: a
    provider's retries happen at once, and a test reads the back-offs they waited."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(0)


def shared_dir() -> Path:
    """A directory the toolbox's sessions can use: pytest's own temporary directories are
    private to the user running the tests, and when that is root the sessions run as
    nobody. The caller removes it."""
    directory = Path(tempfile.mkdtemp(prefix="kubeturn-test-"))
    directory.chmod(0o777)
    return directory


async def start_harness(
    settings: Settings,
    cleanups: list[Callable[[], Awaitable[Any]]],
    *,
    toolbox: Path,
    clock: Clock | None = None,
    model_clock: Clock | None = None,
) -> tuple[Harness, str]:
    """The real Harness, in this process, on a free loopback port, with the toolbox at
    the socket ``toolbox``; its model requests wait on ``model_clock`` between attempts
    (by default a ``NoWaitClock``: retries happen at once)."""
    models = ProviderModels(
        {ProviderType.OPENAI: OpenAIModels(), ProviderType.ANTHROPIC: AnthropicModels()},
        clock=model_clock or NoWaitClock(),
    )
    orchestrator = (
        OrchestratorClient(settings.orchestrator_url, settings.orchestrator_token)
        if settings.orchestrator_url
        else None
    )
    harness = Harness(
        settings,
        clock=clock or SystemClock(),
        model=models,
        orchestrator=orchestrator,
        providers=Providers.load(settings.providers_file),
        metrics=HarnessMetrics(),
        toolbox=toolbox_client(settings, toolbox),
    )
    runner = make_runner(harness)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    await harness.start()

    async def stop() -> None:
        await harness.close()
        await runner.cleanup()
        await models.close()
        if orchestrator is not None:
            await orchestrator.close()

    cleanups.append(stop)
    return harness, f"http://127.0.0.1:{runner.addresses[0][1]}"


# ----------------------------------------------------------------------------- process


@dataclass
class HarnessProcess:
    """A Harness serving from ``python -m kubeturn_harness serve``, a process of its own."""

    process: asyncio.subprocess.Process
    url: str

    async def kill(self) -> None:
        """SIGKILL, as when the node dies: no shutdown hook runs. Waits for the exit;
        a second call does nothing."""
        if self.process.returncode is None:
            self.process.kill()
            await self.process.communicate()


async def spawn_harness(
    data_dir: Path,
    env: dict[str, str],
    log_file: Path,
    *extra: str,
    timeout: float = 20,
) -> HarnessProcess:
    """Start a Harness process on a free loopback port; return once it listens.

    ``env`` is added to this process's environment without its ``KUBETURN_*``
    variables; stderr (the Harness's log) is appended to ``log_file``.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith("KUBETURN_")}
    command = [sys.executable, "-m", "kubeturn_harness", "serve", "--host", "127.0.0.1"]
    command += ["--port", "0", "--data-dir", str(data_dir), *extra]
    with log_file.open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=log, env={**base, **env}
        )
    spawned = HarnessProcess(process, "")
    assert process.stdout is not None
    try:
        async with asyncio.timeout(timeout):
            line = (await process.stdout.readline()).decode().strip()
    except BaseException:
        await spawned.kill()
        raise
    prefix = "harness listening on "
    if not line.startswith(prefix):
        await spawned.kill()
        log_text = await asyncio.to_thread(log_file.read_text)
        raise AssertionError(f"the Harness did not start: {line!r}\n{log_text}")
    spawned.url = line.removeprefix(prefix)
    return spawned


@asynccontextmanager
async def streamed_completions(*events: bytes) -> AsyncIterator[str]:
    """A chat-completions server on 127.0.0.1 that answers every request with ``events``,
    each the data of one server-sent event, then ``[DONE]``; yields its base URL
    (``.../v1``), as a provider's ``baseUrl``."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(b"data: " + event + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()
