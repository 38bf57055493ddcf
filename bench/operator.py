"""Benchmark of the Kubernetes operator against the API emulator, at N concurrent Runs.

For each N: the emulator on 127.0.0.1, the kubelet (each sandbox Pod a real Harness
process) and the scripted model in this process, and the operator in its own process
(``operator.run``, as ``kubeturn operator`` runs it) as the chart's ServiceAccount, its
RBAC rendered by helm (from the kubectl wheel) and enforced by the emulator. One
Workspace, ``shared``, is named by every Run, so one Harness serves them all. N minimal
Runs (one agent state whose Agent picks ``done`` once → final) are created at once, all
answered by one scripted conversation, and driven until every one is ``Succeeded``.

Prints, per N:
1. reconcile latency p50/p99: per Run, from its creation (the POST sent) to its first
   AgentTurn's ADDED event on a watch, and to the Run's ``Succeeded`` (polled);
2. sweep → settled p99, estimated from the operator's ``kubeturn_sweep_to_settled_seconds``
   histogram buckets (read from its ``/metrics``; an upper bound: the bucket's edge), and
   measured per AgentTurn on the watch from its first version carrying
   ``deletionTimestamp`` to its DELETED event;
3. the operator process's peak RSS (``VmHWM`` in ``/proc/<pid>/status``) and CPU seconds;
4. the largest Run object once all ended, in bytes of its JSON as the API serves it: the
   whole object, its status, and its annotations (kopf's and any other; the API server
   caps those at 256 KiB together). These Runs are created with a POST, not with
   ``kubectl apply``, so they carry no last-applied copy of their spec.

Run: ``python bench/operator.py [--runs 50 200] [--json]`` (default ``--runs 50``).
``--profile DIR`` records the operator with py-spy (when installed) into DIR.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from tests.operator import emulator  # noqa: E402
from tests.operator.operator_support import (  # noqa: E402
    GROUP_VERSION,
    NAMESPACE,
    OperatorProcess,
    call,
    charted,
    make_origin,
    script,
    settings,
    workspace_ready,
)

from kubeturn_harness.scripted import parse_script, serve  # noqa: E402

PROMPT = "Say you are done, then call done."
WORKSPACE = "shared"
BOUND_S = 600.0
"""How long all N Runs may take to succeed before the benchmark gives up."""


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_manifest(name: str) -> dict[str, Any]:
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
            "machine": {
                "initial": "working",
                "states": {
                    "working": {
                        "invoke": {"agent": {"slot": "worker", "prompt": PROMPT}},
                        "on": {"done": {"target": "finished", "description": "Done."}},
                    },
                    "finished": {"type": "final"},
                },
            },
        },
    }


def workspace_manifest(origin: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin, "ref": "main"}}},
    }


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


async def one_size(n: int, root: Path, profile: Path | None) -> dict[str, Any]:
    """Run N Runs to Succeeded in a fresh world; the figures."""
    origin = make_origin(root / "git")
    async with contextlib.AsyncExitStack() as stack:
        k8s, installed, kubelet = await charted(stack, root)
        runner, url = await serve(parse_script(script({PROMPT: [{"toolCalls": [call("done")]}]})))
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
        operator = OperatorProcess(
            settings(installed, providers_yaml=providers), installed.kubeconfig, root / "op.log"
        )
        await operator.start()
        stack.push_async_callback(operator.stop)
        metrics_url = f"http://127.0.0.1:{operator.settings.metrics_port}/metrics"

        k8s.create_object(f"{GROUP_VERSION}/workspaces", workspace_manifest(origin))
        await kubelet.running(f"{WORKSPACE}-kubeturn-sandbox", timeout=60)
        await workspace_ready(k8s, WORKSPACE)
        before, _ = await sweep_histogram(metrics_url)
        _, cpu_before = operator.usage()
        own_before = time.process_time()
        children_before = _children_cpu()
        spy = _profiler(operator, profile, n)

        names = [f"bench-{i:04d}" for i in range(n)]
        created: dict[str, float] = {}
        runs_path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs"

        async def create(name: str) -> None:
            created[name] = time.monotonic()
            async with api.post(runs_path, json=run_manifest(name)) as answer:
                assert answer.status in (200, 201), await answer.text()

        started = time.monotonic()
        await asyncio.gather(*(create(name) for name in names))
        succeeded: dict[str, float] = {}
        failed: dict[str, str] = {}
        deadline = started + BOUND_S
        while len(succeeded) + len(failed) < n and time.monotonic() < deadline:
            now = time.monotonic()
            for name in names:
                if name in succeeded or name in failed:
                    continue
                body = k8s.read_object(f"{GROUP_VERSION}/runs", NAMESPACE, name) or {}
                phase = (body.get("status") or {}).get("phase")
                if phase == "Succeeded":
                    succeeded[name] = now
                elif phase == "Failed":
                    failed[name] = str(body["status"].get("message"))
                else:
                    for condition in (body.get("status") or {}).get("conditions", []):
                        if condition.get("reason") == "Invalid":
                            failed[name] = str(condition.get("message"))
            await asyncio.sleep(0.02)
        wall = time.monotonic() - started
        largest = largest_run(k8s, names)
        # Every AgentTurn goes after its Run's record: wait (bounded) for them all to go.
        turns = f"{GROUP_VERSION}/agentturns"

        def live_turns() -> int:
            keys = [key for key in list(k8s.objects) if key[1] == NAMESPACE]
            return sum(
                1
                for key in keys
                if key[0] == turns and k8s.read_object(turns, NAMESPACE, key[2]) is not None
            )

        turns_deadline = time.monotonic() + 90
        while live_turns() and time.monotonic() < turns_deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the watch's last events
        left = live_turns()
        after, _ = await sweep_histogram(metrics_url)
        rss, cpu_after = operator.usage()
        own_cpu = time.process_time() - own_before
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 60)

    first_turn = [watch.first_added[r] - created[r] for r in names if r in watch.first_added]
    to_succeeded = [succeeded[r] - created[r] for r in succeeded]
    sweeps = [watch.deleted[t] - watch.deleting[t] for t in watch.deleted if t in watch.deleting]
    hist_p99, hist_n = histogram_quantile(before, after, 0.99)

    def ms(samples: list[float]) -> dict[str, Any]:
        return {
            "p50": percentile(samples, 0.5) * 1000,
            "p99": percentile(samples, 0.99) * 1000,
            "n": len(samples),
        }

    return {
        "runs": n,
        "succeeded": len(succeeded),
        "failed": len(failed),
        "failures": sorted(set(failed.values()))[:3],
        "wall_s": wall,
        "create_to_first_agentturn_ms": ms(first_turn),
        "create_to_succeeded_ms": ms(to_succeeded),
        "sweep_to_settled_histogram_p99_ms_upper": hist_p99 * 1000,
        "sweep_to_settled_histogram_n": hist_n,
        "deletion_to_deleted_ms": ms(sweeps),
        "agentturns_left": left,
        "operator_peak_rss_mib": rss,
        "operator_cpu_s": cpu_after - cpu_before,
        "emulator_side_cpu_s": own_cpu,
        "harness_side_cpu_s": _children_cpu() - children_before - cpu_after,
        "largest_run": largest,
        "harnesses_started": len(kubelet.started),
        "kubelet_errors": [str(e) for e in kubelet.errors][:3],
    }


def json_bytes(value: Any) -> int:
    """Bytes of ``value``'s compact JSON: what etcd and a watch event carry of it."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def largest_run(k8s: emulator.KubernetesApi, names: list[str]) -> dict[str, Any]:
    """The largest of the Runs ``names`` as stored: its name, and the bytes of the whole
    object, of its status and of its annotations (keys and values, as the API server
    counts them)."""
    found: dict[str, Any] = {"name": None, "bytes": 0, "status_bytes": 0, "annotations_bytes": 0}
    for name in names:
        body = k8s.read_object(f"{GROUP_VERSION}/runs", NAMESPACE, name)
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


def _children_cpu() -> float:
    """CPU seconds of this process's ended children (the operator, the Harness, git)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _profiler(
    operator: OperatorProcess, into: Path | None, n: int
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
            str(into / f"operator-{n}.json"),
            "--idle",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[50])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy into DIR")
    args = parser.parse_args()
    results = []
    for n in args.runs:
        with tempfile.TemporaryDirectory(prefix="kubeturn-bench-") as scratch:
            results.append(asyncio.run(one_size(n, Path(scratch), args.profile)))
    figures = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "sizes": results,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}")
    for r in results:
        print(
            f"N={r['runs']}: {r['succeeded']} Succeeded, {r['failed']} Failed "
            f"in {r['wall_s']:.1f} s; Harness processes {r['harnesses_started']}; "
            f"AgentTurns left {r['agentturns_left']}"
        )
        for label, key in (
            ("create → first AgentTurn", "create_to_first_agentturn_ms"),
            ("create → Succeeded", "create_to_succeeded_ms"),
            ("deletionTimestamp → DELETED", "deletion_to_deleted_ms"),
        ):
            f = r[key]
            print(f"  {label:<28} p50 {f['p50']:9.1f} ms   p99 {f['p99']:9.1f} ms   (n={f['n']})")
        print(
            f"  sweep → settled p99 (histogram, bucket edge) "
            f"≤ {r['sweep_to_settled_histogram_p99_ms_upper']:.0f} ms "
            f"(n={r['sweep_to_settled_histogram_n']})"
        )
        print(
            f"  operator process: peak RSS {r['operator_peak_rss_mib']:.0f} MiB, "
            f"CPU {r['operator_cpu_s']:.1f} s; the rest: emulator, kubelet and model "
            f"{r['emulator_side_cpu_s']:.1f} s, Harness and git {r['harness_side_cpu_s']:.1f} s"
        )
        big = r["largest_run"]
        print(
            f"  largest Run object ({big['name']}): {big['bytes']} bytes of JSON; status "
            f"{big['status_bytes']}, annotations {big['annotations_bytes']}"
        )
        if r["failures"] or r["kubelet_errors"]:
            print(f"  failures: {r['failures']}  kubelet errors: {r['kubelet_errors']}")


if __name__ == "__main__":
    main()
