"""Parts of the system tier: the Orchestrator core and actor, its API, the real Harness
and the scripted model, all in this process and serving HTTP on 127.0.0.1.

``System`` is one test's world. It runs one Run at a time: ``start_run`` loads a
manifest, builds a ``RunCore`` over a ``WorkspaceView`` of real directories, a
``RunActor`` whose TurnPort and ExecPort are one ``HarnessClient`` over the Harness's
HTTP wire, and registers the actor and the Workspace's token with the Orchestrator API
the Harness calls. ``restart`` stops that actor and builds a new core and actor from the
last snapshot saved, as an operator restart does.

Every wait is bounded and says what it waited for when it runs out.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from kubeturn.machine.load import LoadedRun, load_run_yaml
from kubeturn.orchestrator import api
from kubeturn.orchestrator.actor import SAVE_LATER_S, Progress, RunActor, Settled
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.turns import TurnRecord
from kubeturn_harness.service import Harness
from kubeturn_harness.wire import Usage
from tests.harness.support import ScriptedModel

HARNESS_TOKEN = "system-harness-token"
"""The operator's token for the Harness."""
WORKSPACE = "ws-system"
WORKSPACE_TOKEN = "system-workspace-token"
"""The Workspace's token for the Orchestrator API (the Harness holds it)."""
WAIT_S = 10.0
"""The default bound of every wait: far above what any scenario here takes."""
MACHINES = Path(__file__).parent / "machines"
EXAMPLES = Path(__file__).parents[2] / "examples"

Cleanup = Callable[[], Awaitable[Any]]


class MemoryStore:
    """A ``SnapshotStore`` that keeps every snapshot saved, as JSON would store it."""

    def __init__(self) -> None:
        self.snapshots: list[dict[str, Any]] = []

    async def save(self, snapshot: dict[str, Any]) -> None:
        self.snapshots.append(json.loads(json.dumps(snapshot)))

    @property
    def last(self) -> dict[str, Any]:
        assert self.snapshots, "no snapshot was saved"
        return self.snapshots[-1]


class Port:
    """The actor's ``TurnPort`` and ``ExecPort``: the ``HarnessClient``, recording what it
    sent. It can hold back each sweep, or stop answering once it sent an admission or a
    sweep (an Orchestrator that dies right there)."""

    def __init__(
        self,
        client: HarnessClient,
        *,
        sweep_delay_s: float = 0.0,
        hang_after: frozenset[str] = frozenset(),
    ) -> None:
        self.client = client
        self.sweep_delay_s = sweep_delay_s
        self.hang_after = hang_after
        """``admit`` and/or ``sweep``: send it, then never answer (until cancelled)."""
        self.hung = asyncio.Event()
        self.admissions: list[str] = []
        """The idempotency key of every admission sent, in order."""
        self.sweeps: list[Sweep] = []
        self.progress: list[str] = []
        """The Submission of each progress the actor was told of, in order (ADR 0115)."""
        self.spent: list[Usage | None] = []
        """What each of those said its Submission had used so far (ADR 0117)."""

    async def admit(self, effect: Admit) -> str:
        self.admissions.append(effect.key)
        submission = await self.client.admit(effect)
        if "admit" in self.hang_after:
            await self._hang()
        return submission

    async def settlement(
        self, effect: Admit, submission: str, *, progress: Progress | None = None
    ) -> Settled:
        if progress is None:
            return await self.client.settlement(effect, submission)
        told = progress

        async def counted(spent: Usage | None) -> None:
            self.progress.append(submission)
            self.spent.append(spent)
            await told(spent)

        return await self.client.settlement(effect, submission, progress=counted)

    async def sweep(self, effect: Sweep) -> list[Settled]:
        if self.sweep_delay_s:
            await asyncio.sleep(self.sweep_delay_s)
        self.sweeps.append(effect)
        settled = await self.client.sweep(effect)
        if "sweep" in self.hang_after:
            await self._hang()
        return settled

    async def run(self, effect: StartExec) -> ExecResult:
        return await self.client.run(effect)

    async def _hang(self) -> None:
        self.hung.set()
        await asyncio.Event().wait()


def delay_picks(seconds: float) -> Any:
    """An Orchestrator API middleware that holds back each pick's answer: the sweep the
    pick caused then reaches the Harness before the Harness reads the receipt."""

    @web.middleware
    async def middleware(request: web.Request, handler: api.Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.method == "POST" and request.path.endswith("/events"):
            await asyncio.sleep(seconds)
        return response

    return middleware


def load(manifest: str | Path) -> LoadedRun:
    """A Run manifest, from YAML text or a file."""
    if isinstance(manifest, Path):
        return load_run_yaml(manifest.read_text(), str(manifest))
    return load_run_yaml(manifest)


@dataclass
class System:
    model: ScriptedModel
    harness: Harness
    harness_url: str
    api_url: str
    registry: api.Registry
    session: aiohttp.ClientSession
    root: Path
    """A directory the Harness's tools may use (mode 777): worktrees live under it."""
    store: MemoryStore = field(default_factory=MemoryStore)
    actors: list[RunActor] = field(default_factory=list)
    """Every actor started, the current one last."""
    ports: list[Port] = field(default_factory=list)
    """Each actor's TurnPort and ExecPort, in the same order."""
    clients: list[HarnessClient] = field(default_factory=list)
    recorded: list[TurnRecord] = field(default_factory=list)
    """Every Turn record any actor of this System handed out (``Recorded``), in order."""
    _run: LoadedRun | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    # ------------------------------------------------------------------ runs

    @property
    def actor(self) -> RunActor:
        assert self.actors, "no Run was started"
        return self.actors[-1]

    @property
    def core(self) -> RunCore:
        return self.actor.core

    @property
    def port(self) -> Port:
        assert self.ports, "no Run was started"
        return self.ports[-1]

    @property
    def state(self) -> str | None:
        """The Machine's active leaves, joined by ``, ``."""
        return ", ".join(self.core.config.active) if self.core.config is not None else None

    @property
    def output(self) -> Any:
        return self.core.config.output if self.core.config is not None else None

    def worktree(self, slot: str) -> Path:
        """The Run's worktree of ``slot``: a real directory the Harness's tools can use."""
        path = self.root / "work" / slot / "run-1"
        path.mkdir(parents=True, exist_ok=True)
        for part in (self.root / "work", self.root / "work" / slot, path):
            os.chmod(part, 0o777)
        return path

    async def start_run(
        self,
        manifest: str | Path,
        *,
        slots: tuple[str, ...] = ("target",),
        sweep_delay_s: float = 0.0,
        hang_after: frozenset[str] = frozenset(),
        save_later_s: float = SAVE_LATER_S,
    ) -> RunActor:
        """Start ``manifest`` (YAML text, or a file) on a new core and actor, with a
        worktree directory for each of ``slots``."""
        self._run = load(manifest)
        workspace = WorkspaceView({slot: str(self.worktree(slot)) for slot in slots})
        core = RunCore(self._run, workspace=workspace, new_id=self._new_id)
        actor = self._actor(
            core, sweep_delay_s=sweep_delay_s, hang_after=hang_after, save_later_s=save_later_s
        )
        await actor.start()
        return actor

    async def restart(self, *, snapshot: dict[str, Any] | None = None) -> RunActor:
        """Stop the actor (its effects under way stop with it) and resume the Run from
        ``snapshot`` (the last saved by default) on a new core and actor."""
        assert self._run is not None, "no Run was started"
        await self.actor.close()
        saved = snapshot if snapshot is not None else self.store.last
        core = RunCore(
            self._run, workspace=self.core.workspace, new_id=self._new_id, snapshot=saved
        )
        actor = self._actor(core)
        await actor.start()
        return actor

    def _actor(
        self,
        core: RunCore,
        *,
        sweep_delay_s: float = 0.0,
        hang_after: frozenset[str] = frozenset(),
        save_later_s: float = SAVE_LATER_S,
    ) -> RunActor:
        client = HarnessClient(self.harness_url, HARNESS_TOKEN)
        self.clients.append(client)
        port = Port(client, sweep_delay_s=sweep_delay_s, hang_after=hang_after)
        actor = RunActor(
            core,
            turns=port,
            execs=port,
            store=self.store,
            clock=time.time,
            on_record=self.recorded.append,
            save_later_s=save_later_s,
        )
        self.actors.append(actor)
        self.ports.append(port)
        key = f"{core.run.namespace}/{core.run.name}"
        self.registry.workspaces[key] = WORKSPACE
        self.registry.actors[key] = actor
        return actor

    def _new_id(self) -> str:
        return f"{next(self._ids):04d}"

    @property
    def history(self) -> list[TurnRecord]:
        return self.core.history

    async def signal(self, event: str, data: dict[str, Any] | None = None) -> None:
        await self.actor.signal(event, data)

    # ------------------------------------------------------------------ waits

    async def wait_for(
        self, check: Callable[[], Any], what: str, *, timeout: float = WAIT_S
    ) -> None:
        """Wait until ``check()`` is true (it may be async); fail saying ``what``."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    result = check()
                    if asyncio.iscoroutine(result):
                        result = await result
                    if result:
                        return
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise AssertionError(f"waited {timeout:g} s for {what}; {self.describe()}") from None

    async def wait_finished(self, *, timeout: float = WAIT_S) -> None:
        actor = self.actor
        await self.wait_for(actor.finished.is_set, "the Run to finish", timeout=timeout)

    async def wait_state(self, leaf: str, *, timeout: float = WAIT_S) -> None:
        """Wait until the Machine's active leaves are ``leaf`` (joined by ``, ``)."""
        await self.wait_for(lambda: self.state == leaf, f"the state {leaf!r}", timeout=timeout)

    async def wait_records(self, count: int, *, timeout: float = WAIT_S) -> None:
        """Wait until the Run's history holds ``count`` Turn records."""
        await self.wait_for(
            lambda: len(self.history) >= count, f"{count} Turn records", timeout=timeout
        )

    async def wait_held(self, match: str, count: int = 1, *, timeout: float = WAIT_S) -> None:
        """Wait until ``count`` requests of the conversation ``match`` are held open."""

        async def held() -> bool:
            return len([r for r in await self.requests(match) if r["held"]]) >= count

        await self.wait_for(held, f"{count} held model request(s) of {match!r}", timeout=timeout)

    def describe(self) -> str:
        if not self.actors:
            return "no Run was started"
        turns = [(t.id, t.agent, t.state, t.phase.value) for t in self.core.turns.values()]
        return f"phase {self.core.phase.value}, state {self.state!r}, turns {turns}"

    # ------------------------------------------------------------------ reads

    async def requests(self, match: str | None = None) -> list[dict[str, Any]]:
        """The scripted model's request records, of the conversation ``match`` or all."""
        records = await self.model.requests()
        return [r for r in records if match is None or r["conversation"] == match]

    def _harness_url(self, agent: str, instance_id: str) -> str:
        return f"{self.harness_url}/agents/{quote(agent, safe='')}/{quote(instance_id, safe='')}"

    async def conversation(self, agent: str, instance_id: str) -> dict[str, Any]:
        """A Harness conversation's history view."""
        headers = {"Authorization": f"Bearer {HARNESS_TOKEN}"}
        url = self._harness_url(agent, instance_id) + "?view=history"
        async with self.session.get(url, headers=headers) as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def events(self, agent: str, instance_id: str) -> list[dict[str, Any]]:
        """A Harness conversation's whole stream of events."""
        headers = {"Authorization": f"Bearer {HARNESS_TOKEN}"}
        url = self._harness_url(agent, instance_id) + "?offset=0"
        async with self.session.get(url, headers=headers) as response:
            assert response.status == 200, await response.text()
            return list(await response.json())

    def conversations(self) -> list[tuple[str, str]]:
        """(agent, Instance ID) of every conversation the Harness recorded."""
        return [(log.name, log.instance_id) for log in self.harness.store.existing()]

    async def pick(
        self,
        instance_id: str,
        event: str,
        payload: dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """POST a pick to the Orchestrator API as the Workspace's Harness would (with
        ``key`` as its ``Idempotency-Key``)."""
        headers = {"Authorization": f"Bearer {WORKSPACE_TOKEN}"}
        if key is not None:
            headers["Idempotency-Key"] = key
        url = f"{self.api_url}/agents/{quote(instance_id, safe='')}/events"
        body = {**(payload or {}), "type": event}
        async with self.session.post(url, json=body, headers=headers) as response:
            return response.status, dict(await response.json())


def steps_of(records: list[dict[str, Any]]) -> list[int]:
    """The step index each request asked for, in arrival order."""
    return [int(r["step"]) for r in records]


def model_requests_per_submission(events: list[dict[str, Any]]) -> list[int]:
    """How many model requests each Submission of a conversation made, in admission order."""
    order = [e["data"]["submissionId"] for e in events if e["type"] == "submission-admitted"]
    counts = dict.fromkeys(order, 0)
    for event in events:
        if event["type"] == "model-requested":
            counts[event["data"]["submissionId"]] += 1
    return [counts[sid] for sid in order]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
