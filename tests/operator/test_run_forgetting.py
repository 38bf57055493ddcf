"""A deleted Run leaves nothing behind in a shared Workspace (ADR 0030): the real operator
(kopf, in a thread of its own) against the API emulator, the kubelet running the sandbox
Pod as a real Harness process whose ``/work`` is a directory of this machine.

Cases:
- deleting a finished Run in the shared Workspace removes its worktree from the sandbox
  (the directory is gone, its branch stays in the clone) and its
  conversation from the Harness (its history answers 404), while another Run's worktree
  and conversation stay, and its ``status.worktrees`` still reports that worktree (the
  Workspace reports no Run's entry); in both of the chart's RBAC shapes;
- a Run whose Workspace was deleted first goes at once, without waiting for a Harness
  (the garbage collector took the Workspace's Pod and claims, and its volume with them);
- a Run that fanned out with ``worktree: per-child`` (ADR 0113): each child's command ran
  in a worktree of its own, on its own branch, and the Run's output names the branches;
  deleting the Run removes the children's worktrees with its own, their branches kept
  in the clone.

The emulator applies the CRDs' schemas and rules as the API server does, with no
admission plugins; its lifecycle rules are :mod:`lifecycle`'s, the kubelet's are in
:mod:`kubelet`.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest

from kubeturn.k8s import harnesses
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import IN_BOTH_SHAPES, Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WAIT_S,
    WORKSPACES,
    eventually,
    fail_on_logged_errors,
    read,
    status,
)
from tests.operator.shared import (
    FIRST,
    POD,
    SCRIPT,
    SECOND,
    WORKSPACE,
    coder,
    run,
    shared_workspace,
    until_waiting,
)
from tests.operator.world import OperatorWorld

RUN_PATH = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/{{name}}"


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator on the scripted model, the shared Workspace Ready; the test fails if
    the operator or a Harness logged an error."""
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, SCRIPT, tmp_path / "git"
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


def git(clone: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The clone belongs to the tools' user: git refuses another owner's repository
    # unless told it is safe.
    return subprocess.run(
        ["git", "-c", f"safe.directory={clone}", "-C", str(clone), *args],
        capture_output=True,
        text=True,
    )


async def history_status(world: OperatorWorld, instance_id: str) -> int:
    reader = await world.harness()
    url = f"{reader.url}/agents/coder/{quote(instance_id, safe='')}?view=history"
    headers = {"Authorization": f"Bearer {reader.token}"}
    async with world.session.get(url, headers=headers) as answer:
        return answer.status


async def gone(world: OperatorWorld, name: str) -> None:
    """Delete Run ``name`` and wait until it is gone (``WAIT_S``)."""
    await world.delete(RUN_PATH.format(name=name))
    await eventually(lambda: read(world.k8s, RUNS, name) is None, f"Run {name} to go")


@IN_BOTH_SHAPES
async def test_a_deleted_run_leaves_no_worktree_or_conversation_in_the_shared_workspace(
    world: OperatorWorld,
) -> None:
    work = (await world.kubelet.running(POD)).work_root
    clone = work / ".repos" / "target"
    trees = {name: work / "target" / f"kubeturn-{name}" for name in (FIRST, SECOND)}
    for name in (FIRST, SECOND):
        await world.create(run(name))
        await until_waiting(world, name)
    await world.signal(FIRST, "approve")
    await eventually(
        lambda: status(world.k8s, RUNS, FIRST).get("phase") == "Succeeded", f"{FIRST} to end"
    )
    assert all((tree / "README.md").is_file() for tree in trees.values())
    assert await history_status(world, coder(FIRST)) == 200

    await gone(world, FIRST)

    assert not trees[FIRST].exists()
    assert git(trees[SECOND], "rev-parse", "--abbrev-ref", "HEAD").stdout == f"kubeturn/{SECOND}\n"
    assert git(clone, "rev-parse", "--verify", "--quiet", f"kubeturn/{FIRST}").returncode == 0
    assert await history_status(world, coder(FIRST)) == 404
    assert (trees[SECOND] / "README.md").is_file()
    assert await history_status(world, coder(SECOND)) == 200
    assert status(world.k8s, RUNS, SECOND)["worktrees"] == {
        "target": {"path": str(trees[SECOND]), "branch": f"kubeturn/{SECOND}"}
    }
    assert "worktrees" not in world.workspace_status()


def fanned(name: str) -> dict[str, object]:
    """A Run in the shared Workspace that fans out over two packages, each child in
    worktrees of its own writing one file, then waits for ``approve``."""
    child = {
        "initial": "work",
        "states": {
            "work": {
                "invoke": {
                    "exec": {"command": "echo {{ input }} > {{ input }}.txt"},
                    "onDone": "done",
                }
            },
            "done": {"type": "final", "output": "workspace.branch"},
        },
    }
    body = run(name)
    body["spec"]["machine"] = {  # type: ignore[index]
        "initial": "fix",
        "context": {"packages": ["pkg-a", "pkg-b"]},
        "states": {
            "fix": {
                "invoke": {
                    "forEach": {
                        "items": "context.packages",
                        "worktree": "per-child",
                        "machine": child,
                    },
                    "onDone": {"target": "waiting", "assign": {"context.branches": "event.output"}},
                }
            },
            "waiting": {"on": {"approve": "done"}},
            "done": {"type": "final", "output": "context.branches"},
        },
    }
    return body


async def test_a_fanned_out_runs_children_worktrees_go_with_it(world: OperatorWorld) -> None:
    work = (await world.kubelet.running(POD)).work_root
    clone = work / ".repos" / "target"
    branches = [f"kubeturn/{FIRST}_fix=pkg-{key}" for key in "ab"]
    trees = [work / "target" / branch.replace("/", "-") for branch in branches]
    await world.create(fanned(FIRST))
    await eventually(
        lambda: status(world.k8s, RUNS, FIRST).get("state") == "waiting",
        f"Run {FIRST} to wait",
        describe=lambda: world.said(FIRST),
    )
    await world.signal(FIRST, "approve")
    await eventually(
        lambda: status(world.k8s, RUNS, FIRST).get("phase") == "Succeeded", f"{FIRST} to end"
    )
    assert status(world.k8s, RUNS, FIRST)["output"] == branches
    for key, branch, tree in zip("ab", branches, trees, strict=True):
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").stdout == f"{branch}\n"
        assert (tree / f"pkg-{key}.txt").read_text() == f"pkg-{key}\n"
    assert not list((work / "target" / f"kubeturn-{FIRST}").glob("pkg-*.txt"))

    await gone(world, FIRST)

    assert sorted((work / "target").iterdir()) == []
    for branch in (f"kubeturn/{FIRST}", *branches):
        assert git(clone, "rev-parse", "--verify", "--quiet", branch).returncode == 0, branch


async def test_a_run_whose_workspace_is_gone_goes_at_once(world: OperatorWorld) -> None:
    work = (await world.kubelet.running(POD)).work_root
    await world.create(run(FIRST))
    await until_waiting(world, FIRST)
    await world.delete(f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces/{WORKSPACE}")
    await eventually(lambda: read(world.k8s, WORKSPACES, WORKSPACE) is None, "the Workspace to go")

    await gone(world, FIRST)

    # The Run went within this test's bound, well below a wait for a Harness.
    assert WAIT_S < harnesses.WAIT_S
    await eventually(lambda: read(world.k8s, "v1/pods", POD) is None, "the sandbox collected")
    await eventually(lambda: not work.exists(), "the volume gone with its claim")
