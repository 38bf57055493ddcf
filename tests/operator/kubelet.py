"""A kubelet for the operator tier: sandbox Pods in the API emulator become real Harnesses.

The emulator stores Pods and nothing runs them. :class:`Kubelet` polls the emulator (over
HTTP, as a node's kubelet lists its Pods) for Pods labelled
``app.kubernetes.io/component=sandbox`` and, for each new one, does what a node would:

- volumes become directories: a ``persistentVolumeClaim`` one directory per claim (kept
  across Pods, as a PVC outlives its Pod), an ``emptyDir`` one per Pod, a ``configMap``
  or ``secret`` one per Pod holding its keys as files (``data`` base64-decoded for a
  Secret, ``stringData`` as written: the emulator does not fold one into the other); a
  mount's ``subPath`` is that directory inside its volume, made (mode 0777, as the
  volume's root) when missing;
- the init containers run, in order, as root, with their own command, their env
  resolved and every mount path in their command and env replaced by its directory
  (the clone script clones each repo slot into ``<work>/.repos/<slot>``); a failing init
  container leaves the Pod Pending and is reported in :attr:`Kubelet.errors`;
- then what the init containers mounted of the claims is given to uid/gid 65534: the
  Harness runs as root here and runs its tools as nobody, who must own the clones (git
  refuses a repository owned by another user) and be able to write worktrees beside
  them; the rest of a claim (the Harness's own directory) stays root's; directories are
  mode 0777 (``tempfile.mkdtemp`` under /tmp, so nobody can reach them);
- the ``tools`` container runs the toolbox (the image's ``kubeturn_harness.sandbox`` with
  this Python) with its args' mount paths replaced and no environment but ``PATH`` and
  ``LANG`` (the image's); it serves the uid the Harness really runs as here (root), and
  its sessions run as nobody (``--run-as``), who owns the clones, as the Pod's uid 10002
  does; the kubelet waits until it listens;
- the ``harness`` container runs as ``python -m kubeturn_harness`` (the image's
  entrypoint) with its args, its env resolved (``valueFrom.secretKeyRef`` and
  ``configMapKeyRef`` read from the emulator, ``envFrom`` too) and mount paths replaced;
  ``--host 0.0.0.0`` becomes the Pod's own loopback address (127.0.0.2, 127.0.0.3, …, a
  free one per Pod, never one an earlier Pod had, as a cluster's address allocator
  moves on), so each Harness listens at ``http://<podIP>:8080`` as in a cluster;
- once it prints ``harness listening on …`` the Pod's status is patched: phase
  ``Running``, ``podIP``, Ready conditions.

A Pod that is deleted, or replaced by one of the same name, has its Harness stopped
(SIGTERM, then SIGKILL). While :attr:`Kubelet.held` is set, no new Pod is started (a
node slow to start one); those already running run on. :meth:`Kubelet.stop` stops every
Harness and removes every directory. Not emulated: probes, restarts of a container that
exits, resource limits, the securityContext's user (everything runs as root, tools as
nobody), ``items`` of volume sources, image pulls (every image is the Harness).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

SELECTOR = "app.kubernetes.io/component=sandbox"
POLL_S = 0.1
"""How often the Pods are listed: a sandbox starts within a tenth of a second of its Pod."""
START_S = 30.0
"""Bound of one init container, and of a Harness's start until it listens."""
STOP_S = 5.0
"""How long a stopped Harness may take to exit before it is killed."""
NOBODY = 65534
HARNESS_ENTRYPOINT = (sys.executable, "-m", "kubeturn_harness")
"""What every image runs when a container names no ``command``: the Harness image's."""
TOOLBOX = (sys.executable, "-m", "kubeturn_harness.sandbox")
"""What the ``tools`` container's command (tini, then the image's Python) runs here."""
LISTENING = "harness listening on "
TOOLBOX_LISTENING = "toolbox listening on "

Body = dict[str, Any]


class PodFailed(Exception):
    """The Pod cannot run; the message says why."""


@dataclasses.dataclass
class Sandbox:
    """One sandbox Pod, running: its Harness's process, address and directories."""

    namespace: str
    name: str
    uid: str
    ip: str
    url: str
    """``http://<podIP>:<port>``: where the operator reaches the Harness."""
    mounts: dict[str, Path]
    """The Harness's and the toolbox's mount paths → the directories standing for them."""
    log: Path
    """The Harness's stderr (its log); the toolbox's is beside it."""
    process: asyncio.subprocess.Process
    scratch: list[Path]
    """Directories of this Pod alone, removed when it stops."""
    toolbox: asyncio.subprocess.Process | None = None

    def path(self, pod_path: str) -> Path:
        """The directory or file standing for ``pod_path`` in the Harness container."""
        return Path(_rewrite(pod_path, self.mounts))

    @property
    def work_root(self) -> Path:
        return self.path("/work")

    @property
    def data_dir(self) -> Path:
        return self.path("/var/lib/kubeturn/data")

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after :data:`STOP_S`, to the Harness and the toolbox;
        waits for their exits."""
        await _stop(self.process)
        if self.toolbox is not None:
            await _stop(self.toolbox)
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)


class Kubelet:
    """Runs the emulator's sandbox Pods; ``errors`` lists every Pod it could not run."""

    def __init__(self, api_url: str, logs: Path, *, token: str) -> None:
        self._api_url = api_url.rstrip("/")
        self._token = token
        self._logs = logs
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._claims: dict[tuple[str, str], Path] = {}
        self._failed: set[str] = set()
        self.sandboxes: dict[tuple[str, str], Sandbox] = {}
        """(namespace, Pod name) → its running sandbox."""
        self.errors: list[str] = []
        self.started: list[Sandbox] = []
        """Every sandbox started, in order (stopped ones too)."""
        self.held = False
        """While True, Pods that are not running yet are not started."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # force_close: no idle keep-alive connection stays behind in the API server.
        connector = aiohttp.TCPConnector(force_close=True)
        headers = {"Authorization": f"Bearer {self._token}"}
        self._session = aiohttp.ClientSession(self._api_url, connector=connector, headers=headers)
        self._task = asyncio.create_task(self._run(), name="kubelet")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sandbox in self.sandboxes.values():
            await sandbox.stop()
        self.sandboxes.clear()
        if self._session is not None:
            await self._session.close()
        for path in self._claims.values():
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
                pods = await self._get(f"/api/v1/pods?labelSelector={SELECTOR}")
            except (PodFailed, aiohttp.ClientError) as failure:
                self.errors.append(f"listing the Pods: {failure}")
                await asyncio.sleep(POLL_S)
                continue
            seen = set()
            for pod in pods["items"]:
                meta = pod["metadata"]
                key = (meta["namespace"], meta["name"])
                seen.add(key)
                current = self.sandboxes.get(key)
                if current is not None and current.uid == meta["uid"]:
                    continue
                if current is not None:  # replaced by a new Pod of that name
                    await self.sandboxes.pop(key).stop()
                if self.held or meta["uid"] in self._failed or meta.get("deletionTimestamp"):
                    continue
                try:
                    sandbox = await self._start(pod)
                except (PodFailed, OSError, aiohttp.ClientError) as failure:
                    self._failed.add(meta["uid"])
                    self.errors.append(f"Pod {key[0]}/{key[1]}: {failure}")
                    continue
                self.sandboxes[key] = sandbox
                self.started.append(sandbox)
            for key in set(self.sandboxes) - seen:
                await self.sandboxes.pop(key).stop()
            await asyncio.sleep(POLL_S)

    async def _start(self, pod: Body) -> Sandbox:
        """Run the Pod; what it made is removed again if it cannot run."""
        scratch: list[Path] = []
        started: list[Sandbox] = []
        try:
            return await self._run_pod(pod, scratch, started)
        except BaseException:
            for sandbox in started:
                await sandbox.stop()
            for path in scratch:
                shutil.rmtree(path, ignore_errors=True)
            raise

    async def _run_pod(self, pod: Body, scratch: list[Path], started: list[Sandbox]) -> Sandbox:
        meta, spec = pod["metadata"], pod["spec"]
        namespace = meta["namespace"]
        volumes = {
            volume["name"]: await self._volume(namespace, volume, scratch)
            for volume in spec.get("volumes", [])
        }
        claims = {v["name"] for v in spec.get("volumes", []) if "persistentVolumeClaim" in v}
        given: set[Path] = set()
        for init in spec.get("initContainers", []):
            mounts = _mounts(init, volumes)
            given |= {
                mounts[m["mountPath"].rstrip("/")]
                for m in init.get("volumeMounts", [])
                if m["name"] in claims
            }
            env = await self._env(namespace, init, mounts, ip="")
            argv = [
                _rewrite(arg, mounts) for arg in [*init.get("command", []), *init.get("args", [])]
            ]
            await _run_to_end(
                argv or list(HARNESS_ENTRYPOINT), env, f"init container {init['name']}"
            )
        for path in sorted(given):
            await asyncio.to_thread(_give_to_nobody, path)
        containers = {c["name"]: c for c in spec["containers"]}
        toolbox = await self._start_toolbox(containers["tools"], volumes, meta)
        harness = containers["harness"]
        mounts = {**_mounts(containers["tools"], volumes), **_mounts(harness, volumes)}
        port = next(
            (p["containerPort"] for p in harness.get("ports", []) if p.get("name") == "harness"),
            8080,
        )
        log = self._logs / f"{namespace}.{meta['name']}.{meta['uid'][:8]}.log"
        for ip in _free_addresses(port, taken={s.ip for s in self.started}):
            env = await self._env(namespace, harness, mounts, ip=ip)
            args = [_rewrite(arg, mounts) for arg in harness.get("args", [])]
            args = [ip if arg == "0.0.0.0" else arg for arg in args]
            argv = [*(harness.get("command") or HARNESS_ENTRYPOINT), *args]
            process = await _spawn(argv, env, log)
            if process is None:
                continue  # the address was taken meanwhile: try the next one
            sandbox = Sandbox(
                namespace=namespace,
                name=meta["name"],
                uid=meta["uid"],
                ip=ip,
                url=f"http://{ip}:{port}",
                mounts=mounts,
                log=log,
                process=process,
                scratch=scratch,
                toolbox=toolbox,
            )
            started.append(sandbox)
            await self._patch_status(pod, ip)
            return sandbox
        await _stop(toolbox)
        raise PodFailed("no loopback address 127.0.0.2-254 is free for the Harness")

    async def _start_toolbox(
        self, tools: Body, volumes: Mapping[str, Path], meta: Body
    ) -> asyncio.subprocess.Process:
        """The ``tools`` container: the toolbox, once it listens."""
        mounts = _mounts(tools, volumes)
        args = [_rewrite(arg, mounts) for arg in tools.get("args", [])]
        args[args.index("--client-uid") + 1] = str(os.getuid())
        argv = [*TOOLBOX, *args, "--run-as", f"{NOBODY}:{NOBODY}"]
        env = {name: os.environ[name] for name in ("PATH", "LANG") if name in os.environ}
        log = self._logs / f"{meta['namespace']}.{meta['name']}.{meta['uid'][:8]}.tools.log"
        process, line = await _started(argv, env, log)
        if not line.startswith(TOOLBOX_LISTENING):
            await _stop(process)
            said = await asyncio.to_thread(log.read_text)
            raise PodFailed(f"the toolbox did not start ({line!r}); its log:\n{said[-3000:]}")
        return process

    async def _patch_status(self, pod: Body, ip: str) -> None:
        meta = pod["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "127.0.0.1",
            "startTime": now,
            "conditions": conditions,
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        headers = {"Content-Type": "application/merge-patch+json"}
        assert self._session is not None
        async with self._session.patch(path, json={"status": status}, headers=headers) as answer:
            if answer.status != 200:
                raise PodFailed(f"patching the Pod's status: HTTP {answer.status}")

    # ------------------------------------------------------------------ volumes and env

    async def _volume(self, namespace: str, volume: Body, scratch: list[Path]) -> Path:
        if "persistentVolumeClaim" in volume:
            claim = (namespace, volume["persistentVolumeClaim"]["claimName"])
            if claim not in self._claims:
                self._claims[claim] = _directory("kubeturn-pvc-")
            return self._claims[claim]
        path = _directory("kubeturn-vol-")
        scratch.append(path)
        if "emptyDir" in volume:
            return path
        if "configMap" in volume:
            source = await self._object("configmaps", namespace, volume["configMap"]["name"])
            files = _values(source)
        elif "secret" in volume:
            source = await self._object("secrets", namespace, volume["secret"]["secretName"])
            files = _values(source)
        else:
            raise PodFailed(f"volume {volume['name']}: only PVCs, emptyDirs, ConfigMaps, Secrets")
        for key, value in files.items():
            (path / key).write_text(value)
        return path

    async def _env(
        self, namespace: str, container: Body, mounts: Mapping[str, Path], *, ip: str
    ) -> dict[str, str]:
        """The container's environment: this process's, without KUBETURN_*, plus its own."""
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
                env[name] = ip
            else:
                raise PodFailed(f"env {name}: unsupported source {ref}")
        return env

    async def _object(self, plural: str, namespace: str, name: str) -> Body:
        return await self._get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")

    async def _get(self, path: str) -> Body:
        assert self._session is not None
        async with self._session.get(path) as answer:
            if answer.status != 200:
                raise PodFailed(f"GET {path}: HTTP {answer.status}")
            return dict(await answer.json())


def _values(source: Body) -> dict[str, str]:
    """A ConfigMap's or Secret's values: ``data`` (base64 in a Secret) and ``stringData``."""
    data = dict(source.get("data") or {})
    if source.get("kind") == "Secret":
        data = {k: base64.b64decode(v).decode() for k, v in data.items()}
    return data | dict(source.get("stringData") or {})


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
    """``text`` with each mount path (a whole path component) replaced by its directory,
    in one pass: a directory put in is never read again as a mount path (``/tmp``)."""
    if not mounts:
        return text
    paths = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    pattern = rf"(?<![\w/])({paths})(?=/|\"|'|\s|$)"
    return re.sub(pattern, lambda found: str(mounts[found.group(1)]), text)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after :data:`STOP_S`; waits for the exit."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(STOP_S):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


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


def _free_addresses(port: int, taken: set[str]) -> list[str]:
    """Loopback addresses 127.0.0.2-254 where ``port`` can be bound now, in order."""
    free = []
    for last in range(2, 255):
        ip = f"127.0.0.{last}"
        if ip in taken:
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((ip, port))
            except OSError:
                continue
        free.append(ip)
        if len(free) == 3:  # enough to retry a race with another process
            break
    return free


async def _run_to_end(argv: Sequence[str], env: dict[str, str], what: str) -> None:
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(START_S):
            out, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise PodFailed(f"{what} did not finish in {START_S:g} s") from None
    if process.returncode:
        raise PodFailed(f"{what} exited {process.returncode}: {out.decode(errors='replace')}")


async def _spawn(
    argv: Sequence[str], env: dict[str, str], log: Path
) -> asyncio.subprocess.Process | None:
    """Start a Harness; return it once it listens, or None when its address was taken."""
    process, line = await _started(argv, env, log)
    if line.startswith(LISTENING):
        return process
    if process.returncode is None:
        process.kill()
    await process.wait()
    said = await asyncio.to_thread(log.read_text)
    last = said.strip().splitlines()[-1] if said.strip() else ""
    if "cannot listen" in last:
        return None
    raise PodFailed(f"the Harness did not start ({line!r}); its log:\n{said[-3000:]}")


async def _started(
    argv: Sequence[str], env: dict[str, str], log: Path
) -> tuple[asyncio.subprocess.Process, str]:
    """Start ``argv`` with its stderr appended to ``log``; the process and the first line
    it printed within :data:`START_S` (empty if none)."""
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(START_S):
            return process, (await process.stdout.readline()).decode().strip()
    except TimeoutError:
        return process, ""


@contextlib.asynccontextmanager
async def running(api_url: str, logs: Path, *, token: str) -> AsyncIterator[Kubelet]:
    """A kubelet for the emulator at ``api_url``, presenting ``token``, until the block
    ends; Harness logs in ``logs``."""
    kubelet = Kubelet(api_url, logs, token=token)
    await kubelet.start()
    try:
        yield kubelet
    finally:
        await kubelet.stop()
