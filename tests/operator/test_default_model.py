"""An Agent that names no model runs on the default model: the real operator (kopf, in a
thread of its own) against the API emulator, the kubelet running each sandbox Pod as a
real Harness process, and the scripted model as the providers ``scripted`` and ``own``.

Cases:
- the operator's default (the chart's ``defaultModel``, ``scripted/chart-default``): a
  Run whose Agent names no model runs to ``Succeeded``, its Turn ``ended`` by its pick,
  every model request of it for ``chart-default``; its sandbox's Harness was started with
  ``--default-model scripted/chart-default``;
- a Workspace's own ``spec.defaultModel`` (``own/workspace-default``) overrides it: the
  same Run on it succeeds, its model requests for ``workspace-default`` at ``own``; a new
  ``spec.defaultModel`` makes the idle sandbox anew (``SandboxUpdated``: defaultModel
  changed), its Harness started with the new one;
- a Workspace whose ``spec.defaultModel`` names a provider the operator does not have is
  ``Failed``, ``Ready=False``, ``Invalid``, naming ``spec.defaultModel`` and the
  providers it has; no sandbox Pod is made for it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WORKSPACES,
    call,
    events,
    eventually,
    fail_on_logged_errors,
    make_origin,
    read,
    script,
    status,
)
from tests.operator.world import OperatorWorld, operator_world

Body = dict[str, Any]
PROMPT = "Say hello and finish"
SCRIPT = script({PROMPT: [{"toolCalls": [call("finish")]}]})


def workspace(name: str, origin: str, **spec: Any) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin}}, **spec},
    }


def hello(name: str, workspace_name: str) -> Body:
    """One Agent that names no model, one state, one pick."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": workspace_name},
            "agents": {"greeter": {"instructions": "Be brief.", "workspace": "write"}},
            "machine": {
                "initial": "greeting",
                "states": {
                    "greeting": {
                        "invoke": {"agent": {"slot": "greeter", "prompt": PROMPT}},
                        "on": {"finish": {"target": "done", "description": "Said hello."}},
                    },
                    "done": {"type": "final"},
                },
            },
        },
    }


async def succeeded(world: OperatorWorld, run: str) -> Body:
    def said() -> str:
        current = status(world.k8s, RUNS, run)
        current.pop("snapshot", None)
        return json.dumps(current)

    await eventually(
        lambda: status(world.k8s, RUNS, run).get("phase") == "Succeeded",
        f"Run {run} to succeed",
        timeout=60,
        describe=said,
    )
    return status(world.k8s, RUNS, run)


async def models(world: OperatorWorld) -> list[str]:
    """The model of every request the scripted model got, in order."""
    return [r["body"]["model"] for r in await world.model_requests()]


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator whose default model is ``scripted/chart-default``, with the scripted
    model as two providers; the test fails if the operator or a Harness logged an error."""
    async with operator_world(
        k8s,
        k8s_client,
        installation,
        kubelet=kubelet,
        script=SCRIPT,
        providers="scripted:\n  baseUrl: {url}\nown:\n  baseUrl: {url}\n",
        origin=make_origin(tmp_path / "git"),
        default_model="scripted/chart-default",
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


async def test_an_agent_with_no_model_runs_on_the_operators_default(world: OperatorWorld) -> None:
    await world.create(workspace("plain", world.origin))
    await world.create(hello("hello", "plain"))
    done = await succeeded(world, "hello")
    assert [(t["agent"], t["outcome"], t["cause"]) for t in done["turns"]] == [
        ("greeter", "ended", "pick")
    ]
    assert await models(world) == ["chart-default"]
    pod = read(world.k8s, "v1/pods", "plain-kubeturn-sandbox")
    assert pod is not None
    (harness,) = (c for c in pod["spec"]["containers"] if c["name"] == "harness")
    assert harness["args"][-2:] == ["--default-model", "scripted/chart-default"]


async def test_a_workspaces_own_default_model_overrides_the_operators(world: OperatorWorld) -> None:
    await world.create(workspace("own", world.origin, defaultModel="own/workspace-default"))
    await world.create(hello("hello-own", "own"))
    done = await succeeded(world, "hello-own")
    assert [t["outcome"] for t in done["turns"]] == ["ended"]
    assert await models(world) == ["workspace-default"]

    # A new default makes the idle sandbox anew, saying what changed.
    path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces/own"
    patch = json.dumps({"spec": {"defaultModel": "own/next"}})
    headers = {"Content-Type": "application/merge-patch+json"}
    async with world.api.patch(path, data=patch, headers=headers) as answer:
        assert answer.status == 200, await answer.text()

    def harness_model() -> str | None:
        pod = read(world.k8s, "v1/pods", "own-kubeturn-sandbox") or {"spec": {"containers": []}}
        args = [c["args"] for c in pod["spec"]["containers"] if c["name"] == "harness"]
        return args[0][-1] if args else None

    await eventually(lambda: harness_model() == "own/next", "the sandbox made with own/next")
    (updated,) = events(world.k8s, "SandboxUpdated")
    assert updated["message"] == (
        "the sandbox Pod runs an older spec (defaultModel changed); making it anew"
    )


async def test_a_default_model_of_no_provider_is_refused_at_its_path(world: OperatorWorld) -> None:
    await world.create(workspace("nowhere", world.origin, defaultModel="anthropic/claude"))

    def invalid() -> Body | None:
        ready = [
            c
            for c in status(world.k8s, WORKSPACES, "nowhere").get("conditions", [])
            if c["type"] == "Ready"
        ]
        return ready[0] if ready and ready[0]["reason"] == "Invalid" else None

    ready = await eventually(invalid, "the Workspace Invalid")
    assert ready["status"] == "False"
    assert ready["message"] == (
        "spec.defaultModel: 'anthropic/claude' names the provider 'anthropic', which the "
        "operator's providers do not define (defined: own, scripted); name a model of one of "
        "them, or add the provider to the chart's providers"
    )
    assert status(world.k8s, WORKSPACES, "nowhere")["phase"] == "Failed"
    assert read(world.k8s, "v1/pods", "nowhere-kubeturn-sandbox") is None
