"""A Run's object stays small through the real operator (kopf, in a thread of its own)
against the API emulator, the kubelet running the sandbox Pod as a real Harness process.

Cases:
- a Run whose Agent is asked again after each failure, every model request refused with
  4 KiB of provider error, for more Turns than its history's budget holds, the operator
  restarted among them: it ends with every Turn counted (``turnCount``), the oldest
  dropped from ``status.turns`` (``droppedTurns`` says how many) and the rest in order,
  the newest last, each ``failed`` (none cut by the stopping operator);
  ``status.turns`` within its budget and every message in the status and in the Turns'
  Events within 2 KiB; the whole object under 512 KiB, its annotations within 256 KiB,
  none of them kopf's (it keeps no record of what it handled of a Run);
- a Run applied with kubectl whose spec is over the bound: kopf's patch goes through (its
  finalizer is on), with kubectl's copy of the spec its annotations stay within 256 KiB;
  it is ``Ready=False``, ``TooLarge``, saying its size, and starts nothing; with a small
  spec (a new generation) it runs to its end.

The emulator applies the CRDs' schemas and rules and refuses an object over etcd's
limit, as the API server does; the kubelet's limits are in :mod:`kubelet`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kubeturn.api.status import MESSAGE_LIMIT
from kubeturn.k8s import runs
from kubeturn.orchestrator.history import HISTORY_BYTES
from tests import tools
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    OperatorThread,
    events,
    eventually,
    fail_on_logged_errors,
    names,
    read,
    script,
    settings,
)
from tests.operator.shared import WORKSPACE, shared_workspace
from tests.operator.world import OperatorWorld

PROMPT = "Try the task."
REFUSAL = "the provider refused the request: " + "this model is overloaded today. " * 128
"""4 KiB and more of provider error, for every model request."""
TURNS = 60
"""Turns of the failing Run: more than its history's budget holds with their messages
(about 28), so the oldest are dropped."""
RESTART_AFTER = 30
"""The operator is stopped and another started once this many Turns were counted."""
OBJECT_LIMIT = 512 * 1024
ANNOTATIONS_LIMIT = 256 * 1024
DIFFBASE = "kopf.zalando.org/last-handled-configuration"

Body = dict[str, Any]


def failing_run(name: str) -> Body:
    """A Run whose Agent is asked again after each failure, until ``TURNS`` failed."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {"coder": {"model": "scripted/any", "instructions": "Work."}},
            "machine": {
                "initial": "working",
                "context": {"failures": 0},
                "states": {
                    "working": {
                        "invoke": {
                            "agent": {"slot": "coder", "prompt": PROMPT},
                            "onError": {
                                "target": "again",
                                "assign": {"context.failures": "context.failures + 1"},
                            },
                        }
                    },
                    "again": {
                        "always": [
                            {"target": "done", "guard": f"context.failures >= {TURNS}"},
                            {"target": "working"},
                        ]
                    },
                    "done": {"type": "final"},
                },
            },
        },
    }


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def annotations_size(body: Body) -> int:
    """What the API server counts against its bound: every key and value's bytes."""
    found = body["metadata"].get("annotations") or {}
    return sum(len(key.encode()) + len(value.encode()) for key, value in found.items())


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The Workspace Ready under a first operator, whose model refuses every request (the
    test may stop it and start another); the test fails if one logged an error."""
    refusing = script({PROMPT: [{"error": {"status": 400, "message": REFUSAL}}]})
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, refusing, tmp_path / "git"
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


async def test_a_run_of_many_failed_turns_stays_small_across_a_restart(
    world: OperatorWorld, installation: Installation
) -> None:
    made, first = world, world.operator
    await made.create(failing_run("failing"))

    def counted() -> int:
        return int((read(made.k8s, RUNS, "failing") or {}).get("status", {}).get("turnCount", 0))

    await eventually(lambda: counted() >= RESTART_AFTER, f"{RESTART_AFTER} Turns", timeout=120)
    await first.stop()
    stopped_at = counted()
    assert stopped_at < TURNS, "the operator was restarted before the Run's end"
    second = OperatorThread(dataclasses.replace(first.settings), installation.kubeconfig)
    await second.start()
    try:
        await eventually(
            lambda: (
                (read(made.k8s, RUNS, "failing") or {}).get("status", {}).get("phase")
                == "Succeeded"
            ),
            "the Run to end",
            timeout=120,
        )
        await eventually(lambda: not names(made.k8s, AGENTTURNS), "every AgentTurn to go")
    finally:
        await second.stop()

    body = read(made.k8s, RUNS, "failing")
    assert body is not None
    status = body["status"]
    kept = status["turns"]
    assert (status["turnCount"], status["droppedTurns"]) == (TURNS, TURNS - len(kept))
    assert status["droppedTurns"] > 0
    assert [t["name"] for t in kept] == [f"t{n}" for n in range(TURNS - len(kept) + 1, TURNS + 1)]
    # Each Turn failed as its provider did, also the one admitted as the first operator
    # stopped: the stopping operator's API answers 503 (never 404) once its Run actors
    # closed, so no live Turn is told it is over (ADR 0047).
    cut = [(t["name"], t["outcome"]) for t in kept if t["outcome"] != "failed"]
    assert cut == []
    assert size(kept) <= HISTORY_BYTES
    messages = [c["message"] for c in status["conditions"]] + [
        m
        for turn in kept
        for m in [turn.get("message"), *(s.get("message") for s in turn["submissions"])]
        if m is not None
    ]
    messages += [e["message"] for e in events(made.k8s, "TurnSettled")]
    assert messages
    assert all(len(m.encode()) <= MESSAGE_LIMIT for m in messages)
    assert any("[…" in m for m in messages), "the provider's error was cut"
    said = f"Run {size(body)} bytes, status {size(status)}, annotations {annotations_size(body)}"
    assert size(body) < OBJECT_LIMIT, said
    assert annotations_size(body) < ANNOTATIONS_LIMIT, said
    assert DIFFBASE not in body["metadata"].get("annotations", {}), "kopf keeps no record"


@pytest.fixture
async def operating(
    installation: Installation, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[None]:
    """The operator alone (no Workspace: the Run here invokes nothing)."""
    operator = OperatorThread(
        settings(installation, providers_yaml="{}\n"), installation.kubeconfig
    )
    await operator.start()
    try:
        yield
    finally:
        await operator.stop()
    fail_on_logged_errors(caplog, [])


async def test_a_spec_over_the_bound_is_refused_saying_so_and_runs_once_small(
    k8s: emulator.KubernetesApi, kubectl: tools.Kubectl, operating: None
) -> None:
    run: Body = {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": "large", "namespace": NAMESPACE},
        "spec": {
            "agents": {},
            "machine": {"initial": "done", "states": {"done": {"type": "final"}}},
            "input": {"document": "x" * (runs.MAX_SPEC_BYTES + 1024)},
        },
    }
    await kubectl("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(run))

    def ready() -> Body:
        body = read(k8s, RUNS, "large") or {}
        found = [
            c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == "Ready"
        ]
        return found[0] if found else {}

    refused = await eventually(lambda: ready().get("reason") == "TooLarge" and ready(), "TooLarge")
    assert refused["status"] == "False"
    assert "bytes of JSON, over the" in refused["message"]
    # kopf's patch goes through: its finalizer (it keeps no record of what it handled).
    body = await eventually(
        lambda: (
            (found := read(k8s, RUNS, "large")) and found["metadata"].get("finalizers") and found
        ),
        "kopf's finalizer",
    )
    assert annotations_size(body) < ANNOTATIONS_LIMIT
    assert DIFFBASE not in body["metadata"]["annotations"]
    assert (body.get("status") or {}).get("phase") in (None, "Pending")

    run["spec"]["input"] = {"document": "small"}
    await kubectl("apply", "--validate=false", "-f", "-", stdin=yaml.safe_dump(run))
    await eventually(
        lambda: (read(k8s, RUNS, "large") or {}).get("status", {}).get("phase") == "Succeeded",
        "the Run to run once its spec fits",
    )
