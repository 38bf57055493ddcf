"""Benchmark of what the console costs the operator on a cluster: ``kubeturn operator`` (a
process of its own, as bench/operator.py starts it) serving ``console.kubeturn.dev``
behind the API emulator's aggregation layer (ADR 0110), over ``--runs`` live Runs.

The world: the emulator with the chart's RBAC, APIService and serving certificate; the
operator with the console ``kubeturn operator`` mounts (``cluster_console``); ``--runs``
Runs of no Agent, each moved by a signal ``submit`` to wait at ``waiting`` (a trail of
one move), all ``Running``; a viewer (the chart's console role, ``get``/``list`` of Runs
in the namespace) whose token every request carries, as ``kubectl proxy`` does. Each
request goes through the API server (its authentication, RBAC, the proxy with the
front-proxy client certificate); the operator verifies the certificate and asks the API
server a SubjectAccessReview per user and verb (its answers kept a few seconds).

Measured on the operator process (CPU from ``/proc/<pid>/stat``, user + system; RSS
from ``/proc/<pid>/status``):
0. its idle share of a core with the Runs at rest, before any view (``--idle`` s);
1. the group's discovery document (``/apis/console.kubeturn.dev/v1alpha1``), ``--views``
   times: CPU per request that reads nothing, the floor under every view below (the
   emulator's proxy opens a TLS connection per request, so the operator's side of a
   handshake, its client certificate verified, is in every figure; kube-apiserver keeps
   its connections to an aggregated API open);
2. the namespace's Runs list page, ``--views`` times: CPU per view;
3. every Run's page once, then ``--views`` more in turn: CPU per view;
4. a Run page's live part asked with the version it holds (what an open page does every
   2 s while nothing changed: ``204``), ``--views`` times: CPU per poll;
5. all the Runs' pages open at once, each polling every 2 s, for ``--seconds``: the
   share of one core the operator takes (its idle share included);
6. its RSS before the first view and after all this, and its peak.

The figures include what the operator spends anyway while they are taken (step 0 says
how much that is). Run: ``python bench/console_cluster.py [--runs 50] [--views 200]
[--seconds 20] [--idle 10] [--json]``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402
from tests.operator import installation as installation_  # noqa: E402
from tests.operator.console_support import PREFIX, place_console, user  # noqa: E402
from tests.operator.operator_support import (  # noqa: E402
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    OperatorProcess,
    charted,
    eventually,
    helm,
    settings,
)

TICKS = os.sysconf("SC_CLK_TCK")
NO_PROVIDERS = "{}\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def memory_mib(pid: int, field: str) -> float:
    found = re.search(rf"{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def run_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "agents": {},
            "machine": {
                "initial": "drafting",
                "states": {
                    "drafting": {"on": {"submit": "waiting"}},
                    "waiting": {"on": {"approve": "done", "reject": "drafting"}},
                    "done": {"type": "final"},
                },
            },
        },
    }


async def measure(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        k8s, installed, _ = await charted(stack, root)
        objects = installation_.render(helm(), installed.shape)
        place = place_console(k8s, objects, installed.operator_namespace, root / "tls")
        made = dataclasses.replace(
            settings(installed, providers_yaml=NO_PROVIDERS), **place.settings
        )
        operator = OperatorProcess(made, installed.kubeconfig, root / "op.log")
        await operator.start()
        stack.push_async_callback(operator.kill)
        assert operator.process is not None
        pid = operator.process.pid

        admin = aiohttp.ClientSession(
            str(k8s.url),
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            headers=k8s.admin_headers,
        )
        stack.push_async_callback(admin.close)
        names = [f"run-{n:03d}" for n in range(args.runs)]
        runs = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs"
        for name in names:
            async with admin.post(runs, json=run_manifest(name)) as answer:
                assert answer.status == 201, await answer.text()

        def states() -> list[Any]:
            return [
                ((k8s.read_object(RUNS, NAMESPACE, name) or {}).get("status") or {}).get("state")
                for name in names
            ]

        await eventually(lambda: set(states()) == {"drafting"}, "every Run to start", timeout=120)
        signal = {"spec": {"signals": [{"id": "submit-1", "event": "submit"}]}}
        headers = {"Content-Type": "application/merge-patch+json"}
        for name in names:
            async with admin.patch(
                f"{runs}/{name}", data=json.dumps(signal), headers=headers
            ) as answer:
                assert answer.status == 200, await answer.text()
        await eventually(lambda: set(states()) == {"waiting"}, "every Run to wait", timeout=120)

        token = user(k8s, "viewer", console=True, runs=True)
        viewer = aiohttp.ClientSession(
            str(k8s.url),
            connector=aiohttp.TCPConnector(limit=0),
            headers={"Authorization": f"Bearer {token}"},
        )
        stack.push_async_callback(viewer.close)

        async def get(path: str) -> tuple[int, str]:
            async with viewer.get(path) as answer:
                return answer.status, await answer.text()

        await asyncio.sleep(args.idle / 2)  # the Runs' writes settled
        before, started = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(args.idle)
        idle = (cpu_seconds(pid) - before) / (time.monotonic() - started) * 100
        rss_start = memory_mib(pid, "VmRSS")

        async def per_view(paths: list[str], check: Callable[[int], bool]) -> float:
            before = cpu_seconds(pid)
            for path in paths:
                status, _ = await get(path)
                assert check(status), (path, status)
            return (cpu_seconds(pid) - before) / len(paths) * 1000

        def ok(status: int) -> bool:
            return status == 200

        floor_ms = await per_view([PREFIX] * args.views, ok)
        listed = f"{PREFIX}/namespaces/{NAMESPACE}/runs"
        list_ms = await per_view([listed] * args.views, ok)
        pages = [f"{listed}/{name}" for name in names]
        first_ms = await per_view(pages, ok)
        run_ms = await per_view([pages[i % len(pages)] for i in range(args.views)], ok)
        polls = []
        for page in pages:
            _, text = await get(page)
            version = re.search(r'data-version="([0-9a-f]+)"', text)
            assert version is not None, page
            polls.append(f"{page}?part=1&v={version.group(1)}")
        poll_ms = await per_view([polls[0]] * args.views, lambda status: status == 204)

        async def open_pages() -> int:
            asked = 0
            started = time.monotonic()
            while time.monotonic() - started < args.seconds:
                tick = time.monotonic()
                answers = await asyncio.gather(*(get(url) for url in polls))
                assert {status for status, _ in answers} == {204}, answers[0]
                asked += len(answers)
                await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - tick)))
            return asked

        share, asked = await core_share(pid, open_pages)
        return {
            "runs": args.runs,
            "load": os.getloadavg()[0],
            "idle_core_percent": round(idle, 1),
            "discovery_cpu_ms": round(floor_ms, 2),
            "runs_list_cpu_ms": round(list_ms, 2),
            "run_page_first_cpu_ms": round(first_ms, 2),
            "run_page_cpu_ms": round(run_ms, 2),
            "unchanged_poll_cpu_ms": round(poll_ms, 2),
            "open_pages_core_percent": round(share, 1),
            "open_pages_polls": asked,
            "rss_start_mib": round(rss_start, 1),
            "rss_end_mib": round(memory_mib(pid, "VmRSS"), 1),
            "rss_peak_mib": round(memory_mib(pid, "VmHWM"), 1),
        }


async def core_share(pid: int, work: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    """The share of one core (percent) process ``pid`` took while ``work`` ran; its
    result."""
    before, started = cpu_seconds(pid), time.monotonic()
    done = await work()
    return (cpu_seconds(pid) - before) / (time.monotonic() - started) * 100, done


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--views", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubeturn-console-cluster-bench-") as temp:
        figures = asyncio.run(measure(Path(temp), args))
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:28} {value}")


if __name__ == "__main__":
    main()
