"""A kubelet for the operator tier: the emulator's sandbox Pods become real processes.

The emulator stores Pods and nothing runs them. :class:`Kubelet` polls the emulator (over
HTTP, as a node's kubelet watches its Pods) for Pods labelled
``app.kubernetes.io/component`` ``sandbox`` or ``delivery`` (a Run's push Pods) and runs
each as a node would, writing its status as a kubelet does; a Pod already ``Succeeded``
or ``Failed`` is never run again. It also stands for the scheduler: it binds each new Pod to its
node (``pods/binding``, :data:`NODE`) once every claim the Pod mounts exists, and leaves
it ``PodScheduled=False``, ``Unschedulable``, until then. Per Pod (:class:`PodWorker`):

- volumes become directories: a ``persistentVolumeClaim`` one directory per claim (by
  its uid: kept across Pods, as a volume outlives its Pod, and removed once its claim is
  gone and no Pod uses it, as a dynamically provisioned volume is), an ``emptyDir`` one
  per Pod, a ``configMap`` or ``secret`` one per Pod holding its keys as files (a
  Secret's ``data`` base64-decoded; an ``optional`` one that is missing, empty); a
  mount's ``subPath`` is that directory inside its
  volume, made (mode 0777, as the volume's root) when missing;
- the init containers run one after another (as root, with their command, their env
  resolved and every mount path in their command and env replaced by its directory):
  the Pod is ``Pending``, ``Initialized=False``, the one running is ``running`` in
  ``initContainerStatuses``, the later ones and every container ``waiting``
  (``PodInitializing``); one that fails is run again with the kubelet's back-off
  (``CrashLoopBackOff``), the Pod staying ``Pending``. Then what they mounted of the
  claims is given to uid/gid 65534: the Harness runs as root here and runs its tools as
  nobody, who must own the clones (git refuses a repository owned by another user) and
  be able to write worktrees beside them; directories are mode 0777 (``tempfile.mkdtemp``
  under /tmp, so nobody can reach them);
- then the containers start, in order, and the Pod is ``Running`` at its address
  (127.0.0.2, 127.0.0.3, …, a free one per Pod, never one an earlier Pod had, as a
  cluster's address allocator moves on). A Pod with a Harness says its address once the
  Harness listens on it: on this shared machine another process may take an address
  between the kubelet's look and the Harness's bind, and the Pod then takes the next one
  (not counted as a restart). The ``harness`` container runs ``python -m
  kubeturn_harness`` (the image's entrypoint) with its args, ``--host 0.0.0.0`` become
  the Pod's address, its env resolved (``valueFrom.secretKeyRef``, ``configMapKeyRef``,
  ``fieldRef: status.podIP``, ``envFrom``); the ``tools`` container runs the toolbox
  (``kubeturn_harness.sandbox`` with this Python) with no environment but ``PATH`` and
  ``LANG`` (the image's), serving the uid the Harness really runs as here (root), its
  sessions as nobody (``--run-as``); any other container runs its command (or the
  image's entrypoint) with its args;
- ``containerStatuses`` say each container's state (``waiting`` with its reason,
  ``running``, ``terminated`` with ``Completed`` or ``Error``, the exit code, a signal
  counting 128 + its number), ``lastState``, ``restartCount``, ``ready``; the
  ``message`` is what the container wrote to its ``terminationMessagePath`` (by
  default ``/dev/termination-log``; a new empty file for each run of it, standing for
  that path in its command, args and env; 4096 bytes at most), or, when it wrote
  nothing and failed, with ``terminationMessagePolicy: FallbackToLogsOnError``, the
  end of its log (80 lines, 2048 bytes at most);
- a container whose command is the Harness image's Python (``/opt/kubeturn/bin/python``)
  runs this Python;
- a ``readOnly`` mount (or any mount of a claim whose volume source says ``readOnly``)
  is read-only as far as a process can be made to hold it so: the container runs as
  root in a mount namespace of its own where each such directory is bind-mounted
  read-only over itself, and without the capability to mount it again (writes fail
  with EROFS); its other processes, and other containers, see the directory as it is.
  What it cannot hold: a process of another container writing the same directory
  meanwhile is not kept out (nor is it on a node), and a container whose command
  leaves that namespace (``nsenter``) would escape it;
- a container is ready once its ``readinessProbe`` (``httpGet``, with its
  ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds`` and thresholds, the
  API's defaults otherwise) answers 200-399, and unready after ``failureThreshold``
  failures; one without a probe is ready while it runs; ``ContainersReady`` and
  ``Ready`` follow;
- a container that exits is started again as ``restartPolicy`` says (``Always``: in
  any case), at once the first time and after the kubelet's back-off (:class:`BackOff`:
  10 s, doubled each time up to 5 minutes, forgotten after 10 minutes of running)
  meanwhile ``waiting`` ``CrashLoopBackOff``; the Pod stays ``Running``;
- each container's output is kept in ``<namespace>_<pod>_<uid>/<container>.log`` under
  the kubelet's log directory, the directory named as the kubelet names a Pod's
  (``/var/log/pods``): a Pod whose directory name does not fit in a file name's 255
  bytes (a long namespace and a Pod name past 154 characters) cannot be started, and is
  reported in :attr:`Kubelet.errors`, as a kubelet fails its sandbox;
- a container is its process's group (the process leads a session of its own): what is
  left of the group when the process ends is killed, as a container's processes end
  with it;
- a deleted Pod is ended: SIGTERM to every container, SIGKILL to those left after its
  ``deletionGracePeriodSeconds`` (a later, shorter one shortens the wait; never below
  the kubelet's 2 s); then its status says the containers ``terminated`` and the Pod
  ``Succeeded`` or ``Failed``, and the kubelet deletes it with a grace period of 0,
  which removes it. A Pod someone else made ``Failed`` or ``Succeeded`` (an eviction)
  has its containers stopped (within its ``terminationGracePeriodSeconds``) and is left
  to be deleted; one removed from the API at once has them stopped within 2 s.

Once its Harness prints ``harness listening on …`` a Pod is in :attr:`Kubelet.sandboxes`
(:meth:`Kubelet.running` waits for that) until its containers are stopped; a Pod of a
name another Pod had starts its containers only once that one's are stopped (an
eviction stops them before the Pod turns ``Failed``: a test that writes ``Failed``
itself gets the same order). While :attr:`Kubelet.held` is set, no new Pod is bound or
run, even one made with its ``nodeName`` (a node slow to take one); those already running
run on. :meth:`Kubelet.stop` stops every
container within 5 s (the node shutting down) and removes every directory.

Not emulated: liveness and startup probes, probes other than ``httpGet``, resource
limits and OOM kills, the securityContext's user (everything runs as root, tools as
nobody) and ``readOnlyRootFilesystem``, ``items`` of volume sources and their later
updates, image pulls (every image is the Harness), ``activeDeadlineSeconds``, preStop
hooks, sidecar (restartable init) containers. A container's environment or volume the
kubelet cannot resolve (a missing Secret, another volume type) is reported in
:attr:`Kubelet.errors` and leaves its Pod ``Pending``, ``CreateContainerConfigError``,
without the kubelet's retries.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

COMPONENT = "app.kubernetes.io/component"
COMPONENTS = ("sandbox", "delivery")
"""The Pods this kubelet runs: the sandboxes, and the short-lived Pods that push a Run's
delivered branch (a set-based selector, which the emulator does not parse, so the Pods
are listed and chosen here)."""
NODE = "kubeturn-test-node"
"""The one node this kubelet is: the name it binds Pods to."""
POLL_S = 0.1
"""How often the Pods are listed: a Pod is taken within a tenth of a second."""
STOP_S = 5.0
"""How long each container gets when the kubelet itself stops (its node shuts down)."""
MIN_GRACE_S = 2.0
"""The kubelet's shortest grace for a container it stops, whatever the Pod says."""
BACKOFF_FIRST_S = 10.0
BACKOFF_MAX_S = 300.0
"""The kubelet's crash back-off: 10 s, doubled on each crash, up to 5 minutes; forgotten
once a container ran twice that long (10 minutes)."""
TERMINATION_LOG = "/dev/termination-log"
"""A container's ``terminationMessagePath`` when its spec gives none (the API's default)."""
MESSAGE_MAX = 4096
"""The most of a termination message file the kubelet reads."""
IMAGE_PYTHON = "/opt/kubeturn/bin/python"
"""The Harness image's Python: a command naming it runs this Python."""
READ_ONLY = (
    'for d; do [ "$d" = -- ] && break; mount --bind -o ro "$d" "$d" || exit 125; shift;'
    ' done; shift; exec setpriv --bounding-set -sys_admin -- "$@"'
)
"""Run as root in a new mount namespace (``unshare``): each directory before ``--``
bind-mounted read-only over itself, then the rest without the capability to mount
again: writes under those directories fail with EROFS, even as root."""
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
"""How much of a failed container's log becomes its termination message
(``FallbackToLogsOnError``): the smaller of 80 lines and 2048 bytes."""
PROBE_DEFAULTS = {
    "initialDelaySeconds": 0,
    "periodSeconds": 10,
    "timeoutSeconds": 1,
    "successThreshold": 1,
    "failureThreshold": 3,
}
"""A probe's fields the API server defaults when the Pod's spec leaves them out."""
NOBODY = 65534
HARNESS_CONTAINER = "harness"
TOOLS_CONTAINER = "tools"
HARNESS_ENTRYPOINT = (sys.executable, "-m", "kubeturn_harness")
"""What every image runs when a container names no ``command``: the Harness image's."""
TOOLBOX = (sys.executable, "-m", "kubeturn_harness.sandbox")
"""What the ``tools`` container's command (tini, then the image's Python) runs here."""
LISTENING = "harness listening on "
CANNOT_LISTEN = "cannot listen"
"""What a Harness says when its address is taken (another process on this machine)."""
TERMINAL = ("Failed", "Succeeded")

Body = dict[str, Any]


class PodFailed(Exception):
    """The kubelet cannot run the Pod; the message says why."""


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------- pure rules


@dataclasses.dataclass
class BackOff:
    """The kubelet's back-off of one container's restarts (client-go's ``flowcontrol``
    ``Backoff`` as the kubelet uses it): a container that exits is restarted at once the
    first time; one that exits again waits ``delay`` from its exit, and the delay doubles
    at each restart up to :data:`BACKOFF_MAX_S`; a container that ran more than twice that
    since its last restart starts over. Times are monotonic seconds, given."""

    delay: float = 0.0
    last: float | None = None
    """When it was last restarted (None: never)."""

    def _forgotten(self, finished: float) -> bool:
        return self.last is None or finished - self.last > 2 * BACKOFF_MAX_S

    def wait_s(self, finished: float, now: float) -> float:
        """How long a container that exited at ``finished`` waits before its restart."""
        if self._forgotten(finished):
            return 0.0
        return max(0.0, finished + self.delay - now)

    def restarting(self, finished: float, now: float) -> None:
        """It is restarted now: the next crash waits longer."""
        forgotten = self._forgotten(finished)
        self.delay = BACKOFF_FIRST_S if forgotten else min(self.delay * 2, BACKOFF_MAX_S)
        self.last = now


def go_duration(seconds: float) -> str:
    """A whole number of seconds as Go prints a ``time.Duration``: 10s, 1m20s, 5m0s."""
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60}s"


def exit_code(returncode: int) -> int:
    """A process's exit status as a container's: a signal N counts 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def log_tail(text: bytes) -> str:
    """The end of a log as a termination message: 80 lines, 2048 bytes at most."""
    lines = text.splitlines(keepends=True)[-LOG_TAIL_LINES:]
    return b"".join(lines)[-LOG_TAIL_BYTES:].decode(errors="replace")


def pod_phase(spec: Body, init: Sequence[Body], main: Sequence[Body], *, terminal: bool) -> str:
    """The phase of a Pod from its containers' statuses, as the kubelet's ``getPhase``
    decides it (restartable init containers left out); ``terminal``: the Pod is ending,
    its containers will not run again."""
    policy = spec.get("restartPolicy", "Always")
    pending_init = failed_init = 0
    for status in init:
        state, last = status["state"], status.get("lastState") or {}
        if "terminated" in state:
            failed_init += state["terminated"]["exitCode"] != 0
        elif "waiting" in state and "terminated" in last:
            failed_init += last["terminated"]["exitCode"] != 0
        else:
            pending_init += 1
    running = waiting = stopped = succeeded = 0
    for status in main:
        state, last = status["state"], status.get("lastState") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"]["exitCode"] == 0
        elif "terminated" in last:
            stopped += 1
        else:
            waiting += 1
    started = any(
        "running" in s["state"] or "terminated" in s["state"] or "terminated" in s["lastState"]
        for s in main
    )
    if failed_init and policy == "Never":
        return "Failed"
    if terminal and not running:  # ending: Succeeded only if every container ran and did
        return "Succeeded" if stopped and stopped == succeeded and not waiting else "Failed"
    if (pending_init and not started) or waiting:
        return "Pending"
    if running:
        return "Running"
    if stopped:
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        return "Failed" if policy == "Never" else "Running"
    return "Pending"


# ----------------------------------------------------------------------------- containers


@dataclasses.dataclass(eq=False)  # each is itself: hashed by identity
class Container:
    """One container of a Pod: its spec, its process while it runs, and its status."""

    spec: Body
    log: Path
    init: bool = False
    process: asyncio.subprocess.Process | None = None
    state: Body = dataclasses.field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: Body = dataclasses.field(default_factory=dict)
    restarts: int = 0
    runs: int = 0
    ready: bool = False
    backoff: BackOff = dataclasses.field(default_factory=BackOff)
    log_start: int = 0
    """Where this run's output begins in ``log`` (earlier runs' is before it)."""
    container_id: str = ""
    message_file: Path | None = None
    """The file standing for this run's ``terminationMessagePath``."""

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> Body:
        image = str(self.spec.get("image", ""))
        status: Body = {
            "name": self.name,
            "image": image,
            "imageID": f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "restartCount": self.restarts,
            "started": "running" in self.state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status

    def ended(self, returncode: int, started_at: str) -> None:
        """The process exited: its state is ``terminated``, with what it wrote to its
        termination message file (4096 bytes at most) as the message, or, when that is
        empty, the end of its log as the message of a failure if its policy says so."""
        code = exit_code(returncode)
        terminated: Body = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started_at,
            "finishedAt": now_stamp(),
            "containerID": self.container_id,
        }
        if self.message_file is not None and self.message_file.is_file():
            with self.message_file.open("rb") as handle:
                written = handle.read(MESSAGE_MAX).decode(errors="replace")
            if written:
                terminated["message"] = written
        fallback = self.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        if code and fallback and "message" not in terminated:
            with self.log.open("rb") as handle:
                handle.seek(self.log_start)
                message = log_tail(handle.read())
            if message:
                terminated["message"] = message
        self.state, self.ready, self.process = {"terminated": terminated}, False, None


@dataclasses.dataclass
class Sandbox:
    """A sandbox Pod whose Harness listens: where it is, and its processes."""

    namespace: str
    name: str
    uid: str
    ip: str
    url: str
    """``http://<podIP>:<port>``: where the operator reaches the Harness."""
    mounts: dict[str, Path]
    """The Harness's and the toolbox's mount paths → the directories standing for them."""
    log: Path
    """The Harness's log (every run of it); the toolbox's is beside it."""
    process: asyncio.subprocess.Process
    """The Harness's process now (a restarted container's is a new one)."""

    def path(self, pod_path: str) -> Path:
        """The directory or file standing for ``pod_path`` in the Harness container."""
        return Path(_rewrite(pod_path, self.mounts))

    @property
    def work_root(self) -> Path:
        return self.path("/work")

    @property
    def data_dir(self) -> Path:
        return self.path("/var/lib/kubeturn/data")


# ----------------------------------------------------------------------------- the node


class Kubelet:
    """Runs the emulator's sandbox Pods; ``errors`` lists every Pod it could not run."""

    def __init__(self, api_url: str, logs: Path, *, token: str) -> None:
        self._api_url = api_url.rstrip("/")
        self._token = token
        self.logs = logs
        self.session: aiohttp.ClientSession | None = None
        self.probes: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._workers: dict[str, PodWorker] = {}
        """Pod uid → its worker, until its containers are stopped."""
        self._last: dict[tuple[str, str], PodWorker] = {}
        """(namespace, name) → the latest Pod's worker of that name."""
        self.claims: dict[str, Path] = {}
        """A claim's uid → the directory standing for its volume."""
        self.addresses: set[str] = set()
        """Every Pod address given out so far: none is given twice."""
        self.sandboxes: dict[tuple[str, str], Sandbox] = {}
        """(namespace, Pod name) → its sandbox, while its Harness runs."""
        self.errors: list[str] = []
        self.started: list[Sandbox] = []
        """Every sandbox whose Harness listened, in order (stopped ones too)."""
        self.held = False
        """While True, new Pods are not bound (nor run)."""

    async def start(self) -> None:
        # force_close: no idle keep-alive connection stays behind in the API server.
        # The API's session presents the kubelet's token; the probes' (to Pods) none.
        self.session = aiohttp.ClientSession(
            self._api_url,
            connector=aiohttp.TCPConnector(force_close=True),
            headers={"Authorization": f"Bearer {self._token}"},
        )
        self.probes = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        self._task = asyncio.create_task(self._run(), name="kubelet")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*(worker.shut_down() for worker in list(self._workers.values())))
        for session in (self.session, self.probes):
            if session is not None:
                await session.close()
        for path in self.claims.values():
            shutil.rmtree(path, ignore_errors=True)

    async def running(self, name: str, namespace: str = "default", timeout: float = 20) -> Sandbox:
        """The sandbox of Pod ``name`` once its Harness listens."""
        try:
            async with asyncio.timeout(timeout):
                while (namespace, name) not in self.sandboxes:
                    if self.errors:
                        raise AssertionError(f"the kubelet failed: {self.errors}")
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise AssertionError(
                f"waited {timeout:g} s for the sandbox Pod {namespace}/{name} to run; "
                f"running: {sorted(self.sandboxes)}, errors: {self.errors}"
            ) from None
        return self.sandboxes[(namespace, name)]

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            try:
                pods = await self.get("/api/v1/pods")
            except (PodFailed, aiohttp.ClientError) as failure:
                self.errors.append(f"listing the Pods: {failure}")
                await asyncio.sleep(POLL_S)
                continue
            seen = set()
            for pod in pods["items"]:
                meta, spec = pod["metadata"], pod["spec"]
                if (meta.get("labels") or {}).get(COMPONENT) not in COMPONENTS:
                    continue
                seen.add(meta["uid"])
                worker = self._workers.get(meta["uid"])
                if worker is not None:
                    worker.observe(pod)
                    continue
                if (pod.get("status") or {}).get("phase") in TERMINAL or self.held:
                    continue  # a Pod that ended never runs again; a held node takes none
                try:
                    bound = spec.get("nodeName") == NODE or (
                        not spec.get("nodeName") and await self._bind(pod)
                    )
                except (PodFailed, aiohttp.ClientError) as failure:
                    self.errors.append(f"binding Pod {meta['namespace']}/{meta['name']}: {failure}")
                    continue
                if bound:
                    self._take(pod)
            for uid, worker in list(self._workers.items()):
                if uid not in seen:
                    worker.vanished()
            await asyncio.sleep(POLL_S)

    async def _bind(self, pod: Body) -> bool:
        """The scheduler's part: bind the Pod to this node once the claims it mounts are
        there (and not being deleted); whether it was bound."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        for volume in pod["spec"].get("volumes", []):
            if "persistentVolumeClaim" not in volume:
                continue
            claim = volume["persistentVolumeClaim"]["claimName"]
            found = await self.get_or_none(
                f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{claim}"
            )
            if found is None or "deletionTimestamp" in found["metadata"]:
                why = "not found" if found is None else "is being deleted"
                condition = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f'0/1 nodes are available: persistentvolumeclaim "{claim}" {why}.',
                }
                if condition not in ((pod.get("status") or {}).get("conditions") or []):
                    await self.patch_status(path, {"conditions": [condition]})
                return False
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
        }
        assert self.session is not None
        async with self.session.post(f"{path}/binding", json=binding) as answer:
            return answer.status == 201

    def _take(self, pod: Body) -> None:
        meta = pod["metadata"]
        name = (meta["namespace"], meta["name"])
        worker = PodWorker(self, pod, after=self._last.get(name))
        self._workers[meta["uid"]] = self._last[name] = worker
        worker.start()

    def forget(self, worker: PodWorker) -> None:
        """A worker whose Pod's containers are stopped is done."""
        self._workers.pop(worker.uid, None)
        if self._last.get(worker.name) is worker:
            del self._last[worker.name]

    def in_use(self, claim_uid: str) -> bool:
        """Whether a Pod here mounts the claim's volume."""
        return any(claim_uid in worker.claims for worker in self._workers.values())

    # ------------------------------------------------------------------ the API

    async def get(self, path: str) -> Body:
        found = await self.get_or_none(path)
        if found is None:
            raise PodFailed(f"GET {path}: HTTP 404")
        return found

    async def get_or_none(self, path: str) -> Body | None:
        assert self.session is not None
        async with self.session.get(path) as answer:
            if answer.status == 404:
                return None
            if answer.status != 200:
                raise PodFailed(f"GET {path}: HTTP {answer.status}")
            return dict(await answer.json())

    async def patch_status(
        self, path: str, status: Body, version: str | None = None
    ) -> tuple[int, Body | None]:
        """Merge ``status`` into the Pod's (at ``version`` only, if given); the answer's
        HTTP status, and the Pod as written."""
        patch: Body = {"status": status}
        if version is not None:
            patch["metadata"] = {"resourceVersion": version}
        headers = {"Content-Type": "application/merge-patch+json"}
        assert self.session is not None
        async with self.session.patch(f"{path}/status", json=patch, headers=headers) as answer:
            return answer.status, (dict(await answer.json()) if answer.status == 200 else None)


class PodWorker:
    """Runs one Pod from its binding to its end (module docstring), on its own task."""

    def __init__(self, kubelet: Kubelet, pod: Body, after: PodWorker | None) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        self.kubelet, self.pod, self._after = kubelet, pod, after
        self.uid: str = meta["uid"]
        self.name: tuple[str, str] = (meta["namespace"], meta["name"])
        self.path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        # The kubelet's own directory of a Pod's logs (BuildPodLogsDirectory), whose name
        # must fit in a file name's 255 bytes, or the Pod cannot be started.
        directory = kubelet.logs / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        self.init = [
            Container(c, directory / f"{c['name']}.log", init=True)
            for c in spec.get("initContainers", [])
        ]
        for container in self.init:
            container.state = {"waiting": {"reason": "PodInitializing"}}
        self.containers = [Container(c, directory / f"{c['name']}.log") for c in spec["containers"]]
        for container in self.containers:
            container.state = {
                "waiting": {"reason": "PodInitializing" if self.init else "ContainerCreating"}
            }
        self.claims: set[str] = set()
        self.ip: str | None = None
        self.mounts: dict[str, dict[str, Path]] = {}
        """Each container's mount paths → directories."""
        self.initialized = False
        self.start_time = now_stamp()
        self.stopped = asyncio.Event()
        self._scratch: list[Path] = []
        self._changed = asyncio.Event()
        self._gone = False
        self._written: Body | None = None
        self._transitions: dict[str, tuple[str, str]] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._life: asyncio.Task[None] | None = None
        self._sandbox: Sandbox | None = None
        self._messages: Path | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pod {self.path}")

    def observe(self, pod: Body) -> None:
        """The Pod as last read from the API."""
        self.pod = pod
        self._changed.set()

    def vanished(self) -> None:
        """The Pod is no longer in the API (removed at once, or replaced)."""
        self._gone = True
        self._changed.set()

    # ------------------------------------------------------------------ its life

    async def _run(self) -> None:
        try:
            self._life = asyncio.create_task(self._live(), name=f"pod {self.path} containers")
            self._life.add_done_callback(self._failed)
            why, grace = await self._until_ended()
            self._life.cancel()
            await asyncio.gather(self._life, return_exceptions=True)
            await self._kill(grace, follow=why == "deleted")
            if why == "deleted":
                await self._report(terminal=True)
                await self._delete()
            elif why == "ended":
                await self._report(terminal=True, keep_phase=True)
        except Exception as failure:  # a bug here must fail the test, not hang it
            self.kubelet.errors.append(f"Pod {self.path}: {failure!r}")
            await self._kill(0.0, follow=False, report=False)
        finally:
            await self._clean_up()

    def _failed(self, life: asyncio.Task[None]) -> None:
        """A bug in running the Pod fails the test at once (``Kubelet.running`` sees it)."""
        if not life.cancelled() and life.exception() is not None:
            self.kubelet.errors.append(f"Pod {self.path}: {life.exception()!r}")

    async def shut_down(self) -> None:
        """Stop at once, as the node goes: every container within :data:`STOP_S`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._life is not None:
            self._life.cancel()
            await asyncio.gather(self._life, return_exceptions=True)
        await self._kill(STOP_S, follow=False, report=False)
        await self._clean_up()

    async def _until_ended(self) -> tuple[str, float]:
        """Until the Pod is deleted, ended by someone else, or gone: why, and the grace
        its containers get."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            meta, spec = self.pod["metadata"], self.pod["spec"]
            if self._gone:
                return "gone", MIN_GRACE_S
            if "deletionTimestamp" in meta:
                return "deleted", float(meta.get("deletionGracePeriodSeconds") or 0)
            if (self.pod.get("status") or {}).get("phase") in TERMINAL:
                return "ended", float(spec.get("terminationGracePeriodSeconds", 30))

    async def _live(self) -> None:
        """Run the Pod: its volumes, its init containers one after another, then its
        containers, each started again as the Pod's policy says, with its probe."""
        try:
            await self._report()
            if self._after is not None:
                await self._after.stopped.wait()
            volumes = await self._volumes()
            for container in self.init:
                self.mounts[container.name] = _mounts(container.spec, volumes)
                if not await self._initialize(container):
                    return  # the Pod Failed: nothing more starts
            self.initialized = True
            for path in sorted(self._claim_mounts(volumes)):
                await asyncio.to_thread(_give_to_nobody, path)
            for container in self.containers:
                self.mounts[container.name] = _mounts(container.spec, volumes)
            self.ip = self._address()
            supervisors = [asyncio.create_task(self._supervise(c)) for c in self.containers]
            try:
                await asyncio.gather(*supervisors)
            finally:
                for supervisor in supervisors:
                    supervisor.cancel()
                await asyncio.gather(*supervisors, return_exceptions=True)
        except PodFailed as failure:
            self.kubelet.errors.append(f"Pod {self.name[0]}/{self.name[1]}: {failure}")
            for container in [*self.init, *self.containers]:
                if "running" not in container.state and "terminated" not in container.state:
                    container.state = {
                        "waiting": {"reason": "CreateContainerConfigError", "message": str(failure)}
                    }
            await self._report()

    async def _initialize(self, container: Container) -> bool:
        """Run an init container until it succeeds (a failure is run again after the
        back-off); False if it failed in a Pod that never restarts one (it Failed)."""
        while True:
            if await self._run_once(container) == 0:
                return True
            if self.pod["spec"].get("restartPolicy", "Always") == "Never":
                return False
            await self._back_off(container)

    async def _supervise(self, container: Container) -> None:
        """Run a container; start it again as the restart policy says."""
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while True:
            code = await self._run_once(container)
            if (
                container.name == HARNESS_CONTAINER
                and self._sandbox is None
                and self._taken(container)
            ):
                # Another process on this machine took the address between its probe and
                # the Harness's bind: an artefact of sharing one loopback, not a crash.
                self.ip = self._address()
                container.runs = container.restarts = 0
                container.last_state = {}
                continue
            if policy == "Never" or (policy == "OnFailure" and code == 0):
                await self._report()
                return
            await self._back_off(container)

    async def _back_off(self, container: Container) -> None:
        """Wait as the kubelet does before a restart (``CrashLoopBackOff`` meanwhile)."""
        finished = time.monotonic()
        wait = container.backoff.wait_s(finished, finished)
        if wait > 0:
            meta = self.pod["metadata"]
            container.last_state = container.state
            container.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {go_duration(container.backoff.delay)} restarting "
                    f"failed container={container.name} "
                    f"pod={meta['name']}_{meta['namespace']}({self.uid})",
                }
            }
            await self._report()
            await asyncio.sleep(wait)
        container.backoff.restarting(finished, time.monotonic())

    async def _run_once(self, container: Container) -> int:
        """Start the container, report it running, probe it, and wait for its end: its
        exit code (reported, with the state it ended in)."""
        if container.runs:
            container.restarts += 1
            if "terminated" in container.state:
                container.last_state = container.state
        container.runs += 1
        started_at = now_stamp()
        container.log_start = container.log.stat().st_size if container.log.exists() else 0
        container.message_file = self._message_file(container)
        process = await self._spawn(container)
        container.process = process
        container.container_id = f"containerd://{secrets.token_hex(32)}"
        container.state = {"running": {"startedAt": started_at}}
        probe = (container.spec.get("readinessProbe") or {}).get("httpGet")
        container.ready = probe is None and not container.init
        helpers = []
        if probe is not None and not container.init:
            helpers.append(asyncio.create_task(self._probe(container, process)))
        if process.stdout is not None:
            helpers.append(asyncio.create_task(self._read_harness(container, process)))
        try:
            await self._report()
            returncode = await process.wait()
            _kill_group(process)
            if process.stdout is not None:  # what it said last, before it ended
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(helpers[-1]), STOP_S)
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        container.ended(returncode, started_at)
        await self._report()
        return exit_code(returncode)

    def _message_file(self, container: Container) -> Path:
        """A new, empty file for this run of the container's termination message,
        standing for its ``terminationMessagePath``."""
        if self._messages is None:
            self._messages = _directory("kubeturn-messages-")
            self._scratch.append(self._messages)
        path = self._messages / f"{container.name}-{container.runs}"
        path.touch(mode=0o666)
        target = container.spec.get("terminationMessagePath") or TERMINATION_LOG
        self.mounts.setdefault(container.name, {})[target] = path
        return path

    async def _probe(self, container: Container, process: asyncio.subprocess.Process) -> None:
        """The container's readiness probe (``httpGet``), as long as this run of it lasts."""
        spec = PROBE_DEFAULTS | container.spec["readinessProbe"]
        http = spec["httpGet"]
        port = http["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in container.spec["ports"] if p["name"] == port)
        url = f"http://{http.get('host') or self.ip}:{port}{http.get('path', '/')}"
        successes = failures = 0
        await asyncio.sleep(spec["initialDelaySeconds"])
        assert self.kubelet.probes is not None
        while process.returncode is None:
            try:
                timeout = aiohttp.ClientTimeout(total=spec["timeoutSeconds"])
                async with self.kubelet.probes.get(url, timeout=timeout) as answer:
                    ok = 200 <= answer.status < 400
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
            if not container.ready and successes >= spec["successThreshold"]:
                container.ready = True
                await self._report()
            elif container.ready and failures >= spec["failureThreshold"]:
                container.ready = False
                await self._report()
            await asyncio.sleep(spec["periodSeconds"])

    async def _spawn(self, container: Container) -> asyncio.subprocess.Process:
        """Start the container's process, its output appended to its log."""
        spec, name = container.spec, container.name
        mounts = self.mounts[name]
        if name == HARNESS_CONTAINER:
            # The Harness names the work tree by the paths the toolbox sees it at.
            mounts = {**self.mounts.get(TOOLS_CONTAINER, {}), **mounts}
        args = [_rewrite(arg, mounts) for arg in spec.get("args", [])]
        if name == TOOLS_CONTAINER and not container.init:
            args[args.index("--client-uid") + 1] = str(os.getuid())
            argv = [*TOOLBOX, *args, "--run-as", f"{NOBODY}:{NOBODY}"]
            env = {k: os.environ[k] for k in ("PATH", "LANG") if k in os.environ}
        else:
            if name == HARNESS_CONTAINER and not container.init:
                args = [self.ip or "" if arg == "0.0.0.0" else arg for arg in args]
            command = [_rewrite(part, mounts) for part in spec.get("command", [])]
            if command and command[0] == IMAGE_PYTHON:
                command[0] = sys.executable
            argv = [*(command or HARNESS_ENTRYPOINT), *args]
            env = await self._env(spec, mounts)
        read_only = self._read_only(spec, self.mounts[name])
        if read_only:
            namespace = ["unshare", "--mount", "--propagation", "private", "--"]
            argv = [*namespace, "sh", "-c", READ_ONLY, "sh", *map(str, read_only), "--", *argv]
        container.log.parent.mkdir(exist_ok=True)
        with container.log.open("ab") as log:
            return await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE if name == HARNESS_CONTAINER else log,
                stderr=log,
                start_new_session=True,  # its process group stands for the container
            )

    def _read_only(self, spec: Body, mounts: Mapping[str, Path]) -> list[Path]:
        """The directories of the container's read-only mounts: ``readOnly`` on the mount
        or on the volume's claim."""
        claims = {
            v["name"]
            for v in self.pod["spec"].get("volumes", [])
            if (v.get("persistentVolumeClaim") or {}).get("readOnly")
        }
        return [
            mounts[m["mountPath"].rstrip("/")]
            for m in spec.get("volumeMounts", [])
            if m.get("readOnly") or m["name"] in claims
        ]

    async def _read_harness(
        self, container: Container, process: asyncio.subprocess.Process
    ) -> None:
        """Copy the Harness's stdout to its log; the sandbox is there once it listens (and
        the Pod's address said)."""
        assert process.stdout is not None
        async for line in process.stdout:
            with container.log.open("ab") as log:
                log.write(line)
            if line.decode(errors="replace").startswith(LISTENING) and self.ip:
                self._listening(process)
                await self._report()

    def _listening(self, process: asyncio.subprocess.Process) -> None:
        namespace, name = self.name
        if self._sandbox is not None:
            self._sandbox.process = process
            return
        port = next(
            (
                p["containerPort"]
                for c in self.containers
                for p in c.spec.get("ports", [])
                if c.name == HARNESS_CONTAINER and p.get("name") == "harness"
            ),
            8080,
        )
        mounts = {**self.mounts.get(TOOLS_CONTAINER, {}), **self.mounts[HARNESS_CONTAINER]}
        harness = next(c for c in self.containers if c.name == HARNESS_CONTAINER)
        self._sandbox = Sandbox(
            namespace,
            name,
            self.uid,
            self.ip or "",
            f"http://{self.ip}:{port}",
            mounts,
            harness.log,
            process,
        )
        self.kubelet.sandboxes[self.name] = self._sandbox
        self.kubelet.started.append(self._sandbox)

    def _taken(self, container: Container) -> bool:
        """Whether this run of the Harness ended because its address was taken."""
        with container.log.open("rb") as handle:
            handle.seek(container.log_start)
            said = handle.read().decode(errors="replace").strip().splitlines()
        return bool(said) and CANNOT_LISTEN in said[-1]

    def _address(self) -> str:
        """A loopback address for the Pod: free now on its containers' ports, and never
        given to another Pod."""
        ports = [p["containerPort"] for c in self.containers for p in c.spec.get("ports", [])]
        for last in range(2, 255):
            ip = f"127.0.0.{last}"
            if ip not in self.kubelet.addresses and all(_free(ip, port) for port in ports):
                self.kubelet.addresses.add(ip)
                return ip
        raise PodFailed("no loopback address 127.0.0.2-254 is free for the Pod")

    # ------------------------------------------------------------------ its end

    async def _kill(self, grace: float, *, follow: bool, report: bool = True) -> None:
        """SIGTERM to every container's process, SIGKILL after ``grace`` (at least the
        kubelet's 2 s) to those left; each one's end is reported as it comes
        (``report``); ``follow``: a later, shorter ``deletionGracePeriodSeconds``
        shortens the wait."""
        live = {
            c: c.process
            for c in [*self.init, *self.containers]
            if c.process is not None and c.process.returncode is None
        }
        for process in live.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        begun = time.monotonic()
        deadline = begun + max(grace, MIN_GRACE_S)
        exits = {asyncio.ensure_future(p.wait()): c for c, p in live.items()}
        try:
            while exits and time.monotonic() < deadline:
                self._changed.clear()
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    done, _ = await asyncio.wait(
                        [*exits, changed],
                        timeout=deadline - time.monotonic(),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    changed.cancel()
                    await asyncio.gather(changed, return_exceptions=True)
                for exited in done & exits.keys():
                    self._ended(exits.pop(exited))
                if report and done - {changed}:
                    await self._report()
                shorter = self.pod["metadata"].get("deletionGracePeriodSeconds")
                if follow and shorter is not None:
                    deadline = min(deadline, begun + max(float(shorter), MIN_GRACE_S))
        finally:
            for process in live.values():
                _kill_group(process)
            await asyncio.gather(*exits, return_exceptions=True)
            for container in exits.values():
                self._ended(container)
        self._unlist()

    def _ended(self, container: Container) -> None:
        """A container whose process was stopped: ``terminated``."""
        if container.process is not None and container.process.returncode is not None:
            started = container.state.get("running", {}).get("startedAt", now_stamp())
            container.ended(container.process.returncode, started)

    def _unlist(self) -> None:
        """The sandbox's Harness no longer runs: it leaves ``Kubelet.sandboxes``."""
        if self._sandbox is not None and self.kubelet.sandboxes.get(self.name) is self._sandbox:
            del self.kubelet.sandboxes[self.name]

    async def _delete(self) -> None:
        """Remove the Pod: a delete with no grace, of this very Pod."""
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": self.uid}}
        assert self.kubelet.session is not None
        async with self.kubelet.session.delete(self.path, json=options) as answer:
            if answer.status not in (200, 404, 409):
                raise PodFailed(f"deleting the Pod: HTTP {answer.status}")

    async def _clean_up(self) -> None:
        if self.stopped.is_set():
            return
        self._unlist()
        self.kubelet.forget(self)
        for path in self._scratch:
            shutil.rmtree(path, ignore_errors=True)
        namespace = self.name[0]
        for uid in self.claims:
            if self.kubelet.in_use(uid) or uid not in self.kubelet.claims:
                continue
            with contextlib.suppress(PodFailed, aiohttp.ClientError):
                if not await self._claim_exists(namespace, uid):
                    shutil.rmtree(self.kubelet.claims.pop(uid), ignore_errors=True)
        self.stopped.set()

    async def _claim_exists(self, namespace: str, uid: str) -> bool:
        for volume in self.pod["spec"].get("volumes", []):
            if "persistentVolumeClaim" in volume:
                name = volume["persistentVolumeClaim"]["claimName"]
                found = await self.kubelet.get_or_none(
                    f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
                )
                if found is not None and found["metadata"]["uid"] == uid:
                    return True
        return False

    # ------------------------------------------------------------------ its status

    async def _report(self, *, terminal: bool = False, keep_phase: bool = False) -> None:
        """Write the Pod's status as its containers now make it, if it changed, over the
        version last seen (read again after a conflict): a Pod someone else ended (an
        eviction) is never made to run again, and is left its phase."""
        async with self._lock:
            current: Body | None = self.pod
            for _ in range(3):
                if current is None or current["metadata"]["uid"] != self.uid:
                    return
                self.observe(current)
                ended = (current.get("status") or {}).get("phase") in TERMINAL
                if ended and not terminal:
                    return  # someone else ended it: _until_ended stops it
                status = self._status(terminal=terminal)
                if keep_phase:
                    status.pop("phase")
                if status == self._written:
                    return
                version = current["metadata"]["resourceVersion"]
                answer, written = await self.kubelet.patch_status(self.path, status, version)
                if written is not None:
                    self._written = status
                    self.observe(written)
                    return
                if answer != 409:
                    return  # gone meanwhile
                current = await self.kubelet.get_or_none(self.path)

    def _status(self, *, terminal: bool) -> Body:
        init = [c.status() for c in self.init]
        main = [c.status() for c in self.containers]
        phase = pod_phase(self.pod["spec"], init, main, terminal=terminal)
        unready = [c.name for c in self.containers if not c.ready]
        pending = [c.name for c in self.init if "terminated" not in c.state]
        conditions = [
            self._condition("PodReadyToStartContainers", True),
            self._condition(
                "Initialized",
                self.initialized,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending)}]",
            ),
            self._condition(
                "Ready",
                not unready and not terminal,
                "PodCompleted" if terminal else "ContainersNotReady",
                f"containers with unready status: [{' '.join(unready)}]",
            ),
            self._condition(
                "ContainersReady",
                not unready and not terminal,
                "PodCompleted" if terminal else "ContainersNotReady",
                f"containers with unready status: [{' '.join(unready)}]",
            ),
            self._condition("PodScheduled", True),
        ]
        status: Body = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "containerStatuses": main,
        }
        if self.init:
            status["initContainerStatuses"] = init
        if self.ip is not None and self.initialized and (self._sandbox or not self._serves()):
            status |= {"podIP": self.ip, "podIPs": [{"ip": self.ip}]}
        return status

    def _serves(self) -> bool:
        """Whether the Pod has a Harness: its address is said once the Harness listens."""
        return any(c.name == HARNESS_CONTAINER for c in self.containers)

    def _condition(self, type_: str, true: bool, reason: str = "", message: str = "") -> Body:
        value = "True" if true else "False"
        seen = self._transitions.get(type_)
        if seen is None or seen[0] != value:
            seen = self._transitions[type_] = (value, now_stamp())
        condition = {"type": type_, "status": value, "lastTransitionTime": seen[1]}
        if not true and reason:
            condition |= {"reason": reason, "message": message}
        return condition

    # ------------------------------------------------------------------ volumes and env

    async def _volumes(self) -> dict[str, Path]:
        namespace = self.name[0]
        volumes = {}
        for volume in self.pod["spec"].get("volumes", []):
            volumes[volume["name"]] = await self._volume(namespace, volume)
        return volumes

    async def _volume(self, namespace: str, volume: Body) -> Path:
        if "persistentVolumeClaim" in volume:
            name = volume["persistentVolumeClaim"]["claimName"]
            claim = await self.kubelet.get(
                f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"
            )
            uid = claim["metadata"]["uid"]
            self.claims.add(uid)
            if uid not in self.kubelet.claims:
                self.kubelet.claims[uid] = _directory("kubeturn-pvc-")
            return self.kubelet.claims[uid]
        path = _directory("kubeturn-vol-")
        self._scratch.append(path)
        if "emptyDir" in volume:
            return path
        if "configMap" in volume:
            plural, source_name = "configmaps", volume["configMap"]["name"]
            optional = bool(volume["configMap"].get("optional"))
        elif "secret" in volume:
            plural, source_name = "secrets", volume["secret"]["secretName"]
            optional = bool(volume["secret"].get("optional"))
        else:
            raise PodFailed(f"volume {volume['name']}: only PVCs, emptyDirs, ConfigMaps, Secrets")
        path_of = f"/api/v1/namespaces/{namespace}/{plural}/{source_name}"
        source = await self.kubelet.get_or_none(path_of)
        if source is None:
            if optional:
                return path  # an optional source that is missing: an empty directory
            raise PodFailed(f"GET {path_of}: HTTP 404")
        for key, value in _values(source).items():
            (path / key).write_text(value)
        return path

    def _claim_mounts(self, volumes: Mapping[str, Path]) -> set[Path]:
        """What the init containers mounted of the claims."""
        claims = {
            v["name"] for v in self.pod["spec"].get("volumes", []) if "persistentVolumeClaim" in v
        }
        return {
            self.mounts[c.name][m["mountPath"].rstrip("/")]
            for c in self.init
            for m in c.spec.get("volumeMounts", [])
            if m["name"] in claims
        }

    async def _env(self, container: Body, mounts: Mapping[str, Path]) -> dict[str, str]:
        """The container's environment: this process's, without KUBETURN_*, plus its own."""
        namespace = self.name[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETURN_")}
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                found = await self._object("configmaps", namespace, source["configMapRef"]["name"])
            else:
                found = await self._object("secrets", namespace, source["secretRef"]["name"])
            prefix = source.get("prefix", "")
            env |= {prefix + key: value for key, value in _values(found).items()}
        for variable in container.get("env", []):
            name = variable["name"]
            if "value" in variable:
                env[name] = _rewrite(str(variable["value"]), mounts)
                continue
            ref = variable.get("valueFrom", {})
            if "secretKeyRef" in ref or "configMapKeyRef" in ref:
                plural, key_ref = (
                    ("secrets", ref["secretKeyRef"])
                    if "secretKeyRef" in ref
                    else ("configmaps", ref["configMapKeyRef"])
                )
                values = _values(await self._object(plural, namespace, key_ref["name"]))
                if key_ref["key"] not in values:
                    raise PodFailed(
                        f"env {name}: {plural} {key_ref['name']} has no {key_ref['key']}"
                    )
                env[name] = values[key_ref["key"]]
            elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[name] = self.ip or ""
            else:
                raise PodFailed(f"env {name}: unsupported source {ref}")
        return env

    async def _object(self, plural: str, namespace: str, name: str) -> Body:
        return await self.kubelet.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")


def _values(source: Body) -> dict[str, str]:
    """A ConfigMap's or Secret's values (``data``, base64 in a Secret)."""
    data = dict(source.get("data") or {})
    if source.get("kind") == "Secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
    return data


def _mounts(container: Body, volumes: Mapping[str, Path]) -> dict[str, Path]:
    """The container's mount paths → their directories (a ``subPath`` made if missing)."""
    mounts = {}
    for mount in container.get("volumeMounts", []):
        path = volumes[mount["name"]]
        if mount.get("subPath"):
            path = path / mount["subPath"]
            if not path.is_dir():
                path.mkdir(parents=True)
                path.chmod(0o777)
        mounts[mount["mountPath"].rstrip("/")] = path
    return mounts


def _rewrite(text: str, mounts: Mapping[str, Path]) -> str:
    """``text`` with each mount path (a whole path component, followed by ``/``, a quote,
    a space, a shell operator or the end) replaced by its directory, in one pass: a
    directory put in is never read again as a mount path (``/tmp``)."""
    if not mounts:
        return text
    paths = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    pattern = rf"(?<![\w/])({paths})(?=[/\"'\s;&|<>)]|$)"
    return re.sub(pattern, lambda found: str(mounts[found.group(1)]), text)


def _directory(prefix: str) -> Path:
    """A new directory under /tmp that uid 65534 can use (its parent is /tmp)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o777)
    return path


def _give_to_nobody(root: Path) -> None:
    os.chown(root, NOBODY, NOBODY)
    for directory, names, files in os.walk(root):
        for name in [*names, *files]:
            os.lchown(os.path.join(directory, name), NOBODY, NOBODY)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILL to what is left of a container (its process group): as a container's
    processes end with it. The toolbox's sessions, each a process group of its own, are
    ended by the toolbox itself."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _free(ip: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``ip`` now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((ip, port))
        except OSError:
            return False
    return True


@contextlib.asynccontextmanager
async def running(api_url: str, logs: Path, *, token: str) -> AsyncIterator[Kubelet]:
    """A kubelet for the emulator at ``api_url``, presenting ``token``, until the block
    ends; logs in ``logs``."""
    kubelet = Kubelet(api_url, logs, token=token)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()
