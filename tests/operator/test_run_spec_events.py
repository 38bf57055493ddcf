"""A Run's spec reaches its actor as events from kopf's watch; a Run that waits costs
nothing. The real operator (kopf, in a thread of its own, as the chart's ServiceAccount)
against the strict API emulator; these Runs invoke nothing, so no Workspace is made.

One operator, three Runs: ``waits`` (waits for the signal ``go``), ``finished`` (ends as
it starts) and ``broken`` (a transition's target names no state):
- ``x`` appended to ``finished``'s signals is recorded ``ignored`` with a
  ``SignalIgnored`` Event: one read of the spec, one status write;
- while all three wait (running, finished with a signal in its spec, invalid) for 2 s,
  the operator makes no request about Runs at the emulator (no read, no write) and no
  daemon reads a spec (``kubeturn_run_spec_reads``: each daemon read its spec once as it
  loaded the Run and once as its actor started, the invalid one once, then ``finished``
  once for ``x``);
- ``go`` appended to ``waits``' signals is handled: one read, one status write; a new
  ``spec.input`` of ``waits`` (a new generation, nothing new for its actor) is read once
  and writes nothing;
- ``broken`` fixed (a new generation) is loaded at once and runs to ``Succeeded``;
- kopf writes a Run once, its finalizer, and keeps no record of what it handled of one;
- each Run's status is written exactly twice; the runs-by-phase gauge follows: Running 1
  and Succeeded 1, then Succeeded 3, then 2 once ``finished`` is deleted (no count for the
  invalid Run, which has no phase).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client import REGISTRY

from tests.operator import emulator
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    OperatorThread,
    events,
    eventually,
    fail_on_logged_errors,
    read,
    settings,
    status,
)

Body = dict[str, Any]
IDLE_S = 2.0
DIFFBASE = "kopf.zalando.org/last-handled-configuration"
NAMES = ("waits", "finished", "broken")
PATH = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs"


def run(name: str, states: Body, initial: str) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"agents": {}, "machine": {"initial": initial, "states": states}},
    }


WAITS = run(
    "waits",
    {
        "waiting": {"on": {"go": {"target": "done", "description": "Go on."}}},
        "done": {"type": "final"},
    },
    "waiting",
)
FINISHED = run("finished", {"done": {"type": "final"}}, "done")
BROKEN = run("broken", {"start": {"always": "nowhere"}, "done": {"type": "final"}}, "start")


@pytest.fixture
async def operator(
    installation: Installation, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[OperatorThread]:
    """The operator alone; the test fails if it logged an error."""
    started = OperatorThread(settings(installation, providers_yaml="{}\n"), installation.kubeconfig)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()
    fail_on_logged_errors(caplog, [])


def of(k8s: emulator.KubernetesApi, name: str) -> Body:
    return status(k8s, RUNS, name)


def finalizers(k8s: emulator.KubernetesApi, name: str) -> list[str]:
    return list(((read(k8s, RUNS, name) or {}).get("metadata") or {}).get("finalizers") or [])


def annotations(k8s: emulator.KubernetesApi, name: str) -> dict[str, str]:
    found = read(k8s, RUNS, name) or {}
    return dict(found.get("metadata", {}).get("annotations") or {})


def reads() -> float:
    return REGISTRY.get_sample_value("kubeturn_run_spec_reads_total") or 0.0


def gauge() -> dict[str, float]:
    counts = {}
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Cancelled"):
        value = REGISTRY.get_sample_value("kubeturn_runs", {"phase": phase})
        if value:
            counts[phase] = value
    return counts


async def test_a_runs_spec_reaches_it_as_events_and_a_waiting_run_costs_nothing(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    operator: OperatorThread,
) -> None:
    def about_runs() -> list[tuple[str, str, str]]:
        """The operator's requests about Runs so far: (verb, subresource, name)."""
        return [
            (asked.verb, asked.subresource, asked.name)
            for asked, _ in k8s.authorizations
            if asked.user == installation.user and asked.resource == "runs"
        ]

    def status_writes(name: str) -> int:
        return about_runs().count(("patch", "status", name))

    async def send(method: str, name: str, body: Body | None = None) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with k8s_client.request(
            method, f"{PATH}/{name}", data=json.dumps(body), headers=headers
        ) as answer:
            assert answer.status == 200, await answer.text()

    async def reads_reach(count: float) -> None:
        await eventually(lambda: reads() - before >= count, f"{count} reads of specs")

    before = reads()
    for body in (WAITS, FINISHED, BROKEN):
        async with k8s_client.post(PATH, json=body) as answer:
            assert answer.status == 201, await answer.text()
    await eventually(lambda: of(k8s, "waits").get("phase") == "Running", "waits to run")
    await eventually(lambda: of(k8s, "finished").get("phase") == "Succeeded", "finished")
    await eventually(
        lambda: [c["reason"] for c in of(k8s, "broken").get("conditions", [])] == ["Invalid"],
        "broken to be Invalid",
    )
    await reads_reach(5)
    # kopf's own write of a new Run: its finalizer, and no record of what it handled.
    await eventually(
        lambda: all(finalizers(k8s, name) for name in NAMES), "kopf's finalizers on the Runs"
    )
    await send("PATCH", "finished", {"spec": {"signals": [{"id": "x-1", "event": "x"}]}})
    await eventually(lambda: len(events(k8s, "SignalIgnored")) == 1, "a SignalIgnored Event")
    (ignored,) = of(k8s, "finished")["processedSignals"]
    assert (ignored["id"], ignored["result"]) == ("x-1", "ignored")
    await reads_reach(6)

    asked = about_runs()
    await asyncio.sleep(IDLE_S)
    assert about_runs()[len(asked) :] == [], (asked, about_runs()[len(asked) :])
    assert reads() - before == 6
    assert [DIFFBASE in annotations(k8s, name) for name in NAMES] == [False] * 3
    assert gauge() == {"Running": 1, "Succeeded": 1}

    await send("PATCH", "waits", {"spec": {"signals": [{"id": "go-1", "event": "go"}]}})
    await eventually(lambda: of(k8s, "waits").get("phase") == "Succeeded", "waits to end")
    assert of(k8s, "waits")["processedSignals"] == [{"id": "go-1", "result": "handled"}]
    await send("PATCH", "waits", {"spec": {"input": {"more": "nothing to act on"}}})
    await reads_reach(8)

    await send("PATCH", "broken", {"spec": {"machine": {"states": {"start": {"always": "done"}}}}})
    await eventually(lambda: of(k8s, "broken").get("phase") == "Succeeded", "broken fixed")
    await reads_reach(10)
    assert gauge() == {"Succeeded": 3}
    assert [status_writes(name) for name in ("waits", "finished", "broken")] == [2, 2, 2]

    async with k8s_client.delete(f"{PATH}/finished") as answer:
        assert answer.status == 200, await answer.text()
    await eventually(lambda: read(k8s, RUNS, "finished") is None, "finished to go")
    await eventually(lambda: gauge() == {"Succeeded": 2}, "the gauge without finished")
    assert reads() - before == 10
    assert operator.running
