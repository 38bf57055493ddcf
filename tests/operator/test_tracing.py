"""Traces on a cluster (ADR 0107): the real operator (kopf, in a thread of its own) against
the API emulator, the kubelet running the sandbox Pod as a real Harness process, and a
real OTLP/HTTP receiver on 127.0.0.1.

Cases:
- the operator traces (its endpoint given to it, as the chart's OTEL_* variables give it)
  and so do the sandboxes (the operator's ``sandbox_tracing``, the chart's ``tracing``,
  reaching the Harness only through its Pod's environment): a one-Turn Run's trace is
  the Run's uid; its ``run`` span (service ``kubeturn``) starts at the Run's creation;
  its Turn's ``invoke_agent`` span carries the sweep; below it the Harness's ``chat`` and
  ``execute_tool`` spans (service ``kubeturn-harness``, the Workspace's namespace and
  name as resource attributes); the admission that reached the Harness named the Turn's
  span as its ``traceparent``;
- an operator restarted while the Turn's model request is held: the next operator writes
  the Turn's span (with the start the first one recorded) and the Run's, under the ids
  the Harness's spans (from the sandbox that kept running) already name: one tree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.api.tracing import SandboxTracing
from kubeturn.tracing import Tracing
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    OperatorThread,
    call,
    eventually,
    fail_on_logged_errors,
    make_origin,
    read,
    script,
    status,
)
from tests.operator.world import OperatorWorld, operator_world
from tests.otlp import OtlpReceiver, Span

Body = dict[str, Any]
PROMPT = "Say hello and finish"
HELD = "Take your time, then finish"
SCRIPT = script(
    {
        PROMPT: [{"text": "Hello.", "toolCalls": [call("finish")]}],
        HELD: [{"hold": True, "toolCalls": [call("finish")]}],
    }
)


def hello(name: str, workspace: str, prompt: str = PROMPT) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": workspace},
            "agents": {
                "greeter": {
                    "model": "scripted/tiny",
                    "instructions": "Be brief.",
                    "workspace": "write",
                }
            },
            "machine": {
                "initial": "greeting",
                "states": {
                    "greeting": {
                        "invoke": {"agent": {"slot": "greeter", "prompt": prompt}},
                        "on": {"finish": {"target": "done", "description": "Said hello."}},
                    },
                    "done": {"type": "final"},
                },
            },
        },
    }


@pytest.fixture
async def traced(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[OperatorWorld, OtlpReceiver]]:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # milliseconds; no endpoint here
    with OtlpReceiver() as receiver:
        tracing = Tracing.of({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        async with operator_world(
            k8s,
            k8s_client,
            installation,
            kubelet=kubelet,
            script=SCRIPT,
            origin=make_origin(tmp_path / "git"),
            tracing=tracing,
            sandbox_tracing=SandboxTracing(endpoint=receiver.endpoint),
        ) as made:
            yield made, receiver
    fail_on_logged_errors(caplog, kubelet.started)


def below(spans: list[Span], parent: str) -> list[str]:
    children = sorted((s for s in spans if s.parent_id == parent), key=lambda s: s.start_ns)
    return [s.name for s in children]


def workspace(origin: str) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": "plain", "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin}}},
    }


async def test_a_runs_trace_joins_the_operators_and_the_harnesss_spans(
    traced: tuple[OperatorWorld, OtlpReceiver],
) -> None:
    world, receiver = traced
    await world.create(workspace(world.origin))
    await world.create(hello("hello", "plain"))
    await eventually(
        lambda: status(world.k8s, RUNS, "hello").get("phase") == "Succeeded",
        "Run hello to succeed",
        timeout=60,
    )
    spans = await eventually(
        lambda: (found := receiver.received()) and len(found) == 4 and found,
        "the Run's four spans",
    )
    run = read(world.k8s, RUNS, "hello")
    assert run is not None
    meta = run["metadata"]
    assert {s.trace_id for s in spans} == {meta["uid"].replace("-", "")}
    (root,) = (s for s in spans if s.parent_id == "")
    assert (root.name, root.service, root.attributes["kubeturn.phase"]) == (
        "run",
        "kubeturn",
        "Succeeded",
    )
    created = datetime.fromisoformat(meta["creationTimestamp"]).timestamp()
    assert root.start_ns == int(created * 1_000_000_000)
    assert below(spans, root.span_id) == ["invoke_agent greeter"]
    (turn,) = (s for s in spans if s.parent_id == root.span_id)
    assert (turn.attributes["kubeturn.outcome"], turn.attributes["kubeturn.cause"]) == (
        "ended",
        "pick",
    )
    assert [name for name, _ in turn.events] == ["kubeturn.sweep"]
    assert below(spans, turn.span_id) == ["chat tiny", "execute_tool finish"]
    harness = [s for s in spans if s.parent_id == turn.span_id]
    assert {s.service for s in harness} == {"kubeturn-harness"}
    where = {(s.resource["k8s.namespace.name"], s.resource["kubeturn.workspace"]) for s in harness}
    assert where == {(NAMESPACE, "plain")}
    pod = read(world.k8s, "v1/pods", "plain-kubeturn-sandbox")
    assert pod is not None
    (container,) = (c for c in pod["spec"]["containers"] if c["name"] == "harness")
    assert {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": receiver.endpoint} in container["env"]


async def test_an_operator_restarted_mid_turn_writes_into_the_same_tree(
    traced: tuple[OperatorWorld, OtlpReceiver], installation: Installation
) -> None:
    world, receiver = traced
    await world.create(workspace(world.origin))
    await world.create(hello("held", "plain", HELD))

    async def held() -> bool:
        return any(r["held"] for r in await world.model_requests(HELD))

    await eventually(held, "the Turn's model request to be held")
    await world.operator.stop()
    assert receiver.received() == []  # nothing had ended yet
    tracing = Tracing.of({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
    after = OperatorThread(world.operator.settings, installation.kubeconfig, tracing=tracing)
    try:
        await after.start()
        async with world.session.post(f"{world.model}/_release", json={"match": HELD}) as answer:
            assert answer.status == 200
        await eventually(
            lambda: status(world.k8s, RUNS, "held").get("phase") == "Succeeded",
            "Run held to succeed",
            timeout=60,
        )
        spans = await eventually(
            lambda: (found := receiver.received()) and len(found) == 4 and found,
            "the Run's four spans",
        )
    finally:
        await after.stop()
    (root,) = (s for s in spans if s.parent_id == "")
    assert below(spans, root.span_id) == ["invoke_agent greeter"]
    (turn,) = (s for s in spans if s.parent_id == root.span_id)
    assert below(spans, turn.span_id) == ["chat tiny", "execute_tool finish"]
    (record,) = status(world.k8s, RUNS, "held")["turns"]
    assert turn.start_ns == int(record["startedAt"] * 1_000_000_000)  # as the first one saw it
