"""How a Run on a cluster waits for its AgentTurn's finalizer (``ClusterTurns.sweep``),
against the emulator, through the operator's Kube facade and hub; no kopf runs: the test
plays the finalizer, and a stand-in Harness on 127.0.0.1 answers sweeps and histories.

Cases:
- the Run writes the exit (no cause, the named Submission) and deletes the AgentTurn,
  which its finalizer holds; it waits for the finalizer's report past many of its looks
  (``sweep_look_s``), and answers exactly what was reported; no sweep of its own;
- an AgentTurn that goes without a report here (its finalizer removed by hand) is
  noticed at a look: the Run reads the settlements back with a repeated sweep at the
  Workspace's Harness, which got the exit's body;
- an AgentTurn gone before the Run's sweep, whose finalizer reported here (the Run's
  actor was made again meanwhile): the Run answers that report, without a sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.api.agentturn import SWEEP_FINALIZER
from kubeturn.k8s import operator
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import Kube
from kubeturn.k8s.turns import ClusterTurns
from kubeturn.machine.load import LoadedRun, load_run
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Sweep
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.settings import OperatorSettings
from kubeturn_harness.wire import Outcome
from tests.operator import emulator
from tests.operator.operator_support import AGENTTURNS, GROUP_VERSION, NAMESPACE, eventually
from tests.operator.world import OperatorWorld

RUN, WORKSPACE, TURN = "reporting", "ws", "t1"
NAME = f"{RUN}-{TURN}"
KEY = (NAMESPACE, NAME)
IID = f"{NAMESPACE}.{RUN}/root/coder"
SWEEP = Sweep(TURN, "coder", IID, None, "s1")
LOOK_S = 0.05
"""The Run's look at its AgentTurn while it waits: short, so a wait spans many looks."""
HARNESS_SAID = "aborted by the sweep"

Body = dict[str, Any]


@dataclass
class StandIn:
    """A Harness's sweep route and its conversations' streams of settlements; the sweeps'
    bodies, in order."""

    url: str
    sweeps: list[Body] = field(default_factory=list)


@contextlib.asynccontextmanager
async def stand_in() -> AsyncIterator[StandIn]:
    made = StandIn("")

    async def abort(request: web.Request) -> web.Response:
        made.sweeps.append(await request.json())
        return web.json_response({"aborted": True})

    async def settlements(request: web.Request) -> web.Response:
        assert request.query["types"] == "submission-settled"
        settlement = {
            "submissionId": "s1",
            "outcome": "aborted",
            "message": HARNESS_SAID,
            "at": "2030-01-01T00:00:00Z",
        }
        event = {"offset": 0, "type": "submission-settled", "at": "t", "data": settlement}
        headers = {"stream-next-offset": "1", "stream-up-to-date": "true"}
        return web.json_response([event], headers=headers)

    app = web.Application()
    app.router.add_post("/agents/coder/{iid}/abort", abort)
    app.router.add_get("/agents/coder/{iid}", settlements)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    made.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield made
    finally:
        await runner.cleanup()


@pytest.fixture
def kube(kubeconfig: Path) -> Iterator[Kube]:
    client = operator.kube_client(str(kubeconfig))
    yield Kube(client)
    client.close()


PATH = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/agentturns/{NAME}"


@dataclass
class RunSide:
    """The Run's side of the finalizer: the operator's hub, the Run's ``ClusterTurns`` and
    the stand-in Harness of its Workspace."""

    hub: Hub
    turns: ClusterTurns
    harness: StandIn


def agent_turn(world: OperatorWorld) -> Body | None:
    return world.read(AGENTTURNS, NAME)


async def create_agent_turn(world: OperatorWorld) -> None:
    body = {
        "apiVersion": GROUP_VERSION,
        "kind": "AgentTurn",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "finalizers": [SWEEP_FINALIZER]},
        "spec": {
            "runRef": {"name": RUN},
            "workspaceRef": {"name": WORKSPACE},
            "turn": TURN,
            "agent": {"slot": "coder", "instructions": "Work.", "workspace": "write"},
            "statePath": "working",
            "instanceId": IID,
            "prompt": "Work.",
            "cwd": "/work",
        },
    }
    await world.create(body)
    status = {"status": {"phase": "Running", "submissions": [{"id": "s1", "admittedAt": 1}]}}
    await world.patch(f"{PATH}/status", status)


async def deleted_and_held(world: OperatorWorld) -> Body:
    """The AgentTurn once the Run deleted it: still there, its finalizer holding it."""

    def held() -> Body | None:
        found = agent_turn(world)
        return found if found and found["metadata"].get("deletionTimestamp") else None

    return dict(await eventually(held, "the AgentTurn deleted and held by its finalizer"))


def loaded_run() -> LoadedRun:
    return load_run(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "Run",
            "metadata": {"name": RUN, "namespace": NAMESPACE},
            "spec": {
                "workspace": {"name": WORKSPACE},
                "agents": {"coder": {"instructions": "Work."}},
                "machine": {
                    "initial": "working",
                    "states": {
                        "working": {"invoke": {"agent": {"slot": "coder", "prompt": "Work."}}}
                    },
                },
            },
        },
        workspace_required=True,
    )


@pytest.fixture
def world(k8s: emulator.KubernetesApi, k8s_client: aiohttp.ClientSession) -> OperatorWorld:
    """The emulator, which no operator serves here."""
    return OperatorWorld(k8s, k8s_client)


@pytest.fixture
async def run(kube: Kube) -> AsyncIterator[RunSide]:
    hub = Hub(kube, OperatorSettings(sweep_look_s=LOOK_S))
    run = {"metadata": {"name": RUN, "namespace": NAMESPACE}}
    async with stand_in() as harness:
        hub.harness_ready((NAMESPACE, WORKSPACE), HarnessClient(harness.url, "token"))
        try:
            yield RunSide(hub, ClusterTurns(hub, run, loaded_run(), WORKSPACE), harness)
        finally:
            await hub.close()


async def test_the_run_waits_for_the_finalizers_report_past_its_looks(
    world: OperatorWorld, run: RunSide
) -> None:
    await create_agent_turn(world)
    sweeping = asyncio.create_task(run.turns.sweep(SWEEP))
    try:
        held = await deleted_and_held(world)
        exit_ = held["status"]["exit"]
        assert (exit_.get("cause"), exit_["submissionId"]) == (None, "s1")
        assert held["status"]["phase"] == "Settling"
        # Many looks find the AgentTurn still there: the Run keeps waiting.
        await asyncio.sleep(10 * LOOK_S)
        assert not sweeping.done()
        report = [Settled("s1", Outcome.ABORTED, message="the finalizer's words")]
        run.hub.swept(KEY, report)
        assert await asyncio.wait_for(sweeping, 5) == report
    finally:
        sweeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
    assert run.harness.sweeps == []


async def test_an_agentturn_gone_without_a_report_is_swept_again(
    world: OperatorWorld, run: RunSide
) -> None:
    await create_agent_turn(world)
    sweeping = asyncio.create_task(run.turns.sweep(SWEEP))
    try:
        await deleted_and_held(world)
        await world.patch(PATH, {"metadata": {"finalizers": []}})
        settled = await asyncio.wait_for(sweeping, 5)
    finally:
        sweeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweeping
    assert agent_turn(world) is None
    assert [(s.submission, s.outcome, s.message) for s in settled] == [
        ("s1", Outcome.ABORTED, HARNESS_SAID)
    ]
    assert run.harness.sweeps == [{"submissionId": "s1"}]


async def test_a_report_that_came_before_the_runs_sweep_is_its_answer(
    world: OperatorWorld, run: RunSide
) -> None:
    report = [Settled("s1", Outcome.ENDED)]
    run.hub.swept(KEY, report)
    assert await asyncio.wait_for(run.turns.sweep(SWEEP), 5) == report
    assert run.harness.sweeps == []
