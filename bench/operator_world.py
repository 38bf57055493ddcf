"""The worlds bench/operator.py measures, and what it measures of each.

A world: the API emulator on 127.0.0.1 with the chart's ServiceAccount and RBAC (rendered
by helm from the kubectl wheel, enforced by the emulator), the kubelet (each sandbox Pod
a real Harness process) and the scripted model in this process, and one operator in a
process of its own, as that ServiceAccount: kubeturn's (``operator.run``, as ``kubeturn
operator`` runs it), or the floor (bench/floor_operator.py). N Runs are created at once
and driven until every one is ``Succeeded`` and every AgentTurn is gone; the figures are
of that stretch only (after kubeturn's shared Workspace is Ready).

kubeturn's Runs name one Workspace, ``shared``, so one Harness serves them all. A Run's one
agent state asks its Agent for a Turn ``turns`` times: its Agent picks ``done``, which
ends the Run after the last Turn and otherwise passes through a state that loops back
(``again``), so each Turn is a new one. The scripted model answers every Turn at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import kmock
from prometheus_client.parser import text_string_to_metric_families
from tests.operator import emulator, traffic
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WORKSPACES,
    OperatorProcess,
    call,
    charted,
    make_origin,
    settings,
    workspace_ready,
)

from kubeturn_harness.scripted import parse_script, serve

REPO = Path(__file__).resolve().parents[1]
PROMPT = "Say you are done, then call done."
WORKSPACE = "shared"
BOUND_S = 1800.0
"""How long all N Runs may take to succeed before the benchmark gives up."""
STALL_S = 180.0
"""How long it waits for one more Run to end before it gives up (an operator that handles
nothing ends the size with its Runs counted as not ended, not a half-hour wait)."""
TURNS_GONE_S = 120.0
"""How long the AgentTurns may take to go once every Run succeeded."""
RUN_RESOURCE = kmock.resource(RUNS)
KINDS = ("runs", "workspaces", "agentturns")
"""The kinds the figures name; every other resource is ``other``."""


def run_manifest(name: str, turns: int) -> dict[str, Any]:
    """A Run whose Agent is asked for ``turns`` Turns, one after another."""
    working: dict[str, Any] = {
        "invoke": {"agent": {"slot": "worker", "prompt": PROMPT}},
        "on": {"done": {"target": "finished", "description": "Done."}},
    }
    machine: dict[str, Any] = {
        "initial": "working",
        "states": {"working": working, "finished": {"type": "final"}},
    }
    if turns > 1:
        machine["context"] = {"turns": 0}
        working["on"]["done"] = [
            {
                "guard": f"context.turns + 1 >= {turns}",
                "target": "finished",
                "description": "Done.",
            },
            {"target": "again", "assign": {"context.turns": "context.turns + 1"}},
        ]
        machine["states"]["again"] = {"always": {"target": "working"}}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {
                "worker": {
                    "model": "scripted/any",
                    "instructions": "Do what you are asked.",
                    "workspace": "read",
                }
            },
            "machine": machine,
        },
    }


def workspace_manifest(origin: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin, "ref": "main"}}},
    }


def model_script() -> str:
    """Every Turn (each a new conversation) picks ``done`` at once."""
    steps = [{"toolCalls": [call("done")]}]
    return json.dumps({"conversations": [{"match": PROMPT, "repeat": True, "steps": steps}]})


async def sweep_histogram(metrics_url: str) -> tuple[list[tuple[float, float]], float]:
    """The cumulative buckets (upper edge, count) and the count of the operator's sweep
    histogram, read from its ``/metrics``."""
    async with aiohttp.ClientSession() as session, session.get(metrics_url) as answer:
        text = await answer.text()
    buckets: list[tuple[float, float]] = []
    count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "kubeturn_sweep_to_settled_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_count"):
                count = sample.value
    return buckets, count


def histogram_quantile(
    before: list[tuple[float, float]], after: list[tuple[float, float]], q: float
) -> tuple[float, int]:
    """The upper edge of the bucket holding the q-quantile of the observations made between
    ``before`` and ``after``, and their number."""
    earlier = dict(before)
    deltas = [(edge, value - earlier.get(edge, 0.0)) for edge, value in after]
    total = deltas[-1][1] if deltas else 0.0
    if total <= 0:
        return float("nan"), 0
    for edge, cumulative in deltas:
        if cumulative >= q * total:
            return edge, int(total)
    return float("inf"), int(total)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Watch:
    """AgentTurn events with the monotonic time each arrived (a background reader)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self.first_added: dict[str, float] = {}
        """Run name → when its first AgentTurn was ADDED."""
        self.deleting: dict[str, float] = {}
        """AgentTurn name → when a version with deletionTimestamp was first seen."""
        self.deleted: dict[str, float] = {}
        self._opened = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._task = asyncio.create_task(self._read())
        await asyncio.wait_for(self._opened.wait(), 5)

    async def _read(self) -> None:
        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/agentturns?watch=true"
        async with self._session.get(path, timeout=aiohttp.ClientTimeout()) as response:
            self._opened.set()
            async for line in response.content:
                if not line.strip():
                    continue
                now = time.monotonic()
                event = json.loads(line)
                body = event["object"]
                name = body["metadata"]["name"]
                run = ((body.get("spec") or {}).get("runRef") or {}).get("name", "")
                if event["type"] == "ADDED":
                    self.first_added.setdefault(run, now)
                if body["metadata"].get("deletionTimestamp"):
                    self.deleting.setdefault(name, now)
                if event["type"] == "DELETED":
                    self.deleted.setdefault(name, now)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class FloorProcess(OperatorProcess):
    """bench/floor_operator.py in a process of its own, as :class:`OperatorProcess` runs
    kubeturn's (its ``/readyz`` on the settings' health port; measured alike)."""

    async def spawn(self) -> None:
        floor = REPO / "bench" / "floor_operator.py"
        self.process = await asyncio.create_subprocess_exec(
            *[sys.executable, str(floor), str(self._kubeconfig), str(self.settings.health_port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )


def json_bytes(value: Any) -> int:
    """Bytes of ``value``'s compact JSON: what etcd and a watch event carry of it."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def kind_of(resource_: str) -> str:
    plural = resource_.split("/", 1)[0]
    return plural if plural in KINDS else "other"


def by_kind(counts: Counter[str] | Counter[tuple[str, str]]) -> dict[str, int]:
    """Counts keyed by resource, or by (verb, resource), summed per kind."""
    summed = dict.fromkeys((*KINDS, "other"), 0)
    for key, value in counts.items():
        summed[kind_of(key[1] if isinstance(key, tuple) else key)] += value
    return summed


def traffic_figures(seen: traffic.Traffic) -> dict[str, Any]:
    """What the operator's client parsed and wrote, per kind (totals, not per Run)."""
    writes: dict[str, dict[str, int]] = {kind: {} for kind in (*KINDS, "other")}
    for (verb, resource_), count in seen.writes().items():
        verbs = writes[kind_of(resource_)]
        verbs[verb] = verbs.get(verb, 0) + count
    reads = Counter({key: n for key, n in seen.requests.items() if key not in seen.writes()})
    return {
        "answer_bytes": by_kind(seen.answer_bytes),
        "event_bytes": by_kind(seen.event_bytes),
        "events": by_kind(seen.events),
        "writes": writes,
        "reads": by_kind(reads),
    }


def phase_of(k8s: emulator.KubernetesApi, name: str) -> tuple[str | None, str | None]:
    """A Run's phase and, if it will not succeed, why; read without copying it."""
    key = (RUN_RESOURCE, NAMESPACE, name)
    if key not in k8s.objects or k8s.objects[key].deleted:
        return None, None
    status = k8s.objects[key].raw.get("status") or {}
    phase = status.get("phase")
    if phase == "Failed":
        return phase, str(status.get("message"))
    invalid = [c for c in status.get("conditions", []) if c.get("reason") == "Invalid"]
    return phase, str(invalid[0].get("message")) if invalid else None


def live_turns(k8s: emulator.KubernetesApi) -> int:
    turns = kmock.resource(AGENTTURNS)
    return sum(1 for key in list(k8s.objects) if key[0] == turns and not k8s.objects[key].deleted)


def workspace_sizes(k8s: emulator.KubernetesApi, since: int) -> dict[str, Any]:
    """The shared Workspace's JSON now and at its largest, over its versions from the one
    of resourceVersion ``since`` on, and how many were stored after that one."""
    key = (kmock.resource(WORKSPACES), NAMESPACE, WORKSPACE)
    versions = [v.raw for v in k8s.objects[key].history.raw if v is not None]
    seen = [v for v in versions if int(v["metadata"]["resourceVersion"]) >= since]
    return {
        "end_bytes": json_bytes(versions[-1]),
        "largest_bytes": max(map(json_bytes, seen or versions[-1:])),
        "stored_versions": len(seen) - 1,
    }


def largest_run(k8s: emulator.KubernetesApi, names: list[str]) -> dict[str, Any]:
    """The largest of the Runs ``names`` as stored: its name, and the bytes of the whole
    object, of its status and of its annotations (keys and values, as the API server
    counts them)."""
    found: dict[str, Any] = {"name": None, "bytes": 0, "status_bytes": 0, "annotations_bytes": 0}
    for name in names:
        body = k8s.read_object(RUNS, NAMESPACE, name)
        if body is None or json_bytes(body) <= found["bytes"]:
            continue
        annotations = body["metadata"].get("annotations") or {}
        found = {
            "name": name,
            "bytes": json_bytes(body),
            "status_bytes": json_bytes(body.get("status") or {}),
            "annotations_bytes": sum(
                len(k.encode()) + len(v.encode()) for k, v in annotations.items()
            ),
        }
    return found


def children_cpu() -> float:
    """CPU seconds of this process's ended children (the operator, the Harness, git)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def profiler(
    operator: OperatorProcess, into: Path | None, label: str
) -> subprocess.Popen[bytes] | None:
    """py-spy recording the operator from now until it is sent SIGINT (when asked)."""
    if into is None:
        return None
    spy = shutil.which("py-spy")
    if spy is None:
        print("--profile: py-spy is not installed (pip install py-spy); not profiling")
        return None
    assert operator.process is not None
    into.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(operator.process.pid),
            "--format",
            "speedscope",
            "--output",
            str(into / f"{label}.json"),
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def one_size(
    n: int,
    turns: int,
    root: Path,
    *,
    floor: bool,
    profile: Path | None,
    retention_s: float = 0.0,
) -> dict[str, Any]:
    """N Runs to Succeeded in a fresh world, driven by kubeturn or by the floor, each
    settled AgentTurn kept ``retention_s`` (ADR 0106); the figures (totals:
    bench/operator.py divides them per Run)."""
    load = os.getloadavg()[0]
    begun = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        k8s, installed, kubelet = await charted(stack, root)
        runner, url = await serve(parse_script(model_script()))
        stack.push_async_callback(runner.cleanup)
        api = aiohttp.ClientSession(
            str(k8s.url),
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            headers=k8s.admin_headers,
        )
        stack.push_async_callback(api.close)
        watch = Watch(api)
        await watch.open()
        stack.push_async_callback(watch.close)
        providers = f"scripted:\n  type: openai\n  baseUrl: {url}\n"
        made = dataclasses.replace(
            settings(installed, providers_yaml=providers), turn_retention_s=retention_s
        )
        kind = FloorProcess if floor else OperatorProcess
        operator = kind(made, installed.kubeconfig, root / "op.log")
        await operator.start()
        stack.push_async_callback(operator.stop)
        metrics_url = f"http://127.0.0.1:{made.metrics_port}/metrics"

        revision = 0
        if not floor:
            k8s.create_object(f"{GROUP_VERSION}/workspaces", workspace_manifest(make_origin(root)))
            await kubelet.running(f"{WORKSPACE}-kubeturn-sandbox", timeout=60)
            await workspace_ready(k8s, WORKSPACE)
            before, _ = await sweep_histogram(metrics_url)
            shared = k8s.read_object(WORKSPACES, NAMESPACE, WORKSPACE) or {}
            revision = int(shared["metadata"]["resourceVersion"])
        user = installed.user.name
        traffic_before = k8s.traffic[user].copy()
        _, cpu_before = operator.usage()
        own_before = time.process_time()
        children_before = children_cpu()
        spy = profiler(operator, profile, f"{'floor' if floor else 'operator'}-{n}")

        names = [f"bench-{i:04d}" for i in range(n)]
        created: dict[str, float] = {}

        async def create(name: str) -> None:
            created[name] = time.monotonic()
            path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs"
            async with api.post(path, json=run_manifest(name, turns)) as answer:
                assert answer.status in (200, 201), await answer.text()

        started = time.monotonic()
        await asyncio.gather(*(create(name) for name in names))
        succeeded: dict[str, float] = {}
        failed: dict[str, str] = {}
        moved = started
        while len(succeeded) + len(failed) < n and time.monotonic() < started + BOUND_S:
            now = time.monotonic()
            if now - moved > STALL_S:
                break
            ended = len(succeeded) + len(failed)
            for name in names:
                if name in succeeded or name in failed:
                    continue
                phase, why = phase_of(k8s, name)
                if phase == "Succeeded":
                    succeeded[name] = now
                elif why is not None:
                    failed[name] = why
            if len(succeeded) + len(failed) > ended:
                moved = now
            await asyncio.sleep(0.05)
        wall = time.monotonic() - started
        # Every AgentTurn goes after its Run's record: wait (bounded) for them all to go.
        turns_deadline = time.monotonic() + TURNS_GONE_S
        while live_turns(k8s) and time.monotonic() < turns_deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the watches' last events
        settled = time.monotonic() - started
        left = live_turns(k8s)
        rss, cpu_after = operator.usage()
        seen = k8s.traffic[user].since(traffic_before)
        own_cpu = time.process_time() - own_before
        if not floor:
            after, _ = await sweep_histogram(metrics_url)
            hist_p99, hist_n = histogram_quantile(before, after, 0.99)
            workspace = workspace_sizes(k8s, revision)
        else:
            hist_p99, hist_n, workspace = float("nan"), 0, None
        largest = largest_run(k8s, names)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 60)

    first_turn = [watch.first_added[r] - created[r] for r in names if r in watch.first_added]
    to_succeeded = [succeeded[r] - created[r] for r in succeeded]
    sweeps = [watch.deleted[t] - watch.deleting[t] for t in watch.deleted if t in watch.deleting]

    def ms(samples: list[float]) -> dict[str, Any]:
        return {
            "p50": percentile(samples, 0.5) * 1000,
            "p99": percentile(samples, 0.99) * 1000,
            "n": len(samples),
        }

    return {
        "operator": "floor" if floor else "kubeturn",
        "runs": n,
        "turns_per_run": 1 if floor else turns,
        "load_average_1m_at_start": load,
        "succeeded": len(succeeded),
        "failed": len(failed),
        "failures": sorted(set(failed.values()))[:3],
        "wall_s": wall,
        "settled_s": settled,
        "world_s": time.monotonic() - begun,
        "operator_cpu_s": cpu_after - cpu_before,
        "traffic": traffic_figures(seen),
        "workspace": workspace,
        "create_to_first_agentturn_ms": ms(first_turn),
        "create_to_succeeded_ms": ms(to_succeeded),
        "sweep_to_settled_histogram_p99_ms_upper": hist_p99 * 1000,
        "sweep_to_settled_histogram_n": hist_n,
        "deletion_to_deleted_ms": ms(sweeps),
        "agentturns_left": left,
        "operator_peak_rss_mib": rss,
        "emulator_side_cpu_s": own_cpu,
        # The operator and the Harnesses have ended: their CPU is in this process's children's.
        "harness_side_cpu_s": children_cpu() - children_before - cpu_after,
        "largest_run": largest,
        "harnesses_started": len(kubelet.started),
        "kubelet_errors": [str(e) for e in kubelet.errors][:3],
    }
