"""Runs and Workspaces whose names, and whose slots' names, push every limit the CRDs
admit: the real operator (kopf, in a thread of its own) against the API emulator, which
refuses every object kube-apiserver would refuse (names, label values, container and
volume names, sizes), so that each object made here is one a real cluster accepts.

Cases:
- a Workspace of the longest name there is (253 characters, with dots), whose repo
  slots end in ``_``, ``.`` and ``-`` and reach 63 characters, and a Run of that length
  that makes its own Workspace from a template: the operator makes every object of both
  (token Secret, providers ConfigMap, claims, sandbox Pod with a clone container and a
  credentials volume per slot, NetworkPolicy), their names shortened with a digest and
  their label values as ``kubeturn.dev/workspace`` and ``kubeturn.dev/run`` allow; the
  Pod's label selects it by its Workspace, as its NetworkPolicy does;
- a Run of the longest name, with dots, whose agent slots end in ``_`` and reach 63
  characters, in a shared Workspace with such slots, reaches ``Succeeded``: its two
  Turns' AgentTurns are named ``<run>-t<n>`` shortened, labelled with the shortened Run
  and slot names, each found by its label, its worktrees are on the shortened branch;
  a Run of a 201-character name with a template does too, in a Workspace of 211; deleted,
  the Runs go, their AgentTurns found by label;
- a Run whose ``spec.workspace.name`` no Workspace could have is refused up front:
  ``Ready=False``, ``Invalid``, naming ``spec.workspace.name``.

The kubelet (:mod:`kubelet`) names each container's log file after its Pod, so it runs
no Pod whose name is over 228 characters: the sandboxes that run here are of
Workspaces of 211 characters at most; those of the longest names are checked as made.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.k8s import clones, names, objects
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WORKSPACES,
    call,
    eventually,
    fail_on_logged_errors,
    make_origin,
    read,
    script,
    status,
)
from tests.operator.world import OperatorWorld, operator_world

Body = dict[str, Any]


def dotted(length: int, letter: str) -> str:
    """A valid object name of ``length`` characters: 63-character segments, with dots."""
    segments, left = [], length
    while left > 63:
        segments.append(letter * 63)
        left -= 64
    return ".".join([*segments, letter * left])


LONGEST_WORKSPACE = dotted(253, "w")
LONGEST_RUN = dotted(253, "r")
SHARED = dotted(211, "s")
"""The longest Workspace name whose sandbox Pod the kubelet can run (see above)."""
TEMPLATED = dotted(201, "t")
"""A Run whose own Workspace (``<run>-workspace``) is as long as ``SHARED``."""
REPO_SLOTS = ("Target_", "target.", "t-", "x" * 63)
CODER, REVIEWER = "Coder_", "r" * 63
PROMPTS = {CODER: "Write the code", REVIEWER: "Review the code"}
SCRIPT = script({prompt: [{"toolCalls": [call("finish")]}] for prompt in PROMPTS.values()})


def workspace_spec(origin: str) -> Body:
    return {"repos": {slot: {"url": origin} for slot in REPO_SLOTS}}


def workspace(name: str, origin: str) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": workspace_spec(origin),
    }


def cwd(slot: str) -> str:
    """A Turn's working directory: the worktree of ``slot``."""
    return f"{{{{ workspace.repos['{slot}'] }}}}"


def run(name: str, workspace: Body) -> Body:
    """A Run whose coder and then its reviewer each pick ``finish`` at once."""
    agents = {
        slot: {"model": "scripted/any", "instructions": "Work.", "workspace": "write"}
        for slot in PROMPTS
    }
    states = {
        "coding": {
            "invoke": {"agent": {"slot": CODER, "prompt": PROMPTS[CODER], "cwd": cwd("Target_")}},
            "on": {"finish": {"target": "reviewing", "description": "Done."}},
        },
        "reviewing": {
            "invoke": {
                "agent": {"slot": REVIEWER, "prompt": PROMPTS[REVIEWER], "cwd": cwd("target.")}
            },
            "on": {"finish": {"target": "done", "description": "Done."}},
        },
        "done": {"type": "final"},
    }
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": workspace,
            "agents": agents,
            "machine": {"initial": "coding", "states": states},
        },
    }


async def succeeded(world: OperatorWorld, run: str, turns: int) -> Body:
    """Run ``run`` once it is Succeeded with ``turns`` Turns recorded (a Turn is recorded
    once its sweep is back, which may be after the Run ended)."""

    def said() -> str:
        current = status(world.k8s, RUNS, run)
        current.pop("snapshot", None)
        return json.dumps(current)

    def done() -> Body | None:
        current = status(world.k8s, RUNS, run)
        ended = current.get("phase") == "Succeeded" and current.get("turnCount") == turns
        return current if ended else None

    return dict(await eventually(done, f"Run {run[:20]}... Succeeded", describe=said))


@pytest.fixture
async def operated(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator on the scripted model, as the chart installed it; the test fails if it
    logged an error."""
    async with operator_world(
        k8s, k8s_client, installation, script=SCRIPT, origin=make_origin(tmp_path / "git")
    ) as made:
        yield made
    fail_on_logged_errors(caplog, [])


async def test_the_longest_names_make_objects_a_cluster_accepts(operated: OperatorWorld) -> None:
    world = operated
    await world.create(workspace(LONGEST_WORKSPACE, world.origin))
    await world.create(run(LONGEST_RUN, {"template": workspace_spec(world.origin)}))
    owned = objects.owned_workspace_name(LONGEST_RUN)
    assert len(owned) == 253
    assert owned != f"{LONGEST_RUN}-workspace"
    for name in (LONGEST_WORKSPACE, owned):
        pod = objects.sandbox_name(name)
        await eventually(lambda pod=pod: read(world.k8s, "v1/pods", pod), f"the Pod of {name}")
        made = {
            "v1/secrets": objects.token_secret_name(name),
            "v1/configmaps": objects.providers_name(name),
            "v1/persistentvolumeclaims": objects.claim_name(name, "work"),
            "networking.k8s.io/v1/networkpolicies": pod,
        }
        for resource, child in made.items():
            assert len(child) <= 253
            assert world.stored(resource, child)["metadata"]["ownerReferences"][0]["name"] == name
        body = world.stored("v1/pods", pod)
        label = body["metadata"]["labels"]["kubeturn.dev/workspace"]
        assert label == names.label_value(name)
        assert len(label) == 63
        policy = world.stored("networking.k8s.io/v1/networkpolicies", pod)
        assert policy["spec"]["podSelector"]["matchLabels"]["kubeturn.dev/workspace"] == label
        made_clones = [c["name"] for c in body["spec"]["initContainers"]]
        assert made_clones == [clones.name(slot) for slot in REPO_SLOTS]
        assert "clone-t-" not in made_clones
    owned_body = world.stored(WORKSPACES, owned)
    assert owned_body["metadata"]["labels"]["kubeturn.dev/run"] == names.label_value(LONGEST_RUN)


async def test_runs_of_the_longest_names_succeed(
    operated: OperatorWorld, kubelet: kubelet_.Kubelet
) -> None:
    world = operated
    await world.create(workspace(SHARED, world.origin))
    await world.create(run(LONGEST_RUN, {"name": SHARED}))
    await world.create(run(TEMPLATED, {"template": workspace_spec(world.origin)}))
    for name in (LONGEST_RUN, TEMPLATED):
        done = await succeeded(world, name, turns=2)
        assert [(t["agent"], t["outcome"]) for t in done["turns"]] == [
            (CODER, "ended"),
            (REVIEWER, "ended"),
        ]
    await eventually(lambda: world.names(AGENTTURNS) == [], "every AgentTurn swept and gone")
    for number, slot in ((1, CODER), (2, REVIEWER)):
        first = world.k8s.objects[
            AGENTTURNS, NAMESPACE, objects.turn_name(LONGEST_RUN, f"t{number}")
        ].history[0]
        assert first["metadata"]["labels"]["kubeturn.dev/run"] == names.label_value(LONGEST_RUN)
        assert first["metadata"]["labels"]["kubeturn.dev/agent"] == names.label_value(slot)
    shared = world.stored(WORKSPACES, SHARED)
    assert set(shared["status"]["repos"]) == set(REPO_SLOTS)
    sandbox = await kubelet.running(objects.sandbox_name(SHARED))
    branch = names.branch(LONGEST_RUN)
    assert branch != f"kubeturn/{LONGEST_RUN}"
    for slot in REPO_SLOTS:
        worktree = sandbox.work_root / slot / branch.replace("/", "-")
        assert (worktree / "README.md").is_file(), worktree

    for name in (LONGEST_RUN, TEMPLATED):
        await world.delete(f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/{name}")
        await eventually(lambda name=name: read(world.k8s, RUNS, name) is None, "the Run to go")


async def test_a_workspace_name_no_workspace_could_have_is_refused_up_front(
    operated: OperatorWorld,
) -> None:
    world = operated
    await world.create(run("misnamed", {"name": "Shared_Space"}))

    def ready() -> Body:
        found = status(world.k8s, RUNS, "misnamed").get("conditions", [])
        return next((c for c in found if c["type"] == "Ready"), {})

    await eventually(lambda: ready().get("reason") == "Invalid", "Ready=False, Invalid")
    assert ready()["status"] == "False"
    assert ready()["message"].startswith("spec.workspace.name: an object's name has at most 253")
    assert world.names(WORKSPACES) == []
