"""Pushing a Run's delivered branch on a cluster: a short-lived Pod per push, the only
place the slot's Secret is mounted besides its clone container (ADR 0065).

:class:`KubePusher` makes the Pod (:func:`push_pod`), waits for it to end, reads the one
JSON line its program (``kubeturn.k8s.push_program``) left as its termination message,
deletes it and answers a :class:`PushResult`. The Pod's name is derived from the Run, the
slot and the commit (:func:`pod_name`): an operator that restarts mid-push and is asked
again finds the Pod it made, and reads its end, instead of making a second. The Pod runs
on the sandbox Pod's node (the work volume's claim is ReadWriteOnce) with that volume
read-only, the Harness image, and is owned by the Run, so it goes with it.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.resources
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kubeturn.api.workspace import SandboxResources
from kubeturn.errors import Conflict
from kubeturn.k8s import clones, names, objects
from kubeturn.k8s.kube import PODS, RUNS, Kube
from kubeturn.k8s.sandboxes import HARNESS_CONTAINER
from kubeturn.orchestrator.delivery import Pusher, PushRequest, PushResult, refused, shown_url

COMPONENT = "delivery"
"""The push Pods' ``app.kubernetes.io/component``."""
CONTAINER = "push"
PYTHON = "/opt/kubeturn/bin/python"
"""The Harness image's Python, which runs the push program."""
SCRATCH = "/tmp"
"""The push Pod's own ``emptyDir``: the repository it pushes from, and git's ``HOME``."""
RESULT_PATH = "/dev/termination-log"
"""The container's termination message file: the push program's one JSON line."""
PUSH_TIMEOUT_S = 600.0
"""How long a push may take, from the Pod's making to its end: a large delivery over a
slow link takes minutes; past 10 the Pod is deleted and the push said to have failed.
The Pod's ``activeDeadlineSeconds`` too, so it ends even if no operator is there."""
POLL_FIRST_S = 0.2
POLL_MAX_S = 2.0
"""How often the Pod is read while it runs: at once, then less often, up to every 2 s
(a push takes seconds; a watch would hold a connection per push for no gain)."""
GRACE_S = 5
"""The push Pod's ``terminationGracePeriodSeconds``: git has nothing to save."""
FETCH_OPTIONS = ("-c", "protocol.allow=never", "-c", "protocol.file.allow=always")
"""Reading the bundle is git's ``file`` transport, and nothing else is reached then."""
FULL_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
"""A full SHA-1 or SHA-256 commit id, as the Harness names the delivered commit."""

Object = dict[str, Any]
log = logging.getLogger(__name__)


def pod_name(run: str, slot: str, commit: str) -> str:
    """``<run>-push-<slot>-<commit's first 12 digits>``, each part shortened as
    ``names`` shortens it: the same push always gets the same name, another never."""
    suffix = f"-{names.dns_label('push-', slot)}-{commit[:12]}"
    return names.object_name(run, suffix, names.POD_NAME_MAX)


@functools.cache
def program() -> str:
    """The push program's text, which the Pod's Python runs (``-c``)."""
    return importlib.resources.files("kubeturn.k8s").joinpath("push_program.py").read_text()


def push_pod(
    request: PushRequest,
    run: Mapping[str, Any],
    sandbox: Mapping[str, Any],
    *,
    resources: Object,
    timeout_s: float = PUSH_TIMEOUT_S,
) -> Object:
    """The Pod that pushes ``request``: on the sandbox Pod's node, in its Harness image,
    with the work volume read-only and the slot's Secret, optional (a missing Secret is
    said by the program, not left a Pod that never starts). Owned by the Run."""
    spec = sandbox["spec"]
    image = next(c["image"] for c in spec["containers"] if c["name"] == HARNESS_CONTAINER)
    url, secret = request.url, request.secret
    settings = {
        "slot": request.slot,
        "url": url,
        "shown_url": shown_url(url),
        "secret": secret,
        "credentials": clones.CREDENTIALS_PATH,
        "needs": list(clones.needed_keys(url)) if secret else [],
        "work_root": objects.WORK_ROOT,
        "bundle": request.bundle,
        "clone": request.clone,
        "branch": request.branch,
        "commit": request.commit,
        "scratch": SCRATCH,
        "result": RESULT_PATH,
        "env": dict(clones.SAFE_GIT),
        "fetch_options": [*clones.SAFE_GIT_OPTIONS, *FETCH_OPTIONS],
        "push_options": clones.git_options(url, credentials=secret is not None),
        "ssh": _ssh(secret) if clones.transport(url) is clones.Transport.SSH else None,
    }
    mounts = [
        {
            "name": "workspace",
            "mountPath": objects.WORK_ROOT,
            "subPath": objects.WORK_SUBPATH,
            "readOnly": True,
        },
        {"name": "scratch", "mountPath": SCRATCH},
    ]
    volumes: list[Object] = [
        {
            "name": "workspace",
            "persistentVolumeClaim": {
                "claimName": objects.claim_name(request.workspace, "work"),
                "readOnly": True,
            },
        },
        {"name": "scratch", "emptyDir": {}},
    ]
    if secret is not None:
        mounts.append(clones.secret_mount(request.slot))
        volumes.append(clones.secret_volume(request.slot, secret, optional=True))
    container = {
        "name": CONTAINER,
        "image": image,
        "command": [PYTHON, "-I", "-c", program()],
        "args": [json.dumps(settings, sort_keys=True)],
        "env": clones.credential_env(url, secret) if secret is not None else [],
        "workingDir": "/",
        "volumeMounts": mounts,
        "resources": resources,
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePath": RESULT_PATH,
        # A program that could not write its line (it crashed) leaves its log's end.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    meta = run["metadata"]
    labels = {
        **objects.MANAGED_BY,
        "app.kubernetes.io/name": "kubeturn",
        "app.kubernetes.io/component": COMPONENT,
        **objects.run_labels(meta["name"]),
        objects.WORKSPACE_LABEL: names.label_value(request.workspace),
    }
    pod_spec: Object = {
        "nodeName": spec["nodeName"],
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": objects.HARNESS_UID,
            "runAsGroup": objects.HARNESS_UID,
            "fsGroup": objects.HARNESS_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
        "activeDeadlineSeconds": int(timeout_s),
        "terminationGracePeriodSeconds": GRACE_S,
    }
    if spec.get("serviceAccountName"):  # what lets the node pull the Workspace's image
        pod_spec["serviceAccountName"] = spec["serviceAccountName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(meta["name"], request.slot, request.commit),
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [objects.owner_reference(run)],
        },
        "spec": pod_spec,
    }


def _ssh(secret: str | None) -> dict[str, str]:
    key = secret is not None
    return {
        "known_hosts": clones.ssh_command(key=key, known_hosts=True),
        "first_use": clones.ssh_command(key=key, known_hosts=False),
    }


def sandbox_problem(sandbox: Mapping[str, Any] | None) -> str | None:
    """Why a push Pod cannot go beside this sandbox Pod now (its node holds the work
    volume), or None."""
    if sandbox is None:
        return "the Workspace has no sandbox Pod, whose node holds its work volume"
    if "deletionTimestamp" in sandbox["metadata"] or not sandbox["spec"].get("nodeName"):
        return "the Workspace's sandbox Pod is not running on a node"
    phase = (sandbox.get("status") or {}).get("phase")
    if phase != "Running":
        return f"the Workspace's sandbox Pod is {phase or 'Pending'}, not Running"
    return None


def ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def read_result(pod: Mapping[str, Any]) -> tuple[bool, str | None]:
    """What an ended push Pod says: pushed, or why not (one line, from its program's
    result, or from the Pod's status when the program left none)."""
    status = pod.get("status") or {}
    found = [s for s in status.get("containerStatuses") or [] if s.get("name") == CONTAINER]
    terminated = (found[0].get("state") or {}).get("terminated") if found else None
    if not terminated:
        said = status.get("message") or status.get("reason") or "its container never ran"
        return False, f"the push Pod failed: {_one_line(said)}"
    message = str(terminated.get("message") or "")
    try:
        result = json.loads(message.strip().splitlines()[0]) if message.strip() else None
    except ValueError:
        result = None
    if isinstance(result, dict) and isinstance(result.get("pushed"), bool):
        if result["pushed"]:
            return True, None
        return False, _one_line(str(result.get("error") or "the push program said no more"))
    lines = message.strip().splitlines()
    last = lines[-1] if lines else "it said nothing"
    return False, f"the push Pod ended with exit code {terminated.get('exitCode')}: {last}"


def waiting_for(pod: Mapping[str, Any]) -> str:
    """What a push Pod that has not ended is at: its phase, and its container's wait."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            reason = waiting.get("reason", "")
            return f"{phase}, {reason}: {waiting.get('message', '')}".rstrip(": ")
    return phase


def _one_line(text: str) -> str:
    return " ".join(text.split())


class KubePusher(Pusher):
    """Pushes a Run's delivered branch from a Pod of its own (module docstring)."""

    def __init__(
        self,
        kube: Kube,
        *,
        resources: SandboxResources | None = None,
        timeout_s: float = PUSH_TIMEOUT_S,
    ) -> None:
        self._kube = kube
        sized = resources or SandboxResources()
        # git's work here is a clone's: its pack building takes what indexing one does.
        self._resources = objects.container_resources(sized.clone, None)
        self._timeout_s = timeout_s

    async def push(self, request: PushRequest) -> PushResult:
        try:
            return await self._push(request)
        except ApiException as error:
            why = f"the Kubernetes API answered {error.status} {error.reason}"
        except (urllib3.exceptions.HTTPError, OSError) as error:
            why = f"the Kubernetes API could not be reached: {error}"
        return refused(request, why)

    async def _push(self, request: PushRequest) -> PushResult:
        def failed(why: str) -> PushResult:
            return refused(request, why)

        if not FULL_COMMIT.match(request.commit):
            return failed(f"'{request.commit}' is not a full commit id")
        namespace = request.namespace
        run = await self._kube.get(RUNS, namespace, request.run)
        if run is None or "deletionTimestamp" in run["metadata"]:
            return failed(f"the Run '{request.run}' is gone")
        name = pod_name(request.run, request.slot, request.commit)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        pod = await self._kube.get(PODS, namespace, name)
        if pod is not None and not objects.owned_by(pod, run):
            # An earlier Run's of that name, not yet collected: its end is not this one's.
            if not await self._gone(namespace, name, pod, deadline):
                return failed(f"an earlier Run's push Pod {name} is still being deleted")
            pod = None
        if pod is None:
            sandbox = await self._kube.get(PODS, namespace, objects.sandbox_name(request.workspace))
            problem = sandbox_problem(sandbox)
            if problem is not None:
                return failed(problem)
            assert sandbox is not None
            body = push_pod(
                request, run, sandbox, resources=self._resources, timeout_s=self._timeout_s
            )
            pod = await self._kube.create(body)
            log.info("pushing %s of slot %s from Pod %s", request.branch, request.slot, name)
        last = await self._until_ended(namespace, name, pod, deadline)
        if last is None:
            return failed(f"the push Pod {name} was deleted before it ended")
        if not ended(last):
            await self._delete(namespace, name, last)
            return failed(
                f"the push Pod {name} did not end within {self._timeout_s:g} s"
                f" ({waiting_for(last)}); it is deleted"
            )
        pushed, why = read_result(last)
        await self._delete(namespace, name, last)
        return PushResult(True) if pushed else failed(why or "not pushed")

    async def _until_ended(
        self, namespace: str, name: str, pod: Object, deadline: float
    ) -> Object | None:
        """The Pod once it ended, or as it was at the deadline; None if it went."""
        uid, wait = pod["metadata"]["uid"], POLL_FIRST_S
        loop = asyncio.get_running_loop()
        while not ended(pod) and loop.time() < deadline:
            await asyncio.sleep(min(wait, max(0.0, deadline - loop.time())))
            wait = min(wait * 1.5, POLL_MAX_S)
            try:
                found = await self._kube.get(PODS, namespace, name)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                # The API server away for a moment: the Pod runs on; read it again.
                log.debug("reading push Pod %s/%s: %s", namespace, name, error)
                continue
            if found is None or found["metadata"]["uid"] != uid:
                return None
            pod = found
        return pod

    async def _gone(self, namespace: str, name: str, pod: Object, deadline: float) -> bool:
        """Delete this very Pod and wait for it to go; whether it went by the deadline."""
        await self._delete(namespace, name, pod)
        loop, wait = asyncio.get_running_loop(), POLL_FIRST_S
        while loop.time() < deadline:
            found = await self._kube.get(PODS, namespace, name)
            if found is None or found["metadata"]["uid"] != pod["metadata"]["uid"]:
                return True
            await asyncio.sleep(wait)
            wait = min(wait * 1.5, POLL_MAX_S)
        return False

    async def _delete(self, namespace: str, name: str, pod: Object) -> None:
        """Delete this very Pod; one that cannot be deleted now is left (it goes with its
        Run), and what it said stands."""
        try:
            await self._kube.delete(PODS, namespace, name, uid=pod["metadata"]["uid"])
        except Conflict:
            pass  # made anew meanwhile: not this push's
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            log.warning("the push Pod %s/%s is left: %s", namespace, name, error)
