"""The toolbox: the process that runs every Agent's tools, apart from the Harness.

It listens on a Unix socket and forks one process per connection (``worker``), after
checking that the peer is the Harness: by uid where the Harness runs as another user
(the sandbox Pod's ``harness`` container, uid 10001), by pid where the Harness started
the toolbox itself (one machine). An Agent's process, which can reach the socket's path,
is refused either way; under Landlock it cannot even reach the path.

The toolbox holds no secret: it is started with no credential in its environment, in
the Pod it runs in a container of its own (no Secret mounted, its own PID namespace,
no access to the Harness's data), and it is single-threaded so that ``fork`` is safe.
It is a child subreaper: a session's process that escaped its session (its session
process died) is re-parented to the toolbox, which kills every such stray within
``STRAY_SCAN_S``. SIGTERM (or the Harness's death, when the Harness started it) stops
it: every session is told to end what it started, then whatever is left is killed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from kubeturn_harness.sandbox import privileges, reaper, worker

log = logging.getLogger(__name__)

STRAY_SCAN_S = 1.0
"""Seconds between two looks for processes that escaped their session: a stray lives at
most this long, and a look over a few hundred processes costs about a millisecond."""
STOP_GRACE_S = 5.0
"""How long sessions have to end their processes when the toolbox stops, before they and
everything beneath them are killed."""
BACKLOG = 4096
"""Connections waiting to be accepted. A Harness opens one per Submission's tools and
per git request: a burst of Runs opens hundreds at once, and one past the backlog is
dropped (asyncio's client takes the refused connect for made; its first write fails).
The kernel caps it at ``net.core.somaxconn`` (4096 by default since Linux 5.4)."""


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


@dataclass(frozen=True)
class Clients:
    """Who may connect: the Harness's uid, or its pid (either that is set)."""

    uid: int | None = None
    pid: int | None = None

    def allow(self, peer: Peer) -> bool:
        if self.pid is not None and peer.pid == self.pid:
            return True
        return self.uid is not None and peer.uid == self.uid


def peer_of(connection: socket.socket) -> Peer:
    """The credentials the kernel recorded for the connecting process (SO_PEERCRED)."""
    raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def serve(settings: worker.ToolboxSettings, clients: Clients) -> int:
    """Serve until SIGTERM; the exit status."""
    privileges.undumpable()
    reaper.become_subreaper()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if clients.pid is not None and clients.pid == os.getppid():
        reaper.on_parent_death(signal.SIGTERM)
        if os.getppid() != clients.pid:
            return 0  # the Harness ended before it could be watched
    settings.scratch_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    if settings.run_as is not None:
        os.chown(settings.scratch_root, settings.run_as.uid, settings.run_as.gid)
    listener = _listen(settings.socket)
    stopping: list[int] = []
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    sessions: set[int] = set()
    print(f"toolbox listening on {settings.socket}", flush=True)
    try:
        while not stopping:
            for key, _ in selector.select(timeout=STRAY_SCAN_S):
                if key.fileobj is listener:
                    _accept(
                        listener, clients, settings, sessions, [selector, wake_read, wake_write]
                    )
                else:
                    with contextlib.suppress(BlockingIOError):
                        wake_read.recv(4096)
            _reap(sessions)
            reaper.kill_descendants(spare=frozenset(sessions))
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            settings.socket.unlink()
        _stop_sessions(sessions)
        shutil.rmtree(settings.scratch_root, ignore_errors=True)
        with contextlib.suppress(OSError):
            settings.socket.parent.rmdir()  # gone with its last file, if nothing else is there
    return 0


def _listen(path: Path) -> socket.socket:
    """Listen at ``path``, which appears only once connections are taken (bound under
    another name, then renamed): a client that finds it is never refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    binding = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        binding.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(binding))
    # Anyone may connect: who is served is decided by the peer's credentials.
    os.chmod(binding, 0o666)
    listener.listen(BACKLOG)
    listener.setblocking(False)
    binding.rename(path)
    return listener


def _accept(
    listener: socket.socket,
    clients: Clients,
    settings: worker.ToolboxSettings,
    sessions: set[int],
    inherited: list[object],
) -> None:
    """Accept every connection waiting, each a session of its own process."""
    while True:
        try:
            connection, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        _fork_session(connection, listener, clients, settings, sessions, inherited)


def _fork_session(
    connection: socket.socket,
    listener: socket.socket,
    clients: Clients,
    settings: worker.ToolboxSettings,
    sessions: set[int],
    inherited: list[object],
) -> None:
    connection.setblocking(True)
    peer = peer_of(connection)
    if not clients.allow(peer):
        log.warning("refused a connection from pid %d uid %d: not the Harness", peer.pid, peer.uid)
        connection.close()
        return
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            signal.set_wakeup_fd(-1)
            listener.close()
            for thing in inherited:
                with contextlib.suppress(Exception):
                    thing.close()  # type: ignore[attr-defined]
            code = worker.main(connection, settings)
        except BaseException:
            log.exception("a toolbox session failed")
        finally:
            os._exit(code)
    connection.close()
    sessions.add(pid)


def _reap(sessions: set[int]) -> None:
    """Collect every child that ended: sessions, and strays killed earlier."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sessions.discard(pid)


def _stop_sessions(sessions: set[int]) -> None:
    for pid in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while sessions and time.monotonic() < deadline:
        _reap(sessions)
        time.sleep(0.02)
    reaper.kill_descendants()
    _reap(sessions)


def main(settings: worker.ToolboxSettings, clients: Clients) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s toolbox %(name)s: %(message)s",
    )
    return serve(settings, clients)
