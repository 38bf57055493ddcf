"""The sandbox Pod's builder and what its state means to its Workspace's controller
(``kubeturn.k8s.objects``, ``kubeturn.k8s.sandboxes``).

Cases:
- the sandbox Pod mounts two directories of the Workspace's one claim: ``work`` at
  /work (clones and worktrees; all the init containers see) and ``harness`` at the
  Harness's home, where its data dir is; no emptyDir, and no mount of the volume's root;
  ``restartPolicy: Always``; its name is ``sandbox_name``'s;
- ``workspace_of``: the Workspace a Run names, the one its template makes, or none;
- ``read_pod``: gone, being deleted, ended (``Failed``/``Succeeded``, with reason and
  message), starting (with containers waiting, e.g. in CrashLoopBackOff), running;
- ``backoff_s``: 10, 20, 40, … s, capped at 300;
- ``plan``: the first Pod is made at once; a running Pod is probed; an ended Pod is
  deleted, and the failure is said until a Harness is Ready; a Pod deleted is made again
  at once the first time, then only after the back-off (saying so, with when to look
  again); Ready ends the recreation, and resets the back-off only after ``STABLE_S``; a
  Pod the API refused is ``Failed`` with the refusal and retried after the back-off; a
  Workspace being deleted is ``Terminating`` and nothing is done.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.api.status import WorkspacePhase
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import objects, sandboxes
from kubeturn.k8s.sandboxes import Action, PodState, Recreation, plan, read_pod

WORKSPACE = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Workspace",
    "metadata": {"name": "shared", "namespace": "team", "uid": "ws-uid"},
}
SPEC = WorkspaceSpec.model_validate(
    {"repos": {"target": {"url": "https://example.invalid/a.git"}, "docs": {"url": "x"}}}
)


def pod_body(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "shared-kubeturn-sandbox", "uid": "pod-1"}, "status": status}


# ----------------------------------------------------------------------------- the builder


class TestSandboxPod:
    pod = objects.sandbox_pod(WORKSPACE, SPEC, image="harness:1", orchestrator_url="http://o")

    def test_one_claim_two_directories(self) -> None:
        (volume,) = [v for v in self.pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
        assert volume["persistentVolumeClaim"] == {"claimName": "shared-kubeturn-work"}
        assert not [v for v in self.pod["spec"]["volumes"] if "emptyDir" in v]
        (harness,) = self.pod["spec"]["containers"]
        claimed = {
            m["mountPath"]: m["subPath"]
            for m in harness["volumeMounts"]
            if m["name"] == volume["name"]
        }
        assert claimed == {"/work": "work", "/var/lib/kubeturn": "harness"}
        args = harness["args"]
        assert args[args.index("--data-dir") + 1] == "/var/lib/kubeturn/data"
        assert args[args.index("--work-root") + 1] == "/work"

    def test_the_clones_see_only_the_work_directory(self) -> None:
        clones = self.pod["spec"]["initContainers"]
        assert sorted(c["name"] for c in clones) == ["clone-docs", "clone-target"]
        for clone in clones:
            assert clone["volumeMounts"] == [
                {"name": "workspace", "mountPath": "/work", "subPath": "work"}
            ]

    def test_no_mount_reaches_the_harness_directory_from_work(self) -> None:
        for container in [*self.pod["spec"]["initContainers"], *self.pod["spec"]["containers"]]:
            for mount in container["volumeMounts"]:
                if mount["name"] == "workspace":
                    assert mount.get("subPath"), f"{container['name']} mounts the volume's root"
                    assert not mount["mountPath"].startswith("/work/")

    def test_name_and_restart_policy(self) -> None:
        assert self.pod["metadata"]["name"] == objects.sandbox_name("shared")
        assert self.pod["metadata"]["labels"]["kubeturn.dev/workspace"] == "shared"
        assert self.pod["spec"]["restartPolicy"] == "Always"


@pytest.mark.parametrize(
    ("workspace", "expected"),
    [
        ({"name": "shared"}, "shared"),
        ({"template": {"repos": {}}}, "r1-workspace"),
        (None, None),
    ],
)
def test_workspace_of(workspace: dict[str, Any] | None, expected: str | None) -> None:
    run = {"metadata": {"name": "r1"}, "spec": {"workspace": workspace}}
    assert objects.workspace_of(run) == expected


# ----------------------------------------------------------------------------- the Pod's state


class TestReadPod:
    def test_gone(self) -> None:
        assert read_pod(None) == sandboxes.Pod(PodState.MISSING, said=sandboxes.DELETED)

    def test_being_deleted(self) -> None:
        body = pod_body(phase="Running", podIP="10.0.0.9")
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        assert read_pod(body).state is PodState.TERMINATING

    def test_failed_says_why(self) -> None:
        body = pod_body(phase="Failed", reason="Evicted", message="low on memory.")
        assert read_pod(body) == sandboxes.Pod(
            PodState.ENDED, "pod-1", said="the sandbox Pod failed: Evicted: low on memory."
        )

    def test_succeeded_has_ended_too(self) -> None:
        pod = read_pod(pod_body(phase="Succeeded"))
        assert (pod.state, pod.said) == (PodState.ENDED, "the sandbox Pod exited")

    def test_starting_names_containers_waiting(self) -> None:
        body = pod_body(
            phase="Pending",
            initContainerStatuses=[
                {
                    "name": "clone-target",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                }
            ],
            containerStatuses=[
                {"name": "harness", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        )
        pod = read_pod(body)
        assert pod.state is PodState.STARTING
        assert pod.said == ("the sandbox Pod is Pending (clone-target: CrashLoopBackOff: back-off)")

    def test_running_with_an_address(self) -> None:
        assert read_pod(pod_body(phase="Running", podIP="10.0.0.9")) == sandboxes.Pod(
            PodState.RUNNING, "pod-1", "10.0.0.9"
        )
        assert read_pod(pod_body(phase="Running")).state is PodState.STARTING


def test_backoff_doubles_from_10_s_up_to_5_minutes() -> None:
    assert [sandboxes.backoff_s(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 300, 300, 300]


# ----------------------------------------------------------------------------- the plan

MISSING = read_pod(None)
RUNNING = read_pod(pod_body(phase="Running", podIP="10.0.0.9"))
EVICTED = read_pod(pod_body(phase="Failed", reason="Evicted", message="low on memory."))


def look(pod: sandboxes.Pod, memory: Recreation, now: float) -> sandboxes.Plan:
    """Plan, and do what the controller would about the memory."""
    decided = plan(pod, memory, now=now, deleting=False)
    if decided.action is Action.CREATE:
        memory.making(now)
    return decided


class TestPlan:
    def test_the_first_pod_is_made_at_once(self) -> None:
        decided = look(MISSING, Recreation(), 0.0)
        assert (decided.action, decided.phase, decided.reason) == (
            Action.CREATE,
            WorkspacePhase.PENDING,
            "Starting",
        )

    def test_a_running_pod_is_probed(self) -> None:
        decided = look(RUNNING, Recreation(), 0.0)
        assert (decided.action, decided.reason, decided.message) == (Action.PROBE, "Starting", "")

    def test_an_ended_pod_is_deleted_and_why_is_said_until_ready(self) -> None:
        memory = Recreation()
        look(RUNNING, memory, 0.0)
        memory.ready(0.0)
        why = "the sandbox Pod failed: Evicted: low on memory."
        deleted = look(EVICTED, memory, 1.0)
        assert (deleted.action, deleted.reason) == (Action.DELETE, "Recreating")
        assert deleted.message == f"{why}; deleting it to make anew"
        gone = look(MISSING, memory, 2.0)
        assert (gone.action, gone.message) == (Action.CREATE, f"{why}; making a new one")
        starting = look(read_pod(pod_body(phase="Pending")), memory, 3.0)
        assert starting.message == f"{why}; the sandbox Pod is Pending"
        probed = look(RUNNING, memory, 4.0)
        assert (probed.reason, probed.message) == ("Recreating", why)
        memory.ready(5.0)
        assert look(RUNNING, memory, 6.0).reason == "Starting"

    def test_a_deleted_pod_is_made_again_at_once_then_after_the_backoff(self) -> None:
        memory = Recreation()
        look(RUNNING, memory, 0.0)
        first = look(MISSING, memory, 100.0)
        assert (first.action, first.reason) == (Action.CREATE, "Recreating")
        assert first.message == "the sandbox Pod was deleted; making a new one"
        waiting = look(MISSING, memory, 104.0)
        assert (waiting.action, waiting.wait_s) == (Action.NOTHING, 6.0)
        assert waiting.message == (
            "the sandbox Pod was deleted; a new one is made after a back-off of 10 s"
        )
        assert look(MISSING, memory, 110.0).action is Action.CREATE
        assert look(MISSING, memory, 129.0).wait_s == 1.0  # 20 s after the second

    def test_ready_resets_the_backoff_only_once_stable(self) -> None:
        memory = Recreation()
        look(RUNNING, memory, 0.0)
        look(MISSING, memory, 0.0)
        look(MISSING, memory, 10.0)  # the second: the next one 20 s later
        memory.ready(12.0)
        assert look(MISSING, memory, 13.0).wait_s == 17.0  # Ready for a moment: no reset
        memory.ready(12.0 + sandboxes.STABLE_S)
        later = 30.0 + sandboxes.STABLE_S
        assert look(MISSING, memory, later).action is Action.CREATE
        assert look(MISSING, memory, later + 1).wait_s == 9.0  # the first again: 10 s

    def test_a_refused_pod_fails_the_workspace_and_is_retried_after_the_backoff(self) -> None:
        memory = Recreation()
        look(MISSING, memory, 0.0)
        memory.refused("the API refused the sandbox: HTTP 403 Forbidden")
        again = look(MISSING, memory, 1.0)
        assert (again.action, again.phase, again.reason) == (
            Action.CREATE,
            WorkspacePhase.FAILED,
            "Failed",
        )
        memory.refused("the API refused the sandbox: HTTP 403 Forbidden")
        waiting = look(MISSING, memory, 2.0)
        assert (waiting.action, waiting.phase, waiting.wait_s) == (
            Action.NOTHING,
            WorkspacePhase.FAILED,
            9.0,
        )
        assert waiting.message == (
            "the API refused the sandbox: HTTP 403 Forbidden; trying again after a back-off of 10 s"
        )

    def test_a_workspace_being_deleted_is_left_alone(self) -> None:
        decided = plan(MISSING, Recreation(seen=True), now=0.0, deleting=True)
        assert (decided.action, decided.phase, decided.reason) == (
            Action.NOTHING,
            WorkspacePhase.TERMINATING,
            "Terminating",
        )
