"""A git server over ssh for the tests: Debian's ``sshd`` on 127.0.0.1, serving bare
repositories to one key.

Each :func:`serving` starts its own ``sshd`` (``openssh-server``) in the foreground, with
a configuration of its own: a free port of 127.0.0.1, a host key made for it, public-key
authentication only, one authorized key, and that key confined to ``git-shell`` with
``restrict`` (no terminal, no forwarding: only git's upload and receive commands run).
The login user is the tests' own (root here, which sshd lets in by key alone), so the
served repositories are the tests' files. Nothing of the machine's ssh setup is read or
changed, except that root's sshd needs its privilege separation directory (``/run/sshd``),
made when missing, as the package's own service would.

Where ``sshd`` cannot be had or does not start, :class:`Unavailable` says why: the
caller skips with that reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.operator import git_http

START_S = 10.0
"""sshd listens within ~0.1 s; 10 s bounds a loaded machine."""
PRIVILEGE_SEPARATION = Path("/run/sshd")
"""Where Debian's sshd, started as root, chroots its unprivileged child: it refuses to
start without it (the package's service makes it at boot)."""


class Unavailable(Exception):
    """No sshd can serve here; the message says why."""


@dataclasses.dataclass(frozen=True)
class SshServer:
    """An sshd on ``127.0.0.1:port`` letting ``user`` in with ``key`` alone."""

    directory: Path
    port: int
    user: str
    key: str
    """The client's private key (OpenSSH ed25519), as a Secret's ``ssh-privatekey`` holds it."""
    known_hosts: str
    """A ``known_hosts`` line naming the server's host key at its address and port."""

    def bare(self, name: str, *commits: str) -> tuple[str, list[str]]:
        """A new bare repository ``<name>.git`` with one commit per message: its ``ssh://``
        URL and the commits' ids, oldest first."""
        path = self.directory / "srv" / f"{name}.git"
        ids = git_http.bare(path, *commits)
        return f"ssh://{self.user}@127.0.0.1:{self.port}{path}", ids


def _free_port() -> int:
    """A port of 127.0.0.1 free a moment ago (sshd binds it next)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _keypair(path: Path) -> tuple[str, str]:
    """A new ed25519 key at ``path``: (private key text, public key line)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kubeturn-tests", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path.read_text(), path.with_suffix(".pub").read_text().strip()


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[SshServer]:
    """An :class:`SshServer` whose files live in ``directory`` until the block ends."""
    sshd = shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin:/sbin")
    git_shell = shutil.which("git-shell")
    if sshd is None or shutil.which("ssh-keygen") is None:
        raise Unavailable("no sshd here: apt-get install openssh-server")
    if git_shell is None:
        raise Unavailable("no git-shell here: apt-get install git")
    if os.geteuid() == 0 and not PRIVILEGE_SEPARATION.is_dir():
        PRIVILEGE_SEPARATION.mkdir(mode=0o755)
    directory.mkdir(parents=True, exist_ok=True)
    _, host_public = _keypair(directory / "host_key")
    key, client_public = _keypair(directory / "client_key")
    only_git = f'restrict,command="{git_shell} -c \\"$SSH_ORIGINAL_COMMAND\\""'
    (directory / "authorized_keys").write_text(f"{only_git} {client_public}\n")
    port, user = _free_port(), getpass.getuser()
    config = directory / "sshd_config"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {directory / 'host_key'}",
                f"PidFile {directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {directory / 'authorized_keys'}",
                f"AllowUsers {user}",
                "AuthenticationMethods publickey",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                # The tests' files live under /tmp, which is others'-writable: sshd's
                # ownership check of the key file's directories would refuse them.
                "StrictModes no",
                "",
            ]
        )
    )
    log = directory / "sshd.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sshd, "-D", "-e", "-f", str(config)], stdout=output, stderr=subprocess.STDOUT
        )
    try:
        _wait_listening(port, process, log)
        known_hosts = f"[127.0.0.1]:{port} {' '.join(host_public.split()[:2])}\n"
        yield SshServer(directory, port, user, key, known_hosts)
    finally:
        process.terminate()
        try:
            process.wait(timeout=START_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            said = log.read_text(errors="replace").strip()[-1000:]
            raise Unavailable(
                f"sshd did not listen on 127.0.0.1:{port} (exit {process.poll()}): {said}"
            )
        time.sleep(0.05)
