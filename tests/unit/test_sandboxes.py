"""The sandbox Pod's builder and what its state means to its Workspace's controller
(``kubeturn.k8s.objects``, ``kubeturn.k8s.sandboxes``).

Cases:
- the sandbox Pod has two claims: the work volume's ``work`` directory at /work (clones
  and worktrees), mounted by the clone containers and the ``tools`` container only, and
  the Harness's own volume at its home (its data dir), mounted by the ``harness``
  container only; the two share only the toolbox's ``emptyDir``; the ``harness``
  container names the toolbox's socket, the ``tools`` container serves the Harness's uid
  there, as the Workspace tree's user; ``restartPolicy: Always``; its name is
  ``sandbox_name``'s;
- resources (ADR 0053): every container, the clone init containers too, has CPU and
  memory requests and limits, the operator's (``SandboxResources``, the chart's
  ``sandbox.resources``) reaching each; a Workspace's ``spec.resources`` overrides the
  tools container's key by key, and a request it raises above a default limit raises
  that limit with it;
- ``workspace_of``: the Workspace a Run names, the one its template makes, or none;
- ``read_pod``: gone, being deleted, ended (``Failed``/``Succeeded``, with reason and
  message), starting (with containers waiting, e.g. in CrashLoopBackOff, a restarting
  one by the last line it said as it ended), running;
- ``backoff_s``: 10, 20, 40, … s, capped at 300;
- ``plan``: the first Pod is made at once; a running Pod is probed; an ended Pod is
  deleted, and the failure is said until a Harness is Ready; a Pod deleted is made again
  at once the first time, then only after the back-off (saying so, with when to look
  again); Ready ends the recreation, and resets the back-off only after ``STABLE_S``; a
  Pod the API refused is ``Failed`` with the refusal and retried after the back-off; a
  Workspace being deleted is ``Terminating`` and nothing is done;
- the fingerprint (ADR 0032): the same spec gives the same hash in any process (a
  golden value) and in any order of its maps' keys; the builder annotates the Pod with
  it and ``read_pod`` reads it back; ``changed`` names the parts that differ (``env``,
  ``providers``, ``image`` of every container, ``defaultModel``, …), none for a current
  Pod, and ``unrecorded`` for a Pod that carries no fingerprint;
- the default model (ADR 0060): the Harness gets ``--default-model`` of the Workspace's
  ``spec.defaultModel``, else the operator's, else none;
- ``plan`` with a changed spec: a current Pod is ``SandboxCurrent``; an idle one is
  deleted (``ROLL``) and made anew at once, during a back-off too, taking no back-off
  step, with no ``Ready`` of its own until the new Harness answers; a busy one is probed
  and serves on, ``SandboxCurrent=False`` (``SpecChanged``) saying what it waits for;
  a busy one whose tokens changed (revoked, ADR 0038) is rolled at once all the same,
  saying what it cuts; a Workspace being deleted is not rolled;
- the Harness client (ADR 0100): ``looks_again`` only for an idle Pod of an older spec
  (not for a busy one, nor one whose tokens changed while busy); ``plan`` keeps the
  client of the Pod, address and tokens now, and retires one of another Pod, address or
  tokens, and the client of a Pod it rolls; with none held there is nothing to retire;
- ``looked``: a Harness that answers makes the Workspace ``Ready`` and a client of it,
  unless one is held or the tokens are to be read again, and ends the recreation; one
  that does not adds what it said to the plan's message, keeps the plan's wait, and one
  of other tokens has the other objects read again; a refused Pod is ``Failed`` with the
  refusal, kept for the back-off; an object in the way keeps the Workspace ``Pending``
  saying which;
- ``what_runs``: the Workspace's AgentTurns that have not settled (named, at most three)
  and the Runs running an exec on it; None when nothing runs;
- ``volume_said``: equal quantities in other units match; a changed size or class is
  ``StorageChanged``; a class the spec leaves out is not compared;
- ``covers``: maps may hold more keys (defaults), lists as many items, values equal.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from kubeturn.api.status import WorkspacePhase
from kubeturn.api.workspace import Resources, SandboxResources, Storage, WorkspaceSpec
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


def pod_body(annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "shared-kubeturn-sandbox", "uid": "pod-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "status": status}


# ----------------------------------------------------------------------------- the builder


class TestSandboxPod:
    pod = objects.sandbox_pod(
        WORKSPACE,
        SPEC,
        image="harness:1",
        orchestrator_url="http://o",
        providers_yaml="{}\n",
        harness_token_sha256="t1",
    )

    def containers(self) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in self.pod["spec"]["containers"]}

    def mounts(self, container: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {m["mountPath"]: m for m in container["volumeMounts"]}

    def test_two_claims_one_for_the_tree_one_for_the_harness(self) -> None:
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in self.pod["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        assert claims == {"workspace": "shared-kubeturn-work", "harness": "shared-kubeturn-harness"}
        harness, tools = self.containers()["harness"], self.containers()["tools"]
        assert self.mounts(harness)["/var/lib/kubeturn"] == {
            "name": "harness",
            "mountPath": "/var/lib/kubeturn",
        }
        assert self.mounts(tools)["/work"] == {
            "name": "workspace",
            "mountPath": "/work",
            "subPath": "work",
        }
        args = harness["args"]
        assert args[args.index("--data-dir") + 1] == "/var/lib/kubeturn/data"
        assert args[args.index("--work-root") + 1] == "/work"

    def test_the_harness_and_the_tools_share_only_the_toolbox_socket(self) -> None:
        harness, tools = self.containers()["harness"], self.containers()["tools"]
        shared = {m["name"] for m in harness["volumeMounts"]} & {
            m["name"] for m in tools["volumeMounts"]
        }
        assert shared == {"toolbox"}
        assert {"name": "toolbox", "emptyDir": {}} in self.pod["spec"]["volumes"]
        assert harness["args"][harness["args"].index("--toolbox") + 1] == objects.TOOLBOX_SOCKET
        assert tools["command"] == objects.TOOLBOX_COMMAND
        assert tools["args"][:4] == [
            "--socket",
            objects.TOOLBOX_SOCKET,
            "--client-uid",
            str(objects.HARNESS_UID),
        ]
        assert "env" not in tools
        assert "envFrom" not in tools
        context = tools["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (objects.TOOL_UID,) * 2
        assert self.pod["spec"]["securityContext"]["runAsUser"] == objects.HARNESS_UID
        assert "runAsUser" not in harness["securityContext"]

    def test_every_container_has_requests_and_limits(self) -> None:
        spec = self.pod["spec"]
        defaults = SandboxResources()
        for container in [*spec["initContainers"], *spec["containers"]]:
            resources = container["resources"]
            for kind in ("requests", "limits"):
                assert set(resources[kind]) == {"cpu", "memory"}, container["name"]
        assert self.containers()["harness"]["resources"] == defaults.harness.model_dump()
        assert self.containers()["tools"]["resources"] == defaults.tools.model_dump()
        for clone in spec["initContainers"]:
            assert clone["resources"] == defaults.clone.model_dump()

    def test_the_operators_resources_reach_every_container(self) -> None:
        chosen = SandboxResources(
            harness=Resources(requests={"cpu": "1"}, limits={"cpu": "3"}),
            clone=Resources(requests={"memory": "1Gi"}, limits={"memory": "5Gi"}),
        )
        pod = sandbox(SPEC, resources=chosen)
        containers = {c["name"]: c for c in pod["spec"]["containers"]}
        assert containers["harness"]["resources"] == {
            "requests": {"cpu": "1"},
            "limits": {"cpu": "3"},
        }
        for clone in pod["spec"]["initContainers"]:
            assert clone["resources"] == {
                "requests": {"memory": "1Gi"},
                "limits": {"memory": "5Gi"},
            }

    def test_the_spec_resources_override_the_tools_defaults_key_by_key(self) -> None:
        spec = SPEC.model_copy(update={"resources": Resources(limits={"cpu": 8})})
        (tools,) = [c for c in sandbox(spec)["spec"]["containers"] if c["name"] == "tools"]
        assert tools["resources"] == {
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"cpu": 8, "memory": "4Gi"},
        }

    def test_a_request_above_a_default_limit_raises_that_limit(self) -> None:
        spec = SPEC.model_copy(update={"resources": Resources(requests={"memory": "16Gi"})})
        (tools,) = [c for c in sandbox(spec)["spec"]["containers"] if c["name"] == "tools"]
        assert tools["resources"] == {
            "requests": {"cpu": "250m", "memory": "16Gi"},
            "limits": {"cpu": "2", "memory": "16Gi"},
        }

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
                    assert container["name"] != "harness"

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

    def test_a_container_restarting_says_why_it_ended(self) -> None:
        said = "fatal: Authentication failed\nkubeturn: cannot clone repo slot 'target': why\n"
        body = pod_body(
            phase="Pending",
            initContainerStatuses=[
                {
                    "name": "clone-target",
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": said}},
                }
            ],
        )
        assert read_pod(body).said == (
            "the sandbox Pod is Pending"
            " (clone-target: CrashLoopBackOff: kubeturn: cannot clone repo slot 'target': why)"
        )

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


# ----------------------------------------------------------------------------- a changed spec

POD_SPEC = {
    "initContainers": [{"name": "clone-target", "image": "harness:1", "command": ["sh"]}],
    "containers": [
        {"name": "harness", "image": "harness:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "tools", "image": "harness:1"},
    ],
    "restartPolicy": "Always",
}
PROVIDERS = "scripted:\n  type: openai\n"


def fingerprint(**changes: Any) -> sandboxes.Fingerprint:
    """POD_SPEC's fingerprint, its Harness container's fields replaced by ``changes`` (the
    tools container's ``resources``, and every container's ``image``)."""
    spec = copy.deepcopy(POD_SPEC)
    providers = changes.pop("providers", PROVIDERS)
    tokens = changes.pop("tokens", "t1")
    if "resources" in changes:
        spec["containers"][1]["resources"] = changes.pop("resources")
    if "image" in changes:
        spec["containers"][1]["image"] = changes["image"]
    spec["containers"][0].update(changes)
    return sandboxes.fingerprint(spec, providers, tokens)


class TestFingerprint:
    def test_the_same_in_every_process(self) -> None:
        """The sha256 of compact JSON with sorted keys: a Pod made by one operator process
        is current to the next one (a change here would make every sandbox anew)."""
        spec = {"containers": [{"name": "harness", "image": "harness:1"}]}
        canonical = (
            '{"providers":"{}\\n","spec":{"containers":[{"image":"harness:1","name":"harness"}]},'
            '"tokens":"t1"}'
        )
        golden = "d30ff72c7a8a1e2bfe58929dab85ad2e93d70ded9c26f6bc72bbcad335a9d39b"
        assert hashlib.sha256(canonical.encode()).hexdigest() == golden
        assert sandboxes.fingerprint(spec, "{}\n", "t1").digest == golden

    def test_the_same_in_any_key_order(self) -> None:
        reordered = {key: POD_SPEC[key] for key in reversed(list(POD_SPEC))}
        reordered["containers"] = [dict(reversed(list(c.items()))) for c in POD_SPEC["containers"]]
        assert sandboxes.fingerprint(reordered, PROVIDERS, "t1") == fingerprint()

    def test_the_builder_annotates_the_pod_and_read_pod_reads_it(self) -> None:
        pod = objects.sandbox_pod(
            WORKSPACE,
            SPEC,
            image="harness:1",
            orchestrator_url="http://o",
            providers_yaml="p",
            harness_token_sha256="t1",
        )
        made = sandboxes.fingerprint(pod["spec"], "p", "t1")
        assert pod["metadata"]["annotations"] == made.annotations()
        body = pod_body(pod["metadata"]["annotations"], phase="Running", podIP="10.0.0.9")
        assert read_pod(body).made_from == made

    def test_changed_names_the_parts_that_differ(self) -> None:
        now = fingerprint()
        assert sandboxes.changed(fingerprint(), now) == ()
        assert sandboxes.changed(fingerprint(env=[]), now) == ("env",)
        assert sandboxes.changed(fingerprint(providers="{}\n"), now) == ("providers",)
        assert sandboxes.changed(fingerprint(tokens="t2"), now) == ("tokens",)
        assert sandboxes.changed(fingerprint(image="harness:2"), now) == ("image",)
        both = fingerprint(env=[], resources={"limits": {"memory": "1Gi"}})
        assert sandboxes.changed(both, now) == ("env", "resources")

    def test_a_changed_default_model_is_named(self) -> None:
        serve = ["serve", "--port", "8080"]
        now = fingerprint(args=[*serve, "--default-model", "openai/gpt-4.1"])
        assert sandboxes.changed(fingerprint(args=serve), now) == ("defaultModel",)
        older = fingerprint(args=[*serve, "--default-model", "openai/gpt-4o"])
        assert sandboxes.changed(older, now) == ("defaultModel",)
        assert sandboxes.changed(fingerprint(args=[*serve, "--port", "9"]), fingerprint(args=serve))
        assert sandboxes.changed(now, now) == ()

    def test_a_pod_without_one_is_unrecorded(self) -> None:
        pod = read_pod(pod_body(phase="Running", podIP="10.0.0.9"))
        assert pod.made_from is None
        assert sandboxes.changed(pod.made_from, fingerprint()) == (sandboxes.UNRECORDED,)


def harness_args(spec: WorkspaceSpec, default_model: str | None) -> list[str]:
    pod = objects.sandbox_pod(
        WORKSPACE,
        spec,
        image="harness:1",
        orchestrator_url="http://o",
        providers_yaml="p",
        harness_token_sha256="t1",
        default_model=default_model,
    )
    (harness,) = (c for c in pod["spec"]["containers"] if c["name"] == "harness")
    return list(harness["args"])


class TestDefaultModel:
    def test_none_gives_no_flag(self) -> None:
        assert "--default-model" not in harness_args(SPEC, None)

    def test_the_operators_default(self) -> None:
        assert harness_args(SPEC, "openai/gpt-4.1")[-2:] == ["--default-model", "openai/gpt-4.1"]

    def test_the_workspaces_own_wins(self) -> None:
        own = SPEC.model_copy(update={"defaultModel": "local/qwen"})
        assert harness_args(own, "openai/gpt-4.1")[-2:] == ["--default-model", "local/qwen"]
        assert harness_args(own, None)[-2:] == ["--default-model", "local/qwen"]


class TestPlanAChangedSpec:
    def test_a_current_pod_says_so(self) -> None:
        decided = look(RUNNING, Recreation(), 0.0)
        assert decided.current == sandboxes.Said(
            True, "UpToDate", "the sandbox Pod was made from the Workspace as it is"
        )

    def test_an_idle_pod_is_made_anew_at_once_without_a_backoff_step(self) -> None:
        memory = Recreation()
        look(RUNNING, memory, 0.0)
        look(MISSING, memory, 1.0)  # made again once: the next one after 10 s
        made = memory.made
        decided = plan(RUNNING, memory, now=2.0, deleting=False, changes=("env",), busy=None)
        older = "the sandbox Pod runs an older spec (env changed)"
        assert (decided.action, decided.phase, decided.reason) == (
            Action.ROLL,
            WorkspacePhase.PENDING,
            "Recreating",
        )
        assert decided.message == f"{older}; no Turn runs on it: deleting it to make anew"
        assert decided.current == sandboxes.Said(False, "SpecChanged", f"{older}; making it anew")
        terminating = pod_body(phase="Running")
        terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        assert look(read_pod(terminating), memory, 3.0).message == (
            f"{older}; no Turn runs on it; a new one follows once it is gone"
        )
        again = look(MISSING, memory, 4.0)  # within the back-off: made at once all the same
        assert (again.action, again.message) == (
            Action.CREATE,
            f"{older}; no Turn runs on it; making it anew",
        )
        assert memory.made == made
        assert look(read_pod(pod_body(phase="Pending")), memory, 5.0).reason == "Recreating"
        memory.ready(6.0)
        assert look(RUNNING, memory, 7.0).reason == "Starting"

    def test_a_busy_pod_serves_on_saying_what_it_waits_for(self) -> None:
        memory = Recreation()
        busy = "AgentTurn r-t1 running"
        decided = plan(RUNNING, memory, now=0.0, deleting=False, changes=("env",), busy=busy)
        assert decided.action is Action.PROBE
        assert decided.reason == "Starting"
        assert decided.current == sandboxes.Said(
            False,
            "SpecChanged",
            "the sandbox Pod runs an older spec (env changed); it is made anew when no Turn "
            f"runs on it ({busy})",
        )
        assert not memory.rolling

    def test_a_busy_pod_whose_tokens_changed_is_made_anew_at_once(self) -> None:
        memory = Recreation()
        busy = "AgentTurn r-t1 running"
        changes = ("env", sandboxes.TOKENS)
        decided = plan(RUNNING, memory, now=0.0, deleting=False, changes=changes, busy=busy)
        older = "the sandbox Pod runs an older spec (env, tokens changed)"
        assert (decided.action, decided.reason) == (Action.ROLL, "Recreating")
        assert decided.message == (
            f"{older}; its tokens were revoked; {busy}: deleting it to make anew"
        )
        assert decided.current == sandboxes.Said(False, "SpecChanged", f"{older}; making it anew")
        assert memory.rolling

    def test_an_unrecorded_pod_is_said_so(self) -> None:
        decided = plan(
            RUNNING, Recreation(), now=0.0, deleting=False, changes=(sandboxes.UNRECORDED,)
        )
        assert decided.action is Action.ROLL
        assert decided.current is not None
        assert decided.current.message.startswith(
            "the sandbox Pod runs a spec it carries no record of (an earlier operator made it)"
        )

    def test_a_workspace_being_deleted_is_not_rolled(self) -> None:
        decided = plan(RUNNING, Recreation(), now=0.0, deleting=True, changes=("env",))
        assert (decided.action, decided.current) == (Action.NOTHING, None)


OF_NOW = ("pod-1", "http://10.0.0.9:8080", "sha-1")
"""Whom a client of ``RUNNING``'s Harness speaks to."""


class TestTheHarnessClient:
    def test_only_an_idle_pod_of_an_older_spec_is_looked_at_again(self) -> None:
        assert sandboxes.looks_again(("env",), None)
        assert not sandboxes.looks_again(("env",), "AgentTurn r-t1 running")
        assert not sandboxes.looks_again(("env", sandboxes.TOKENS), "AgentTurn r-t1 running")
        assert not sandboxes.looks_again((), None)

    def test_the_client_of_the_pod_now_is_kept(self) -> None:
        decided = plan(RUNNING, Recreation(), now=0.0, deleting=False, held=OF_NOW, harness=OF_NOW)
        assert (decided.action, decided.client) == (Action.PROBE, sandboxes.Client.KEEP)

    @pytest.mark.parametrize(
        "held",
        [
            ("pod-0", "http://10.0.0.9:8080", "sha-1"),
            ("pod-1", "http://10.0.0.8:8080", "sha-1"),
            ("pod-1", "http://10.0.0.9:8080", "sha-0"),
        ],
        ids=["another-pod", "another-address", "other-tokens"],
    )
    def test_a_client_of_another_pod_address_or_tokens_is_retired(
        self, held: sandboxes.Harness
    ) -> None:
        decided = plan(RUNNING, Recreation(), now=0.0, deleting=False, held=held, harness=OF_NOW)
        assert (decided.action, decided.client) == (Action.PROBE, sandboxes.Client.RETIRE)

    def test_a_client_of_a_pod_that_went_is_retired(self) -> None:
        decided = plan(MISSING, Recreation(), now=0.0, deleting=False, held=OF_NOW, harness=None)
        assert (decided.action, decided.client) == (Action.CREATE, sandboxes.Client.RETIRE)

    def test_the_client_of_a_pod_rolled_is_retired(self) -> None:
        decided = plan(
            RUNNING,
            Recreation(),
            now=0.0,
            deleting=False,
            changes=("env",),
            held=OF_NOW,
            harness=OF_NOW,
        )
        assert (decided.action, decided.client) == (Action.ROLL, sandboxes.Client.RETIRE)

    def test_with_none_held_none_is_retired(self) -> None:
        for pod in (RUNNING, MISSING, EVICTED):
            decided = plan(pod, Recreation(), now=0.0, deleting=False, harness=OF_NOW)
            assert decided.client is sandboxes.Client.KEEP


class TestLooked:
    def probed(self, memory: Recreation) -> sandboxes.Plan:
        decided = plan(RUNNING, memory, now=0.0, deleting=False)
        assert (decided.action, decided.message) == (Action.PROBE, memory.why or "")
        return decided

    def test_a_harness_that_answers_is_ready_and_gets_a_client(self) -> None:
        memory = Recreation(why="the sandbox Pod failed")
        probe = sandboxes.Probe(True, "the Harness answers /readyz")
        ended = sandboxes.looked(self.probed(memory), memory, now=1.0, probe=probe)
        assert ended == sandboxes.Look(
            WorkspacePhase.READY,
            sandboxes.Said(True, "HarnessReady", "the Harness answers /readyz"),
            sandboxes.Client.OPEN,
        )
        assert (memory.why, memory.ready_since) == (None, 1.0)

    def test_no_second_client_and_none_while_the_tokens_are_read_again(self) -> None:
        probe = sandboxes.Probe(True, "the Harness answers /readyz")
        memory = Recreation()
        held = sandboxes.looked(self.probed(memory), memory, now=1.0, probe=probe, held=True)
        unsynced = sandboxes.looked(self.probed(memory), memory, now=2.0, probe=probe, synced=False)
        assert (held.phase, held.client) == (WorkspacePhase.READY, sandboxes.Client.KEEP)
        assert (unsynced.phase, unsynced.client) == (WorkspacePhase.READY, sandboxes.Client.KEEP)

    def test_a_harness_that_does_not_answer_adds_what_it_said(self) -> None:
        memory = Recreation(why="the sandbox Pod failed", ready_since=0.0)
        probe = sandboxes.Probe(False, "the Harness is not ready (HTTP 401)", tokens_differ=True)
        ended = sandboxes.looked(self.probed(memory), memory, now=1.0, probe=probe)
        assert ended == sandboxes.Look(
            WorkspacePhase.PENDING,
            sandboxes.Said(
                False,
                "Recreating",
                "the sandbox Pod failed; the Harness is not ready (HTTP 401)",
            ),
            resync=True,
        )
        assert memory.ready_since is None

    def test_a_refused_pod_is_failed_and_kept_for_the_backoff(self) -> None:
        memory = Recreation()
        decided = plan(MISSING, memory, now=0.0, deleting=False)
        memory.making(0.0)
        said = "the API refused the sandbox: HTTP 403 Forbidden"
        ended = sandboxes.looked(decided, memory, now=0.0, refused=said)
        assert ended == sandboxes.Look(WorkspacePhase.FAILED, sandboxes.Said(False, "Failed", said))
        assert memory.refusal == said

    def test_an_object_in_the_way_keeps_it_pending(self) -> None:
        memory = Recreation()
        decided = plan(MISSING, memory, now=0.0, deleting=False)
        going = sandboxes.Said(False, "EarlierObjectsGoing", "the Secret s is being deleted")
        ended = sandboxes.looked(decided, memory, now=0.0, waiting=going)
        assert ended == sandboxes.Look(WorkspacePhase.PENDING, going)

    def test_the_plans_wait_is_kept(self) -> None:
        memory = Recreation(seen=True, made=1, next_at=10.0)
        decided = plan(MISSING, memory, now=0.0, deleting=False)
        ended = sandboxes.looked(decided, memory, now=0.0)
        assert (decided.action, ended.wait_s) == (Action.NOTHING, 10.0)
        assert ended.ready == sandboxes.Said(False, decided.reason, decided.message)


def agent_turn(name: str, workspace: str, *, settled: bool = False) -> dict[str, Any]:
    status = {"settlement": {"outcome": "ended"}} if settled else {"phase": "Running"}
    return {
        "metadata": {"name": name},
        "spec": {"workspaceRef": {"name": workspace}},
        "status": status,
    }


class TestWhatRuns:
    def test_nothing_runs(self) -> None:
        turns = [agent_turn("a-t1", "other"), agent_turn("b-t1", "shared", settled=True)]
        assert sandboxes.what_runs(turns, "shared", []) is None

    def test_turns_that_have_not_settled_and_execs(self) -> None:
        turns = [agent_turn(f"r{n}-t1", "shared") for n in (5, 4, 3, 2, 1)]
        turns.append({"metadata": {"name": "no-workspace"}, "spec": {}})
        assert sandboxes.what_runs(turns, "shared", []) == (
            "AgentTurn r1-t1, r2-t1, r3-t1 and 2 more running"
        )
        assert sandboxes.what_runs(turns[:1], "shared", ["team/b", "team/a"]) == (
            "AgentTurn r5-t1 and an exec of Run team/a, team/b running"
        )


class TestVolume:
    @staticmethod
    def claim(size: str, class_: str | None = "standard") -> dict[str, Any]:
        spec: dict[str, Any] = {"resources": {"requests": {"storage": size}}}
        if class_ is not None:
            spec["storageClassName"] = class_
        return {"spec": spec}

    def test_equal_quantities_match(self) -> None:
        said = sandboxes.volume_said(self.claim("10240Mi"), Storage(size="10Gi"))
        assert (said.status, said.reason) == (True, "UpToDate")

    def test_a_changed_size_or_class_is_said(self) -> None:
        storage = Storage.model_validate({"size": "20Gi", "class": "fast"})
        said = sandboxes.volume_said(self.claim("10Gi"), storage)
        assert said == sandboxes.Said(
            False,
            "StorageChanged",
            "spec.storage asks for size 20Gi (the claim has 10Gi) and class fast (the claim "
            "has standard); kubeturn neither resizes nor replaces a Workspace's volume",
        )

    def test_a_class_left_out_is_the_clusters_default(self) -> None:
        assert sandboxes.volume_said(self.claim("10Gi"), Storage(size="10Gi")).status


@pytest.mark.parametrize(
    ("have", "want", "covered"),
    [
        ({"a": 1, "b": {"c": 2, "default": 3}}, {"b": {"c": 2}}, True),
        ({"a": [{"port": 1, "protocol": "TCP"}]}, {"a": [{"port": 1}]}, True),
        ({"a": [{"port": 1}, {"port": 2}]}, {"a": [{"port": 1}]}, False),
        ({"a": {"c": 2}}, {"a": {"c": 3}}, False),
        ({}, {"a": {}}, False),
        (None, {"a": 1}, False),
    ],
)
def test_covers(have: Any, want: Any, covered: bool) -> None:
    assert sandboxes.covers(have, want) is covered


def test_the_tools_refuse_to_run_unconfined_when_the_operator_requires_it() -> None:
    def tools_args(required: bool) -> list[str]:
        pod = objects.sandbox_pod(
            WORKSPACE,
            SPEC,
            image="harness:1",
            orchestrator_url="http://o",
            providers_yaml="{}\n",
            harness_token_sha256="t1",
            require_confinement=required,
        )
        (tools,) = [c for c in pod["spec"]["containers"] if c["name"] == "tools"]
        return list(tools["args"])

    assert "--require-confinement" not in tools_args(False)
    assert tools_args(True)[-1] == "--require-confinement"


def sandbox(spec: WorkspaceSpec, **options: Any) -> dict[str, Any]:
    """The sandbox Pod of ``spec`` for ``WORKSPACE``."""
    return objects.sandbox_pod(
        WORKSPACE,
        spec,
        image="harness:1",
        orchestrator_url="http://o",
        providers_yaml="{}\n",
        harness_token_sha256="t1",
        **options,
    )
