"""A Run delivers its work on a cluster (ADR 0063): the real operator against the API
emulator (which checks every status write against the CRD's schema), the kubelet running
the sandbox Pod as a real Harness process whose ``/work`` is a directory of this machine.

Cases (one operator, two Runs in the shared Workspace):
- ``push: false``: the coder writes a file and picks ``finish``; the ``deliver`` invoke
  commits it on ``kubeturn/<run>`` by the manifest's author, its bundle is under
  ``.deliveries``, ``onDone`` gets the commit, and ``status.deliveries`` holds exactly one
  record, not pushed; Succeeded;
- ``push: true``: the commit is made, and pushed to the slot's repository by the
  operator's pusher (a push Pod of its own, ADR 0065): the repository's ``kubeturn/<run>``
  is that commit, ``onDone`` and the one ``status.deliveries`` record say pushed, and no
  push Pod is left; Succeeded.
"""

from __future__ import annotations

import subprocess
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
    call,
    eventually,
    fail_on_logged_errors,
    script,
    status,
)
from tests.operator.shared import POD, shared_workspace
from tests.operator.world import OperatorWorld

SCRIPT = script(
    {
        f"Change it for {name}": [
            {"toolCalls": [call("write", path="CHANGE.md", content=f"{name}\n")]},
            {"toolCalls": [call("finish")]},
        ]
        for name in ("kept", "pushed")
    }
)


def run(name: str, *, push: bool) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": "shared"},
            "agents": {
                "coder": {"model": "scripted/any", "instructions": "Work.", "workspace": "write"}
            },
            "machine": {
                "initial": "working",
                "states": {
                    "working": {
                        "invoke": {"agent": {"slot": "coder", "prompt": f"Change it for {name}"}},
                        "on": {"finish": {"target": "delivering", "description": "Done."}},
                    },
                    "delivering": {
                        "invoke": {
                            "deliver": {
                                "slot": "target",
                                "message": "Change for {{ input.who }}",
                                "push": push,
                                "author": {"name": "Ada", "email": "ada@example.invalid"},
                            },
                            "onDone": {"target": "done", "assign": {"context.out": "event.output"}},
                            "onError": {"target": "failed", "assign": {"context.why": "event"}},
                        }
                    },
                    "done": {"type": "final", "output": "context.out"},
                    "failed": {"type": "final", "outcome": "failed", "output": "context.why"},
                },
            },
            "input": {"who": name},
        },
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
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, SCRIPT, tmp_path / "git"
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


def git(repository: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", f"safe.directory={repository}", "-C", str(repository), *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def ended(world: OperatorWorld, name: str) -> bool:
    return status(world.k8s, RUNS, name).get("phase") in ("Succeeded", "Failed")


async def test_a_run_commits_its_work_and_records_each_delivery_once(world: OperatorWorld) -> None:
    work = (await world.kubelet.running(POD)).work_root
    await world.create(run("kept", push=False))
    await world.create(run("pushed", push=True))
    await eventually(lambda: ended(world, "kept") and ended(world, "pushed"), "both Runs to end")

    kept = status(world.k8s, RUNS, "kept")
    tree = work / "target" / "kubeturn-kept"
    commit = git(tree, "rev-parse", "kubeturn/kept")
    assert kept["phase"] == "Succeeded", kept
    assert git(tree, "log", "-1", "--format=%an|%s") == "Ada|Change for kept"
    assert git(tree, "show", "kubeturn/kept:CHANGE.md") == "kept"
    assert kept["output"] == {  # remote: null, which the API server drops
        "commit": commit,
        "branch": "kubeturn/kept",
        "changed": True,
        "pushed": False,
    }
    (record,) = kept["deliveries"]
    assert {k: v for k, v in record.items() if k != "time"} == {
        "state": "delivering",
        "slot": "target",
        "branch": "kubeturn/kept",
        "commit": commit,
        "changed": True,
        "pushed": False,
    }
    assert (work / ".deliveries" / "kept" / "target.bundle").is_file()

    pushed = status(world.k8s, RUNS, "pushed")
    commit = git(work / "target" / "kubeturn-pushed", "rev-parse", "HEAD")
    assert pushed["phase"] == "Succeeded", pushed
    assert pushed["output"] == {
        "commit": commit,
        "branch": "kubeturn/pushed",
        "changed": True,
        "pushed": True,
        "remote": world.origin,
    }
    (record,) = pushed["deliveries"]
    assert (record["pushed"], record["commit"], record["remote"]) == (True, commit, world.origin)
    assert git(Path(world.origin.removeprefix("file:")), "rev-parse", "kubeturn/pushed") == commit
    assert git(Path(world.origin.removeprefix("file:")), "branch", "--list", "kubeturn/kept") == ""
    async with world.api.get(f"/api/v1/namespaces/{NAMESPACE}/pods") as answer:
        pods = (await answer.json())["items"]
    components = [pod["metadata"]["labels"].get("app.kubernetes.io/component") for pod in pods]
    assert "delivery" not in components
