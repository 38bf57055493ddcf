"""A clone container of the real Harness image, made again over a volume an Agent has
planted, reads nothing of it and leaks no key (ADR 0033, docs/security/threat_model.md).

The test plays the Agent, then re-makes the Pod. The Agent plants ssh and git
configuration on the volume (:mod:`tests.operator.plants`): a passwd home's
``.ssh/config`` with a ``Match exec`` line, ``.gitconfig`` and ``.config/git/config``
that rewrite URLs to a command and install hooks and an fsmonitor, and repositories at
``/work`` and ``/work/.repos`` to be discovered; each copies the key onto the volume.
The Pod made again runs the clone container the operator builds (``objects.sandbox_pod``:
its exact script, env, working directory and mounts) in the Harness image, as the
Workspace's user (10002, as the image makes it) in the Pod's fsGroup (10001), with no
capability: the Agent's volume at /work, the Secret's files read-only as the kubelet
leaves them (root's, group 10001, mode 0440). The image's passwd is swapped for one whose
Workspace user lives at /work, as the image's user once did; in one case ``$HOME`` is
/work too: what the clone reads must not hang on either. The server is a real sshd on
127.0.0.1 (:mod:`tests.operator.git_ssh`), reached over the host network.

Cases:
- with the Secret's ``known_hosts``, at a commit; without, on a branch, with
  ``HOME=/work``: the clone succeeds at the right commit; no loot file appears; no file
  on the volume, and not the container's log, holds the key or a line of it;
- the attack is real: in the same container, a clone as they ran before
  (``plants.NAIVE_CLONE``) hands the key over through each plant.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kubeturn.api import common
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import clones, objects
from tests.docker.images import DEBOOTSTRAP_AND_BUILD_SECONDS
from tests.operator import git_ssh, plants

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine

SLOT = "target"
POD_GROUP = 10001
"""The Pod's fsGroup: the group the kubelet gives the Secret's files, and the clone's."""
CLONE_SECONDS = 120.0
"""A container starts and clones a two-commit repository in ~1 s; 2 min bounds a stuck one."""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[git_ssh.SshServer]:
    """A real sshd on 127.0.0.1; the tests skip, saying why, where none can run."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(git_ssh.serving(tmp_path_factory.mktemp("sshd")))
        except git_ssh.Unavailable as why:
            pytest.skip(f"no sshd to clone from: {why}")
        yield server


@pytest.fixture(scope="module")
def passwd_at_work(
    docker_engine: DockerEngine, harness_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The image's /etc/passwd with the Workspace's user at home in /work."""
    image_passwd = docker_engine("run", "--rm", "--entrypoint", "cat", harness_image, "/etc/passwd")
    lines = []
    for line in image_passwd.stdout.splitlines():
        fields = line.split(":")
        if fields[2] == str(plants.WORKSPACE_UID):
            assert fields[5] == "/nonexistent", "the image gives the Workspace's user no home"
            fields[5] = objects.WORK_ROOT
        lines.append(":".join(fields))
    path = tmp_path_factory.mktemp("passwd") / "passwd"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o644)
    return path


def sandbox_pod(url: str, ref: str) -> dict[str, Any]:
    spec = WorkspaceSpec.model_validate(
        {"repos": {SLOT: {"url": url, "ref": ref, "secretRef": {"name": "repo-key"}}}}
    )
    workspace = {
        "apiVersion": common.GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": "planted", "namespace": "team", "uid": "ws-uid"},
    }
    return objects.sandbox_pod(
        workspace,
        spec,
        image="harness:1",
        orchestrator_url="http://127.0.0.1:9",
        providers_yaml="{}\n",
        harness_token_sha256="t1",
    )


def secret_volume(directory: Path, keys: dict[str, str]) -> Path:
    """The Secret's volume as the kubelet leaves it with the Pod's fsGroup."""
    directory.mkdir()
    for key, value in keys.items():
        (directory / key).write_text(value)
        os.chown(directory / key, 0, POD_GROUP)
        (directory / key).chmod(clones.SECRET_MODE | 0o040)
    return directory


def run_clone_container(
    docker_engine: DockerEngine,
    image: str,
    pod: dict[str, Any],
    sources: dict[str, Path],
    passwd: Path,
    *,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the Pod's clone container of ``SLOT`` as a kubelet would, its volumes being
    ``sources`` (by volume name), as the Workspace's user; ``env`` adds to its env,
    ``command`` replaces its command."""
    (container,) = pod["spec"]["initContainers"]
    assert container["name"] == clones.name(SLOT)
    argv = command or container["command"]
    run = ["run", "--rm", "--network=host", "--cap-drop=ALL", "--security-opt=no-new-privileges"]
    run += ["--user", f"{plants.WORKSPACE_UID}:{plants.WORKSPACE_UID}"]
    run += ["--group-add", str(POD_GROUP), "--workdir", container["workingDir"]]
    for mount in container["volumeMounts"]:
        read_only = ":ro" if mount.get("readOnly") else ""
        run += ["--volume", f"{sources[mount['name']]}:{mount['mountPath']}{read_only}"]
    run += ["--volume", f"{passwd}:/etc/passwd:ro"]
    for variable in [*container["env"], *({"name": k, "value": v} for k, v in (env or {}).items())]:
        run += ["--env", f"{variable['name']}={variable['value']}"]
    run += ["--entrypoint", argv[0], image, *argv[1:]]
    return docker_engine(*run, check=False, timeout=CLONE_SECONDS)


def planted_volume(tmp_path: Path, which: tuple[str, ...] = plants.PLANTS) -> Path:
    """The Workspace's /work, owned by its user as the image makes it, with ``which``
    planted by the Agent."""
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    key = f"{clones.CREDENTIALS_PATH}/ssh-privatekey"
    plants.plant(work, seen_at=objects.WORK_ROOT, key=key, plants=which)
    return work


def git(work: Path, *args: str) -> str:
    clone = work / ".repos" / SLOT
    command = ["git", "-c", "safe.directory=*", "-C", str(clone), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
@pytest.mark.parametrize(
    ("known_hosts", "at_commit", "home"),
    [(True, True, None), (False, False, objects.WORK_ROOT)],
    ids=["known-hosts-at-a-commit", "first-use-on-a-branch-home-at-work"],
)
def test_a_clone_container_made_again_reads_nothing_the_agent_planted(
    docker_engine: DockerEngine,
    harness_image: str,
    sshd: git_ssh.SshServer,
    passwd_at_work: Path,
    tmp_path: Path,
    known_hosts: bool,
    at_commit: bool,
    home: str | None,
) -> None:
    url, commits = sshd.bare(f"private-{uuid.uuid4().hex[:8]}", "one", "two")
    work = planted_volume(tmp_path)
    keys = {"ssh-privatekey": sshd.key}
    keys |= {"known_hosts": sshd.known_hosts} if known_hosts else {}
    pod = sandbox_pod(url, commits[0][:7] if at_commit else "main")
    sources = {"workspace": work, clones.name(SLOT): secret_volume(tmp_path / "secret", keys)}

    done = run_clone_container(
        docker_engine,
        harness_image,
        pod,
        sources,
        passwd_at_work,
        env={"HOME": home} if home else None,
    )

    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert git(work, "rev-parse", "HEAD") == (commits[0] if at_commit else commits[-1])
    assert plants.loot(work) == []
    assert plants.holding(work, sshd.key) == []
    assert not plants.holds(log, sshd.key)


@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
@pytest.mark.parametrize("plant", sorted(plants.LEAKS))
def test_each_plant_leaks_the_key_from_a_clone_that_reads_it(
    docker_engine: DockerEngine,
    harness_image: str,
    sshd: git_ssh.SshServer,
    passwd_at_work: Path,
    tmp_path: Path,
    plant: str,
) -> None:
    url, _ = sshd.bare(f"private-{uuid.uuid4().hex[:8]}", "one")
    work = planted_volume(tmp_path, (plant,))
    pod = sandbox_pod(url, "main")
    secret = secret_volume(tmp_path / "secret", {"ssh-privatekey": sshd.key})

    run_clone_container(
        docker_engine,
        harness_image,
        pod,
        {"workspace": work, clones.name(SLOT): secret},
        passwd_at_work,
        env={"HOME": objects.WORK_ROOT},
        command=["sh", "-c", plants.NAIVE_CLONE],
    )

    assert plants.loot(work) == [work / plants.LEAKS[plant]]
    assert (work / plants.LEAKS[plant]).read_text() == sshd.key
