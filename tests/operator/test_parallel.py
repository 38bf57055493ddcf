"""Parallel states and fan-outs through the real operator (kopf, in a thread of its own)
against the API emulator, the kubelet running the sandbox Pod as a real Harness process,
the scripted model holding each model request until the test releases it.

Cases:
- two reviewers in parallel (``tests/system/machines/two-reviewers.yaml``): kubectl shows
  the Run in both regions' states and one AgentTurn per reviewer; the first reviewer's
  ``reject`` ends its Turn ``ended`` (cause pick) and the other's ``aborted`` (its held
  request cut), one record each, no model request after the pick;
- a fan-out over five items, two at a time (``fan-out.yaml``): the Run's status lists its
  children (kubectl's CHILDREN column counts them), never more than two running in any
  status the operator wrote; ``spec.cancel`` sweeps each live child Turn (``aborted``,
  recorded once), the pending children never start, no model request follows;
- the operator stopped while two children run and three wait, another started: the live
  Turns are followed again (one admission each at the Harness), the pending children start
  in item order, the fan-out completes with every output in item order, each Turn recorded
  once; the same with the operator in a process of its own, SIGKILLed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kubeturn_harness.scripted import parse_script, serve
from tests import tools
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    OperatorProcess,
    OperatorThread,
    call,
    fail_on_logged_errors,
    kubectl_table,
    make_origin,
    script,
    settings,
    workspace_ready,
)
from tests.operator.shared import WORKSPACE, shared_workspace, workspace
from tests.operator.world import OperatorWorld

Body = dict[str, Any]
MACHINES = Path(__file__).parents[1] / "system" / "machines"
SECURITY = "Review the change for security."
STYLE = "Review the change for style."
PACKAGES = ["pkg-a", "pkg-b", "pkg-c", "pkg-d", "pkg-e"]


def fix(package: str) -> str:
    """The first words of a fan-out child's prompt (``fan-out.yaml``)."""
    return f"Fix the package {package}."


SCRIPT = script(
    {
        SECURITY: [{"hold": True, "toolCalls": [call("reject")]}],
        STYLE: [{"hold": True, "toolCalls": [call("approve")]}],
        **{fix(p): [{"hold": True, "toolCalls": [call("fixed")]}] for p in PACKAGES},
    }
)
"""Every model request is held until released: the security reviewer then rejects, the
style reviewer approves, each fixer picks ``fixed``."""


def manifest(file: str) -> Body:
    """A system-tier manifest, in the shared Workspace (PyYAML reads a bare ``on`` as
    ``True``, as kubectl does)."""
    body: Body = yaml.safe_load((MACHINES / file).read_text())
    body["metadata"]["namespace"] = NAMESPACE
    body["spec"]["workspace"] = {"name": WORKSPACE}
    return body


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The shared Workspace Ready under an operator on ``SCRIPT``; the test fails if the
    operator or the Harness logged an error."""
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, SCRIPT, tmp_path / "git", watch_agentturns=True
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


async def held(world: OperatorWorld, *matches: str) -> None:
    async def all_held() -> bool:
        for match in matches:
            if not [r for r in await world.model_requests(match) if r["held"]]:
                return False
        return True

    await world.until(all_held, f"held model requests of {matches}")


async def release(world: OperatorWorld, match: str) -> int:
    async with world.session.post(f"{world.model}/_release", json={"match": match}) as answer:
        return int((await answer.json())["released"])


async def cut(world: OperatorWorld, match: str) -> None:
    """Until the one model request of ``match`` was cut by its client."""

    async def was_cut() -> bool:
        (request,) = await world.model_requests(match)
        return bool(request["disconnected"] and request["closedAt"] is not None)

    await world.until(was_cut, f"the held model request of {match!r} to be cut")


async def ended(world: OperatorWorld, run: str, phase: str, turns: int) -> Body:
    """Until Run ``run`` is ``phase`` with ``turns`` Turns recorded and its AgentTurns gone."""
    await world.until(
        lambda: world.run(run).get("phase") == phase and world.run(run)["turnCount"] == turns,
        f"Run {run} {phase} with {turns} Turns",
        run=run,
    )
    await world.until(lambda: world.names(AGENTTURNS) == [], "every AgentTurn to go", run=run)
    return world.run(run)


def running_children(patches: list[tuple[str, Any]]) -> list[int]:
    """How many fan-out children ran in each status the operator wrote of a Run."""
    return [
        len([c for c in body["status"]["children"] if c["status"] == "running"])
        for plural, body in patches
        if plural == "runs" and "children" in body["status"]
    ]


async def test_the_first_rejection_ends_both_reviewers_turns(
    world: OperatorWorld, kubectl: tools.Kubectl
) -> None:
    await world.create(manifest("two-reviewers.yaml"))
    await held(world, SECURITY, STYLE)
    await world.until(
        lambda: (
            [world.read(AGENTTURNS, n)["status"].get("phase") for n in world.names(AGENTTURNS)]
            == ["Running", "Running"]
        ),
        "both reviewers' AgentTurns Running",
    )
    shown = kubectl_table((await kubectl("get", "agentturns")).stdout)
    assert sorted(row[2:5] for row in shown[1:]) == [
        ["security", "review.security.reading", "Running"],
        ["style", "review.style.reading", "Running"],
    ]
    runs = kubectl_table((await kubectl("get", "runs")).stdout)
    assert runs[0][:3] == ["NAME", "STATE", "PHASE"]
    assert runs[1][:3] == [
        "two-reviewers",
        "review.security.reading, review.style.reading",
        "Running",
    ]

    assert await release(world, SECURITY) == 1
    done = await ended(world, "two-reviewers", "Failed", 2)

    assert done["state"] == "rejected"
    assert sorted(
        (t["agent"], t["state"], t["outcome"], t.get("cause")) for t in done["turns"]
    ) == [
        ("security", "review.security.reading", "ended", "pick"),
        ("style", "review.style.reading", "aborted", None),
    ]
    await cut(world, STYLE)
    harness = await world.harness()
    for turn in done["turns"]:
        history = await harness.history(turn["agent"], turn["instanceId"])
        assert [s["outcome"] for s in history["settlements"]] == [turn["outcome"]]
        assert [s["submissionId"] for s in history["submissions"]] == [turn["submissions"][0]["id"]]
    # No model request after the pick: one each, the style reviewer's cut.
    assert len(await world.model_requests(SECURITY)) == 1
    assert len(await world.model_requests()) == 2


async def test_a_cancel_mid_fan_out_sweeps_every_live_child_turn(
    world: OperatorWorld, kubectl: tools.Kubectl, status_patches: list[tuple[str, Any]]
) -> None:
    await world.create(manifest("fan-out.yaml"))
    await held(world, fix("pkg-a"), fix("pkg-b"))
    await world.until(
        lambda: world.run("fan-out").get("childProgress") == "2 running, 3 pending",
        "the Run's status to show two children running",
        run="fan-out",
    )
    assert [(c["key"], c["status"], c.get("state")) for c in world.run("fan-out")["children"]] == [
        ("pkg-a", "running", "fix[pkg-a].work"),
        ("pkg-b", "running", "fix[pkg-b].work"),
        ("pkg-c", "pending", None),
        ("pkg-d", "pending", None),
        ("pkg-e", "pending", None),
    ]
    wide = kubectl_table((await kubectl("get", "runs", "-o", "wide")).stdout)
    assert (wide[0][1], wide[0][-2]) == ("STATE", "CHILDREN")
    assert (wide[1][1], wide[1][-2]) == ("fix", "2 running, 3 pending")
    shown = kubectl_table((await kubectl("get", "agentturns")).stdout)
    assert sorted(row[3] for row in shown[1:]) == ["fix[pkg-a].work", "fix[pkg-b].work"]

    assert await release(world, fix("pkg-a")) == 1
    await held(world, fix("pkg-c"))
    await world.until(
        lambda: world.run("fan-out").get("childProgress") == "1 succeeded, 2 running, 2 pending",
        "pkg-c to run in pkg-a's place",
        run="fan-out",
    )
    path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/fan-out"
    await world.patch(path, {"spec": {"cancel": True}})
    done = await ended(world, "fan-out", "Cancelled", 3)

    assert sorted((t["state"], t["outcome"], t.get("cause")) for t in done["turns"]) == [
        ("fix[pkg-a].work", "ended", "pick"),
        ("fix[pkg-b].work", "aborted", None),
        ("fix[pkg-c].work", "aborted", None),
    ]
    assert len({t["name"] for t in done["turns"]}) == 3
    assert (done["children"], done.get("childProgress")) == ([], None)
    assert max(running_children(status_patches)) == 2
    for package in ("pkg-b", "pkg-c"):
        await cut(world, fix(package))
    # The pending children never started; no model request came after the cancel.
    assert await world.model_requests(fix("pkg-d")) == []
    assert await world.model_requests(fix("pkg-e")) == []
    assert len(await world.model_requests()) == 3
    settled = world.events("TurnSettled")
    assert sorted(e["involvedObject"]["name"] for e in settled) == sorted(
        f"fan-out-{t['name']}" for t in done["turns"]
    )


async def both_children_running(world: OperatorWorld) -> None:
    """Until pkg-a's and pkg-b's Turns run (their model requests held), three pending."""
    await held(world, fix("pkg-a"), fix("pkg-b"))
    await world.until(
        lambda: (
            [world.read(AGENTTURNS, n)["status"].get("phase") for n in world.names(AGENTTURNS)]
            == ["Running", "Running"]
        ),
        "both children's AgentTurns Running",
    )
    assert world.run("fan-out")["childProgress"] == "2 running, 3 pending"


async def finish_the_fan_out(world: OperatorWorld) -> Body:
    """Release the held children, then each pending one as it runs; the Run at its end."""
    assert await release(world, fix("pkg-a")) + await release(world, fix("pkg-b")) == 2
    for package in PACKAGES[2:]:
        await held(world, fix(package))
        assert await release(world, fix(package)) == 1
    return await ended(world, "fan-out", "Succeeded", 5)


async def restored_every_child(world: OperatorWorld, done: Body) -> None:
    """Each Turn recorded once, ``ended`` by its pick, the pending children started in item
    order, one admission per Turn at the Harness (the live ones followed again), and every
    output in item order."""
    assert done["output"] == [f"{p} fixed" for p in PACKAGES]
    turns = sorted(done["turns"], key=lambda t: int(t["name"].removeprefix("t")))
    assert [(t["name"], t["state"]) for t in turns] == [
        (f"t{n}", f"fix[{p}].work") for n, p in enumerate(PACKAGES, start=1)
    ]
    assert {(t["outcome"], t.get("cause")) for t in turns} == {("ended", "pick")}
    harness = await world.harness()
    for turn in turns:
        events = await harness.events("fixer", turn["instanceId"])
        admitted = [
            e["data"]["request"]["key"] for e in events if e["type"] == "submission-admitted"
        ]
        assert admitted == [f"{turn['name']}.1"], turn["name"]
    assert len(await world.model_requests()) == 5
    assert (done["children"], done.get("childProgress")) == ([], None)


async def test_an_operator_restarted_mid_fan_out_restores_every_child(
    world: OperatorWorld, installation: Installation
) -> None:
    await world.create(manifest("fan-out.yaml"))
    await both_children_running(world)
    first = world.operator
    await first.stop()
    second = OperatorThread(dataclasses.replace(first.settings), installation.kubeconfig)
    await second.start()
    try:
        done = await finish_the_fan_out(world)
    finally:
        await second.stop()
    await restored_every_child(world, done)


async def test_an_operator_killed_mid_fan_out_restores_every_child(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As the restart above, the operator in a process of its own SIGKILLed: nothing of it
    runs on, nothing is written or released on its way out."""
    runner, url = await serve(parse_script(SCRIPT))
    providers = f"scripted:\n  type: openai\n  baseUrl: {url}\n"
    log = tmp_path / "operator.log"
    operator = OperatorProcess(
        settings(installation, providers_yaml=providers), installation.kubeconfig, log
    )
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
    world = OperatorWorld(
        k8s,
        k8s_client,
        workspace=WORKSPACE,
        kubelet=kubelet,
        session=session,
        model=url.removesuffix("/v1"),
    )
    try:
        await operator.start()
        await world.create(workspace(make_origin(tmp_path / "git")))
        await workspace_ready(k8s, WORKSPACE)
        await world.create(manifest("fan-out.yaml"))
        await both_children_running(world)

        await operator.kill()
        await operator.start()
        await restored_every_child(world, await finish_the_fan_out(world))
    finally:
        await operator.stop()
        await session.close()
        await runner.cleanup()
    said = log.read_text()
    assert " ERROR " not in said, said
    assert "Traceback" not in said, said
    fail_on_logged_errors(caplog, kubelet.started)
