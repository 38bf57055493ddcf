"""The in-process layout of the hostile tier: a Harness process started as the sandbox
Pod's is (its secrets in its environment), which starts its own toolbox, a scripted
model and a stub Orchestrator, a Workspace tree with a clone and Runs' worktrees, and
what is looked at once the hostile Agent is done.

Two users: ``tools-as-nobody`` (the Harness as root, its tools as nobody:
``--tool-uid``) and ``one-user`` (the Harness and its tools as one user, as the local
runner runs them; root here when the tests run as root). The work tree is a small ext4
volume of its own where the tests run as root (so that an Agent can fill it while the
Harness's data lives elsewhere), a plain directory otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kubeturn_harness.scripted import parse_script, serve
from tests.harness.support import HarnessProcess, StubOrchestrator, agent_url, spawn_harness
from tests.hostile import agent

NOBODY = 65534
VOLUME_MIB = 24
"""The work volume's size: a clone and three worktrees take well under a MiB; the Agent's
64 MiB cannot fit."""
AFTER_FULL = "after the volume filled"
SETTLE_S = 300.0
"""The hostile Turn runs ~20 calls, one a search of the readable filesystem."""


@contextlib.contextmanager
def small_volume() -> Iterator[Path | None]:
    """A 24 MiB ext4 volume mounted on a new directory (no reserved blocks: root fills
    it too); None where it cannot be made (not root, no loop device)."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        yield None
        return
    image = Path(tempfile.mkdtemp(prefix="kubeturn-volume-")) / "work.img"
    mount = Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
    made = subprocess.run(
        f"truncate -s {VOLUME_MIB}M {image} && mkfs.ext4 -q -F -m 0 {image} && "
        f"mount -o loop {image} {mount}",
        shell=True,
        capture_output=True,
        check=False,
    )
    try:
        if made.returncode != 0:
            yield None
        else:
            mount.chmod(0o777)
            yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
        shutil.rmtree(mount, ignore_errors=True)
        shutil.rmtree(image.parent, ignore_errors=True)


def make_clone(clone: Path, owner: int) -> None:
    """A repository with one commit, owned by the tools' user (as a Pod's volume is)."""
    clone.mkdir(parents=True)
    git = ["git", "-c", "user.name=kubeturn", "-c", "user.email=k@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main", str(clone)], check=True)
    (clone / "README.md").write_text("# the shared clone\n")
    subprocess.run([*git, "-C", str(clone), "add", "README.md"], check=True)
    subprocess.run([*git, "-C", str(clone), "commit", "-q", "-m", "one"], check=True)
    subprocess.run(["chown", "-R", f"{owner}:{owner}", str(clone.parents[1])], check=True)


def processes_running(*needles: str) -> list[str]:
    """The command lines of this machine's processes that hold any of ``needles``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in line for needle in needles):
            found.append(line.strip())
    return found


def toolbox_of(harness_pid: int) -> tuple[int, str]:
    """The pid and socket of the toolbox the Harness ``harness_pid`` started."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        if parent == harness_pid and b"kubeturn_harness.sandbox" in argv:
            return int(entry.name), argv[argv.index(b"--socket") + 1].decode()
    raise AssertionError(f"the Harness {harness_pid} started no toolbox")


@dataclass
class Attack:
    """What one hostile Turn did, and what was found after it."""

    variant: str
    secrets: agent.Secrets
    target: agent.Target
    results: dict[str, str]
    settled: dict[str, Any]
    after: dict[str, Any] = field(default_factory=dict)

    @property
    def tools_as_root(self) -> bool:
        return self.variant == "one-user" and os.geteuid() == 0


class Scene:
    """One layout's servers and tree, for one test module."""

    def __init__(self, variant: str, tmp: Path, work_root: Path, *, disk_full: bool) -> None:
        self.variant, self.tmp, self.work_root, self.disk_full = variant, tmp, work_root, disk_full
        self.secrets = agent.Secrets()
        self.tool_uid = NOBODY if variant == "tools-as-nobody" else os.getuid()
        self.data_dir = tmp / "data"
        self.clone = work_root / ".repos" / "target"
        self.session: aiohttp.ClientSession | None = None
        self.harness: HarnessProcess | None = None
        self.cleanups: list[Any] = []

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secrets.bearer}"}

    def harness_environment(self) -> dict[str, str]:
        """The Harness's environment: its secrets, and the hash of the token it accepts."""
        digest = hashlib.sha256(self.secrets.bearer.encode()).hexdigest()
        return {**self.secrets.harness_env(), "KUBETURN_HARNESS_TOKEN_SHA256": digest}

    async def start_servers(self) -> None:
        """The stub Orchestrator, and the providers file naming the model's port; the
        model answers there once ``answer`` starts it (its script names what the Agent
        finds only once the Harness runs: its pid, its worktrees)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.model_port = probe.getsockname()[1]
        model_url = f"http://127.0.0.1:{self.model_port}/v1"
        self.orchestrator = StubOrchestrator()
        runner = web.AppRunner(self.orchestrator.app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.cleanups.append(runner.cleanup)
        self.orchestrator.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self.providers = self.tmp / "providers.yaml"
        self.providers.write_text(
            f"scripted:\n  type: openai\n  baseUrl: {model_url}\n  apiKeyEnv: OPENAI_API_KEY\n"
        )
        self.providers.chmod(0o644)
        self.session = aiohttp.ClientSession()

    async def start(self) -> None:
        """The servers, and the Harness (which starts its own toolbox)."""
        await self.start_servers()
        self.harness = await spawn_harness(
            self.data_dir,
            self.harness_environment(),
            self.tmp / "harness.log",
            "--work-root",
            str(self.work_root),
            "--orchestrator-url",
            self.orchestrator.url,
            "--providers",
            str(self.providers),
            "--tool-uid",
            str(self.tool_uid),
            "--tool-gid",
            str(self.tool_uid),
            "--tool-processes",
            str(agent.TOOL_PROCESSES),
            "--default-model",
            "scripted/any",
        )

    async def answer(self, script: str) -> None:
        """Start the scripted model with ``script``."""
        runner, _ = await serve(parse_script(script), port=self.model_port)
        self.cleanups.append(runner.cleanup)

    async def stop(self) -> None:
        if self.harness is not None:
            await self.harness.kill()
        if self.session is not None:
            await self.session.close()
        for cleanup in reversed(self.cleanups):
            await cleanup()

    @property
    def url(self) -> str:
        assert self.harness is not None
        return self.harness.url

    async def post(self, path: str, body: Any) -> tuple[int, Any]:
        assert self.session is not None
        async with self.session.post(
            f"{self.url}{path}", json=body, headers=self.headers()
        ) as response:
            return response.status, await response.json()

    async def worktree(self, run: str) -> Path:
        status, answer = await self.post(
            "/worktrees", {"run": run, "branch": f"kubeturn/{run}", "slots": ["target"]}
        )
        assert status == 200, answer
        return Path(answer["worktrees"]["target"]["path"])

    async def turn(self, run: str, prompt: str, cwd: Path, *, name: str = agent.AGENT) -> str:
        """Admit a Turn of ``run`` and wait for its settlement's outcome."""
        iid = f"default.{run}/root/{name}"
        self.orchestrator.surfaces[iid] = {"instanceId": iid, "menu": [], "allowed": []}
        body = {
            "prompt": prompt,
            "cwd": str(cwd),
            "definition": {"instructions": "You are an Agent.", "workspace": "write"},
        }
        status, answer = await self.post(agent_url("", name, iid), body)
        assert status == 200, answer
        return str(answer["submissionId"])

    async def history(self, run: str, *, name: str = agent.AGENT) -> dict[str, Any]:
        assert self.session is not None
        iid = f"default.{run}/root/{name}"
        async with self.session.get(
            agent_url(self.url, name, iid) + "?view=history", headers=self.headers()
        ) as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())

    async def hostile_turn(
        self, target: agent.Target, tree_a: Path, tree_b: Path
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """Start the model with the hostile script; give Run B a conversation whose
        prompt holds the marker (the logs must stay out of reach); run Run A's hostile
        Turn. Its tool results by probe, and its settlement."""
        secret_task = f"run B's task, {self.secrets.marker}"
        extra = {secret_task: "noted", AFTER_FULL: "still here"}
        await self.answer(agent.script(self.secrets, target, extra=extra))
        await self.settled(agent.RUN_B, await self.turn(agent.RUN_B, secret_task, tree_b))
        settled = await self.settled(
            agent.RUN_A, await self.turn(agent.RUN_A, agent.PROMPT, tree_a)
        )
        names = [name for name, _ in agent.probes(self.secrets, target)]
        return agent.results(names, (await self.history(agent.RUN_A))["messages"]), settled

    async def turn_after_full(self, tree_a: Path) -> str:
        """The outcome of one more Turn, once the Agent filled the work volume."""
        sid = await self.turn(agent.RUN_A, AFTER_FULL, tree_a, name="again")
        return str((await self.settled(agent.RUN_A, sid, name="again"))["outcome"])

    async def settled(self, run: str, sid: str, *, name: str = agent.AGENT) -> dict[str, Any]:
        async with asyncio.timeout(SETTLE_S):
            while True:
                for settlement in (await self.history(run, name=name))["settlements"]:
                    if settlement["submissionId"] == sid:
                        return dict(settlement)
                await asyncio.sleep(0.1)


async def hooks_never_run(scene: Scene) -> dict[str, object]:
    """Plant in the clone (as a kernel without Landlock would let an Agent) a hook that
    leaves a file, an fsmonitor that does, and a failing reference-transaction hook; then
    ask for Run C's worktree."""
    pwned = await asyncio.to_thread(_plant_hooks, scene.clone, scene.work_root / "pwned-by-hook")
    status, answer = await scene.post(
        "/worktrees", {"run": agent.RUN_C, "branch": f"kubeturn/{agent.RUN_C}", "slots": ["target"]}
    )
    return {"status": status, "pwned": await asyncio.to_thread(pwned.exists), "answer": answer}


def _plant_hooks(clone: Path, pwned: Path) -> Path:
    hooks = clone / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook, body in {
        "post-checkout": f"#!/bin/sh\ntouch {pwned}\n",
        "reference-transaction": "#!/bin/sh\nexit 1\n",
    }.items():
        (hooks / hook).write_text(body)
        (hooks / hook).chmod(0o755)
    config = ["git", "-c", "safe.directory=*", "-C", str(clone), "config"]
    subprocess.run([*config, "core.fsmonitor", f"touch {pwned}"], check=True)
    return pwned
