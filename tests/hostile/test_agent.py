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
   ``/proc/<pid>/task/<tid>/environ`` is no oracle (the Harness is the Agent's "other
   process" here);
3. a shared Workspace: Run B's worktree cannot be read or written, the conversation logs
   cannot be listed or read, no hook or fsmonitor can be planted in the clone every Run
   borrows from, and one planted there anyway (a kernel without Landlock) never runs
   when the Harness makes Run C's worktree, nor blocks it if it fails;
3a. fan-out children (ADR 0113, ``tests/hostile/fan_out.py``, a Harness of its own): a
   Run's session reaches its children's worktrees and no other Run's children (one
   named as its start, a long name's digest form), a child's session its own alone,
   none a child's worktree being made, none makes an entry beside the worktrees, and a
   child that breaks its ``.git`` stops no later session of its Run;
4. processes: ``setsid``, ``nohup``, a double fork and ``disown`` leave nothing running
   once the call returns; a fork bomb stops at the session's process limit (not for a
   root session: Linux exempts root from it); the Harness cannot be signalled (Landlock
   ABI 6 and later); when the Harness dies mid-command, its toolbox ends every process
   the session started;
5. a full work volume: the Agent's command and ``write`` say "No space left on device",
   and the Harness goes on recording (the Turn settles; another is admitted and
   settles);
and the toolbox's socket answers no one but the Harness; on one machine the toolbox ends
with the Harness that started it. The proofs themselves are ``tests/hostile/proofs.py``.
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

from tests.harness.support import shared_dir
from tests.hostile import agent, fan_out
from tests.hostile.layout import (
    Attack,
    Scene,
    hooks_never_run,
    make_clone,
    processes_running,
    small_volume,
    toolbox_of,
)
from tests.hostile.proofs import (  # noqa: F401  (the proofs run here with this layout)
    ABI,
    TestFanOutChildren,
    TestFileTools,
    TestFullVolume,
    TestProcesses,
    TestSecrets,
    TestSharedWorkspace,
    TestToolbox,
)

VARIANTS = ["tools-as-nobody", "one-user"] if os.geteuid() == 0 else ["one-user"]
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


@pytest.fixture(scope="module", params=VARIANTS, name="fan_out")
def fan_out_attack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[fan_out.FanOutAttack]:
    """The hostile sessions of a fanned-out Run, its children and other Runs, in one layout."""
    variant = str(request.param)
    work_root = shared_dir()
    try:
        tmp = tmp_path_factory.mktemp(f"fan-out-{variant}")
        yield asyncio.run(fan_out.attack(variant, tmp, work_root))
    finally:
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
            outside_pid=harness_pid,
            toolbox_socket=socket_path,
            disk_full=scene.disk_full,
        )
        results, settled = await scene.hostile_turn(target, tree_a, tree_b)
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
            after["second turn"] = await scene.turn_after_full(tree_a)
        await asyncio.to_thread((tree_a / "big").unlink, True)
        after["run c"] = await hooks_never_run(scene)
        after["etc"] = await asyncio.to_thread(Path("/etc/kubeturn-hostile").exists)
        left, after["toolbox alive"] = await _harness_death(scene, tree_a, toolbox_pid)
        after["left after the harness died"] = left
        return Attack(variant, scene.secrets, target, results, settled, after)
    finally:
        await scene.stop()


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def _harness_death(scene: Scene, tree: Path, toolbox_pid: int) -> tuple[list[str], bool]:
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
    return processes_running(agent.LONG), _alive(toolbox_pid)


class TestOneMachine:
    def test_the_toolbox_ends_with_the_harness_that_started_it(self, attack: Attack) -> None:
        assert attack.after["toolbox alive"] is False
