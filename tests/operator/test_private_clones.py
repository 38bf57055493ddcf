"""Workspaces clone private repositories and start from commits: the sandbox Pod's clone
init containers (``kubeturn.k8s.clones``) run for real against private git servers, and
read nothing an Agent planted on the volume.

Each clone container is taken from the Pod ``objects.sandbox_pod`` builds and run as a
node would run it: ``sh`` with its command, env and working directory, as the Pod's uid
(10001), every mount path replaced by a directory (the kubelet's rules, :mod:`kubelet`),
the Secret's keys as files the kubelet would leave them (root's, group 10001,
``defaultMode`` plus group read). The https server is git's smart HTTP behind basic auth
on 127.0.0.1 (:mod:`git_http`), plain or with a certificate made for it. For ssh, most
tests use a stand-in ``ssh`` that records its arguments, reads the key it is given and
runs git's remote command on this machine; the Agent's plants meet a real sshd
(:mod:`git_ssh`), with the clone run as the Workspace's user (10002, in the fsGroup
10001) in a mount namespace whose passwd gives it its home on the planted volume. The
docker tier (tests/docker/test_clone_isolation.py) runs the same in the Harness image.

Cases:
- https with the Secret's username and password: cloned on its branch after a 401; no
  process's command line or environment held the password while git fetched; the
  clone's ``.git/config`` holds no credential and its remote is the URL as written;
- a wrong password: the clone fails with git's words and a last line naming the slot,
  and leaves no directory;
- a Secret without 'password': fails before git runs, naming the Secret and the key;
- no ``secretRef`` for a private repository: fails at once (no terminal prompt);
- a redirect to another port: git follows, and the helper gives it nothing; a redirect
  from https to plain http: git does not follow (the URL's protocol alone), and the
  plain server hears nothing; the credential helper, asked as git asks, answers the
  URL's own protocol, host and port alone (not http, another port, the default port
  the URL does not write, another host);
- a commit ``ref``, full or abbreviated, not the branch's tip: cloned detached at it;
  a commit the repository lacks fails, naming it, and leaves nothing on the volume;
- a clone found on the volume is kept without asking the server; a half-made one left by
  a clone cut short is thrown away and made again;
- ssh: ``GIT_SSH_COMMAND`` gives the mounted key only, with ``StrictHostKeyChecking=yes``
  and the Secret's ``known_hosts``, or without it ``accept-new`` (the log says the host
  key is trusted on first use); the key is readable by the clone's user; a Secret
  without 'ssh-privatekey' fails before ssh runs;
- an Agent's plants (:mod:`plants`: ssh and git configuration in the passwd home and
  ``$HOME``, both on the volume, and repositories to discover): the clone made again,
  with ``known_hosts`` at a commit or without it on a branch, succeeds, and no loot and
  no trace of the key is on the volume or in its log; each plant does leak the key from
  a clone as they ran before (the attack is real);
- a Workspace whose url carries a token: the CRD's rule refuses it (422) at the url's
  path without quoting it; nothing is made and the token is written nowhere;
- the whole path: the real operator and kubelet make a Workspace of a private repository
  at a commit Ready, ``status.repos`` reports that commit, and a Run's worktree made by
  the Harness (``POST /worktrees``) starts there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.api.workspace import URL_CREDENTIALS, WorkspaceSpec
from kubeturn.k8s import clones, objects
from tests.operator import emulator, git_http, git_ssh, plants
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    WORKSPACES,
    OperatorThread,
    Writes,
    eventually,
    fail_on_logged_errors,
    harness_token,
    names,
    settings,
    status,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="runs the clone as uid 10001, as the Pod does: needs root"
)

SLOT = "target"
USER, PASSWORD = "kubeturn-bot", "ghp-not-a-real-token-5f2c"
SECRET = "git-credentials"
NAME = "private"
"""The Workspace's."""

Body = dict[str, Any]

WORKSPACE: Body = {
    "apiVersion": GROUP_VERSION,
    "kind": "Workspace",
    "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": "ws-uid"},
}


@dataclasses.dataclass
class Clone:
    """What one run of a clone container did."""

    code: int
    log: str
    work: Path
    """The directory standing for /work."""
    credentials: Path | None
    """The directory standing for the Secret's volume, if the Pod mounts one."""

    @property
    def path(self) -> Path:
        return self.work / ".repos" / SLOT

    @property
    def last_line(self) -> str:
        return self.log.strip().splitlines()[-1]

    @property
    def config(self) -> str:
        """The clone's ``.git/config``."""
        return (self.path / ".git" / "config").read_text()

    def git(self, *args: str) -> str:
        return git_http.git("-c", "safe.directory=*", "-C", str(self.path), *args)

    def detached(self) -> bool:
        """HEAD names a commit, not a branch."""
        command = ["git", "-c", "safe.directory=*", "-C", str(self.path), "symbolic-ref", "-q"]
        return subprocess.run([*command, "HEAD"], check=False).returncode == 1


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory the clone's uid can reach (pytest's own temp dirs are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="kubeturn-clones-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
async def server(scratch: Path) -> AsyncIterator[git_http.GitServer]:
    async with git_http.serving(scratch / "srv", USER, PASSWORD) as serving:
        yield serving


def pod(url: str, ref: str = "main", *, secret: bool = True) -> Body:
    repo: Body = {"url": url, "ref": ref}
    if secret:
        repo["secretRef"] = {"name": SECRET}
    spec = WorkspaceSpec.model_validate({"repos": {SLOT: repo}})
    return objects.sandbox_pod(
        WORKSPACE,
        spec,
        image="harness:1",
        orchestrator_url="http://o",
        providers_yaml="{}\n",
        harness_token_sha256="t1",
    )


async def run_clone(
    body: Body,
    work: Path,
    keys: dict[str, str] | None = None,
    *,
    path: str | None = None,
    env: dict[str, str] | None = None,
    home: Path | None = None,
) -> Clone:
    """Run the Pod's clone container of ``SLOT`` with the Secret's ``keys``; ``work`` is
    the volume's directory (``work`` in it stands for /work), ``path`` the PATH, ``env``
    more of the environment.

    It runs as the Pod's uid (10001). With ``home``, it runs as the Workspace's user
    (10002, in the Pod's fsGroup 10001) in a mount namespace of its own whose
    ``/etc/passwd`` gives that user ``home``: an image whose user's home is on the volume."""
    (init,) = [c for c in body["spec"]["initContainers"] if c["name"] == clones.name(SLOT)]
    volumes = {"workspace": work}
    credentials = None
    for volume in body["spec"]["volumes"]:
        if "secret" in volume:
            assert keys is not None, "the Pod mounts a Secret: give its keys"
            credentials = volumes[volume["name"]] = secret_directory(work)
            _secret_files(credentials, keys, volume["secret"]["defaultMode"])
    mounts = kubelet_._mounts(init, volumes)
    argv = [kubelet_._rewrite(arg, mounts) for arg in init["command"]]
    environment = {"PATH": path or os.environ["PATH"]}
    environment |= {v["name"]: kubelet_._rewrite(v["value"], mounts) for v in init["env"]}
    environment |= env or {}
    uid = objects.TOOL_UID
    user: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": [uid]}
    if home is not None:
        passwd = work.parent / "passwd"
        passwd.write_text(_passwd_with(plants.WORKSPACE_UID, home))
        namespace = ["unshare", "--mount", "--propagation", "private", "sh", "-c", AS_WORKSPACE]
        argv = [*namespace, str(passwd), *argv]
        user = {}
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=environment,
        cwd=init["workingDir"],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        **user,
    )
    out, _ = await process.communicate()
    assert process.returncode is not None
    return Clone(process.returncode, out.decode(), mounts[objects.WORK_ROOT], credentials)


AS_WORKSPACE = (
    'mount --bind "$0" /etc/passwd && exec setpriv --reuid=10002 --regid=10002'
    ' --groups=10001 --inh-caps=-all --no-new-privs -- "$@"'
)
"""Run as root in a new mount namespace: its /etc/passwd becomes ``$0``, then the rest runs
as the Workspace's user in the Pod's fsGroup, with no capability, as a container does."""


def _passwd_with(uid: int, home: Path) -> str:
    """This machine's /etc/passwd with ``uid`` the Workspace's user, at home in ``home``."""
    kept = [
        line
        for line in Path("/etc/passwd").read_text().splitlines()
        if line.split(":")[2:3] != [str(uid)]
    ]
    return "\n".join([*kept, f"workspace:x:{uid}:{uid}::{home}:/bin/bash", ""])


def secret_directory(work: Path) -> Path:
    """Where ``run_clone`` puts the Secret's volume of a Pod whose volume is ``work``."""
    return work.parent / f"{clones.name(SLOT)}-secret"


def _secret_files(directory: Path, keys: dict[str, str], mode: int) -> None:
    """The Secret's volume as the kubelet leaves it with the Pod's ``fsGroup``: root's
    files of group 10001, ``defaultMode`` plus group read, in a directory of that group."""
    directory.mkdir()
    os.chown(directory, 0, objects.TOOL_UID)
    directory.chmod(0o750)
    for key, value in keys.items():
        (directory / key).write_text(value)
        os.chown(directory / key, 0, objects.TOOL_UID)
        (directory / key).chmod(mode | 0o040)


def give_to_the_pods_user(path: Path) -> None:
    uid = f"{objects.TOOL_UID}:{objects.TOOL_UID}"
    subprocess.run(["chown", "-R", uid, str(path)], check=True)


def work_volume(scratch: Path) -> Path:
    volume = scratch / "volume"
    volume.mkdir(mode=0o777)
    volume.chmod(0o777)
    return volume


# ----------------------------------------------------------------------------- https


async def test_https_clones_with_the_secrets_credentials_and_keeps_none(
    server: git_http.GitServer, scratch: Path
) -> None:
    *_, tip = server.bare("private", "one", "two")
    url = f"{server.url}/private.git"

    clone = await run_clone(
        pod(url), work_volume(scratch), {"username": USER, "password": PASSWORD}
    )

    assert clone.code == 0, clone.log
    assert clone.git("rev-parse", "HEAD") == tip
    assert clone.git("symbolic-ref", "HEAD") == "refs/heads/main"
    assert server.refused >= 1, "git sent credentials before it was asked for them"
    assert server.served >= 1
    assert server.exposed == []
    config = clone.config
    assert PASSWORD not in config
    assert USER not in config
    assert "credential" not in config
    assert clone.git("remote", "get-url", "origin") == url
    assert [p.name for p in (clone.work / ".repos").iterdir()] == [SLOT]
    assert clone.path.stat().st_uid == objects.TOOL_UID


async def test_a_wrong_password_fails_saying_so_and_leaves_nothing(
    server: git_http.GitServer, scratch: Path
) -> None:
    server.bare("private", "one")
    url = f"{server.url}/private.git"

    clone = await run_clone(pod(url), work_volume(scratch), {"username": USER, "password": "no"})

    assert clone.code != 0
    assert "Authentication failed" in clone.log
    assert clone.last_line == (
        f"kubeturn: cannot clone repo slot '{SLOT}': git could not clone {url} at main"
        " (its words are above)"
    )
    assert server.served == 0
    assert list((clone.work / ".repos").iterdir()) == []


async def test_a_secret_without_a_password_fails_before_git_runs(
    server: git_http.GitServer, scratch: Path
) -> None:
    server.bare("private", "one")

    clone = await run_clone(
        pod(f"{server.url}/private.git"), work_volume(scratch), {"username": USER}
    )

    assert clone.code == 1
    assert clone.last_line == (
        f"kubeturn: cannot clone repo slot '{SLOT}': the Secret '{SECRET}' has no key"
        " 'password' (or it is empty); an https URL needs 'username' and 'password'"
    )
    assert (server.refused, server.served) == (0, 0)


async def test_a_private_repository_without_a_secret_fails_at_once(
    server: git_http.GitServer, scratch: Path
) -> None:
    server.bare("private", "one")

    clone = await run_clone(pod(f"{server.url}/private.git", secret=False), work_volume(scratch))

    assert clone.code == 1
    assert "terminal prompts disabled" in clone.log
    assert clone.last_line.startswith(f"kubeturn: cannot clone repo slot '{SLOT}': git could")


async def test_the_credentials_are_not_given_to_another_port_a_redirect_leads_to(
    server: git_http.GitServer, scratch: Path
) -> None:
    async with git_http.serving(scratch / "elsewhere", USER, PASSWORD) as elsewhere:
        elsewhere.bare("private", "one")
        server.moved_to = elsewhere.url

        clone = await run_clone(
            pod(f"{server.url}/private.git"),
            work_volume(scratch),
            {"username": USER, "password": PASSWORD},
        )

        assert clone.code == 1
        assert server.redirected >= 1
        # git followed, was refused, asked the helper for 127.0.0.1:<other port>: nothing.
        assert "terminal prompts disabled" in clone.log
        assert elsewhere.refused >= 1
        assert elsewhere.served == 0


async def test_https_redirected_to_plain_http_gets_nothing(
    server: git_http.GitServer, scratch: Path
) -> None:
    """The token would cross the network in clear: git does not even follow."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make the https server's certificate")
    server.bare("private", "one")
    tls, certificate = git_http.certificate(scratch)
    async with git_http.serving(scratch / "secure", USER, PASSWORD, tls=tls) as secure:
        secure.bare("private", "one")
        trusted = {"GIT_SSL_CAINFO": str(certificate)}
        keys = {"username": USER, "password": PASSWORD}
        body = pod(f"{secure.url}/private.git")

        straight = await run_clone(body, work_volume(scratch), keys, env=trusted)
        assert straight.code == 0, straight.log  # the certificate is trusted: https works

        secure.moved_to = server.url
        (scratch / "moved").mkdir()
        clone = await run_clone(body, work_volume(scratch / "moved"), keys, env=trusted)

    assert clone.code == 1, clone.log
    assert secure.redirected >= 1
    # git speaks the URL's protocol alone: curl is told not to follow to another.
    assert 'Protocol "http" not supported or disabled' in clone.log
    assert (server.refused, server.served) == (0, 0)
    assert server.exposed == []


def test_the_credential_helper_answers_the_urls_protocol_host_and_port_alone(
    scratch: Path,
) -> None:
    """git asks the helper with what the URL it is at says: ``protocol``, and ``host``
    with a port when the URL writes one. Asked of anything else, it answers nothing, and
    git, with no terminal, gives up."""
    body = pod("https://git.example.invalid:8443/team/a.git")
    (init,) = body["spec"]["initContainers"]
    env = {v["name"]: v["value"] for v in init["env"]}
    script = init["command"][2].splitlines()
    words = shlex.split(next(line for line in script if " clone --" in line))
    (helper,) = [w for w in words if w.startswith("credential.helper=!")]
    credentials = scratch / "credentials"
    credentials.mkdir()
    (credentials / "username").write_text(USER)
    (credentials / "password").write_text(PASSWORD)
    helper = helper.replace(clones.CREDENTIALS_PATH, str(credentials))

    def fill(protocol: str, host: str) -> str | None:
        asked = subprocess.run(
            ["git", "-c", "credential.helper=", "-c", helper, "credential", "fill"],
            input=f"protocol={protocol}\nhost={host}\n\n",
            env={
                "PATH": os.environ["PATH"],
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_TERMINAL_PROMPT": "0",
                **{k: v for k, v in env.items() if k in ("REPO_PROTOCOL", "REPO_HOST")},
            },
            capture_output=True,
            text=True,
            check=False,
        )
        return asked.stdout if asked.returncode == 0 else None

    assert fill("https", "git.example.invalid:8443") == (
        f"protocol=https\nhost=git.example.invalid:8443\nusername={USER}\npassword={PASSWORD}\n"
    )
    for protocol, host in [
        ("http", "git.example.invalid:8443"),
        ("https", "git.example.invalid"),
        ("https", "git.example.invalid:443"),
        ("https", "git.example.invalid:8080"),
        ("https", "other.invalid:8443"),
        ("https", "git.example.invalid:8443.other.invalid"),
    ]:
        assert fill(protocol, host) is None, (protocol, host)


# ----------------------------------------------------------------------------- commits


@pytest.mark.parametrize("length", [40, 7], ids=["full", "abbreviated"])
async def test_a_commit_ref_is_cloned_detached_at_that_commit(
    server: git_http.GitServer, scratch: Path, length: int
) -> None:
    first, _tip = server.bare("private", "one", "two")

    clone = await run_clone(
        pod(f"{server.url}/private.git", first[:length]),
        work_volume(scratch),
        {"username": USER, "password": PASSWORD},
    )

    assert clone.code == 0, clone.log
    assert clone.git("rev-parse", "HEAD") == first
    assert clone.detached()
    assert clone.git("status", "--porcelain") == ""


async def test_a_commit_the_repository_lacks_fails_naming_it_and_leaves_no_clone(
    server: git_http.GitServer, scratch: Path
) -> None:
    server.bare("private", "one")
    url = f"{server.url}/private.git"

    clone = await run_clone(
        pod(url, "deadbeef"), work_volume(scratch), {"username": USER, "password": PASSWORD}
    )

    assert clone.code == 1
    assert clone.last_line == (
        f"kubeturn: cannot clone repo slot '{SLOT}': deadbeef is not a commit on a branch"
        f" or tag of {url}"
    )
    assert list((clone.work / ".repos").iterdir()) == []


async def test_a_clone_found_is_kept_and_a_half_made_one_made_again(
    server: git_http.GitServer, scratch: Path
) -> None:
    *_, tip = server.bare("private", "one")
    body, keys = pod(f"{server.url}/private.git"), {"username": USER, "password": PASSWORD}
    volume = work_volume(scratch)
    partial = volume / "work" / ".repos" / f".partial-{SLOT}"
    partial.mkdir(parents=True)
    (partial / "left-over").write_text("from a clone cut short\n")
    give_to_the_pods_user(volume / "work")  # as a clone cut short left it

    first = await run_clone(body, volume, keys)
    assert first.code == 0, first.log
    assert first.git("rev-parse", "HEAD") == tip
    assert not partial.exists()
    asked = server.refused + server.served

    assert first.credentials is not None
    shutil.rmtree(first.credentials)
    second = await run_clone(body, volume, keys)
    assert second.code == 0, second.log
    assert server.refused + server.served == asked


# ----------------------------------------------------------------------------- ssh

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n-----END OPENSSH PRIVATE KEY-----\n"
KNOWN_HOSTS = "git.invalid ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKubeturnTestsOnlyNotARealHostKey\n"
STAND_IN = """#!/bin/sh
# ssh's stand-in: records its arguments, reads the key it is given (as the clone's user),
# and runs git's remote command on this machine, where the repository is.
printf '%s\\n' "$@" > {record}
key=; previous=
for argument; do
  if [ "$previous" = -i ]; then key=$argument; fi
  previous=$argument
done
cat -- "$key" > {record}.key || exit 255
exec sh -c "$previous"
"""


@dataclasses.dataclass
class Ssh:
    url: str
    origin: Path
    commits: list[str]
    path: str
    """PATH, the stand-in ``ssh`` first."""
    record: Path

    @property
    def arguments(self) -> list[str]:
        return self.record.read_text().splitlines()

    @property
    def key_read(self) -> str:
        """What the stand-in read from the file ``-i`` named."""
        return Path(f"{self.record}.key").read_text()


@pytest.fixture
def ssh(scratch: Path) -> Ssh:
    """A repository reached as ``ssh://git.invalid/…`` through the stand-in ``ssh``."""
    home = scratch / "ssh"
    home.mkdir(mode=0o777)
    home.chmod(0o777)  # the stand-in writes its record here as the clone's user
    origin = home / "origin.git"
    commits = git_http.bare(origin, "one")
    # git-upload-pack runs as the clone's user, and git refuses another user's repository.
    give_to_the_pods_user(origin)
    record = home / "arguments"
    stand_in = home / "bin" / "ssh"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN.format(record=shlex.quote(str(record))))
    stand_in.chmod(0o755)
    path = f"{stand_in.parent}:{os.environ['PATH']}"
    return Ssh(f"ssh://git.invalid{origin}", origin, commits, path, record)


@pytest.mark.parametrize("known_hosts", [True, False], ids=["known-hosts", "first-use"])
async def test_ssh_clones_with_the_mounted_key_alone(
    ssh: Ssh, scratch: Path, known_hosts: bool
) -> None:
    keys = {"ssh-privatekey": KEY} | ({"known_hosts": KNOWN_HOSTS} if known_hosts else {})

    clone = await run_clone(pod(ssh.url), work_volume(scratch), keys, path=ssh.path)

    assert clone.code == 0, clone.log
    assert clone.git("rev-parse", "HEAD") == ssh.commits[0]
    assert clone.credentials is not None
    command = clones.ssh_command(key=True, known_hosts=known_hosts)
    expected = shlex.split(command.replace(clones.CREDENTIALS_PATH, str(clone.credentials)))
    assert ssh.arguments[: len(expected) - 1] == expected[1:]
    assert ssh.arguments[-2:] == ["git.invalid", f"git-upload-pack '{ssh.origin}'"]
    if known_hosts:
        assert "StrictHostKeyChecking=yes" in ssh.arguments
        assert f"UserKnownHostsFile={clone.credentials}/known_hosts" in ssh.arguments
    else:
        assert "StrictHostKeyChecking=accept-new" in ssh.arguments
        assert (
            f"kubeturn: the Secret '{SECRET}' has no key 'known_hosts': the host key is"
            " trusted on first use"
        ) in clone.log
    assert ssh.key_read == KEY
    assert "ssh -i" not in clone.config
    assert "sshcommand" not in clone.config.lower()


async def test_ssh_without_a_private_key_fails_before_ssh_runs(ssh: Ssh, scratch: Path) -> None:
    clone = await run_clone(
        pod(ssh.url), work_volume(scratch), {"known_hosts": KNOWN_HOSTS}, path=ssh.path
    )

    assert clone.code == 1
    assert clone.last_line == (
        f"kubeturn: cannot clone repo slot '{SLOT}': the Secret '{SECRET}' has no key"
        " 'ssh-privatekey' (or it is empty); an ssh URL needs 'ssh-privatekey'"
    )
    assert not ssh.record.exists()


# ----------------------------------------------------------------------------- an Agent's plants


@pytest.fixture
def sshd(scratch: Path) -> Iterator[git_ssh.SshServer]:
    """A real sshd on 127.0.0.1 (:mod:`git_ssh`); the test skips, saying why, without one."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(git_ssh.serving(scratch / "sshd"))
        except git_ssh.Unavailable as why:
            pytest.skip(str(why))
        yield server


@pytest.fixture
def namespaces() -> None:
    """The clone runs in a mount namespace of its own (its passwd): skip where none can be."""
    if shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("no unshare or setpriv (util-linux) to give the clone a passwd of its own")
    made = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {made.stderr.decode().strip()}")


def planted(scratch: Path, which: tuple[str, ...] = plants.PLANTS) -> Path:
    """A volume whose ``work`` (the clone's /work) an Agent has planted ``which`` in, to
    leak the key the clone container will find in its Secret's volume."""
    volume = work_volume(scratch)
    key = secret_directory(volume) / "ssh-privatekey"
    plants.plant(volume / "work", seen_at=str(volume / "work"), key=str(key), plants=which)
    return volume


@pytest.mark.usefixtures("namespaces")
@pytest.mark.parametrize(
    ("known_hosts", "at_commit"),
    [(True, True), (False, False)],
    ids=["known-hosts-at-a-commit", "first-use-on-a-branch"],
)
async def test_a_clone_reads_nothing_an_agent_planted(
    sshd: git_ssh.SshServer, scratch: Path, known_hosts: bool, at_commit: bool
) -> None:
    """The Pod made again after an Agent planted everything: its passwd home and ``$HOME``
    are the planted volume, as in an image whose user lived there."""
    url, commits = sshd.bare("private", "one", "two")
    volume = planted(scratch)
    work = volume / "work"
    keys = {"ssh-privatekey": sshd.key}
    keys |= {"known_hosts": sshd.known_hosts} if known_hosts else {}
    body = pod(url, commits[0][:7] if at_commit else "main")

    clone = await run_clone(body, volume, keys, env={"HOME": str(work)}, home=work)

    assert clone.code == 0, clone.log
    assert clone.git("rev-parse", "HEAD") == (commits[0] if at_commit else commits[-1])
    assert plants.loot(work) == []
    assert plants.holding(work, sshd.key) == []
    assert not plants.holds(clone.log, sshd.key)


@pytest.mark.usefixtures("namespaces")
@pytest.mark.parametrize("plant", sorted(plants.LEAKS))
async def test_each_plant_leaks_the_key_from_a_clone_that_reads_it(
    sshd: git_ssh.SshServer, scratch: Path, plant: str
) -> None:
    """The attack is real: the clone containers' ssh before ``-F /dev/null``, with git
    reading ``$HOME``, hands the key over."""
    url, _ = sshd.bare("private", "one")
    volume = planted(scratch, (plant,))
    work = volume / "work"
    body = pod(url)
    body["spec"]["initContainers"][0]["command"] = ["sh", "-c", plants.NAIVE_CLONE]

    await run_clone(body, volume, {"ssh-privatekey": sshd.key}, env={"HOME": str(work)}, home=work)

    assert plants.loot(work) == [work / plants.LEAKS[plant]]
    assert (work / plants.LEAKS[plant]).read_text() == sshd.key


# ----------------------------------------------------------------------------- the whole path

PROVIDERS = "scripted:\n  type: openai\n  baseUrl: http://127.0.0.1:9/v1\n"
"""No Turn runs here: the Harness needs a providers file, not a model."""


@dataclasses.dataclass
class Api(Writes):
    api: aiohttp.ClientSession


async def test_a_workspace_of_a_private_repository_starts_runs_at_its_commit(
    server: git_http.GitServer,
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, _tip = server.bare("private", "one", "two")
    name = NAME
    api = Api(k8s_client)
    operator = OperatorThread(
        settings(installation, providers_yaml=PROVIDERS), installation.kubeconfig
    )
    await operator.start()
    try:
        await api.create(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": NAMESPACE},
                "stringData": {"username": USER, "password": PASSWORD},
            }
        )
        repo = {
            "url": f"{server.url}/private.git",
            "ref": first[:12],
            "secretRef": {"name": SECRET},
        }
        await api.create(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Workspace",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"repos": {SLOT: repo}},
            }
        )
        await eventually(
            lambda: status(k8s, WORKSPACES, name).get("phase") == "Ready",
            "the Workspace Ready",
            describe=lambda: f"{status(k8s, WORKSPACES, name)}; kubelet: {kubelet.errors}",
        )
        assert status(k8s, WORKSPACES, name)["repos"][SLOT]["commit"] == first

        sandbox = await kubelet.running(objects.sandbox_name(name))
        body = {"run": "default.r1", "branch": "kubeturn/r1", "slots": [SLOT]}
        headers = {"Authorization": f"Bearer {harness_token(k8s, name)}"}
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(f"{sandbox.url}/worktrees", json=body, headers=headers) as answer,
        ):
            assert answer.status == 200, await answer.text()
            made = await answer.json()
        worktree = made["worktrees"][SLOT]["path"]
        read = ("-c", "safe.directory=*", "-C", worktree)
        assert git_http.git(*read, "rev-parse", "HEAD") == first
        assert git_http.git(*read, "symbolic-ref", "HEAD") == "refs/heads/kubeturn/r1"
        clone = sandbox.work_root / ".repos" / SLOT
        assert PASSWORD not in (clone / ".git" / "config").read_text()
    finally:
        await operator.stop()
    fail_on_logged_errors(caplog, kubelet.started)


async def test_a_workspace_whose_url_carries_a_token_is_refused_naming_the_path(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The CRD's rule refuses it (422) at the URL's path, in words that never quote the URL;
    the operator sees nothing of it and makes nothing. (The operator's own check, for a
    cluster with an older CRD, is ``tests/unit/test_repo_urls.py``'s.)"""
    operator = OperatorThread(
        settings(installation, providers_yaml=PROVIDERS), installation.kubeconfig
    )
    await operator.start()
    try:
        # Posted once the operator watches Workspaces, so that it could see one slip past.
        await eventually(
            lambda: any(
                (asked.verb, asked.resource) == ("watch", "workspaces")
                for asked, _ in k8s.authorizations
            ),
            "the operator watching Workspaces",
        )
        repo = {"url": f"https://{USER}:{PASSWORD}@127.0.0.1:9/private.git"}
        workspace = {
            "apiVersion": GROUP_VERSION,
            "kind": "Workspace",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"repos": {SLOT: repo}},
        }
        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces"
        async with k8s_client.post(path, json=workspace) as answer:
            assert answer.status == 422
            refusal = await answer.json()
    finally:
        await operator.stop()
    (cause,) = refusal["details"]["causes"]
    assert (cause["field"], cause["message"]) == (
        f"spec.repos.{SLOT}.url",
        f'Invalid value: "string": a repo\'s url {URL_CREDENTIALS}',
    )
    assert PASSWORD not in json.dumps(refusal)
    assert names(k8s, WORKSPACES) == []
    assert names(k8s, "v1/pods") == []
    assert names(k8s, "v1/secrets") == []
    assert not [r for r in caplog.records if PASSWORD in r.getMessage()]
    fail_on_logged_errors(caplog, [])
