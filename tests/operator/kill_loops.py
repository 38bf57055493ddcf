"""The kill loop: the operator SIGKILLed at random moments while Runs of several Turns
progress, then what a user and the Harness can see counted. Used by
``test_kill_loop`` (12 kills) and ``bench/kill_loop.py`` (50, and figures).

The operator runs in a process of its own (``OperatorProcess``) as the chart's
ServiceAccount against the emulator, the kubelet running the shared Workspace's Harness,
and the scripted model answering every Turn with one pick, ``next``, and picking it
again whenever it is asked again (a model that retries a pick it was told may be lost).
A kill comes at a seeded random moment after each start (while kopf starts, while Runs
resume, while Turns run), and a new process starts at once, as a pod's container is
restarted. After the last kill the operator runs until every Run ended.

Counted (``Figures``): Runs that Succeeded and that did not; Turns whose conversation
took more than one Submission (admitted twice); Submissions settled other than once;
Turn Events posted more than once, or never (``TurnSettled`` per AgentTurn,
``TurnRecorded`` per recorded Turn); AgentTurns left; Turns recorded other than
``ended`` (failed by downtime); Run versions on a watch that show a final phase without
every Turn's record.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from kubeturn_harness.scripted import parse_script, serve
from tests.operator import emulator
from tests.operator.installation import Installation
from tests.operator.kubelet import Kubelet
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WORKSPACES,
    Body,
    HarnessReader,
    OperatorProcess,
    events,
    eventually,
    harness_token,
    make_origin,
    names,
    read,
    settings,
    workspace_ready,
)

WORKSPACE = "shared"
POD = f"{WORKSPACE}-kubeturn-sandbox"
AGENT = "worker"
PROMPT = "Step {n} of the task: call next."
FINAL = ("Succeeded", "Failed", "Cancelled")
UP_S = (0.5, 4.0)
"""A kill comes this long after its process started (uniform): from kopf's start (about
2 s here) to well into serving, so kills land in every phase of a start and of a Turn."""
MODEL_DELAY_MS = 300
"""The scripted model's pause before each answer: Turns take long enough that kills land
while they run, not only between them."""
END_S = 240.0
"""How long the last operator may take to end every Run after the last kill."""


@dataclasses.dataclass
class Figures:
    kills: int = 0
    runs: int = 0
    succeeded: int = 0
    not_succeeded: list[str] = dataclasses.field(default_factory=list)
    turns: int = 0
    failed_turns: list[str] = dataclasses.field(default_factory=list)
    """Turns recorded ``failed`` (a runaway of lost picks, a fault): failed by downtime."""
    other_turns: list[str] = dataclasses.field(default_factory=list)
    """Turns recorded neither ``ended`` nor ``failed``: ``aborted`` when the sweep of a
    Turn whose pick ended it came after the Harness's sweep wait (90 s), the operator
    being down meanwhile; the Run goes on as with ``ended``."""
    admitted_twice: list[str] = dataclasses.field(default_factory=list)
    settled_not_once: list[str] = dataclasses.field(default_factory=list)
    duplicate_events: list[str] = dataclasses.field(default_factory=list)
    missing_events: list[str] = dataclasses.field(default_factory=list)
    agentturns_left: list[str] = dataclasses.field(default_factory=list)
    final_without_turns: list[str] = dataclasses.field(default_factory=list)
    """Run versions that showed a final phase without every Turn's record."""
    wall_s: float = 0.0

    def clean(self) -> bool:
        return not (
            self.not_succeeded
            or self.failed_turns
            or self.admitted_twice
            or self.settled_not_once
            or self.duplicate_events
            or self.missing_events
            or self.agentturns_left
            or self.final_without_turns
        )


def run_manifest(name: str, turns: int) -> Body:
    states: dict[str, Any] = {}
    for n in range(1, turns + 1):
        after = f"step{n + 1}" if n < turns else "finished"
        states[f"step{n}"] = {
            "invoke": {"agent": {"slot": AGENT, "prompt": PROMPT.format(n=n)}},
            "on": {"next": {"target": after, "description": "Go on."}},
        }
    states["finished"] = {"type": "final"}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {
                AGENT: {
                    "model": "scripted/any",
                    "instructions": "Do what you are asked.",
                    "workspace": "read",
                }
            },
            "machine": {"initial": "step1", "states": states},
        },
    }


def model_script() -> str:
    """Every Turn picks ``next``; asked again (its pick lost), it picks ``next`` again."""
    step = {"delayMs": MODEL_DELAY_MS, "toolCalls": [{"name": "next", "arguments": {}}]}
    return json.dumps({"conversations": [{"match": "", "repeat": True, "steps": [step]}]})


class RunWatch:
    """Every Run version the API served on a watch (a background reader)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self.versions: list[Body] = []
        self._task: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()

    async def open(self) -> None:
        self._task = asyncio.create_task(self._read(), name="run watch")
        await eventually(self._opened.is_set, "the Run watch to open", timeout=5)

    async def _read(self) -> None:
        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs?watch=true"
        async with self._session.get(path, timeout=aiohttp.ClientTimeout()) as response:
            assert response.status == 200
            self._opened.set()
            async for line in response.content:
                if line.strip():
                    self.versions.append(json.loads(line)["object"])

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def final_without_turns(versions: list[Body], turns: int) -> list[str]:
    """Versions with a final phase whose ``status.turns`` lacks a Turn the Run recorded
    (or, Succeeded, lacks any of its ``turns``)."""
    found = []
    for body in versions:
        status = body.get("status") or {}
        if status.get("phase") not in FINAL:
            continue
        kept = status.get("turns") or []
        short = len(kept) < int(status.get("turnCount") or 0)
        if short or (status["phase"] == "Succeeded" and len(kept) < turns):
            meta = body["metadata"]
            found.append(f"{meta['name']}@{meta['resourceVersion']}: {len(kept)} Turns")
    return found


async def kill_loop(
    k8s: emulator.KubernetesApi,
    installation: Installation,
    kubelet: Kubelet,
    root: Path,
    *,
    kills: int,
    runs: int,
    turns: int,
    seed: int,
    log: Path,
) -> Figures:
    """Drive ``runs`` Runs of ``turns`` Turns through ``kills`` SIGKILLs; count."""
    figures = Figures(runs=runs)
    rng = random.Random(seed)
    runner, url = await serve(parse_script(model_script()))
    api = aiohttp.ClientSession(
        str(k8s.url),
        connector=aiohttp.TCPConnector(force_close=True, limit=0),
        headers=k8s.admin_headers,
    )
    watch = RunWatch(api)
    providers = f"scripted:\n  type: openai\n  baseUrl: {url}\n"
    operator = OperatorProcess(
        settings(installation, providers_yaml=providers), installation.kubeconfig, log
    )
    names_ = [f"kill-{i:02d}" for i in range(runs)]
    try:
        await watch.open()
        await operator.start()
        origin = make_origin(root / "git")
        k8s.create_object(
            WORKSPACES,
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Workspace",
                "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
                "spec": {"repos": {"target": {"url": origin, "ref": "main"}}},
            },
        )
        await kubelet.running(POD, timeout=60)
        await workspace_ready(k8s, WORKSPACE)
        started = time.monotonic()
        for name in names_:
            k8s.create_object(RUNS, run_manifest(name, turns))
        while figures.kills < kills:
            await asyncio.sleep(rng.uniform(*UP_S))
            await operator.kill()
            figures.kills += 1
            await operator.spawn()

        def ended() -> bool:
            return all(
                ((read(k8s, RUNS, n) or {}).get("status") or {}).get("phase") in FINAL
                for n in names_
            )

        await eventually(ended, "every Run to end", timeout=END_S)
        with contextlib.suppress(AssertionError):
            await eventually(lambda: not names(k8s, AGENTTURNS), "AgentTurns gone", timeout=60)
        figures.wall_s = time.monotonic() - started
        await asyncio.sleep(1.0)  # the last background Events and watch versions
        await count(k8s, kubelet, names_, figures)
        figures.final_without_turns = final_without_turns(watch.versions, turns)
    finally:
        await operator.stop()
        await watch.close()
        await api.close()
        await runner.cleanup()
    return figures


async def count(
    k8s: emulator.KubernetesApi, kubelet: Kubelet, runs: list[str], figures: Figures
) -> None:
    """Count what the Runs, the Harness's conversations and the Events say."""
    sandbox = await kubelet.running(POD)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as plain:
        harness = HarnessReader(sandbox.url, harness_token(k8s, WORKSPACE), plain)
        recorded: list[tuple[str, Body]] = []
        for name in runs:
            status = (read(k8s, RUNS, name) or {}).get("status") or {}
            if status.get("phase") == "Succeeded":
                figures.succeeded += 1
            else:
                figures.not_succeeded.append(
                    f"{name}: {status.get('phase')} {status.get('message')}"
                )
            for record in status.get("turns") or []:
                recorded.append((name, record))
        figures.turns = len(recorded)
        for run, record in recorded:
            where = f"{run}/{record['name']}"
            said = f"{where}: {record['outcome']} {record.get('message')}"
            if record["outcome"] == "failed":
                figures.failed_turns.append(said)
            elif record["outcome"] != "ended":
                figures.other_turns.append(said)
            stream = await harness.events(AGENT, record["instanceId"])
            kinds = Counter(e["type"] for e in stream)
            if kinds["submission-admitted"] != 1:
                figures.admitted_twice.append(f"{where}: {kinds['submission-admitted']}")
            settled = Counter(
                e["data"]["submissionId"] for e in stream if e["type"] == "submission-settled"
            )
            admitted = [
                e["data"]["submissionId"] for e in stream if e["type"] == "submission-admitted"
            ]
            for submission in admitted:
                if settled[submission] != 1:
                    figures.settled_not_once.append(f"{where}/{submission}: {settled[submission]}")
    settled_events = Counter(e["involvedObject"]["name"] for e in events(k8s, "TurnSettled"))
    recorded_events = Counter(
        (e["involvedObject"]["name"], e["message"].split(" ", 1)[0])
        for e in events(k8s, "TurnRecorded")
    )
    for run, record in recorded:
        turn = f"{run}-{record['name']}"
        for what, seen in (
            (f"TurnSettled {turn}", settled_events[turn]),
            (f"TurnRecorded {run}/{record['name']}", recorded_events[(run, record["name"])]),
        ):
            if seen > 1:
                figures.duplicate_events.append(f"{what}: {seen}")
            elif seen == 0:
                figures.missing_events.append(what)
    figures.agentturns_left = names(k8s, AGENTTURNS)
