"""A Harness killed with SIGKILL leaves none of its Agents' processes running.

A real Harness process (``python -m kubeturn_harness serve``) runs a Turn whose model
calls ``bash`` with a command that sleeps, and starts a second sleeper in a session of
its own (``setsid``), which leaves the command's process group. Once both run, the
Harness is SIGKILLed (no shutdown hook runs) and ``/proc`` is scanned.

Cases:
- on one machine, where the Harness starts the toolbox as its child: within a few
  seconds no process of that tool call is left, and the toolbox is gone too (it gets
  SIGTERM when the Harness dies, ``PR_SET_PDEATHSIG``, and ends every session);
- as in a Pod, where the toolbox runs apart (its own container) and outlives the
  Harness: within a few seconds no process of that tool call is left (the session sees
  its connection close and kills everything it started), and the toolbox still serves
  the next Harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeturn_harness.settings import NOBODY
from tests.harness.support import TOKEN, StartWorld, script, spawn_harness

IID = "default.sleepy-1/work/coder"
PROMPT = "Sleep on it"
GONE_WITHIN_S = 10.0
"""How long the processes may outlive the Harness: the session sees its connection close
(or the toolbox its parent die) at once and kills in milliseconds; a toolbox that stops
gives its sessions up to 5 s (``server.STOP_GRACE_S``)."""


def _processes(*needles: str) -> dict[int, str]:
    """pid → command line of every process holding any of ``needles``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(needle in line for needle in needles):
                found[int(entry.name)] = line.strip()
    return found


async def _wait(check: object, what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


@pytest.fixture
def sleepers() -> tuple[str, str, str]:
    """Two sleep durations no other process uses (each marks its process), and the
    command that starts both: one in a session of its own, one in the command's group."""
    escaping, staying = (f"{random.randint(10_000, 99_999)}.{n}" for n in (1, 2))
    return escaping, staying, f"setsid sleep {escaping} & sleep {staying}; echo woke"


@pytest.fixture
def toolbox_apart() -> Iterator[Path]:
    """A toolbox started on its own, as the sandbox Pod's tools container is: it serves
    connections of this uid and outlives any one Harness. Its socket."""
    directory = Path(tempfile.mkdtemp(prefix="kubeturn-toolbox-"))
    directory.chmod(0o711)  # the sessions' user passes through to its scratch
    socket = directory / "toolbox.sock"
    command = [sys.executable, "-m", "kubeturn_harness.sandbox", "--socket", str(socket)]
    command += ["--client-uid", str(os.getuid()), "--scratch-root", str(directory / "scratch")]
    if os.geteuid() == 0:
        command += ["--run-as", f"{NOBODY}:{NOBODY}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert process.poll() is None, "the toolbox exited"
            assert time.monotonic() < deadline, "the toolbox never listened"
            time.sleep(0.05)
        yield socket
        assert process.poll() is None, "the toolbox died with the Harness"
    finally:
        process.terminate()
        process.wait(timeout=15)
        shutil.rmtree(directory, ignore_errors=True)


async def _kill_mid_command(
    world: StartWorld, tmp_path: Path, sleepers: tuple[str, str, str], *extra: str
) -> dict[int, str]:
    """Run the sleepers in a Turn, SIGKILL the Harness once both run; what is left of
    them, and of a toolbox the Harness started, a few seconds later."""
    escaping, staying, command = sleepers
    call = {"name": "bash", "arguments": {"command": command}}
    w = await world(script(PROMPT, {"toolCalls": [call]}, {"text": "Done."}), orchestrated=False)
    env = {
        "KUBETURN_HARNESS_TOKEN_SHA256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "KUBETURN_PROVIDERS": str(tmp_path / "providers.yaml"),
    }
    harness = await spawn_harness(tmp_path / "data", env, tmp_path / "harness.log", *extra)
    try:
        w.harness.url = harness.url
        await w.harness.admit(IID, PROMPT)
        await _wait(
            lambda: len(_processes(f"sleep {escaping}", f"sleep {staying}")) >= 3,
            "the command never started both sleepers",
            30,
        )
    finally:
        await harness.kill()
    # The sleepers, and a toolbox this Harness started (it names the Harness's pid).
    needles = (escaping, staying, f"--client-pid {harness.process.pid} ")
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := _processes(*needles)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def test_on_one_machine_the_tools_and_the_toolbox_die_with_the_harness(
    world: StartWorld, tmp_path: Path, sleepers: tuple[str, str, str]
) -> None:
    assert await _kill_mid_command(world, tmp_path, sleepers) == {}


async def test_with_the_toolbox_apart_the_tools_die_with_the_harness(
    world: StartWorld, tmp_path: Path, sleepers: tuple[str, str, str], toolbox_apart: Path
) -> None:
    left = await _kill_mid_command(world, tmp_path, sleepers, "--toolbox", str(toolbox_apart))
    assert left == {}
