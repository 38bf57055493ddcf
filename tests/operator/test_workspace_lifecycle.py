"""A Workspace outlives its sandbox Pod: the real operator (kopf, in a thread of its own)
against the API emulator, the kubelet running each sandbox Pod as a real Harness process.

Cases:
- a Ready Workspace reports its clones from the Harness (``status.repos``: path and
  commit; ``repoCount``) and counts the Runs that name it (``runCount``) and the
  unfinished ones (``activeRunCount``), each Run its own worktrees
  (``Run.status.worktrees``: path and branch); a Run that finishes is no longer counted
  active, and one that is deleted no longer counted (the Workspace looking every second);
  a ``worktrees`` key an older operator left in its status is removed; its status is the
  same bytes with 3 Runs and with 12 sharing it but the counts' digits;
- the sandbox Pod deleted while the Workspace is idle is made again: the Workspace goes
  ``Pending`` (``Ready=False``, ``Recreating``) and then ``Ready`` at the new Pod's
  endpoint; the conversation logged before is in the new Harness's history (its data
  dir is on the Workspace's volume); a Turn admitted after that runs on the new Harness;
  a ``SandboxRecreated`` Event on the Workspace says why;
- a sandbox Pod that ended ``Failed`` (evicted) is deleted and made again; until the new
  one is Ready the condition keeps the eviction's message; a ``SandboxEnded`` Warning and
  a ``SandboxRecreated`` Event say so;
- a Workspace whose ``spec.env`` and ``spec.storage`` change while its Run waits (its
  Turn swept, none running) makes its sandbox anew (ADR 0032): the new Pod carries the
  new env, and so does its new Harness process; the Workspace said ``SandboxCurrent=False``
  (``SpecChanged``) on the way, and is ``Ready`` and ``SandboxCurrent`` again; one
  ``SandboxUpdated`` Event names ``env``, no ``SandboxRecreated``; the conversation is in
  the new Harness's history and the Run goes on there; the providers ConfigMap and the
  NetworkPolicy, changed by hand meanwhile, are put back; the volume's claim is left as
  it was and ``VolumeCurrent=False`` (``StorageChanged``) says so;
- with a Turn running (its model request held), a changed ``spec.env`` leaves the Pod
  serving: ``SandboxCurrent=False`` names the running AgentTurn, ``Ready`` stays True,
  the Turn runs on; once a signal sweeps it (``aborted``, not cut by the roll) the Pod is
  made anew;
- the tokens rotated (ADR 0038, 0040: a new ``kubeturn.dev/rotate-tokens`` on the
  Workspace) while a Turn runs (its model request held), in both RBAC shapes of the
  chart: within seconds, well before the Workspace's next look, the old Orchestrator
  token is answered 401; the token Secret is made anew, carrying the rotation; the
  sandbox is made anew at once with new tokens (a ``SandboxUpdated`` Event names them),
  cutting the Turn (``failed``, the Harness restarted); the new Harness refuses the old
  Harness token and takes the new one, the Orchestrator takes the new token only, and a
  Turn then runs on the new sandbox;
- the token Secret deleted by hand (the operator watches no Secret): at the Workspace's
  next look, within ``READY_PROBE_S``, it is made anew with new tokens, the old
  Orchestrator token is refused and the sandbox is made anew;
- the Workspace deleted, its token Secret held by another controller's finalizer, and
  made again under its name: its token is forgotten with it (401); the garbage collector
  takes its Pod (once its Harness stopped) and its other objects; the one made again
  waits, ``Pending``, ``EarlierObjectsGoing``, naming the Secret, and makes no Pod
  until that Secret is gone, then makes its own Secret (owned by it) with new tokens
  rather than taking the old one's, makes its sandbox anew, refuses the old token, and
  a Turn runs on it.

Each scenario's Workspace is a named one that its Runs share. The emulator has no
applies the CRDs' schemas and rules, with no admission plugins; its lifecycle rules
are :mod:`lifecycle`'s, the kubelet's are in :mod:`kubelet`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.k8s import objects, workspaces
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import IN_BOTH_SHAPES, Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WORKSPACES,
    events,
    eventually,
    fail_on_logged_errors,
    harness_token,
    model_requests,
    orchestrator_token,
    read,
    status,
)
from tests.operator.shared import (
    FIRST,
    LONG,
    POD,
    SCRIPT,
    SECOND,
    WORKSPACE,
    coder,
    run,
    shared_workspace,
    until_waiting,
    workspace,
)
from tests.operator.world import OperatorWorld

MARK = "SANDBOX_MARK"
"""A variable of the Workspace's ``spec.env`` that a test changes."""

Body = dict[str, Any]


def long_run(name: str) -> Body:
    """A Run whose coder's model request is held until a signal ``stop`` sweeps its Turn."""
    body = run(FIRST)
    body["metadata"]["name"] = name
    body["spec"]["machine"] = {
        "initial": "working",
        "states": {
            "working": {
                "invoke": {"agent": {"slot": "coder", "prompt": LONG}},
                "on": {"stop": {"target": "done", "description": "Stop working."}},
            },
            "done": {"type": "final"},
        },
    }
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
    """The operator on the scripted model, the shared Workspace Ready, its versions
    watched; the test fails if the operator or a Harness logged an error."""
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, SCRIPT, tmp_path / "git", watch_workspaces=True
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


def head(origin: str) -> str:
    bare = origin.removeprefix("file://")
    answer = subprocess.run(
        ["git", "-C", bare, "rev-parse", "main"], check=True, capture_output=True, text=True
    )
    return answer.stdout.strip()


# ----------------------------------------------------------------------------- status


@pytest.fixture
def looks_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ready Workspace looks every second rather than every ``READY_PROBE_S``: its counts
    of Runs are written at its looks."""
    monkeypatch.setattr(workspaces, "READY_PROBE_S", 1.0)


def counts(world: OperatorWorld) -> tuple[int, int]:
    """The Workspace's (``runCount``, ``activeRunCount``)."""
    said = world.workspace_status()
    return said.get("runCount", 0), said.get("activeRunCount", 0)


def worktree(work: Path, name: str) -> Body:
    """Run ``name``'s worktrees as its status reports them (``work`` stands for /work)."""
    return {
        "target": {"path": str(work / "target" / f"kubeturn-{name}"), "branch": f"kubeturn/{name}"}
    }


def waiting_run(name: str) -> Body:
    """A Run in the shared Workspace that asks no Agent: it waits for ``approve``."""
    body = run(FIRST)
    body["metadata"]["name"] = name
    body["spec"]["machine"] = {
        "initial": "waiting",
        "states": {"waiting": {"on": {"approve": "done"}}, "done": {"type": "final"}},
    }
    return body


def size_but_counts(world: OperatorWorld) -> int:
    """The bytes of the Workspace's status as JSON, but the digits of its two counts."""
    said = world.workspace_status()
    digits = len(str(said["runCount"])) + len(str(said["activeRunCount"]))
    return len(json.dumps(said, separators=(",", ":"))) - digits


async def test_the_workspace_reports_its_clones_and_counts_its_runs(
    looks_often: None, world: OperatorWorld
) -> None:
    # Paths are the Harness's: the kubelet's directory stands for /work.
    work = (await world.kubelet.running(POD)).work_root
    ready = world.workspace_status()
    assert ready["repos"] == {
        "target": {"path": str(work / ".repos" / "target"), "commit": head(world.origin)}
    }
    assert ready["repoCount"] == 1
    assert counts(world) == (0, 0)
    assert "worktrees" not in ready

    # A status an older operator wrote, with a worktrees entry per Run: the key goes.
    stored = read(world.k8s, WORKSPACES, WORKSPACE)
    assert stored is not None
    older = {"old-run": {"target": {"path": "/work/target/kubeturn-old-run", "branch": "b"}}}
    world.k8s.store_undecoded(
        WORKSPACES, {**stored, "status": {**stored["status"], "worktrees": older}}
    )
    assert world.workspace_status()["worktrees"] == older
    await world.until(lambda: "worktrees" not in world.workspace_status(), "the older key to go")

    for name in (FIRST, SECOND):
        await world.create(run(name))
        await until_waiting(world, name)
    for name in (FIRST, SECOND):
        assert status(world.k8s, RUNS, name)["worktrees"] == worktree(work, name)
    await world.until(lambda: counts(world) == (2, 2), "both Runs counted")
    assert (work / "target" / f"kubeturn-{FIRST}" / "README.md").is_file()
    assert "worktrees" not in world.workspace_status()

    # A Run that finishes is not active; one that is deleted is not counted.
    await world.signal(FIRST, "approve")
    await world.until(lambda: counts(world) == (2, 1), f"{FIRST} no longer active")
    assert status(world.k8s, RUNS, FIRST)["phase"] == "Succeeded"
    assert status(world.k8s, RUNS, FIRST)["worktrees"] == worktree(work, FIRST)
    await world.delete(f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/{SECOND}")
    await world.until(lambda: counts(world) == (1, 0), f"{SECOND} no longer counted")
    await world.until(lambda: read(world.k8s, RUNS, SECOND) is None, f"{SECOND} to go")
    assert world.workspace_status()["phase"] == "Ready"

    # 3 Runs sharing it, then 12 (and FIRST, finished): the same bytes but the counts'.
    sizes: dict[int, int] = {}
    made = 0
    for total in (3, 12):
        while made < total:
            made += 1
            await world.create(waiting_run(f"run-{made}"))
        for n in range(1, total + 1):
            name = f"run-{n}"
            await eventually(
                lambda name=name: status(world.k8s, RUNS, name).get("worktrees"),
                f"{name}'s worktrees",
            )
            assert status(world.k8s, RUNS, name)["worktrees"] == worktree(work, name)
        await world.until(
            lambda total=total: counts(world) == (total + 1, total), f"{total} Runs counted"
        )
        sizes[total] = size_but_counts(world)
    assert sizes[12] == sizes[3], sizes


# ----------------------------------------------------------------------------- recreation


async def test_a_deleted_sandbox_pod_is_made_again_with_its_conversations(
    world: OperatorWorld,
) -> None:
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)
    before = await world.harness()
    logged = await before.history("coder", coder(FIRST))
    assert [s["outcome"] for s in logged["settlements"]] == ["ended"]
    old = world.workspace_status()["endpoint"]
    assert old == before.url
    seen = len(world.versions)

    await world.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}")
    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old
        ),
        "the Workspace Ready at a new endpoint",
    )
    after = await world.harness()
    assert [s.url for s in world.kubelet.started] == [old, after.url]
    assert world.workspace_status()["endpoint"] == after.url
    # On the way: Pending, not Ready, saying the sandbox is being made again.
    between = [v["status"] for v in world.versions[seen:]]
    pending = [s for s in between if s.get("phase") == "Pending"]
    assert pending, f"the Workspace was never Pending: {between}"
    (condition,) = [c for c in pending[0]["conditions"] if c["type"] == "Ready"]
    assert (condition["status"], condition["reason"]) == ("False", "Recreating")
    assert condition["message"].startswith("the sandbox Pod was deleted")
    assert all(s.get("endpoint") is None for s in pending)
    (recreated,) = events(world.k8s, "SandboxRecreated")
    assert recreated["involvedObject"]["kind"] == "Workspace"
    assert recreated["message"].startswith("the sandbox Pod was deleted")

    # The conversation logged before the Pod went is in the new Harness's history.
    assert await after.history("coder", coder(FIRST)) == logged

    # A Turn admitted now runs on the new Harness.
    await world.create(run(SECOND))
    await until_waiting(world, SECOND)
    second = await after.history("coder", coder(SECOND))
    assert [s["outcome"] for s in second["settlements"]] == ["ended"]
    for name in (FIRST, SECOND):
        assert status(world.k8s, RUNS, name)["worktrees"]["target"]["branch"] == f"kubeturn/{name}"
    await world.signal(FIRST, "approve")
    await world.until(
        lambda: status(world.k8s, RUNS, FIRST).get("phase") == "Succeeded", f"{FIRST} to end"
    )


async def test_an_evicted_sandbox_pod_is_made_again_keeping_why(world: OperatorWorld) -> None:
    old = world.workspace_status()["endpoint"]
    seen = len(world.versions)
    evicted = {
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: ephemeral-storage.",
        }
    }
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{POD}/status"
    headers = {"Content-Type": "application/merge-patch+json"}
    async with world.api.patch(path, data=json.dumps(evicted), headers=headers) as answer:
        assert answer.status == 200, await answer.text()

    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old
        ),
        "the Workspace Ready at a new endpoint",
    )
    assert len(world.kubelet.started) == 2
    said = [
        c["message"]
        for v in world.versions[seen:]
        for c in v["status"].get("conditions", [])
        if c["type"] == "Ready" and c["reason"] == "Recreating"
    ]
    assert said, "the Workspace never said it was making the sandbox again"
    why = "the sandbox Pod failed: Evicted: The node was low on resource: ephemeral-storage."
    assert all(message.startswith(why) for message in said), said
    assert world.ready()["reason"] == "HarnessReady"
    (ended,) = events(world.k8s, "SandboxEnded")
    assert (ended["type"], ended["message"]) == ("Warning", why)
    (recreated,) = events(world.k8s, "SandboxRecreated")
    assert recreated["message"].startswith(why)


# ----------------------------------------------------------------------------- a changed spec

WORKSPACE_PATH = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces/{WORKSPACE}"


CHILDREN = (
    ("v1/configmaps", f"{WORKSPACE}-kubeturn-providers"),
    ("networking.k8s.io/v1/networkpolicies", POD),
    ("v1/persistentvolumeclaims", f"{WORKSPACE}-kubeturn-work"),
)
"""The providers ConfigMap, the NetworkPolicy and the volume's claim."""


def stored(k8s: emulator.KubernetesApi, resource: str, name: str) -> Body:
    found = read(k8s, resource, name)
    assert found is not None, f"no {resource} {name}"
    return found


def harness_env(sandbox: kubelet_.Sandbox) -> dict[str, str]:
    """The environment the sandbox's Harness process runs with (Linux's /proc)."""
    raw = Path(f"/proc/{sandbox.process.pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def pod_env(k8s: emulator.KubernetesApi) -> dict[str, Any]:
    (harness,) = [
        c for c in stored(k8s, "v1/pods", POD)["spec"]["containers"] if c["name"] == "harness"
    ]
    return {variable["name"]: variable.get("value") for variable in harness["env"]}


async def test_a_changed_spec_makes_an_idle_sandbox_anew(world: OperatorWorld) -> None:
    assert world.condition("SandboxCurrent")["status"] == "True"
    assert world.condition("VolumeCurrent")["status"] == "True"
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)
    before = await world.harness()
    logged = await before.history("coder", coder(FIRST))
    old = world.workspace_status()["endpoint"]
    assert MARK not in harness_env(await world.kubelet.running(POD))
    seen = len(world.versions)
    providers, policy, claim = (stored(world.k8s, *child) for child in CHILDREN)
    # Changed by hand: brought back when the Workspace is looked at anew.
    await world.patch(
        f"/api/v1/namespaces/{NAMESPACE}/configmaps/{WORKSPACE}-kubeturn-providers",
        {"data": {"providers.yaml": "{}\n"}},
    )
    await world.patch(
        f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies/{POD}",
        {"spec": {"ingress": []}},
    )

    await world.patch(
        WORKSPACE_PATH,
        {"spec": {"env": [{"name": MARK, "value": "second"}], "storage": {"size": "20Gi"}}},
    )
    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old
            and world.condition("SandboxCurrent").get("status") == "True"
        ),
        "the Workspace Ready at a new endpoint, its sandbox current",
    )
    after = await world.kubelet.running(POD)
    assert [s.url for s in world.kubelet.started] == [old, after.url]
    assert pod_env(world.k8s)[MARK] == "second"
    assert harness_env(after)[MARK] == "second"

    # On the way: the old Pod said to be of an older spec, the Workspace Ready no more.
    said = [
        c
        for v in world.versions[seen:]
        for c in v["status"].get("conditions", [])
        if c["type"] == "SandboxCurrent" and c["status"] == "False"
    ]
    assert said, "the Workspace never said its sandbox ran an older spec"
    assert all(c["reason"] == "SpecChanged" for c in said), said
    assert "env changed" in said[0]["message"]
    (updated,) = events(world.k8s, "SandboxUpdated")
    assert updated["involvedObject"]["kind"] == "Workspace"
    assert "(env changed)" in updated["message"]
    assert events(world.k8s, "SandboxRecreated") == []

    # The other objects: put back as the operator makes them; the volume left as it was.
    now = [stored(world.k8s, *child) for child in CHILDREN]
    assert [now[0]["data"], now[1]["spec"], now[2]["spec"]] == [
        providers["data"],
        policy["spec"],
        claim["spec"],
    ]
    volume = world.condition("VolumeCurrent")
    assert (volume["status"], volume["reason"]) == ("False", "StorageChanged")
    assert "size 20Gi (the claim has 10Gi)" in volume["message"]

    # The conversation is in the new Harness's history, and the Run goes on there.
    reader = await world.harness()
    assert await reader.history("coder", coder(FIRST)) == logged
    await world.signal(FIRST, "approve")
    await world.until(
        lambda: status(world.k8s, RUNS, FIRST).get("phase") == "Succeeded", f"{FIRST} to end"
    )


async def test_a_changed_spec_waits_for_the_running_turn(world: OperatorWorld) -> None:
    name = "long"
    await world.create(long_run(name))

    async def held() -> bool:
        return any(r["held"] for r in await model_requests(world.session, world.model, LONG))

    await world.until(held, "the Turn's model request held")
    turn = f"{name}-t1"
    await world.until(
        lambda: status(world.k8s, AGENTTURNS, turn).get("phase") == "Running",
        "the AgentTurn Running",
    )
    old = await world.kubelet.running(POD)

    await world.patch(WORKSPACE_PATH, {"spec": {"env": [{"name": MARK, "value": "second"}]}})
    waiting = await world.until(
        lambda: (
            world.workspace_status().get("observedGeneration") == 2
            and world.condition("SandboxCurrent").get("reason") == "SpecChanged"
            and world.condition("SandboxCurrent")
        ),
        "the Workspace to say its sandbox runs an older spec",
    )
    assert waiting["status"] == "False"
    assert (
        f"it is made anew when no Turn runs on it (AgentTurn {turn} running)"
        in (waiting["message"])
    )
    assert world.ready()["status"] == "True"
    assert world.kubelet.started == [old]
    assert status(world.k8s, AGENTTURNS, turn)["phase"] == "Running"
    assert MARK not in pod_env(world.k8s)

    await world.signal(name, "stop")
    await world.until(
        lambda: status(world.k8s, RUNS, name).get("phase") == "Succeeded", f"{name} to end"
    )
    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old.url
            and world.condition("SandboxCurrent").get("status") == "True"
        ),
        "the sandbox made anew once the Turn was swept",
    )
    assert len(world.kubelet.started) == 2
    assert pod_env(world.k8s)[MARK] == "second"
    (record,) = status(world.k8s, RUNS, name)["turns"]
    assert (record["outcome"], record.get("cause")) == ("aborted", None)


# ----------------------------------------------------------------------------- tokens

RESTARTED = "the Harness restarted while this Submission ran"
SECRET_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/{WORKSPACE}-kubeturn-tokens"
REVOKED_WITHIN_S = 5.0
"""How soon rotated tokens are refused: the Workspace's event, not its next look at a
Ready sandbox (20 s away), makes them anew."""
LOOKED_WITHIN_S = workspaces.READY_PROBE_S + 10
"""How soon a token Secret deleted by hand is made anew: at the next look of a Ready
Workspace, with room for a loaded machine."""


def cut_run(name: str) -> Body:
    """A Run whose coder's model request is held; the Turn's failure ends the Run."""
    body = long_run(name)
    body["spec"]["machine"]["states"]["working"]["invoke"]["onError"] = "done"
    return body


@IN_BOTH_SHAPES
async def test_rotating_the_tokens_revokes_the_old_ones_at_once(world: OperatorWorld) -> None:
    name = "long"
    await world.create(cut_run(name))

    async def held() -> bool:
        return any(r["held"] for r in await model_requests(world.session, world.model, LONG))

    await world.until(held, "the Turn's model request held")
    turn = f"{name}-t1"
    await world.until(
        lambda: status(world.k8s, AGENTTURNS, turn).get("phase") == "Running",
        "the AgentTurn Running",
    )
    iid = stored(world.k8s, AGENTTURNS, turn)["spec"]["instanceId"]
    old = (orchestrator_token(world.k8s, WORKSPACE), harness_token(world.k8s, WORKSPACE))
    old_sandbox = await world.kubelet.running(POD)
    assert await world.surface(iid, old[0]) == 200

    # The response to a leak: kubectl annotate workspace shared kubeturn.dev/rotate-tokens=1.
    await world.patch(WORKSPACE_PATH, {"metadata": {"annotations": {objects.ROTATE_TOKENS: "1"}}})

    async def revoked() -> bool:
        return await world.surface(iid, old[0]) == 401

    await eventually(revoked, "the old Orchestrator token refused", timeout=REVOKED_WITHIN_S)

    # The sandbox is made anew at once with new tokens, cutting the Turn that ran.
    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old_sandbox.url
        ),
        "the Workspace Ready at a new sandbox with the new tokens",
    )
    new = (orchestrator_token(world.k8s, WORKSPACE), harness_token(world.k8s, WORKSPACE))
    assert set(new).isdisjoint(old)
    assert objects.rotation(stored(world.k8s, "v1/secrets", f"{WORKSPACE}-kubeturn-tokens")) == "1"
    (updated,) = events(world.k8s, "SandboxUpdated")
    assert "tokens changed" in updated["message"]
    await world.until(
        lambda: (
            status(world.k8s, RUNS, name).get("phase") == "Succeeded"
            and status(world.k8s, RUNS, name).get("turnCount") == 1
        ),
        f"{name} to end, its Turn recorded",
    )
    (record,) = status(world.k8s, RUNS, name)["turns"]
    assert (record["outcome"], record["message"]) == ("failed", RESTARTED)

    # Both ways, only the new tokens are taken.
    assert await world.surface(iid, old[0]) == 401
    assert await world.surface(iid, new[0]) == 404  # known, and the Turn is over
    sandbox = await world.kubelet.running(POD)
    assert [await world.readyz(sandbox.url, token) for token in (old[1], new[1])] == [401, 200]
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)


async def test_a_token_secret_deleted_by_hand_is_made_anew_at_the_next_look(
    world: OperatorWorld,
) -> None:
    old = orchestrator_token(world.k8s, WORKSPACE)
    old_endpoint = world.workspace_status()["endpoint"]
    await world.delete(SECRET_PATH)

    async def refused() -> bool:
        return await world.surface("any", old) == 401

    await eventually(refused, "the old Orchestrator token refused", timeout=LOOKED_WITHIN_S)
    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old_endpoint
        ),
        "the Workspace Ready at a new sandbox with the new tokens",
    )
    new = orchestrator_token(world.k8s, WORKSPACE)
    assert new != old
    assert await world.surface("any", new) == 404
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)


HOLD = "tests.kubeturn.dev/hold"
"""A finalizer standing for another controller's: it keeps an object being deleted."""


async def test_a_workspace_made_again_under_its_name_takes_none_of_the_old_tokens(
    world: OperatorWorld,
) -> None:
    old_token = orchestrator_token(world.k8s, WORKSPACE)
    old_uid = stored(world.k8s, WORKSPACES, WORKSPACE)["metadata"]["uid"]
    old_endpoint = world.workspace_status()["endpoint"]
    # Another controller's finalizer holds the token Secret: it outlives its Workspace.
    await world.patch(SECRET_PATH, {"metadata": {"finalizers": [HOLD]}})
    await world.delete(WORKSPACE_PATH)
    await world.until(lambda: read(world.k8s, WORKSPACES, WORKSPACE) is None, "the Workspace gone")
    assert await world.surface("any", old_token) == 401  # forgotten with its Workspace
    # The garbage collector takes what it owned: the Pod once its Harness stopped.
    await world.until(
        lambda: all(read(world.k8s, *child) is None for child in (("v1/pods", POD), *CHILDREN)),
        "the old Workspace's Pod and objects collected",
    )
    held = stored(world.k8s, "v1/secrets", f"{WORKSPACE}-kubeturn-tokens")
    assert held["metadata"]["deletionTimestamp"]
    assert objects_owner(held) == old_uid

    # Made again: it waits for the earlier Secret to go rather than take its tokens.
    await world.create(workspace(world.origin))
    await world.until(
        lambda: world.ready().get("reason") == "EarlierObjectsGoing", "the Workspace waiting"
    )
    waiting = world.ready()
    assert waiting["status"] == "False"
    assert waiting["message"] == (
        f"the Secret {WORKSPACE}-kubeturn-tokens of an earlier Workspace of this name is "
        "being deleted; this Workspace's is made once it is gone"
    )
    assert world.workspace_status()["phase"] == "Pending"
    assert read(world.k8s, "v1/pods", POD) is None
    await world.patch(SECRET_PATH, {"metadata": {"finalizers": None}})

    await world.until(
        lambda: (
            world.workspace_status().get("phase") == "Ready"
            and world.workspace_status()["endpoint"] != old_endpoint
        ),
        "the Workspace made again Ready at a new sandbox",
    )
    new_uid = stored(world.k8s, WORKSPACES, WORKSPACE)["metadata"]["uid"]
    secret = stored(world.k8s, "v1/secrets", f"{WORKSPACE}-kubeturn-tokens")
    assert objects_owner(secret) == new_uid != old_uid
    new_token = orchestrator_token(world.k8s, WORKSPACE)
    assert new_token != old_token
    assert await world.surface("any", old_token) == 401
    assert await world.surface("any", new_token) == 404
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)


def objects_owner(body: Body) -> str:
    """The uid of the object's one owner."""
    (owner,) = body["metadata"]["ownerReferences"]
    return str(owner["uid"])
