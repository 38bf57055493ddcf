"""Connections to the toolbox that arrive faster than it accepts them, against a real
toolbox process.

Cases:
- 200 connections made while the toolbox is stopped (SIGSTOP), past the 128 its
  listening socket once held: every one is queued, none refused (a refused connect,
  ``EAGAIN``, is what asyncio's client took for a connection made, and then lost on
  its first write: a session dropped under a burst of Runs); once the toolbox runs
  again it turns them away (they are not the Harness's) and serves the next session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kubeturn_harness.sandbox.client import LocalToolbox, Toolbox
from kubeturn_harness.sandbox.protocol import Kind, Limits

CONNECTIONS = 200
LIMITS = Limits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8)
CONNECT = """
import socket, sys
held, refused = [], 0
for _ in range(int(sys.argv[2])):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.setblocking(False)
    try:
        connection.connect(sys.argv[1])
    except BlockingIOError:
        refused += 1
    held.append(connection)
print(refused)
"""
"""Connects from a process of its own, not the Harness's: the toolbox turns each away
without forking a session for it."""


def connect_many(socket_path: Path) -> int:
    """Connections refused among ``CONNECTIONS`` made at once."""
    done = subprocess.run(
        [sys.executable, "-c", CONNECT, str(socket_path), str(CONNECTIONS)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


async def test_a_burst_of_connections_is_queued_not_refused() -> None:
    local = LocalToolbox.start(run_as=None)
    try:
        await local.wait_listening()
        toolbox = Toolbox(socket=local.socket, work_root=Path("/"), limits=LIMITS)
        await toolbox.ready(10)
        os.kill(local.process.pid, signal.SIGSTOP)
        try:
            refused = connect_many(local.socket)
        finally:
            os.kill(local.process.pid, signal.SIGCONT)

        assert refused == 0
        session = await toolbox.session(Kind.GIT)
        await session.close()
    finally:
        local.stop()
