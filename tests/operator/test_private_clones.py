"""Workspaces clone private repositories and start from commits: the sandbox Pod's clone
init containers (``kubeturn.k8s.clones``) run for real against a private git server.

Each clone container is taken from the Pod ``objects.sandbox_pod`` builds and run as a
node would run it: ``sh`` with its command and env, as the Pod's uid (10001), every mount
path replaced by a directory (the kubelet's rules, :mod:`kubelet`), the Secret's keys as
files the kubelet would leave them (root's, group 10001, ``defaultMode`` plus group read).
The git server is git's smart HTTP behind basic auth on 127.0.0.1 (:mod:`git_http`); no
sshd runs: ssh is a stand-in ``ssh`` that records its arguments, reads the key it is
given and runs git's remote command on this machine.

Cases:
- https with the Secret's username and password: cloned on its branch after a 401; no
  process's command line or environment held the password while git fetched; the
  clone's ``.git/config`` holds no credential and its remote is the URL as written;
- a wrong password: the clone fails with git's words and a last line naming the slot,
  and leaves no directory;
- a Secret without 'password': fails before git runs, naming the Secret and the key;
- no ``secretRef`` for a private repository: fails at once (no terminal prompt);
- a redirect to another host: the credentials are not given there;
- a commit ``ref``, full or abbreviated, not the branch's tip: cloned detached at it;
  a commit the repository lacks fails, naming it, and leaves nothing on the volume;
- a clone found on the volume is kept without asking the server; a half-made one left by
  a clone cut short is thrown away and made again;
- ssh: ``GIT_SSH_COMMAND`` gives the mounted key only, with ``StrictHostKeyChecking=yes``
  and the Secret's ``known_hosts``, or without it ``accept-new`` (the log says the host
  key is trusted on first use); the key is readable by the clone's user; a Secret
  without 'ssh-privatekey' fails before ssh runs;
- the whole path: the real operator and kubelet make a Workspace of a private repository
  at a commit Ready, ``status.repos`` reports that commit, and a Run's worktree made by
  the Harness (``POST /worktrees``) starts there.
"""

from __future__ import annotations

import asyncio
import dataclasses
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

from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import clones, objects
from tests.operator import emulator, git_http
from tests.operator import kubelet as kubelet_
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    WORKSPACES,
    OperatorThread,
    Writes,
    eventually,
    fail_on_logged_errors,
    harness_token,
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
) -> Clone:
    """Run the Pod's clone container of ``SLOT`` with the Secret's ``keys``; ``work`` is
    the volume's directory (``work`` in it stands for /work), ``path`` the PATH."""
    (init,) = [c for c in body["spec"]["initContainers"] if c["name"] == clones.name(SLOT)]
    volumes = {"workspace": work}
    credentials = None
    for volume in body["spec"]["volumes"]:
        if "secret" in volume:
            assert keys is not None, "the Pod mounts a Secret: give its keys"
            credentials = volumes[volume["name"]] = work.parent / f"{volume['name']}-secret"
            _secret_files(credentials, keys, volume["secret"]["defaultMode"])
    mounts = kubelet_._mounts(init, volumes)
    argv = [kubelet_._rewrite(arg, mounts) for arg in init["command"]]
    env = {"PATH": path or os.environ["PATH"]}
    env |= {v["name"]: kubelet_._rewrite(v["value"], mounts) for v in init["env"]}
    uid = objects.TOOL_UID
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd="/",
        user=uid,
        group=uid,
        extra_groups=[uid],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    assert process.returncode is not None
    return Clone(process.returncode, out.decode(), mounts[objects.WORK_ROOT], credentials)


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


async def test_the_credentials_are_not_given_to_the_host_a_redirect_leads_to(
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
        assert "terminal prompts disabled" in clone.log
        assert elsewhere.refused >= 1
        assert elsewhere.served == 0


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
    kubeconfig: Path,
    kubelet: kubelet_.Kubelet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, _tip = server.bare("private", "one", "two")
    name = NAME
    api = Api(k8s_client)
    operator = OperatorThread(settings(providers_yaml=PROVIDERS), kubeconfig)
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
