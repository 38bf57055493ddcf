"""A Workspace's cap on live Turns (``spec.maxLiveTurns``, ADR 0116) through the real
operator (kopf, in a thread of its own) against the API emulator, the kubelet running the
sandbox Pod as a real Harness process, the scripted model holding each model request
until the test releases it.

Cases (one scenario, cap 1, three Runs started in order):
- the first Run's Turn runs; the second's and third's AgentTurns are ``Pending`` with
  reason ``WorkspaceFull`` and a message naming the cap, as ``kubectl get agentturns``
  shows, and reach no model; the operator's ``/metrics`` has
  ``kubeturn_turns_waiting{reason="WorkspaceFull"}`` 2, the other reasons 0;
- the operator stopped and another started: the queue is rebuilt in order, nothing
  waiting is admitted while the first Turn lives; the gauge shows the two again;
- the first Turn ends: the second (not the third) is admitted, its reason gone; the
  gauge shows 1;
- the third Run cancelled while its Turn waits: the Turn is recorded ``aborted`` and never
  reaches the Harness's model, and the gauge shows none waiting; the second ends; every
  Run's Turn admitted once.

And the operator's ``namespace_max_live_turns`` (the chart's ``maxLiveTurnsPerNamespace``)
at 1, the Workspace uncapped: the second Run's Turn is ``Pending``, ``NamespaceFull``
(the gauge's ``NamespaceFull`` 1), until the first's ends.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests import tools
from tests.operator import emulator, shared
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    OperatorThread,
    call,
    fail_on_logged_errors,
    kubectl_table,
    make_origin,
    script,
)
from tests.operator.world import OperatorWorld, operator_world

Body = dict[str, Any]
WORKSPACE = "capped"
RUNS = ("first", "second", "third")
PROMPTS = {name: f"Do the {name} task" for name in RUNS}
SCRIPT = script(
    {prompt: [{"hold": True, "toolCalls": [call("finish")]}] for prompt in PROMPTS.values()}
)
"""Each Run's model request is held until released; then its coder picks ``finish``."""


def run(name: str) -> Body:
    return shared.coder_run(name, PROMPTS[name], workspace=WORKSPACE)


@pytest.fixture
async def world(
    request: pytest.FixtureRequest,
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator on ``SCRIPT``, the Workspace Ready; capped at 1 live Turn by the
    Workspace, or (``world`` parametrized ``namespace``) by the operator's namespace cap."""
    origin = make_origin(tmp_path / "git")
    by_namespace = getattr(request, "param", None) == "namespace"
    async with operator_world(
        k8s,
        k8s_client,
        installation,
        kubelet=kubelet,
        script=SCRIPT,
        workspace=(
            shared.workspace(origin, WORKSPACE)
            if by_namespace
            else shared.workspace(origin, WORKSPACE, maxLiveTurns=1)
        ),
        origin=origin,
        **({"namespace_max_live_turns": 1} if by_namespace else {}),
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


def turn(world: OperatorWorld, name: str) -> Body:
    """The status of Run ``name``'s one AgentTurn (``{}`` before it has one)."""
    found = world.read(AGENTTURNS, f"{name}-t1")
    return (found or {}).get("status") or {}


async def held(world: OperatorWorld, name: str) -> None:
    async def holding() -> bool:
        return any(r["held"] for r in await world.model_requests(PROMPTS[name]))

    await world.until(holding, f"the held model request of {name}", run=name)


async def release(world: OperatorWorld, name: str) -> None:
    async with world.session.post(
        f"{world.model}/_release", json={"match": PROMPTS[name]}
    ) as answer:
        assert (await answer.json())["released"] == 1


async def gauge(world: OperatorWorld) -> dict[str, float]:
    """``kubeturn_turns_waiting`` by reason, as the operator's ``/metrics`` exposes it."""
    url = f"http://127.0.0.1:{world.operator.settings.metrics_port}/metrics"
    async with world.session.get(url) as answer:
        exposed = await answer.text()
    found = re.findall(r'^kubeturn_turns_waiting\{reason="(\w+)"\} (\S+)$', exposed, re.M)
    return {reason: float(value) for reason, value in found}


def counts(workspace: float = 0, namespace: float = 0) -> dict[str, float]:
    return {"WorkspaceFull": workspace, "NamespaceFull": namespace, "Resuming": 0}


async def shows(world: OperatorWorld, wanted: dict[str, float]) -> None:
    async def shown() -> bool:
        return await gauge(world) == wanted

    await world.until(shown, f"kubeturn_turns_waiting to be {wanted}")


def waiting(world: OperatorWorld, *names: str, reason: str = "WorkspaceFull") -> bool:
    return all(
        (turn(world, n).get("phase"), turn(world, n).get("reason")) == ("Pending", reason)
        for n in names
    )


async def test_a_workspace_capped_at_one_admits_its_turns_one_by_one_in_order(
    world: OperatorWorld, installation: Installation, kubectl: tools.Kubectl
) -> None:
    await world.create(run("first"))
    await held(world, "first")
    await world.create(run("second"))
    await world.until(lambda: waiting(world, "second"), "the second Turn Pending")
    await world.create(run("third"))
    await world.until(lambda: waiting(world, "second", "third"), "both later Turns Pending")
    assert turn(world, "second")["message"] == (
        f"waits for a live Turn to end: Workspace {NAMESPACE}/{WORKSPACE} has 1 live of at "
        "most 1 (its spec.maxLiveTurns); earlier Turns go first"
    )
    shown = kubectl_table((await kubectl("get", "agentturns")).stdout)
    assert shown[0][4:6] == ["PHASE", "OUTCOME"]
    assert shown[0][-1] == "REASON"
    assert sorted((row[0], row[4], row[-1]) for row in shown[1:]) == [
        ("first-t1", "Running", ""),
        ("second-t1", "Pending", "WorkspaceFull"),
        ("third-t1", "Pending", "WorkspaceFull"),
    ]
    assert await gauge(world) == counts(workspace=2)

    first = world.operator
    await first.stop()
    restarted = OperatorThread(dataclasses.replace(first.settings), installation.kubeconfig)
    await restarted.start()
    try:
        await world.until(lambda: waiting(world, "second", "third"), "both still Pending")
        await shows(world, counts(workspace=2))
        assert await world.model_requests(PROMPTS["second"]) == []
        await release(world, "first")
        await held(world, "second")
        await world.until(
            lambda: world.run("first").get("phase") == "Succeeded", "the first Run done"
        )
        assert (turn(world, "second").get("phase"), turn(world, "second").get("reason")) == (
            "Running",
            None,
        )
        assert waiting(world, "third")
        await shows(world, counts(workspace=1))
        assert await world.model_requests(PROMPTS["third"]) == []

        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/third"
        await world.patch(path, {"spec": {"cancel": True}})
        await world.until(
            lambda: world.run("third").get("phase") == "Cancelled", "the third Run cancelled"
        )
        await shows(world, counts())
        await release(world, "second")
        await world.until(
            lambda: world.run("second").get("phase") == "Succeeded", "the second Run done"
        )
    finally:
        await restarted.stop()

    assert [(t["outcome"], t.get("cause")) for t in world.run("third")["turns"]] == [
        ("aborted", None)
    ]
    assert await world.model_requests(PROMPTS["third"]) == []
    harness = await world.harness()
    for name in ("first", "second"):
        (recorded,) = world.run(name)["turns"]
        assert (recorded["outcome"], recorded.get("cause")) == ("ended", "pick")
        events = await harness.events("coder", recorded["instanceId"])
        admitted = [e for e in events if e["type"] == "submission-admitted"]
        assert len(admitted) == 1, name
    assert len(await world.model_requests()) == 2


@pytest.mark.parametrize("world", ["namespace"], indirect=True)
async def test_a_namespace_capped_at_one_holds_the_second_turn_back(world: OperatorWorld) -> None:
    await world.create(run("first"))
    await held(world, "first")
    await world.create(run("second"))
    await world.until(
        lambda: waiting(world, "second", reason="NamespaceFull"), "the second Turn Pending"
    )
    assert turn(world, "second")["message"] == (
        f"waits for a live Turn to end: namespace {NAMESPACE} has 1 live of at most 1 (the "
        "operator's --namespace-max-live-turns); earlier Turns go first"
    )
    assert await gauge(world) == counts(namespace=1)
    assert await world.model_requests(PROMPTS["second"]) == []
    await release(world, "first")
    await held(world, "second")
    await release(world, "second")
    for name in ("first", "second"):
        await world.until(lambda n=name: world.run(n).get("phase") == "Succeeded", f"{name} done")
