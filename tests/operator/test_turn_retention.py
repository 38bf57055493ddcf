"""Finished Turns stay visible in ``kubectl get agentturns`` for their retention (ADR
0106): the real operator (kopf, in a thread of its own) against the API emulator, the
kubelet running the shared Workspace's sandbox as a real Harness process, kubectl 1.35.

Cases:
- a Run's two Turns of one conversation, the operator's retention an hour: once the first
  Turn ended, the second is admitted (the kept one is not waited for), and when both
  ended kubectl lists both ``Settled``, ``ended``, cause ``pick``, with their tokens
  (``status.tokens``, the sum of ``status.usage``) and no cost (the model has no price),
  each held by the retain finalizer alone; the shared Workspace's changed spec makes its
  sandbox anew (the kept Turns run nowhere); deleting the Run lets them go at once, and
  the Run goes;
- a Run's own ``spec.turnRetention`` (1s): its Turn is seen kept, settled, then goes
  while the Run waits on, its record in ``Run.status.turns`` unchanged; a Turn kept
  (5s) while the operator stops goes after the operator started again, its deadline read
  from the object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.api.agentturn import RETAIN_FINALIZER
from tests import tools
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURN_COLUMNS,
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    call,
    fail_on_logged_errors,
    kubectl_table,
    script,
)
from tests.operator.shared import WORKSPACE, shared_workspace
from tests.operator.world import OperatorWorld

FIRST, SECOND = "Do the first part", "Do the second part"
SCRIPT = script({FIRST: [{"toolCalls": [call("finish")]}, {"toolCalls": [call("finish")]}]})
"""The coder picks ``finish`` at once, in each of its two Turns (one conversation: the
scripted model matches it by its first prompt, and answers by its count of replies)."""
HOUR_S = 3600.0


def run(name: str, *, retention: str | None = None, second: bool = False) -> dict[str, Any]:
    """A Run in the shared Workspace whose coder picks ``finish`` (with ``second``, then
    again in a second Turn of the conversation), then waits for ``approve``."""
    states: dict[str, Any] = {
        "working": {
            "invoke": {"agent": {"slot": "coder", "prompt": FIRST, "continue": True}},
            "on": {"finish": {"target": "again" if second else "waiting", "description": "."}},
        },
        "again": {
            "invoke": {"agent": {"slot": "coder", "prompt": SECOND, "continue": True}},
            "on": {"finish": {"target": "waiting", "description": "Done."}},
        },
        "waiting": {"on": {"approve": "done"}},
        "done": {"type": "final"},
    }
    if not second:
        del states["again"]
    spec: dict[str, Any] = {
        "workspace": {"name": WORKSPACE},
        "agents": {"coder": {"model": "scripted/any", "instructions": "Work."}},
        "machine": {"initial": "working", "states": states},
    }
    if retention is not None:
        spec["turnRetention"] = retention
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator keeping settled AgentTurns an hour unless a Run says otherwise, the
    shared Workspace Ready, every AgentTurn version watched; the test fails if the
    operator or a Harness logged an error."""
    async with shared_workspace(
        k8s,
        k8s_client,
        installation,
        kubelet,
        SCRIPT,
        tmp_path / "git",
        watch_agentturns=True,
        turn_retention_s=HOUR_S,
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


def held(world: OperatorWorld, name: str) -> bool:
    """Whether AgentTurn ``name`` is settled and held by the retain finalizer alone."""
    found = world.read(AGENTTURNS, name)
    return found is not None and kept_settled(found)


def kept_settled(body: dict[str, Any]) -> bool:
    meta = body["metadata"]
    settlement = (body.get("status") or {}).get("settlement") or {}
    return (
        bool(meta.get("deletionTimestamp"))
        and meta.get("finalizers") == [RETAIN_FINALIZER]
        and settlement.get("outcome") == "ended"
    )


async def waiting(world: OperatorWorld, name: str, turns: int) -> None:
    """Until Run ``name`` waits for ``approve``, its ``turns`` Turns recorded."""

    def recorded() -> bool:
        current = world.run(name)
        return current.get("state") == "waiting" and current.get("turnCount") == turns

    await world.until(recorded, f"Run {name} to wait, {turns} Turns recorded", run=name)


async def test_kubectl_shows_finished_turns_until_their_run_is_deleted(
    world: OperatorWorld, kubectl: tools.Kubectl
) -> None:
    await world.create(run("two", second=True))
    await waiting(world, "two", 2)
    turns = ["two-t1", "two-t2"]
    await world.until(lambda: all(held(world, n) for n in turns), "both Turns kept, settled")

    shown = kubectl_table((await kubectl("get", "agentturns")).stdout)
    assert shown[0] == AGENTTURN_COLUMNS
    assert [row[:7] for row in shown[1:]] == [
        ["two-t1", "two", "coder", "working", "Settled", "ended", "pick"],
        ["two-t2", "two", "coder", "again", "Settled", "ended", "pick"],
    ]
    # The scripted model reports usage and has no price: tokens, and no cost (never 0).
    for row in shown[1:]:
        used = (world.read(AGENTTURNS, row[0]) or {}).get("status") or {}
        assert (row[7], row[8]) == (str(used["tokens"]), ""), row
        assert used["tokens"] == used["usage"]["promptTokens"] + used["usage"]["completionTokens"]
        assert used["tokens"] > 0
        assert "cost" not in used["usage"]
    assert all(row[9].endswith("s") for row in shown[1:]), "SETTLED is how long ago"
    assert [(t["name"], t["outcome"], t["cause"]) for t in world.run("two")["turns"]] == [
        ("t1", "ended", "pick"),
        ("t2", "ended", "pick"),
    ]

    # A changed Workspace makes its sandbox anew: the kept Turns do not run on it.
    old = world.workspace_status()["endpoint"]
    path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces/{WORKSPACE}"
    await world.patch(path, {"spec": {"env": [{"name": "KUBETURN_TEST_MARK", "value": "2"}]}})
    await world.until(
        lambda: (
            world.workspace_status().get("endpoint") not in (None, old)
            and world.condition("SandboxCurrent").get("status") == "True"
        ),
        "the sandbox made anew, current",
    )
    assert all(held(world, n) for n in turns)

    await world.delete(f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/two")
    await world.until(
        lambda: world.read(RUNS, "two") is None and sorted(world.turns.deleted()) == turns,
        "the Run and its kept Turns to go",
    )
    assert world.names(AGENTTURNS) == []


async def test_a_kept_turn_goes_when_its_retention_passed_across_a_restart(
    world: OperatorWorld,
) -> None:
    await world.create(run("brief", retention="1s"))
    await waiting(world, "brief", 1)
    await world.until(lambda: world.turns.deleted() == ["brief-t1"], "the Turn kept 1s to go")
    seen = [body for kind, body in world.turns.of("brief-t1") if kind == "MODIFIED"]
    assert any(kept_settled(body) for body in seen), "it was never seen kept, settled"
    assert world.run("brief")["state"] == "waiting"
    assert [t["outcome"] for t in world.run("brief")["turns"]] == ["ended"]

    await world.create(run("kept", retention="5s"))
    await waiting(world, "kept", 1)
    await world.until(lambda: held(world, "kept-t1"), "the Turn kept 5s, settled")
    await world.operator.stop()
    assert held(world, "kept-t1")
    await world.operator.start()
    await world.until(
        lambda: world.turns.deleted() == ["brief-t1", "kept-t1"], "the kept Turn to go"
    )
    assert world.names(AGENTTURNS) == []
    assert world.run("kept")["state"] == "waiting"
