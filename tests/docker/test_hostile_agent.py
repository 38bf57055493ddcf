"""A hostile Agent against the sandbox Pod's layout, in the real Harness image: the threat
model's proof where a Docker engine runs (the in-process layouts are ``tests/hostile``).

Two containers of the image, as ``kubeturn.k8s.objects.sandbox_pod`` makes them: ``harness``
(uid 10001, the tokens, a provider's key and a Workspace ``env`` value in its environment,
its data on a volume of its own) and ``tools`` (uid 10002 with group 10001, as the Pod's
``fsGroup`` gives; the toolbox under tini; the work tree; no secret), each with its own
PID namespace, every capability dropped and ``no-new-privileges``, sharing the toolbox's
socket directory and the host's loopback network (the Pod's one network namespace). The
scripted model and a stub Orchestrator serve on the host's 127.0.0.1. The work tree is a
small volume the Agent can fill (where one can be mounted).

The hostile Agent of Run A makes the calls of ``tests/hostile/agent.py``; the proofs of
``tests/hostile/proofs.py`` run on what it found (the process it attacks outside its
session is the toolbox: the Harness is not in its PID namespace). Besides: no process of
the Harness's
container is visible from the tools' (another PID namespace), and a Harness killed in the
middle of a command leaves no process of it behind in the tools container, which serves
on.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kubeturn.k8s import objects
from tests.hostile import agent
from tests.hostile.layout import Attack, Scene, hooks_never_run, make_clone, small_volume
from tests.hostile.proofs import (  # noqa: F401  (the proofs run here with this layout)
    ABI,
    TestFileTools,
    TestFullVolume,
    TestProcesses,
    TestSecrets,
    TestSharedWorkspace,
    TestToolbox,
)

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine

ROOTS = ("/work", "/tmp", "/run", "/etc", "/var", "/home", "/root", "/opt", "/srv", "/mnt")
"""Everything of the tools container's filesystem but the image's ``/usr`` (which no one
writes) and the kernel's ``/proc``, ``/sys`` and ``/dev``."""
CONTAINER_START_S = 60.0
GONE_WITHIN_S = 10.0
DATA_DIR = objects.DATA_DIR
BUILD_AND_RUN_S = 1800.0

pytestmark = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock: nothing confines")


class PodScene(Scene):
    """The two containers standing for the sandbox Pod, with the host's servers."""

    def __init__(self, engine: DockerEngine, image: str, tmp: Path, work: Path, *, full: bool):
        super().__init__("pod", tmp, work, disk_full=full)
        self.engine, self.image = engine, image
        self.tool_uid = objects.TOOL_UID
        self.names = {
            c: f"kubeturn-hostile-{c}-{uuid.uuid4().hex[:8]}" for c in ("tools", "harness")
        }
        self.sockets = Path(tempfile.mkdtemp(prefix="kubeturn-socket-"))
        self.sockets.chmod(0o777)
        self.harness_home = Path(tempfile.mkdtemp(prefix="kubeturn-harness-"))
        os.chown(self.harness_home, objects.HARNESS_UID, objects.HARNESS_UID)
        self.harness_home.chmod(0o700)
        self.port = 0

    async def start(self) -> None:
        await super().start_servers()
        security = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--network=host"]
        self.engine(
            "run", "--detach", "--name", self.names["tools"], *security,
            "--user", f"{objects.TOOL_UID}:{objects.TOOL_UID}",
            "--group-add", str(objects.HARNESS_UID),
            "--tmpfs", "/tmp:rw,exec,mode=1777",
            "--volume", f"{self.work_root}:{objects.WORK_ROOT}",
            "--volume", f"{self.sockets}:{objects.TOOLBOX_DIR}",
            "--entrypoint", objects.TOOLBOX_COMMAND[0],
            self.image, *objects.TOOLBOX_COMMAND[1:],
            "--socket", objects.TOOLBOX_SOCKET,
            "--client-uid", str(objects.HARNESS_UID),
            "--scratch-root", "/tmp/kubeturn",
        )  # fmt: skip
        env = {**self.harness_environment(), "KUBETURN_PROVIDERS": "/etc/kubeturn/providers.yaml"}
        self.port = _free_port()
        self.engine(
            "run", "--detach", "--name", self.names["harness"], *security,
            "--user", f"{objects.HARNESS_UID}:{objects.HARNESS_UID}",
            *(item for name, value in env.items() for item in ("--env", f"{name}={value}")),
            "--volume", f"{self.providers}:/etc/kubeturn/providers.yaml:ro",
            "--volume", f"{self.sockets}:{objects.TOOLBOX_DIR}",
            "--volume", f"{self.harness_home}:{objects.HARNESS_HOME}",
            self.image,
            "serve", "--host", "127.0.0.1", "--port", str(self.port),
            "--data-dir", DATA_DIR, "--work-root", objects.WORK_ROOT,
            "--toolbox", objects.TOOLBOX_SOCKET,
            "--orchestrator-url", self.orchestrator.url,
            "--tool-processes", str(agent.TOOL_PROCESSES),
            "--default-model", "scripted/any",
        )  # fmt: skip
        self.base = f"http://127.0.0.1:{self.port}"
        await self.until_ready()

    @property
    def url(self) -> str:
        return self.base

    async def until_ready(self) -> None:
        deadline = time.monotonic() + CONTAINER_START_S
        while True:
            try:
                assert self.session is not None
                async with self.session.get(f"{self.base}/readyz", headers=self.headers()) as got:
                    if got.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the Harness was not ready in time:\n{self.logs()}")
            await asyncio.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(
            f"--- {container}\n{self.engine('logs', name, check=False).stdout}"
            f"{self.engine('logs', name, check=False).stderr}"
            for container, name in self.names.items()
        )

    def toolbox_pid(self) -> int:
        """The toolbox's pid in the tools container (tini's child; its sessions are its)."""
        found = self.in_tools(
            "for p in /proc/[0-9]*; do grep -q '^PPid:\\s*1$' $p/status 2>/dev/null && "
            "tr '\\0' ' ' < $p/cmdline | grep -q kubeturn_harness.sandbox && "
            "basename $p; done"
        ).split()
        assert len(found) == 1, found
        return int(found[0])

    def on_host(self, path: Path) -> Path:
        """The host's directory standing for ``path`` under the container's work root."""
        return self.work_root / path.relative_to(objects.WORK_ROOT)

    def in_tools(self, command: str) -> str:
        """``command``'s output, run in the tools container (as its user, not as the Agent)."""
        return self.engine("exec", self.names["tools"], "bash", "-c", command, check=False).stdout

    def running(self, *needles: str) -> list[str]:
        """The command lines of the tools container's processes holding any of ``needles``."""
        listing = self.in_tools(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
        )
        return [line for line in listing.splitlines() if any(n in line for n in needles)]

    async def stop(self) -> None:
        for name in self.names.values():
            self.engine("rm", "--force", "--volumes", name, check=False)
        await super().stop()
        shutil.rmtree(self.sockets, ignore_errors=True)
        shutil.rmtree(self.harness_home, ignore_errors=True)


@pytest.fixture(scope="module")
def attack(
    docker_engine: DockerEngine, harness_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Attack]:
    with small_volume() as volume:
        work = volume if volume is not None else Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
        try:
            tmp = tmp_path_factory.mktemp("pod")
            scene = PodScene(docker_engine, harness_image, tmp, work, full=volume is not None)
            yield asyncio.run(_attack(scene))
        finally:
            if volume is None:
                shutil.rmtree(work, ignore_errors=True)


async def _attack(scene: PodScene) -> Attack:
    make_clone(scene.clone, objects.TOOL_UID)
    try:
        await scene.start()
        tree_a, tree_b = await scene.worktree(agent.RUN_A), await scene.worktree(agent.RUN_B)
        await asyncio.to_thread(_plant_canary, scene.on_host(tree_a), scene.secrets.canary)
        target = agent.Target(
            tree_a=str(tree_a),
            tree_b=str(tree_b),
            clone=f"{objects.WORK_ROOT}/.repos/target",
            work_root=objects.WORK_ROOT,
            data_dir=DATA_DIR,
            ports=(scene.port, int(scene.orchestrator.url.rpartition(":")[2])),
            roots=(str(tree_a), *ROOTS),
            toolbox_socket=objects.TOOLBOX_SOCKET,
            outside_pid=await asyncio.to_thread(scene.toolbox_pid),
            disk_full=scene.disk_full,
        )
        results, settled = await scene.hostile_turn(target, tree_a, tree_b)
        after = await asyncio.to_thread(_found, scene, scene.on_host(tree_b))
        if scene.disk_full:
            after["second turn"] = await scene.turn_after_full(tree_a)
        await asyncio.to_thread((scene.on_host(tree_a) / "big").unlink, True)
        after["run c"] = await hooks_never_run(scene)
        after["left after the harness died"] = await _harness_death(scene, tree_a)
        after["toolbox serves on"] = scene.running("kubeturn_harness.sandbox") != []
        return Attack("pod", scene.secrets, target, results, settled, after)
    except BaseException:
        print(scene.logs())
        raise
    finally:
        await scene.stop()


def _plant_canary(tree: Path, canary: str) -> None:
    (tree / "canary.txt").write_text(canary + "\n")
    os.chown(tree / "canary.txt", objects.TOOL_UID, objects.TOOL_UID)


def _found(scene: PodScene, tree_b: Path) -> dict[str, Any]:
    """What the hostile Turn left: processes, files, a hook."""
    work = scene.work_root
    planted = (work / "pwned", work / "pwned-fsmonitor", work / "planted")
    return {
        "escapes": scene.running(*agent.ESCAPES, agent.BOMB),
        "planted": sorted(p.name for p in planted if p.exists()),
        "hook": (scene.clone / ".git" / "hooks" / "post-checkout").exists(),
        "owned": sorted(p.name for p in tree_b.iterdir() if p.name.startswith("owned")),
        "etc": scene.in_tools("test -e /etc/kubeturn-hostile && echo yes") != "",
        "harness visible": scene.running("kubeturn_harness serve"),
    }


async def _harness_death(scene: PodScene, tree: Path) -> list[str]:
    """Start a long command in a Turn, kill the harness container, and see what is left
    in the tools container."""
    await scene.turn(agent.RUN_A, agent.LONG_PROMPT, tree, name="long")
    deadline = time.monotonic() + CONTAINER_START_S
    while not await asyncio.to_thread(scene.running, agent.LONG):
        assert time.monotonic() < deadline, "the long command never started"
        await asyncio.sleep(0.2)
    await asyncio.to_thread(scene.engine, "kill", "--signal", "KILL", scene.names["harness"])
    deadline = time.monotonic() + GONE_WITHIN_S
    while await asyncio.to_thread(scene.running, agent.LONG):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    return await asyncio.to_thread(scene.running, agent.LONG)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TestThePod:
    def test_no_process_of_the_harness_is_visible_to_the_tools(self, attack: Attack) -> None:
        assert attack.after["harness visible"] == []

    def test_the_toolbox_serves_on_when_the_harness_dies(self, attack: Attack) -> None:
        assert attack.after["toolbox serves on"] is True
