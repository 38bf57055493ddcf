"""The operator tier's kubelet (:mod:`tests.operator.kubelet`) runs a Pod as the Pod
lifecycle documentation says a kubelet does: each case is a Pod of plain processes.

Cases:
- the scheduler's part: a Pod whose claim does not exist stays unbound,
  ``PodScheduled=False``, ``Unschedulable``, naming the claim; once the claim exists it is
  bound and runs; a claim's volume is kept across Pods and is a new one for a claim made
  anew under the same name;
- while its init containers run the Pod is ``Pending`` with ``Initialized=False``
  (``ContainersNotInitialized``, naming them): the running one ``running``, the later
  one and the containers ``waiting``/``PodInitializing``; then ``Initialized`` and
  ``Running``, the init containers ``terminated``/``Completed``;
- an init container that fails is run again at once, then waits in ``CrashLoopBackOff``
  ("back-off 10s restarting failed container=…"), its ``lastState`` ``terminated``,
  ``Error``, with its exit code and the end of its log as the message
  (``FallbackToLogsOnError``); the Pod stays ``Pending``;
- a container becomes ready only once its readiness probe (``httpGet``) answers 200-399:
  ``Running`` and not ready before its server listens, ready after; one whose probe
  answers 404 never is, and ``Ready``/``ContainersReady`` stay ``False`` naming it;
- a container that keeps exiting under ``restartPolicy: Always`` is restarted at once,
  then waits in ``CrashLoopBackOff``, ``restartCount`` counting, the Pod ``Running``;
- a deleted Pod's containers get SIGTERM: one that exits goes at once (exit code 143),
  one that ignores it is killed (137) once the grace period is over, not before; then
  the Pod's last status is ``Failed`` with both ``terminated``, and it is removed; a later
  delete with a shorter grace shortens the wait;
- a Pod someone else made ``Failed`` has its containers stopped and stays, keeping its
  phase and reason, until it is deleted (then at once);
- a Pod labelled ``delivery`` is run as a sandbox is, one of another component never;
  with ``restartPolicy: Never`` its container runs once: the Pod ``Succeeded`` with it
  ``terminated``/``Completed`` (0), or ``Failed`` with ``Error`` and its exit code, and
  is not run again while it stays;
- a container's termination message is what it wrote to its ``terminationMessagePath``
  (the default ``/dev/termination-log`` or its own), read up to 4096 bytes; with
  ``FallbackToLogsOnError`` the log's end only when it wrote nothing;
- the Harness image's Python (``/opt/kubeturn/bin/python``) in a command is this Python;
- a ``readOnly`` mount, and every mount of a claim whose source says ``readOnly``, cannot
  be written or mounted again from inside, even as root, while another mount of the
  container can be written and other Pods still write the same volume;
- a missing Secret of an ``optional`` volume mounts as an empty directory;
- a held kubelet runs no new Pod, not even one made with its ``nodeName``;
- the back-off (10, 20, 40 … 300 s, forgotten after 10 minutes of running) and the phase
  rules, as pure functions.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.operator_support import NAMESPACE, eventually

PODS = "v1/pods"
CLAIMS = "v1/persistentvolumeclaims"
PYTHON = sys.executable
SLEEP = [PYTHON, "-c", "import time; time.sleep(120)"]
STUBBORN = [
    PYTHON,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)",
]
"""A process that ignores SIGTERM: only SIGKILL ends it."""

Body = dict[str, Any]


def container(name: str, command: list[str], **fields: Any) -> Body:
    return {"name": name, "image": "example/plain:1", "command": command, **fields}


def pod(name: str, containers: list[Body], component: str = "sandbox", **spec: Any) -> Body:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/component": component},
        },
        "spec": {"containers": containers, **spec},
    }


def read(k8s: emulator.KubernetesApi, name: str) -> Body:
    return k8s.read_object(PODS, NAMESPACE, name) or {}


def versions(k8s: emulator.KubernetesApi, name: str) -> list[Body]:
    """Every version of the Pod the API stored, in order (None for its removal)."""
    return list(k8s.objects[emulator.kmock.resource(PODS), NAMESPACE, name].history)


def phase(body: Body) -> str | None:
    found: str | None = (body.get("status") or {}).get("phase")
    return found


def condition(body: Body, type_: str) -> Body:
    found = [c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == type_]
    return found[0] if found else {}


def state(body: Body, name: str, *, init: bool = False) -> Body:
    """A container's status by its name."""
    key = "initContainerStatuses" if init else "containerStatuses"
    found = [s for s in (body.get("status") or {}).get(key, []) if s["name"] == name]
    return found[0] if found else {}


async def until(
    k8s: emulator.KubernetesApi, name: str, check: Callable[[Body], Any], what: str
) -> Any:
    return await eventually(
        lambda: check(read(k8s, name)), what, describe=lambda: str(read(k8s, name).get("status"))
    )


# ----------------------------------------------------------------------------- scheduling


async def test_a_pod_is_bound_once_its_claim_exists_and_a_claim_made_anew_is_a_new_volume(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet, tmp_path: Path
) -> None:
    claim = {
        "metadata": {"name": "data", "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    look = "echo seen: $(ls /data ) && touch /data/mark && exec sleep 120"
    main = container(
        "main", ["sh", "-c", look], volumeMounts=[{"name": "data", "mountPath": "/data"}]
    )
    k8s.create_object(PODS, pod("first", [main], volumes=volumes))
    unschedulable = await until(
        k8s, "first", lambda b: condition(b, "PodScheduled").get("reason"), "Unschedulable"
    )
    assert unschedulable == "Unschedulable"
    assert condition(read(k8s, "first"), "PodScheduled")["message"] == (
        '0/1 nodes are available: persistentvolumeclaim "data" not found.'
    )
    assert "nodeName" not in read(k8s, "first")["spec"]

    made = k8s.create_object(CLAIMS, claim)
    await until(k8s, "first", lambda b: phase(b) == "Running", "first Running")
    assert read(k8s, "first")["spec"]["nodeName"] == kubelet_.NODE

    async def listed(name: str) -> str:
        body = read(k8s, name)
        log = (
            tmp_path / "harness-logs" / f"{NAMESPACE}_{name}_{body['metadata']['uid']}" / "main.log"
        )
        await eventually(lambda: log.exists() and log.read_text(), f"{name}'s listing")
        return log.read_text()

    assert await listed("first") == "seen:\n"
    k8s.delete_object(PODS, NAMESPACE, "first")
    await eventually(lambda: not read(k8s, "first"), "first gone")
    k8s.create_object(PODS, pod("second", [main], volumes=volumes))
    assert await listed("second") == "seen: mark\n"  # the claim's volume outlived its Pod

    k8s.delete_object(PODS, NAMESPACE, "second")
    k8s.delete_object(CLAIMS, NAMESPACE, "data")
    await eventually(lambda: not read(k8s, "second"), "second gone")
    anew = k8s.create_object(CLAIMS, claim)
    assert anew["metadata"]["uid"] != made["metadata"]["uid"]
    k8s.create_object(PODS, pod("third", [main], volumes=volumes))
    assert await listed("third") == "seen:\n"


# ----------------------------------------------------------------------------- init containers


async def test_a_pod_is_pending_while_its_init_containers_run(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    init = [container("first", ["sh", "-c", wait]), container("second", ["true"])]
    k8s.create_object(PODS, pod("p", [container("main", SLEEP)], initContainers=init))
    running = await until(
        k8s,
        "p",
        lambda b: "running" in state(b, "first", init=True).get("state", {}) and b,
        "the first init container running",
    )
    assert running["status"]["phase"] == "Pending"
    initialized = condition(running, "Initialized")
    assert (initialized["status"], initialized["reason"]) == ("False", "ContainersNotInitialized")
    assert initialized["message"] == "containers with incomplete status: [first second]"
    assert state(running, "second", init=True)["state"] == {
        "waiting": {"reason": "PodInitializing"}
    }
    assert state(running, "main")["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert "podIP" not in running["status"]

    gate.touch()
    done = await until(k8s, "p", lambda b: phase(b) == "Running" and b, "Running")
    assert condition(done, "Initialized")["status"] == "True"
    for name in ("first", "second"):
        ended = state(done, name, init=True)["state"]["terminated"]
        assert (ended["reason"], ended["exitCode"]) == ("Completed", 0)
    assert "running" in state(done, "main")["state"]
    assert done["status"]["podIP"].startswith("127.0.0.")


async def test_a_failing_init_container_backs_off_with_its_logs_last_words(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    fail = "echo cloning >&2; echo 'cannot clone: no such repository' >&2; exit 3"
    init = [
        container("clone", ["sh", "-c", fail], terminationMessagePolicy="FallbackToLogsOnError")
    ]
    k8s.create_object(PODS, pod("p", [container("main", SLEEP)], initContainers=init))
    backing_off = await until(
        k8s,
        "p",
        lambda b: (
            state(b, "clone", init=True).get("state", {}).get("waiting", {}).get("reason")
            == "CrashLoopBackOff"
            and b
        ),
        "the clone container in CrashLoopBackOff",
    )
    clone = state(backing_off, "clone", init=True)
    uid = backing_off["metadata"]["uid"]
    assert clone["state"]["waiting"]["message"] == (
        f"back-off 10s restarting failed container=clone pod=p_{NAMESPACE}({uid})"
    )
    assert clone["restartCount"] == 1  # the first restart is at once
    ended = clone["lastState"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("Error", 3)
    assert ended["message"] == "cloning\ncannot clone: no such repository\n"
    assert backing_off["status"]["phase"] == "Pending"
    assert condition(backing_off, "Initialized")["status"] == "False"
    assert state(backing_off, "main")["state"] == {"waiting": {"reason": "PodInitializing"}}


# ----------------------------------------------------------------------------- readiness


async def test_a_container_is_ready_only_once_its_readiness_probe_answers(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet, tmp_path: Path
) -> None:
    ip = {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}

    def server(name: str, port: int, path: str, delay: float) -> Body:
        serve = f"sleep {delay}; exec {PYTHON} -m http.server -d {tmp_path} -b $POD_IP {port}"
        probe = {"httpGet": {"path": path, "port": "web"}, "periodSeconds": 1}
        return container(
            name,
            ["sh", "-c", serve],
            env=[ip],
            ports=[{"name": "web", "containerPort": port}],
            readinessProbe=probe,
        )

    k8s.create_object(
        PODS, pod("p", [server("web", 8000, "/", 1.0), server("lost", 8001, "/x", 0)])
    )
    await until(k8s, "p", lambda b: state(b, "web").get("ready"), "web ready")
    stored = [v for v in versions(k8s, "p") if v is not None]
    running = [v for v in stored if v.get("status", {}).get("phase") == "Running"]
    assert running, "never Running"
    assert not state(running[0], "web")["ready"], "ready before its probe answered"
    await asyncio.sleep(2.5)  # the lost one's probe fails at each period
    now = read(k8s, "p")
    assert (now["status"]["phase"], state(now, "lost")["ready"]) == ("Running", False)
    for type_ in ("Ready", "ContainersReady"):
        said = condition(now, type_)
        assert (said["status"], said["reason"]) == ("False", "ContainersNotReady")
        assert said["message"] == "containers with unready status: [lost]"


# ----------------------------------------------------------------------------- restarts


async def test_a_container_that_keeps_exiting_backs_off_and_the_pod_stays_running(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    crash = container(
        "main",
        ["sh", "-c", "echo boom >&2; exit 2"],
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    k8s.create_object(PODS, pod("p", [crash]))
    backing_off = await until(
        k8s,
        "p",
        lambda b: (
            state(b, "main").get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
            and b
        ),
        "CrashLoopBackOff",
    )
    main = state(backing_off, "main")
    assert main["state"]["waiting"]["message"].startswith(
        "back-off 10s restarting failed container=main "
    )
    assert (main["restartCount"], main["ready"], main["started"]) == (1, False, False)
    ended = main["lastState"]["terminated"]
    assert (ended["reason"], ended["exitCode"], ended["message"]) == ("Error", 2, "boom\n")
    assert backing_off["status"]["phase"] == "Running"
    restarted = [v for v in versions(k8s, "p") if v and state(v, "main").get("restartCount") == 1]
    assert any("running" in state(v, "main")["state"] for v in restarted)


# ----------------------------------------------------------------------------- ending


async def test_a_deleted_pod_gets_sigterm_then_sigkill_after_its_grace_and_is_removed(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    containers = [container("polite", SLEEP), container("stubborn", STUBBORN)]
    k8s.create_object(PODS, pod("p", containers, terminationGracePeriodSeconds=3))
    await until(k8s, "p", lambda b: phase(b) == "Running", "Running")
    await asyncio.sleep(0.5)  # the processes set their signal handlers

    begun = time.monotonic()
    deleted = k8s.delete_object(PODS, NAMESPACE, "p")
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 3
    polite = await until(
        k8s,
        "p",
        lambda b: "terminated" in state(b, "polite").get("state", {}) and b,
        "polite ended",
    )
    await eventually(lambda: not read(k8s, "p"), "the Pod removed", timeout=10)
    took = time.monotonic() - begun
    assert 3 <= took < 8, took  # its grace, then the kubelet's own steps
    *_, last, removed = versions(k8s, "p")
    assert removed is None
    assert last["status"]["phase"] == "Failed"
    ends = {name: state(last, name)["state"]["terminated"] for name in ("polite", "stubborn")}
    assert (ends["polite"]["exitCode"], ends["stubborn"]["exitCode"]) == (143, 137)  # 128 + N
    assert "terminated" in state(polite, "polite")["state"]


async def test_a_later_delete_with_a_shorter_grace_shortens_the_wait(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    k8s.create_object(PODS, pod("p", [container("stubborn", STUBBORN)]))
    await until(k8s, "p", lambda b: phase(b) == "Running", "Running")
    await asyncio.sleep(0.5)
    begun = time.monotonic()
    assert k8s.delete_object(PODS, NAMESPACE, "p")["metadata"]["deletionGracePeriodSeconds"] == 30
    await asyncio.sleep(0.5)
    k8s.delete_object(PODS, NAMESPACE, "p", {"gracePeriodSeconds": 2})
    await eventually(lambda: not read(k8s, "p"), "the Pod removed", timeout=10)
    assert time.monotonic() - begun < 8  # far below the first grace, 30 s


async def test_a_pod_someone_else_ended_has_its_containers_stopped_and_stays(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    k8s.create_object(PODS, pod("p", [container("main", SLEEP)]))
    await until(k8s, "p", lambda b: phase(b) == "Running", "Running")
    evicted = {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."}
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/p/status"
    headers = {"Content-Type": "application/merge-patch+json"}
    body = json.dumps({"status": evicted})
    async with k8s.request("PATCH", path, data=body, headers=headers) as answer:
        assert answer.status == 200
    stopped = await until(
        k8s, "p", lambda b: "terminated" in state(b, "main").get("state", {}) and b, "main stopped"
    )
    assert {k: stopped["status"][k] for k in evicted} == evicted
    assert "deletionTimestamp" not in stopped["metadata"]
    k8s.delete_object(PODS, NAMESPACE, "p")
    assert not read(k8s, "p")


# ----------------------------------------------------------------------------- pure rules


def test_the_back_off_doubles_to_five_minutes_and_is_forgotten_after_ten() -> None:
    backoff = kubelet_.BackOff()
    now, waits = 0.0, []
    for _ in range(8):
        now += 1.0  # each run lasts a second
        wait = backoff.wait_s(now, now)
        waits.append(wait)
        now += wait
        backoff.restarting(now - wait, now)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300]
    now += 601  # ran for more than 10 minutes
    assert backoff.wait_s(now, now) == 0
    backoff.restarting(now, now)
    assert backoff.delay == 10
    assert [kubelet_.go_duration(s) for s in (10, 80, 300)] == ["10s", "1m20s", "5m0s"]


def running() -> Body:
    return {"state": {"running": {}}, "lastState": {}}


def waiting(reason: str, last: Body | None = None) -> Body:
    return {"state": {"waiting": {"reason": reason}}, "lastState": last or {}}


def terminated(code: int) -> Body:
    return {"state": {"terminated": {"exitCode": code}}, "lastState": {}}


@pytest.mark.parametrize(
    ("policy", "init", "main", "terminal", "phase"),
    [
        ("Always", [running()], [waiting("PodInitializing")], False, "Pending"),
        (
            "Always",
            [waiting("CrashLoopBackOff", terminated(1)["state"])],
            [waiting("PodInitializing")],
            False,
            "Pending",
        ),
        ("Never", [terminated(1)], [waiting("PodInitializing")], False, "Failed"),
        ("Always", [terminated(0)], [running(), waiting("ContainerCreating")], False, "Pending"),
        ("Always", [], [waiting("CrashLoopBackOff", terminated(2)["state"])], False, "Running"),
        ("Always", [], [terminated(0)], False, "Running"),
        ("OnFailure", [], [terminated(0)], False, "Succeeded"),
        ("Never", [], [terminated(1)], False, "Failed"),
        ("Always", [], [terminated(0), terminated(0)], True, "Succeeded"),
        ("Always", [], [terminated(0), terminated(143)], True, "Failed"),
        ("Always", [running()], [waiting("PodInitializing")], True, "Failed"),
    ],
)
def test_the_phase_follows_the_containers(
    policy: str, init: list[Body], main: list[Body], terminal: bool, phase: str
) -> None:
    spec = {"restartPolicy": policy}
    assert kubelet_.pod_phase(spec, init, main, terminal=terminal) == phase


def test_a_termination_message_is_the_last_80_lines_and_2048_bytes() -> None:
    lines = b"".join(f"line {i}\n".encode() for i in range(100))
    assert kubelet_.log_tail(lines).splitlines() == [f"line {i}" for i in range(20, 100)]
    assert kubelet_.log_tail(b"x" * 5000) == "x" * 2048


# ----------------------------------------------------------------------------- short-lived Pods


async def test_a_delivery_pod_runs_once_and_ends_as_its_container_did(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    ran.mkdir()
    for name, code in (("fine", 0), ("broken", 3)):
        script = f"echo once >> {ran / name}; exit {code}"
        k8s.create_object(
            PODS,
            pod(name, [container("push", ["sh", "-c", script])], "delivery", restartPolicy="Never"),
        )
    other = pod("other", [container("main", ["sh", "-c", f"touch {ran / 'other'}"])], "web")
    k8s.create_object(PODS, other)

    fine = await until(k8s, "fine", lambda b: phase(b) == "Succeeded" and b, "fine Succeeded")
    broken = await until(k8s, "broken", lambda b: phase(b) == "Failed" and b, "broken Failed")
    for body, reason, code in ((fine, "Completed", 0), (broken, "Error", 3)):
        terminated = state(body, "push")["state"]["terminated"]
        assert (terminated["reason"], terminated["exitCode"]) == (reason, code)
        assert state(body, "push")["restartCount"] == 0
    await asyncio.sleep(10 * kubelet_.POLL_S)  # many polls: neither is run again
    assert (ran / "fine").read_text() == (ran / "broken").read_text() == "once\n"
    assert phase(read(k8s, "fine")) == "Succeeded"
    assert not (ran / "other").exists()
    assert "nodeName" not in read(k8s, "other")["spec"]


async def test_the_termination_message_is_what_the_container_wrote_to_its_file(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    cases = {
        "default": (["sh", "-c", "printf said > /dev/termination-log"], {}),
        "own": (
            ["sh", "-c", "printf '%5000s' | tr ' ' x > /run/result; exit 1"],
            {"terminationMessagePath": "/run/result"},
        ),
        "written": (
            ["sh", "-c", "echo logged; echo written > /dev/termination-log; exit 2"],
            {"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
        "logged": (
            ["sh", "-c", "echo logged; exit 2"],
            {"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
    }
    for name, (command, fields) in cases.items():
        k8s.create_object(
            PODS,
            pod(name, [container("push", command, **fields)], "delivery", restartPolicy="Never"),
        )
    messages = {}
    for name in cases:
        body = await until(k8s, name, lambda b: phase(b) in kubelet_.TERMINAL and b, "ended")
        messages[name] = state(body, "push")["state"]["terminated"].get("message")
    assert messages == {
        "default": "said",
        "own": "x" * kubelet_.MESSAGE_MAX,
        "written": "written\n",
        "logged": "logged\n",
    }


async def test_the_images_python_is_this_python(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    command = [kubelet_.IMAGE_PYTHON, "-I", "-c", "import sys; print(sys.executable, end='')"]
    fields = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    k8s.create_object(
        PODS,
        pod(
            "p",
            [container("push", [*command[:-1], command[-1] + "; sys.exit(1)"], **fields)],
            "delivery",
            restartPolicy="Never",
        ),
    )
    body = await until(k8s, "p", lambda b: phase(b) == "Failed" and b, "Failed")
    assert state(body, "push")["state"]["terminated"]["message"] == PYTHON


@pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")
async def test_a_read_only_mount_cannot_be_written_even_as_root(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    claim = {
        "metadata": {"name": "data", "namespace": NAMESPACE},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    k8s.create_object(CLAIMS, claim)
    writer = "mkdir /data/work && echo by-the-sandbox > /data/work/file && exec sleep 120"
    mounts = [{"name": "data", "mountPath": "/data"}]
    k8s.create_object(
        PODS,
        pod(
            "sandbox",
            [container("main", ["sh", "-c", writer], volumeMounts=mounts)],
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )
    await until(
        k8s, "sandbox", lambda b: "running" in state(b, "main").get("state", {}), "it writes"
    )
    await asyncio.sleep(0.2)
    tries = (
        "cat /work/file; "
        "touch /work/new 2>/dev/null && echo wrote work; "
        "touch /secret/new 2>/dev/null && echo wrote secret; "
        "mount -o remount,rw,bind /work 2>/dev/null && echo remounted; "
        "touch /scratch/new && echo wrote scratch; "
        "cat /whole/work/file; touch /whole/new 2>/dev/null && echo wrote whole; true"
    )
    sources = [
        ("plain", {"persistentVolumeClaim": {"claimName": "data"}}),
        ("whole", {"persistentVolumeClaim": {"claimName": "data", "readOnly": True}}),
    ]
    mounts = [
        {"name": "plain", "mountPath": "/work", "subPath": "work", "readOnly": True},
        {"name": "whole", "mountPath": "/whole"},
        {"name": "secret", "mountPath": "/secret", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    k8s.create_object(
        PODS,
        pod(
            "reader",
            [container("push", ["sh", "-c", tries], volumeMounts=mounts)],
            "delivery",
            restartPolicy="Never",
            volumes=[
                *({"name": name, **source} for name, source in sources),
                {"name": "secret", "secret": {"secretName": "absent", "optional": True}},
                {"name": "scratch", "emptyDir": {}},
            ],
        ),
    )
    body = await until(k8s, "reader", lambda b: phase(b) == "Succeeded" and b, "Succeeded")
    log = next(kubelet.logs.glob(f"{NAMESPACE}_reader_*")) / "push.log"
    assert log.read_text() == "by-the-sandbox\nwrote scratch\nby-the-sandbox\n"
    assert state(body, "push")["state"]["terminated"]["exitCode"] == 0
    assert kubelet.errors == []


async def test_a_missing_secret_of_an_optional_volume_is_an_empty_directory(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    volumes = [{"name": "s", "secret": {"secretName": "absent", "optional": True}}]
    look = ["sh", "-c", "ls -A /s > /dev/termination-log; [ -d /s ]"]
    k8s.create_object(
        PODS,
        pod(
            "p",
            [container("push", look, volumeMounts=[{"name": "s", "mountPath": "/s"}])],
            "delivery",
            restartPolicy="Never",
            volumes=volumes,
        ),
    )
    body = await until(k8s, "p", lambda b: phase(b) == "Succeeded" and b, "Succeeded")
    assert "message" not in state(body, "push")["state"]["terminated"]


async def test_a_held_kubelet_runs_no_new_pod_not_even_one_given_its_node(
    k8s: emulator.KubernetesApi, kubelet: kubelet_.Kubelet
) -> None:
    kubelet.held = True
    k8s.create_object(
        PODS,
        pod(
            "p",
            [container("push", ["true"])],
            "delivery",
            restartPolicy="Never",
            nodeName=kubelet_.NODE,
        ),
    )
    await asyncio.sleep(10 * kubelet_.POLL_S)
    assert phase(read(k8s, "p")) is None
    kubelet.held = False
    await until(k8s, "p", lambda b: phase(b) == "Succeeded", "Succeeded once let go")
