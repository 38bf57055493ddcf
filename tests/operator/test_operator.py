"""The real operator (kopf, in a thread of its own) against the API emulator, with the
kubelet running each sandbox Pod as a real Harness process and the scripted model.

Cases:
- ``examples/task-with-review.yaml`` applied with kubectl runs to ``Succeeded``: coder →
  reviewer rejects → coder fixes on the same conversation → reviewer approves → a signal
  ``approve`` appended to ``spec.signals`` passes ``humanReview``; every AgentTurn
  disappears only after its ``status.settlement`` was written (``ended``, cause
  ``pick``); the AgentTurns are ``-t1``..``-t4`` in order, each labelled with its Turn
  number; ``Run.status.state`` is the final state ``done``;
  ``Run.status.turns`` holds each Turn once, ``turnCount`` is 4; one
  ``TurnSettled`` Event per Turn; ``kubectl get agentturns`` shows the CRD's printer
  columns while a Turn runs; an ``approve`` sent while the coder works is recorded
  ``ignored`` in ``processedSignals`` with the events the Run accepts, and a
  ``SignalIgnored`` Warning Event; at ``humanReview`` the status lists ``approve`` and
  ``reject`` as accepted (``kubectl get runs -o wide``: ``ACCEPTS``); the operator's
  ``/metrics`` counts the Run ``Succeeded`` and its Turns ``ended`` by ``pick``;
- ``kubectl delete agentturn`` on a live Turn whose model request is held: the sweep
  names no cause, so the Harness settles it ``aborted`` with no message, as does the
  AgentTurn's last ``status.settlement``; the held request is cut and no other is made;
  the Machine gets ``agent.fault`` (reason ``deleted``), unhandled, so the Run fails
  naming the Turn;
- the operator stopped mid-Turn and a new one started against the same API and
  Harness: the Run resumes and succeeds, with one admission per Turn at the Harness,
  one record per Turn in ``Run.status.turns`` and each transition taken once in
  ``Run.status.trail``;
- an invalid Run (a transition's target names no state) gets ``Ready=False``,
  ``Invalid``, with the manifest path; a fixed spec (a new generation) runs;
- a Run whose saved state a newer kubeturn wrote (``status.snapshot.version`` 99) gets,
  from a restarted operator, ``Ready=False``, ``SnapshotUnreadable`` saying so, and stays
  as it was (no retry writes it again); the operator goes on driving other Runs;
- a Run whose states invoke an Agent and name no ``spec.workspace`` gets ``Ready=False``,
  ``Invalid``, naming ``spec.workspace`` and the states; with a Workspace added (a new
  generation) it runs: its two Turns on one continued conversation, created back to
  back, are admitted in order, the second after the first settled at the Harness;
- an AgentTurn deleted right after an operator restart, while the new operator cannot
  reach the Harness yet (its process frozen): the finalizer waits, and sweeps the Turn
  once the Harness answers (the held request cut, ``aborted``), never leaving it running;
  the resumed Run's Machine gets ``agent.fault`` (``deleted``);
- ``kubectl delete run`` mid-Turn: the Run goes only after its live AgentTurn was swept
  (``aborted``, the held request cut), and its Harness recorded the Turn ``aborted`` (the
  Run's Workspace, which the garbage collector takes after the Run, held meanwhile by a
  finalizer standing for another controller's).

The operator runs as the chart's ServiceAccount, every namespace watched; the first
scenario runs again with ``watchNamespaces`` (the chart's two RBAC shapes). Limits of the
emulator (no admission plugins) are the emulator's; the kubelet's are in
:mod:`tests.operator.kubelet`.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from kubeturn.orchestrator.snapshots import VERSION
from kubeturn_harness.scripted import parse_script, serve
from tests import tools
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import IN_BOTH_SHAPES, Installation
from tests.operator.operator_support import (
    AGENTTURN_COLUMNS,
    AGENTTURNS,
    RUNS,
    WORKSPACES,
    AgentTurnWatch,
    HarnessReader,
    OperatorThread,
    call,
    events,
    eventually,
    fail_on_logged_errors,
    harness_token,
    kubectl_table,
    make_origin,
    model_requests,
    names,
    read,
    script,
    settings,
    status,
)

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
CRDS = ROOT / "crds"


@pytest.fixture
def printer_columns() -> Mapping[str, Sequence[emulator.Column]]:
    """The CRDs' own printer columns: what ``kubectl get`` shows in a cluster."""
    columns = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        (version,) = crd["spec"]["versions"]
        columns[crd["spec"]["names"]["kind"]] = tuple(
            (column["name"], column["jsonPath"], column["type"])
            for column in version.get("additionalPrinterColumns", [])
        )
    return columns


# ----------------------------------------------------------------------------- the world


@dataclass
class Cluster:
    """One test's world: the API, kubectl, the kubelet, the scripted model, the operator."""

    k8s: emulator.KubernetesApi
    kubectl: tools.Kubectl
    kubelet: kubelet_.Kubelet
    session: aiohttp.ClientSession
    model: str
    """The scripted model's base URL (its control routes live there)."""
    origin: str
    """The ``file://`` URL of a bare git repository with a ``main`` branch."""
    operator: OperatorThread
    watch: AgentTurnWatch
    installation: Installation
    operators: list[OperatorThread] = field(default_factory=list)

    async def apply(self, manifest: dict[str, Any]) -> None:
        """``kubectl apply`` the manifest (as YAML: a ``True`` key is written ``true``)."""
        text = yaml.safe_dump(manifest)
        await self.kubectl("apply", "--validate=false", "-f", "-", stdin=text)

    def run(self, name: str) -> dict[str, Any]:
        return status(self.k8s, RUNS, name)

    def describe(self, run: str) -> Callable[[], str]:
        def said() -> str:
            current = self.run(run)
            current.pop("snapshot", None)
            return (
                f"Run status {json.dumps(current)}; AgentTurns {names(self.k8s, AGENTTURNS)}; "
                f"kubelet errors {self.kubelet.errors}"
            )

        return said

    async def run_phase(self, run: str, phase: str, timeout: float = 20) -> dict[str, Any]:
        await eventually(
            lambda: self.run(run).get("phase") == phase,
            f"Run {run} to be {phase}",
            timeout=timeout,
            describe=self.describe(run),
        )
        return self.run(run)

    async def requests(self, match: str | None = None) -> list[dict[str, Any]]:
        return await model_requests(self.session, self.model, match)

    async def release(self, match: str) -> int:
        async with self.session.post(f"{self.model}/_release", json={"match": match}) as answer:
            return int((await answer.json())["released"])

    async def held(self, match: str, count: int = 1) -> None:
        async def enough() -> bool:
            return len([r for r in await self.requests(match) if r["held"]]) >= count

        await eventually(enough, f"{count} held model request(s) of {match!r}")

    async def cut(self, match: str) -> None:
        """Wait until the one model request of ``match`` was cut by its client."""

        async def cut() -> bool:
            (request,) = await self.requests(match)
            return bool(request["disconnected"] and request["closedAt"] is not None)

        await eventually(cut, f"the held model request of {match!r} to be cut")

    async def harness(self, workspace: str) -> HarnessReader:
        """The Workspace's Harness, once its sandbox runs."""
        sandbox = await self.kubelet.running(f"{workspace}-kubeturn-sandbox")
        return HarnessReader(sandbox.url, harness_token(self.k8s, workspace), self.session)

    async def restart_operator(self) -> None:
        await self.operator.stop()
        self.operator = OperatorThread(self.operator.settings, self.installation.kubeconfig)
        self.operators.append(self.operator)
        await self.operator.start()


StartCluster = Callable[..., Awaitable[Cluster]]


@pytest.fixture
async def cluster(
    k8s: emulator.KubernetesApi,
    kubectl: tools.Kubectl,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[StartCluster]:
    """Start the world with a scripted model answering from ``script`` (JSON text),
    priced by ``pricing`` (YAML flow text) if given; the test fails if the operator or a
    Harness logged an error."""
    origin = make_origin(tmp_path / "git")
    connector = aiohttp.TCPConnector(force_close=True)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30))
    api = aiohttp.ClientSession(
        str(k8s.url), connector=aiohttp.TCPConnector(force_close=True), headers=k8s.admin_headers
    )
    started: list[Cluster] = []
    cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def start(text: str, *, pricing: str = "") -> Cluster:
        runner, url = await serve(parse_script(text))
        cleanups.append(runner.cleanup)
        priced = f"  pricing: {pricing}\n" if pricing else ""
        providers = f"scripted:\n  type: openai\n  baseUrl: {url}\n{priced}"
        operator = OperatorThread(
            settings(installation, providers_yaml=providers), installation.kubeconfig
        )
        watch = AgentTurnWatch(api)
        await watch.open()
        cleanups.append(watch.close)
        await operator.start()
        world = Cluster(
            k8s=k8s,
            kubectl=kubectl,
            kubelet=kubelet,
            session=session,
            model=url.removesuffix("/v1"),
            origin=origin,
            operator=operator,
            watch=watch,
            installation=installation,
            operators=[operator],
        )
        started.append(world)
        return world

    yield start
    try:
        for world in started:
            await world.operator.stop()
    finally:
        for cleanup in reversed(cleanups):
            await cleanup()
        await api.close()
        await session.close()
    # Nothing failed on the way: no handler, actor or effect logged an error, and no
    # Harness did.
    fail_on_logged_errors(caplog, kubelet.started)


def task_with_review(origin: str) -> dict[str, Any]:
    """``examples/task-with-review.yaml`` cloning ``origin``, its Agents on the scripted
    model. PyYAML reads a bare ``on`` key as ``True``, as kubectl does: a state's events
    are under ``state[True]``."""
    manifest = yaml.safe_load((EXAMPLES / "task-with-review.yaml").read_text())
    manifest["spec"]["workspace"]["template"]["repos"]["target"]["url"] = origin
    for agent in manifest["spec"]["agents"].values():
        agent["model"] = "scripted/any"
    return dict(manifest)


# ----------------------------------------------------------------------------- task-with-review

RUN = "task-with-review"
WORKSPACE = f"{RUN}-workspace"
CODER_IID = f"default.{RUN}/root/coder"
CODER = "Add a --verbose flag"
FIRST_REVIEW = "The author says: first attempt"
SECOND_REVIEW = "The author says: added tests"
SCRIPTED = (CODER, FIRST_REVIEW, SECOND_REVIEW)


def task_with_review_script(*, hold_first: bool) -> str:
    return script(
        {
            CODER: [
                {
                    "text": "Adding the flag.",
                    "hold": hold_first,
                    "toolCalls": [call("write", path="cli.py", content="")],
                },
                {"toolCalls": [call("submit", summary="first attempt")]},
                {
                    "text": "Adding tests.",
                    "toolCalls": [call("write", path="test_cli.py", content="")],
                },
                {"toolCalls": [call("submit", summary="added tests")]},
            ],
            FIRST_REVIEW: [
                {"toolCalls": [call("read", path="cli.py")]},
                {"toolCalls": [call("review_verdict", verdict="reject", notes="add tests")]},
            ],
            SECOND_REVIEW: [{"toolCalls": [call("review_verdict", verdict="approve")]}],
        }
    )


async def coder_running(cluster: StartCluster) -> tuple[Cluster, str]:
    """Apply the example Run and wait until its coder's first Turn runs, its model
    request held; answer the world and that AgentTurn's name."""
    world = await cluster(task_with_review_script(hold_first=True))
    await world.apply(task_with_review(world.origin))
    await world.held(CODER)
    first = f"{RUN}-t1"
    await eventually(
        lambda: status(world.k8s, AGENTTURNS, first).get("phase") == "Running",
        f"AgentTurn {first} to be Running",
    )
    return world, first


@IN_BOTH_SHAPES
async def test_task_with_review_runs_to_succeeded(cluster: StartCluster) -> None:
    # While the coder's first Turn runs (its model request held), kubectl shows it.
    world, first = await coder_running(cluster)
    shown = kubectl_table((await world.kubectl("get", "agentturns")).stdout)
    assert shown[0] == AGENTTURN_COLUMNS
    assert [row[:6] for row in shown[1:]] == [[first, RUN, "coder", "implementing", "Running", ""]]
    # A person approving before the review: ignored, said so, and not kept for later.
    early = [
        {"op": "add", "path": "/spec/signals/-", "value": {"id": "early-1", "event": "approve"}}
    ]
    await world.kubectl("patch", "run", RUN, "--type=json", "-p", json.dumps(early))
    ignored = {
        "id": "early-1",
        "result": "ignored",
        "message": "no active state accepts approve; the Run accepts now: submit (implementing)",
    }
    await eventually(
        lambda: world.run(RUN).get("processedSignals") == [ignored],
        "the early approval to be recorded ignored",
    )
    await eventually(lambda: len(events(world.k8s, "SignalIgnored")) == 1, "a SignalIgnored Event")
    (warning,) = events(world.k8s, "SignalIgnored")
    assert (warning["type"], warning["message"]) == (
        "Warning",
        f"signal early-1 (approve) ignored: {ignored['message']}",
    )
    assert await world.release(CODER) == 1

    await eventually(
        lambda: world.run(RUN).get("state") == "humanReview" and world.run(RUN)["turnCount"] == 4,
        "the Run to wait at humanReview with 4 Turns recorded",
        describe=world.describe(RUN),
    )
    # Recorded in the Run before its finalizer goes: the last AgentTurn goes next.
    await eventually(lambda: names(world.k8s, AGENTTURNS) == [], "every AgentTurn to go")
    waiting = world.run(RUN)
    assert waiting["waitingFor"] == "approve,reject"
    assert [(a["event"], a["state"]) for a in waiting["acceptedEvents"]] == [
        ("approve", "humanReview"),
        ("reject", "humanReview"),
    ]
    ready = {c["type"]: c for c in waiting["conditions"]}["Ready"]
    assert ready["message"] == (
        "the Run is Running; it accepts now: approve (humanReview), reject (humanReview)"
    )
    wide = kubectl_table((await world.kubectl("get", "runs", "-o", "wide")).stdout)
    assert (wide[0][-1], wide[1][-1]) == ("ACCEPTS", "approve,reject")
    signal = [
        {"op": "add", "path": "/spec/signals/-", "value": {"id": "approve-1", "event": "approve"}}
    ]
    await world.kubectl("patch", "run", RUN, "--type=json", "-p", json.dumps(signal))
    done = await world.run_phase(RUN, "Succeeded")

    assert done["output"] == {"rounds": 1, "summary": "added tests"}
    assert done["turnCount"] == 4
    assert done["processedSignals"] == [ignored, {"id": "approve-1", "result": "handled"}]
    assert done["observedGeneration"] == 3  # the signal's generation, acted on
    turns = done["turns"]
    assert [(t["agent"], t["state"], t["outcome"], t["cause"]) for t in turns] == [
        ("coder", "implementing", "ended", "pick"),
        ("reviewer", "reviewing", "ended", "pick"),
        ("coder", "fixing", "ended", "pick"),
        ("reviewer", "reviewing", "ended", "pick"),
    ]
    turn_names = [f"{RUN}-{t['name']}" for t in turns]
    assert turn_names == [f"{RUN}-t{n}" for n in range(1, 5)]
    # Its usage sums every Turn's tokens, per Agent and in all; no price, no cost.
    usage = done["usage"]
    spent = sum(t["tokens"]["promptTokens"] + t["tokens"]["completionTokens"] for t in turns)
    assert usage["tokens"] == spent > 0
    assert sorted(usage["agents"]) == ["coder", "reviewer"]
    assert "cost" not in usage
    listed = kubectl_table((await world.kubectl("get", "runs")).stdout)
    row = dict(zip(listed[0], listed[1], strict=True))
    assert (row["TOKENS"], row["COST"]) == (str(spent), "")
    assert done["state"] == "done"
    ready = {c["type"]: c for c in done["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Finished")

    # Each AgentTurn went only after its settlement was written: the last version
    # served before DELETED, and the DELETED one, carry it.
    assert sorted(world.watch.deleted()) == sorted(turn_names)
    for name, record in zip(turn_names, turns, strict=True):
        seen = world.watch.of(name)
        tokens = {k: v for k, v in record["tokens"].items() if v is not None}
        assert seen[-1][1]["status"]["usage"] == tokens, name
        assert [kind for kind, _ in seen][-1] == "DELETED", name
        before, gone = seen[-2][1], seen[-1][1]
        for version in (before, gone):
            settlement = version["status"]["settlement"]
            assert (settlement["outcome"], settlement["cause"]) == ("ended", "pick"), name
            assert version["status"]["phase"] == "Settled"
        assert before["metadata"]["deletionTimestamp"]
        assert before["status"]["exit"]["cause"] == "pick"
        assert before["metadata"]["labels"]["kubeturn.dev/turn-seq"] == name.rpartition("-t")[2]

    settled = events(world.k8s, "TurnSettled")
    assert sorted(e["involvedObject"]["name"] for e in settled) == sorted(turn_names)
    assert all("ended (cause pick)" in e["message"] for e in settled)

    # At the Harness: the coder's two Turns on one conversation, each ended by its pick.
    harness = await world.harness(WORKSPACE)
    coder = await harness.history("coder", CODER_IID)
    assert [s["outcome"] for s in coder["settlements"]] == ["ended", "ended"]
    assert [s["submissionId"] for s in coder["settlements"]] == [
        turns[0]["submissions"][0]["id"],
        turns[2]["submissions"][0]["id"],
    ]
    # Model requests, exactly what the script needs: none after a Turn-ending pick.
    steps = {match: [r["step"] for r in await world.requests(match)] for match in SCRIPTED}
    assert steps == {CODER: [0, 1, 2, 3], FIRST_REVIEW: [0, 1], SECOND_REVIEW: [0]}
    assert len(await world.requests()) == 7

    # The operator's metrics count the Run by phase and its Turns by outcome and cause.
    metrics_url = f"http://127.0.0.1:{world.operator.settings.metrics_port}/metrics"
    async with world.session.get(metrics_url) as answer:
        exposed = await answer.text()
    assert 'kubeturn_runs{phase="Succeeded"} 1.0' in exposed
    assert 'kubeturn_runs{phase="Running"} 0.0' in exposed
    assert 'kubeturn_turns_total{cause="pick",outcome="ended"}' in exposed
    sandbox = await world.kubelet.running(f"{WORKSPACE}-kubeturn-sandbox")
    worktree = sandbox.work_root / "target" / f"kubeturn-{RUN}"
    assert sorted(p.name for p in worktree.iterdir() if p.name != ".git") == [
        "README.md",
        "cli.py",
        "test_cli.py",
    ]


# ----------------------------------------------------------------------------- kubectl delete


async def test_deleting_a_live_agentturn_sweeps_it_with_no_cause_and_fails_the_run(
    cluster: StartCluster,
) -> None:
    world, first = await coder_running(cluster)

    await world.kubectl("delete", "agentturn", first, "--wait=false")
    failed = await world.run_phase(RUN, "Failed")
    await eventually(lambda: first in world.watch.deleted(), f"AgentTurn {first} to go")

    # The sweep named no cause: the Harness settled the Submission aborted, no message.
    harness = await world.harness(WORKSPACE)
    coder = await harness.history("coder", CODER_IID)
    (settlement,) = coder["settlements"]
    assert (settlement["outcome"], settlement.get("message")) == ("aborted", None)
    kind, last = world.watch.of(first)[-1]
    assert kind == "DELETED"
    # A merge patch drops a null: no cause, no message.
    assert last["status"]["settlement"]["outcome"] == "aborted"
    assert "cause" not in last["status"]["settlement"]
    assert "message" not in last["status"]["settlement"]
    assert "exit" not in last["status"]  # the Run did not end it: a person did

    # The held model request was cut, and no other was made for the conversation.
    await world.cut(CODER)

    # The Machine got agent.fault (deleted); implementing does not handle it.
    assert failed["message"] == (
        "the invoke of state 'implementing' failed and no onError handles it: "
        "the AgentTurn of Turn t1 was deleted"
    )
    (settled,) = events(world.k8s, "TurnSettled")
    assert (settled["involvedObject"]["name"], settled["message"]) == (
        first,
        "coder in implementing: aborted",
    )
    await eventually(
        lambda: world.run(RUN).get("turnCount") == 1,
        "the deleted Turn's record",
        describe=world.describe(RUN),
    )
    (turn,) = world.run(RUN)["turns"]
    assert (turn["name"], turn["agent"], turn["outcome"], turn["cause"]) == (
        "t1",
        "coder",
        "aborted",
        None,
    )
    assert [s["id"] for s in turn["submissions"]] == [settlement["submissionId"]]
    assert len(await world.requests(CODER)) == 1


# ----------------------------------------------------------------------------- a stall


async def test_a_stalled_turn_is_swept_recorded_once_and_fails_the_run_saying_so(
    cluster: StartCluster,
) -> None:
    world = await cluster(task_with_review_script(hold_first=True))
    manifest = task_with_review(world.origin)
    manifest["spec"]["agents"]["coder"]["stallAfter"] = "1s"
    await world.apply(manifest)
    first = f"{RUN}-t1"

    failed = await world.run_phase(RUN, "Failed")
    stalled = (
        "stalled: no progress (no model request, output streamed, answer, tool call or pick) "
        "for 1s "
        "(spec.agents.coder.stallAfter)"
    )
    assert failed["message"] == (
        f"the invoke of state 'implementing' failed and no onError handles it: {stalled}"
    )
    await eventually(lambda: first in world.watch.deleted(), f"AgentTurn {first} to go")
    _, last = world.watch.of(first)[-1]
    assert (last["status"]["settlement"]["outcome"], last["status"]["settlement"]["message"]) == (
        "aborted",
        stalled,
    )
    await eventually(
        lambda: world.run(RUN).get("turnCount") == 1,
        "the stalled Turn's record",
        describe=world.describe(RUN),
    )
    (turn,) = world.run(RUN)["turns"]
    assert (turn["name"], turn["outcome"], turn.get("cause"), turn["message"]) == (
        "t1",
        "aborted",
        None,
        stalled,
    )
    # The sweep cut the held model request, and no model request came after it.
    await world.cut(CODER)
    harness = await world.harness(WORKSPACE)
    coder = await harness.history("coder", CODER_IID)
    assert [s["outcome"] for s in coder["settlements"]] == ["aborted"]
    assert len(await world.requests()) == 1


# ----------------------------------------------------------------------------- a budget


async def test_a_turn_that_reaches_its_token_limit_is_swept_mid_turn_and_fails_the_run(
    cluster: StartCluster,
) -> None:
    working = [
        {"text": "Looking first.", "toolCalls": [call("bash", command="sleep 20")]},
        {"toolCalls": [call("submit", summary="done")]},
    ]
    world = await cluster(script({CODER: working}))
    manifest = task_with_review(world.origin)
    manifest["spec"]["agents"]["coder"]["limits"] = {"perTurn": {"tokens": 10}}
    await world.apply(manifest)
    first = f"{RUN}-t1"

    failed = await world.run_phase(RUN, "Failed")
    await eventually(
        lambda: world.run(RUN).get("turnCount") == 1,
        "the swept Turn's record",
        describe=world.describe(RUN),
    )
    (turn,) = world.run(RUN)["turns"]
    used = turn["tokens"]["promptTokens"] + turn["tokens"]["completionTokens"]
    reached = (
        f"budget: spec.agents.coder.limits.perTurn.tokens reached: this Turn used {used} "
        "tokens of 10"
    )
    assert (turn["name"], turn["outcome"], turn["cause"], turn["message"]) == (
        "t1",
        "aborted",
        "budget",
        reached,
    )
    assert failed["message"] == (
        f"the invoke of state 'implementing' failed and no onError handles it: {reached}"
    )
    await eventually(lambda: first in world.watch.deleted(), f"AgentTurn {first} to go")
    _, last = world.watch.of(first)[-1]
    settlement = last["status"]["settlement"]
    assert (settlement["outcome"], settlement["cause"], settlement["message"]) == (
        "aborted",
        "budget",
        reached,
    )
    # Swept while its Agent's command ran, after the one answer that reached the limit:
    # the Submission aborted, and no model request came after that answer.
    harness = await world.harness(WORKSPACE)
    coder = await harness.history("coder", CODER_IID)
    assert [s["outcome"] for s in coder["settlements"]] == ["aborted"]
    assert len(await world.requests()) == 1
    assert world.run(RUN)["usage"]["tokens"] == used


async def test_a_run_level_cost_limit_stops_a_multi_turn_run(cluster: StartCluster) -> None:
    reviewing = [
        {"toolCalls": [call("write", path=f"review-{n}.txt", content="looked")], "delayMs": 300}
        for n in range(20)
    ]
    world = await cluster(
        script(
            {
                CODER: [{"toolCalls": [call("submit", summary="first attempt")]}],
                FIRST_REVIEW: reviewing,
            }
        ),
        pricing="{any: {input: 10, output: 10}}",
    )
    manifest = task_with_review(world.origin)
    manifest["spec"]["limits"] = {"cost": "0.01"}
    await world.apply(manifest)

    failed = await world.run_phase(RUN, "Failed")
    await eventually(
        lambda: world.run(RUN).get("turnCount") == 2,
        "both Turns' records",
        describe=world.describe(RUN),
    )
    assert failed["state"] == "failed"
    coder, reviewer = world.run(RUN)["turns"]
    assert [(t["name"], t["outcome"], t["cause"]) for t in (coder, reviewer)] == [
        ("t1", "ended", "pick"),
        ("t2", "aborted", "budget"),
    ]
    assert reviewer["message"].startswith("budget: spec.limits.cost reached: the Run cost ")
    assert reviewer["message"].endswith(" USD of 0.01 USD")
    # The reviewer worked answer after answer until the Run's cost was reached; no model
    # request started after the answer that reached it but the one then in flight, cut.
    harness = await world.harness(WORKSPACE)
    held = await harness.history("reviewer", reviewer["instanceId"])
    assert [s["outcome"] for s in held["settlements"]] == ["aborted"]
    spent = Decimal(coder["tokens"]["cost"])
    answered = [m["usage"] for m in held["messages"] if m.get("usage")]
    reached_at = next(
        index
        for index, usage in enumerate(answered)
        if (spent := spent + Decimal(usage["cost"])) >= Decimal("0.01")
    )
    requests = await world.requests(FIRST_REVIEW)
    assert len(requests) in (reached_at + 1, reached_at + 2)
    assert all(r["disconnected"] for r in requests[reached_at + 1 :])
    usage = world.run(RUN)["usage"]
    assert Decimal(usage["cost"]) == Decimal(coder["tokens"]["cost"]) + Decimal(
        reviewer["tokens"]["cost"]
    )
    assert usage["limits"] == [
        {"limit": "spec.limits.cost", "used": usage["cost"], "of": "0.01", "reached": True}
    ]


# ----------------------------------------------------------------------------- a retry


async def test_a_runaway_is_retried_once_on_a_fresh_conversation_then_fails_the_run(
    cluster: StartCluster,
) -> None:
    loop = [{"toolCalls": [call("read", path="README.md")]}] * 4
    world = await cluster(script({CODER: loop}))
    manifest = task_with_review(world.origin)
    invoke = manifest["spec"]["machine"]["states"]["implementing"]["invoke"]["agent"]
    invoke["retry"] = {"limit": 1, "when": ["runaway"], "freshConversation": True}
    await world.apply(manifest)

    failed = await world.run_phase(RUN, "Failed")
    runaway = "runaway: 4 identical calls of `read` in a row"
    assert failed["message"] == (
        f"the invoke of state 'implementing' failed and no onError handles it: {runaway}"
    )
    await eventually(
        lambda: world.run(RUN).get("turnCount") == 2,
        "both Turns' records",
        describe=world.describe(RUN),
    )
    # Two Turns, each its own AgentTurn and record; the retry on the next epoch's
    # conversation (the continued one was burnt by the fault), with the identical prompt.
    turns = world.run(RUN)["turns"]
    assert [(t["name"], t["outcome"], t["message"], t["instanceId"]) for t in turns] == [
        ("t1", "failed", runaway, CODER_IID),
        ("t2", "failed", runaway, f"{CODER_IID}/1"),
    ]
    for name in (f"{RUN}-t1", f"{RUN}-t2"):
        await eventually(lambda n=name: n in world.watch.deleted(), f"AgentTurn {name} to go")
        _, last = world.watch.of(name)[-1]
        assert last["status"]["settlement"]["outcome"] == "failed"
    requests = await world.requests(CODER)
    assert [r["step"] for r in requests] == [0, 1, 2, 3, 0, 1, 2, 3]
    prompts = [
        next(m["content"] for m in r["body"]["messages"] if m["role"] == "user")
        for r in (requests[0], requests[4])
    ]
    assert prompts[0] == prompts[1]
    harness = await world.harness(WORKSPACE)
    for iid in (CODER_IID, f"{CODER_IID}/1"):
        held = await harness.history("coder", iid)
        assert [s["outcome"] for s in held["settlements"]] == ["failed"]
    assert len(await world.requests()) == 8


# ----------------------------------------------------------------------------- restart


async def test_an_operator_restarted_mid_turn_resumes_the_run(cluster: StartCluster) -> None:
    world, _ = await coder_running(cluster)

    await world.restart_operator()
    assert await world.release(CODER) == 1
    await eventually(
        lambda: world.run(RUN).get("state") == "humanReview" and world.run(RUN)["turnCount"] == 4,
        "the Run to wait at humanReview with 4 Turns recorded",
        describe=world.describe(RUN),
    )
    signal = {"spec": {"signals": [{"id": "approve-1", "event": "approve"}]}}
    await world.kubectl("patch", "run", RUN, "--type=merge", "-p", json.dumps(signal))
    done = await world.run_phase(RUN, "Succeeded")

    turns = done["turns"]
    assert [(t["agent"], t["state"], t["outcome"], t["cause"]) for t in turns] == [
        ("coder", "implementing", "ended", "pick"),
        ("reviewer", "reviewing", "ended", "pick"),
        ("coder", "fixing", "ended", "pick"),
        ("reviewer", "reviewing", "ended", "pick"),
    ]
    assert len({t["name"] for t in turns}) == done["turnCount"] == 4
    assert [(m["from"], m.get("event"), m["to"]) for m in done["trail"]] == [
        ("implementing", "submit", "reviewing"),
        ("reviewing", "review_verdict", "fixing"),
        ("fixing", "submit", "reviewing"),
        ("reviewing", "review_verdict", "humanReview"),
        ("humanReview", "approve", "done"),
    ]
    assert done["droppedTrail"] == 0

    # One admission per Turn at the Harness: the resumed operator admitted nothing again.
    harness = await world.harness(WORKSPACE)
    coder = await harness.events("coder", CODER_IID)
    admitted = [e["data"] for e in coder if e["type"] == "submission-admitted"]
    assert [a["request"]["key"] for a in admitted] == [
        f"{turns[0]['name']}.1",
        f"{turns[2]['name']}.1",
    ]
    assert [a["submissionId"] for a in admitted] == [
        turns[0]["submissions"][0]["id"],
        turns[2]["submissions"][0]["id"],
    ]
    for review in (turns[1], turns[3]):
        history = await harness.history("reviewer", review["instanceId"])
        assert [s["submissionId"] for s in history["submissions"]] == [
            review["submissions"][0]["id"]
        ]
    assert len(await world.requests()) == 7
    assert len(world.kubelet.started) == 1  # the sandbox ran on, untouched


# ----------------------------------------------------------------------------- invalid


async def test_an_invalid_run_says_where_and_a_fixed_spec_runs(cluster: StartCluster) -> None:
    world = await cluster(task_with_review_script(hold_first=True))
    typo = task_with_review(world.origin)
    typo["spec"]["machine"]["states"]["reviewing"][True]["review_verdict"][0]["target"] = (
        "humanReveiw"
    )
    await world.apply(typo)

    def ready() -> dict[str, Any]:
        found = [c for c in world.run(RUN).get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found else {}

    await eventually(lambda: ready().get("reason") == "Invalid", "Ready=False, Invalid")
    condition = ready()
    assert condition["status"] == "False"
    assert condition["message"] == (
        "spec.machine.states.reviewing.on.review_verdict[0].target: "
        "no state 'humanReveiw' (did you mean 'humanReview'?)"
    )
    assert condition["observedGeneration"] == 1
    assert world.run(RUN).get("phase") == "Pending"  # the CRD's default: the operator set none
    assert names(world.k8s, WORKSPACES) == []
    assert names(world.k8s, AGENTTURNS) == []

    await world.apply(task_with_review(world.origin))
    assert (read(world.k8s, RUNS, RUN) or {})["metadata"]["generation"] == 2
    await world.held(CODER)
    running = await world.run_phase(RUN, "Running")
    assert running["state"] == "implementing"
    assert running["observedGeneration"] == 2
    assert ready()["status"] == "True"
    assert names(world.k8s, AGENTTURNS) == [f"{RUN}-t1"]


def timed(name: str, delay: str) -> dict[str, Any]:
    """A Run of no Agent that waits ``delay`` and succeeds."""
    machine = {
        "initial": "waiting",
        "states": {"waiting": {"after": {delay: "done"}}, "done": {"type": "final"}},
    }
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"agents": {}, "machine": machine},
    }


async def test_a_snapshot_a_newer_kubeturn_wrote_is_not_restored_and_says_why(
    cluster: StartCluster,
) -> None:
    world = await cluster(script({}))
    await world.apply(timed("waits", "1h"))
    await world.run_phase("waits", "Running")
    await world.operator.stop()
    newer = {"status": {"snapshot": {"version": 99}}}
    await world.kubectl(
        "patch", "run", "waits", "--subresource=status", "--type=merge", "-p", json.dumps(newer)
    )
    world.operator = OperatorThread(world.operator.settings, world.installation.kubeconfig)
    world.operators.append(world.operator)
    await world.operator.start()

    def ready() -> dict[str, Any]:
        found = [c for c in world.run("waits").get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found else {}

    await eventually(
        lambda: ready().get("reason") == "SnapshotUnreadable", "Ready=False, SnapshotUnreadable"
    )
    assert ready()["status"] == "False"
    assert ready()["message"] == (
        "the Run's saved state (status.snapshot) cannot be restored: it is version 99, "
        f"written by a newer kubeturn; this one reads versions 0 to {VERSION}: run a kubeturn "
        "that "
        "reads it. The Run is not driven; delete it, or run a kubeturn that reads it"
    )
    before = read(world.k8s, RUNS, "waits") or {}
    await world.apply(timed("quick", "0s"))
    await world.run_phase("quick", "Succeeded")
    after = read(world.k8s, RUNS, "waits") or {}
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["status"]["snapshot"]["version"] == 99
    assert after["status"]["phase"] == "Running"


HANDOVER = "handover"
HANDOVER_IID = f"default.{HANDOVER}/root/coder"
IMPLEMENT = "Implement the handover"


def handover(workspace: dict[str, Any] | None) -> dict[str, Any]:
    """Two states that continue one coder conversation, the first's pick entering the
    second: its Turns are swept and admitted back to back."""

    def continued(prompt: str, then: str) -> dict[str, Any]:
        agent = {"slot": "coder", "prompt": prompt, "continue": True}
        return {
            "invoke": {"agent": agent},
            "on": {"submit": {"target": then, "description": "Done."}},
        }

    spec: dict[str, Any] = {
        "agents": {"coder": {"model": "scripted/any", "instructions": "Code."}},
        "machine": {
            "initial": "implementing",
            "states": {
                "implementing": continued(IMPLEMENT, "fixing"),
                "fixing": continued("Fix the handover", "done"),
                "done": {"type": "final"},
            },
        },
    }
    if workspace is not None:
        spec["workspace"] = workspace
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": HANDOVER, "namespace": "default"},
        "spec": spec,
    }


async def test_a_run_that_invokes_needs_a_workspace_and_then_runs_its_turns_in_order(
    cluster: StartCluster,
) -> None:
    submit = {"toolCalls": [call("submit")]}
    world = await cluster(script({IMPLEMENT: [submit, submit]}))
    await world.apply(handover(None))

    def ready() -> dict[str, Any]:
        found = [c for c in world.run(HANDOVER).get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found else {}

    await eventually(lambda: ready().get("reason") == "Invalid", "Ready=False, Invalid")
    assert ready()["status"] == "False"
    message = ready()["message"]
    assert message.startswith("spec.workspace: missing, and the state ")
    for state in ("implementing", "fixing"):  # in the order the API server keeps
        assert f"the state {state!r} invokes the Agent 'coder'" in message
    assert names(world.k8s, AGENTTURNS) == []

    await world.apply(handover({"template": {"repos": {"target": {"url": world.origin}}}}))
    await world.run_phase(HANDOVER, "Succeeded")
    await eventually(
        lambda: world.run(HANDOVER).get("turnCount") == 2,
        "the last Turn's record",
        describe=world.describe(HANDOVER),
    )
    done = world.run(HANDOVER)
    assert (done["state"], done["observedGeneration"]) == ("done", 2)
    assert [(t["name"], t["state"], t["outcome"]) for t in done["turns"]] == [
        ("t1", "implementing", "ended"),
        ("t2", "fixing", "ended"),
    ]
    # The ordered abort: the first Turn settled at the Harness before the second was
    # admitted on the conversation.
    harness = await world.harness(f"{HANDOVER}-workspace")
    kinds = {"submission-admitted": "admitted", "submission-settled": "settled"}
    order = [
        (kinds[e["type"]], e["data"]["submissionId"])
        for e in await harness.events("coder", HANDOVER_IID)
        if e["type"] in kinds
    ]
    first, second = (t["submissions"][0]["id"] for t in done["turns"])
    assert order == [
        ("admitted", first),
        ("settled", first),
        ("admitted", second),
        ("settled", second),
    ]


async def test_a_turn_deleted_before_a_new_operator_knows_its_harness_is_still_swept(
    cluster: StartCluster,
) -> None:
    world, first = await coder_running(cluster)
    sandbox = await world.kubelet.running(f"{WORKSPACE}-kubeturn-sandbox")

    # The new operator cannot reach the Harness (frozen) when the AgentTurn is deleted.
    sandbox.process.send_signal(signal.SIGSTOP)
    try:
        await world.restart_operator()
        await world.kubectl("delete", "agentturn", first, "--wait=false")
        await asyncio.sleep(1.5)
        waiting = read(world.k8s, AGENTTURNS, first)
        assert waiting is not None, "the AgentTurn went without its sweep"
        assert waiting["metadata"]["deletionTimestamp"]
        assert "settlement" not in waiting.get("status", {})
        (request,) = await world.requests(CODER)
        assert request["closedAt"] is None  # still running on the Harness
    finally:
        sandbox.process.send_signal(signal.SIGCONT)

    await eventually(lambda: first in world.watch.deleted(), f"AgentTurn {first} to go")
    (_, last) = world.watch.of(first)[-1]
    assert last["status"]["settlement"]["outcome"] == "aborted"
    assert "message" not in last["status"]["settlement"]
    harness = await world.harness(WORKSPACE)
    (settlement,) = (await harness.history("coder", CODER_IID))["settlements"]
    assert (settlement["outcome"], settlement.get("message")) == ("aborted", None)
    await world.cut(CODER)
    failed = await world.run_phase(RUN, "Failed")
    # The resumed Run's Machine heard of the deletion before the sweep's settlement.
    assert str(failed["message"]).endswith("the AgentTurn of Turn t1 was deleted")


# ----------------------------------------------------------------------------- Run deletion


HOLD = "tests.kubeturn.dev/hold"
"""A finalizer standing for another controller's: it keeps an object being deleted."""


async def test_deleting_a_run_sweeps_its_live_turn_before_it_goes(cluster: StartCluster) -> None:
    world, first = await coder_running(cluster)
    # The Run owns its Workspace: once the Run is gone the garbage collector takes the
    # Workspace, its token Secret and its sandbox. Another controller's finalizer keeps
    # them while the Harness's record is read.
    meta = read(world.k8s, WORKSPACES, WORKSPACE)["metadata"]
    held = {"finalizers": [*meta.get("finalizers", []), HOLD]}
    held["resourceVersion"] = meta["resourceVersion"]
    patch = json.dumps({"metadata": held})
    await world.kubectl("patch", "workspace", WORKSPACE, "--type=merge", "-p", patch)

    await world.kubectl("delete", "run", RUN, "--wait=false")
    await eventually(lambda: read(world.k8s, RUNS, RUN) is None, f"Run {RUN} to go")

    assert first in world.watch.deleted()
    (_, last) = world.watch.of(first)[-1]
    assert last["status"]["settlement"]["outcome"] == "aborted"
    harness = await world.harness(WORKSPACE)
    (settlement,) = (await harness.history("coder", CODER_IID))["settlements"]
    assert (settlement["outcome"], settlement.get("message")) == ("aborted", None)
    await world.cut(CODER)
