"""A hostile Agent against the sandbox, in-process: the threat model's proof on one
machine (docs/security/threat_model.md; the Pod's layout in the real images is
``tests/docker/test_hostile_agent.py``).

A scripted model plays an Agent of Run A under prompt injection: every tool call it
makes is an attack (``tests/hostile/agent.py``). The Harness runs as a process of its
own, its secrets in its environment as in the sandbox Pod, and starts its own toolbox;
Run B has a worktree beside Run A's in the same Workspace and a conversation in the
Harness's data. Each layout (``tools-as-nobody``: the Harness as root, its tools as
nobody; ``one-user``: both as one user) runs the hostile Turn once; the tests read what
each attack came to.

Cases, by the threat model's points:
1. secrets: the Agent's search of every ``/proc/*/environ`` and ``cmdline``, its
   environment, the filesystem and the Harness's port finds no secret (and does find
   the canary in its own worktree); the Harness's ``environ`` cannot be read;
2. file tools: they run as the tools' user, confined: ``/etc/shadow`` is unreadable to
   nobody, nothing is written into ``/etc``, and ``edit`` on the Harness's
   ``/proc/<pid>/task/<tid>/environ`` is no oracle;
3. a shared Workspace: Run B's worktree cannot be read or written, the conversation logs
   cannot be listed or read, no hook or fsmonitor can be planted in the clone every Run
   borrows from, and one planted there anyway (a kernel without Landlock) never runs
   when the Harness makes Run C's worktree, nor blocks it if it fails;
4. processes: ``setsid``, ``nohup``, a double fork and ``disown`` leave nothing running
   once the call returns; a fork bomb stops at the session's process limit (not for a
   root session: Linux exempts root from it); the Harness cannot be signalled (Landlock
   ABI 6 and later); when the Harness dies mid-command, its toolbox ends every process
   the session started;
5. a full work volume: the Agent's command and ``write`` say "No space left on device",
   and the Harness goes on recording (the Turn settles; another is admitted and
   settles);
and the toolbox's socket answers no one but the Harness.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeturn_harness.sandbox import landlock
from tests.harness.support import shared_dir
from tests.hostile import agent
from tests.hostile.layout import (
    Attack,
    Scene,
    make_clone,
    processes_running,
    small_volume,
    toolbox_of,
)

VARIANTS = ["tools-as-nobody", "one-user"] if os.geteuid() == 0 else ["one-user"]
ABI = landlock.abi()
LOCAL_ROOTS = ("/tmp", "/etc", "/run", "/home", "/root", "/var/tmp", "/dev/shm")
"""Where the Agent searches besides the Workspace's tree and the Harness's data: the
places a process of this machine leaves files in (the system's programs cannot hold a
secret the tests made)."""
GONE_WITHIN_S = 10.0

pytestmark = pytest.mark.skipif(ABI == 0, reason="this kernel has no Landlock: nothing confines")


@pytest.fixture(scope="module", params=VARIANTS)
def attack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Attack]:
    """The hostile Turn of one layout, run once for the module."""
    variant = str(request.param)
    with small_volume() as volume:
        work_root = volume if volume is not None else shared_dir()
        try:
            yield asyncio.run(_attack(variant, tmp_path_factory.mktemp(variant), work_root, volume))
        finally:
            if volume is None:
                subprocess.run(["rm", "-rf", str(work_root)], check=False)


async def _attack(variant: str, tmp: Path, work_root: Path, volume: Path | None) -> Attack:
    scene = Scene(variant, tmp, work_root, disk_full=volume is not None)
    make_clone(scene.clone, scene.tool_uid)
    try:
        await scene.start()
        assert scene.harness is not None
        tree_a, tree_b = await scene.worktree(agent.RUN_A), await scene.worktree(agent.RUN_B)
        (tree_a / "canary.txt").write_text(scene.secrets.canary + "\n")
        os.chown(tree_a / "canary.txt", scene.tool_uid, scene.tool_uid)
        harness_pid = scene.harness.process.pid
        toolbox_pid, socket_path = toolbox_of(harness_pid)
        port = int(scene.url.rpartition(":")[2])
        orchestrator_port = int(scene.orchestrator.url.rpartition(":")[2])
        target = agent.Target(
            tree_a=str(tree_a),
            tree_b=str(tree_b),
            clone=str(scene.clone),
            work_root=str(work_root),
            data_dir=str(scene.data_dir),
            ports=(port, orchestrator_port),
            roots=(str(tree_a), str(work_root), str(scene.data_dir), str(tmp), *LOCAL_ROOTS),
            harness_pid=harness_pid,
            toolbox_socket=socket_path,
            disk_full=scene.disk_full,
        )
        secret_task = f"run B's task, {scene.secrets.marker}"
        extra = {secret_task: "noted", "after the volume filled": "still here"}
        await scene.answer(agent.script(scene.secrets, target, extra=extra))
        await scene.settled(agent.RUN_B, await scene.turn(agent.RUN_B, secret_task, tree_b))

        sid = await scene.turn(agent.RUN_A, agent.PROMPT, tree_a)
        settled = await scene.settled(agent.RUN_A, sid)
        names = [name for name, _ in agent.probes(scene.secrets, target)]
        results = agent.results(names, (await scene.history(agent.RUN_A))["messages"])
        after = {
            "escapes": processes_running(*agent.ESCAPES, agent.BOMB),
            "planted": sorted(
                str(p)
                for p in (work_root / "pwned", work_root / "pwned-fsmonitor", work_root / "planted")
                if p.exists()
            ),
            "hook": (scene.clone / ".git" / "hooks" / "post-checkout").exists(),
            "owned": sorted(p.name for p in tree_b.iterdir() if p.name.startswith("owned")),
        }
        if scene.disk_full:
            sid = await scene.turn(agent.RUN_A, "after the volume filled", tree_a, name="second")
            after["second turn"] = (await scene.settled(agent.RUN_A, sid, name="second"))["outcome"]
        await asyncio.to_thread((tree_a / "big").unlink, True)
        after["run c"] = await _hooks_never_run(scene)
        after["harness death"] = await _harness_death(scene, tree_a, toolbox_pid)
        return Attack(variant, scene.secrets, target, results, settled, after)
    finally:
        await scene.stop()


async def _hooks_never_run(scene: Scene) -> dict[str, object]:
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


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def _harness_death(scene: Scene, tree: Path, toolbox_pid: int) -> dict[str, object]:
    """Start a long command in a Turn, SIGKILL the Harness, and see what is left."""
    assert scene.harness is not None
    await scene.turn(agent.RUN_A, agent.LONG_PROMPT, tree, name="long")
    deadline = time.monotonic() + 30
    while not processes_running(agent.LONG):
        assert time.monotonic() < deadline, "the long command never started"
        await asyncio.sleep(0.1)
    scene.harness.process.send_signal(signal.SIGKILL)
    await scene.harness.process.wait()
    deadline = time.monotonic() + GONE_WITHIN_S
    while processes_running(agent.LONG) or _alive(toolbox_pid):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    return {
        "left": processes_running(agent.LONG),
        "toolbox": _alive(toolbox_pid),
    }


# ----------------------------------------------------------------------------- 1. secrets


class TestSecrets:
    def test_the_search_finds_no_secret(self, attack: Attack) -> None:
        assert agent.hits(attack.results["search"]) == []

    def test_the_search_reads_what_it_can_reach(self, attack: Attack) -> None:
        search = attack.results["search"]
        assert agent.canaries(search) >= 1, search
        read = int(search.split("PROC-FILES-READ ")[1].split()[0])
        assert read > 0, search

    def test_the_harness_port_answers_no_one_without_the_token(self, attack: Attack) -> None:
        port = attack.target.ports[0]
        lines = [
            line
            for line in attack.results["search"].splitlines()
            if line.startswith(f"PORT {port} ")
        ]
        assert lines, attack.results["search"]
        for line in lines:
            path, status = line.split()[2], line.split()[4]
            assert status == ("200" if path == "/healthz" else "401"), line

    def test_the_harness_environ_cannot_be_read(self, attack: Attack) -> None:
        said = attack.results["read the Harness's environ"]
        assert agent.denied(said), said


# ----------------------------------------------------------------------------- 2. file tools


class TestFileTools:
    def test_shadow_is_unreadable_to_the_tools_user(self, attack: Attack) -> None:
        if attack.tools_as_root:
            pytest.skip("one user, root here: on one machine the tools run as the person")
        assert attack.results["read /etc/shadow"] == "Permission denied: /etc/shadow"

    def test_nothing_is_written_into_etc(self, attack: Attack) -> None:
        said = attack.results["write into /etc"]
        assert agent.denied(said), said
        assert not Path("/etc/kubeturn-hostile").exists()

    def test_edit_is_no_oracle_on_the_harness_environ(self, attack: Attack) -> None:
        said = attack.results["edit oracle on the Harness's environ"]
        assert agent.denied(said), said


# ----------------------------------------------------------------------------- 3. shared Workspace


class TestSharedWorkspace:
    def test_run_b_is_out_of_reach(self, attack: Attack) -> None:
        for probe in ("read run B", "write run B"):
            assert agent.denied(attack.results[probe]), attack.results[probe]
        said = attack.results["bash run B"]
        assert "run B" not in said.replace("run B's", "")
        assert said.count("Permission denied") >= 3, said
        assert attack.after["owned"] == []

    def test_the_conversation_logs_are_out_of_reach(self, attack: Attack) -> None:
        listed = attack.results["list the data dir"]
        assert agent.denied(listed) or "Refused" in listed, listed
        said = attack.results["bash the data dir"]
        assert agent.denied(said), said
        assert attack.secrets.marker not in said

    def test_nothing_is_planted_in_the_clone_or_beside_it(self, attack: Attack) -> None:
        said = attack.results["plant a hook"]
        assert agent.denied(said) or "Read-only" in said, said
        assert attack.after["planted"] == []
        assert attack.after["hook"] is False

    def test_hooks_planted_anyway_never_run_and_block_nothing(self, attack: Attack) -> None:
        run_c = attack.after["run c"]
        assert isinstance(run_c, dict)
        assert run_c["status"] == 200, run_c
        assert run_c["pwned"] is False


# ----------------------------------------------------------------------------- 4. processes


class TestProcesses:
    def test_no_escape_outlives_its_call(self, attack: Attack) -> None:
        assert attack.results["escape the call"].startswith("left them")
        assert attack.after["escapes"] == []

    def test_a_fork_bomb_stops_at_the_process_limit(self, attack: Attack) -> None:
        said = attack.results["fork bomb"]
        if attack.tools_as_root:
            pytest.skip("Linux exempts root from RLIMIT_NPROC; the Pod's tools are not root")
        started = int(said.split("started=")[1].split()[0])
        refused = int(said.split("refused=")[1].split()[0])
        assert started <= agent.TOOL_PROCESSES, said
        assert refused >= agent.TOOL_PROCESSES * 2, said

    @pytest.mark.skipif(ABI < 6, reason="Landlock scopes signals from ABI 6 (Linux 6.12)")
    def test_the_harness_cannot_be_signalled(self, attack: Attack) -> None:
        said = attack.results["signal the Harness"]
        assert "Operation not permitted" in said, said

    def test_the_harness_death_ends_every_process_of_its_tools(self, attack: Attack) -> None:
        assert attack.after["harness death"] == {"left": [], "toolbox": False}


# ----------------------------------------------------------------------------- 5. a full volume


class TestFullVolume:
    def test_the_agent_is_told_the_volume_is_full(self, attack: Attack) -> None:
        if not attack.target.disk_full:
            pytest.skip("no small volume can be mounted here (it needs root and a loop device)")
        assert "No space left on device" in attack.results["fill the volume"]
        assert "No space left on device" in attack.results["write on a full volume"]

    def test_the_harness_goes_on_recording(self, attack: Attack) -> None:
        if not attack.target.disk_full:
            pytest.skip("no small volume can be mounted here (it needs root and a loop device)")
        assert attack.settled["outcome"] == "completed"
        assert attack.after["second turn"] == "completed"


# ----------------------------------------------------------------------------- the toolbox


class TestToolbox:
    def test_its_socket_serves_the_harness_alone(self, attack: Attack) -> None:
        said = attack.results["open a session for run B"]
        assert said.startswith(("answer: b'<closed>'", "closed:")), said
