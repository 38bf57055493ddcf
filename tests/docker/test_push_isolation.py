"""A push Pod's container of the real Harness image pushes a Run's delivered branch over
ssh, and reads nothing through a link an Agent planted (ADR 0065,
docs/security/threat_model.md).

The container is the one ``deliveries.push_pod`` builds (its exact command, settings,
env and mounts), run as a kubelet would run it: as the Pod's user (the Harness's, 10001)
in its fsGroup, with no capability, no new privileges and a read-only root filesystem;
the work volume read-only at /work, as the clone container and a ``deliver`` session
leave it (the Workspace user's clone, the bundle under ``.deliveries``); the Secret's
files as the kubelet leaves them (root's, group 10001, mode 0440); ``/tmp`` an empty
directory of its own; its termination message file. The server is a real sshd on
127.0.0.1 (:mod:`tests.operator.git_ssh`), reached over the host network.

Cases:
- with the Secret's key and ``known_hosts``: the branch is pushed (the server's ref is the
  commit) and the termination message says so; the work volume is as it was;
- the bundle is a link to the mounted Secret's key, at its path in the container: refused
  as a link, nothing pushed, and no line of the key in the log or the message.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kubeturn.api import common
from kubeturn.k8s import clones, deliveries, objects
from kubeturn.orchestrator.delivery import PushRequest
from tests.docker.images import DEBOOTSTRAP_AND_BUILD_SECONDS
from tests.operator import git_http, git_ssh, plants

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine

SLOT = "target"
RUN = "r1"
BRANCH = f"kubeturn/{RUN}"
BUNDLE = f".deliveries/{RUN}/{SLOT}.bundle"
CLONE = f".repos/{SLOT}"
PUSH_SECONDS = 120.0
"""A container starts and pushes one commit in ~1 s; 2 min bounds a stuck one."""

Body = dict[str, Any]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[git_ssh.SshServer]:
    """A real sshd on 127.0.0.1; the tests skip, saying why, where none can run."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(git_ssh.serving(tmp_path_factory.mktemp("sshd")))
        except git_ssh.Unavailable as why:
            pytest.skip(f"no sshd to push to: {why}")
        yield server


def work_volume(tmp_path: Path, bare: Path) -> tuple[Path, str]:
    """The Workspace's /work: the slot's clone of ``bare`` and a delivered commit's bundle,
    owned by the Workspace's user as the clone container and the toolbox leave them; the
    commit's id (its objects are in the bundle alone)."""
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    clone = work / CLONE
    git_http.git("clone", "--quiet", str(bare), str(clone))
    base = git_http.git("-C", str(clone), "rev-parse", "HEAD")
    making = tmp_path / "making"
    git_http.git("init", "--quiet", str(making))
    (making / ".git" / "objects" / "info" / "alternates").write_text(
        f"{clone / '.git' / 'objects'}\n"
    )
    here = ("-C", str(making))
    git_http.git(*here, "update-ref", f"refs/heads/{BRANCH}", base)
    git_http.git(*here, "checkout", "--quiet", BRANCH)
    (making / "WORK.md").write_text("the Agent's work\n")
    git_http.git(*here, "add", "WORK.md")
    git_http.git(*here, "commit", "--quiet", "-m", "the Agent's work")
    commit = git_http.git(*here, "rev-parse", "HEAD")
    bundle = work / BUNDLE
    bundle.parent.mkdir(parents=True)
    git_http.git(*here, "bundle", "create", "--quiet", str(bundle), BRANCH, f"^{base}")
    bundle.chmod(0o644)
    uid = f"{plants.WORKSPACE_UID}:{plants.WORKSPACE_UID}"
    subprocess.run(["chown", "-R", uid, str(work)], check=True)
    return work, commit


def secret_volume(directory: Path, keys: dict[str, str]) -> Path:
    """The Secret's volume as the kubelet leaves it with the Pod's fsGroup."""
    directory.mkdir()
    for key, value in keys.items():
        (directory / key).write_text(value)
        os.chown(directory / key, 0, objects.HARNESS_UID)
        (directory / key).chmod(clones.SECRET_MODE | 0o040)
    return directory


def push_pod(image: str, url: str, commit: str) -> Body:
    request = PushRequest(
        namespace="team",
        run=RUN,
        workspace="ws",
        slot=SLOT,
        branch=BRANCH,
        commit=commit,
        bundle=BUNDLE,
        clone=CLONE,
        url=url,
        secret="repo-key",
    )
    run = {
        "apiVersion": common.GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": RUN, "namespace": "team", "uid": "run-uid"},
    }
    sandbox = {
        "spec": {"nodeName": "node", "containers": [{"name": "harness", "image": image}]},
    }
    return deliveries.push_pod(request, run, sandbox, resources={})


def run_push_container(
    docker_engine: DockerEngine, pod: Body, sources: dict[str, Path], message: Path
) -> subprocess.CompletedProcess[str]:
    """Run the Pod's container as a kubelet would, its volumes being ``sources`` (by
    volume name; the scratch volume an empty tmpfs), its termination message ``message``."""
    spec = pod["spec"]
    (container,) = spec["containers"]
    user = spec["securityContext"]["runAsUser"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    run = ["run", "--rm", "--network=host", "--cap-drop=ALL", "--security-opt=no-new-privileges"]
    run += ["--read-only", "--user", f"{user}:{spec['securityContext']['runAsGroup']}"]
    run += ["--group-add", str(spec["securityContext"]["fsGroup"])]
    run += ["--workdir", container["workingDir"]]
    for mount in container["volumeMounts"]:
        if mount["name"] == "scratch":
            run += ["--mount", f"type=tmpfs,destination={mount['mountPath']},tmpfs-mode=1777"]
            continue
        read_only = ":ro" if mount.get("readOnly") else ""
        run += ["--volume", f"{sources[mount['name']]}:{mount['mountPath']}{read_only}"]
    run += ["--volume", f"{message}:{container['terminationMessagePath']}"]
    for variable in container["env"]:
        run += ["--env", f"{variable['name']}={variable['value']}"]
    command = container["command"]
    run += ["--entrypoint", command[0], pod_image(pod), *command[1:], *container["args"]]
    return docker_engine(*run, check=False, timeout=PUSH_SECONDS)


def pod_image(pod: Body) -> str:
    image: str = pod["spec"]["containers"][0]["image"]
    return image


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root``: its size and modification time."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory, name)
            stat = path.lstat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def message_file(tmp_path: Path) -> Path:
    path = tmp_path / "termination-log"
    path.touch()
    path.chmod(0o666)
    return path


@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
def test_a_push_container_pushes_over_ssh_and_writes_nothing_on_the_volume(
    docker_engine: DockerEngine, harness_image: str, sshd: git_ssh.SshServer, tmp_path: Path
) -> None:
    url, _ = sshd.bare(f"pushed-{uuid.uuid4().hex[:8]}", "one", "two")
    bare = Path(url.split(str(sshd.port), 1)[1])
    work, commit = work_volume(tmp_path, bare)
    keys = {"ssh-privatekey": sshd.key, "known_hosts": sshd.known_hosts}
    sources = {"workspace": work, clones.name(SLOT): secret_volume(tmp_path / "secret", keys)}
    before = listing(work)
    message = message_file(tmp_path)

    done = run_push_container(docker_engine, push_pod(harness_image, url, commit), sources, message)

    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert json.loads(message.read_text()) == {"pushed": True}
    assert git_http.git(f"--git-dir={bare}", "rev-parse", f"refs/heads/{BRANCH}") == commit
    assert listing(work) == before
    assert not plants.holds(log, sshd.key)


@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
def test_a_bundle_linked_to_the_mounted_key_is_refused_and_the_key_read_nowhere(
    docker_engine: DockerEngine, harness_image: str, sshd: git_ssh.SshServer, tmp_path: Path
) -> None:
    url, _ = sshd.bare(f"linked-{uuid.uuid4().hex[:8]}", "one")
    bare = Path(url.split(str(sshd.port), 1)[1])
    work, commit = work_volume(tmp_path, bare)
    (work / BUNDLE).unlink()
    (work / BUNDLE).symlink_to(f"{clones.CREDENTIALS_PATH}/ssh-privatekey")
    keys = {"ssh-privatekey": sshd.key, "known_hosts": sshd.known_hosts}
    sources = {"workspace": work, clones.name(SLOT): secret_volume(tmp_path / "secret", keys)}
    message = message_file(tmp_path)

    done = run_push_container(docker_engine, push_pod(harness_image, url, commit), sources, message)

    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    result = json.loads(message.read_text())
    assert result == {
        "pushed": False,
        "cause": "bundle",
        "error": f"the delivered bundle '{BUNDLE}' is, or is reached through, a symbolic link",
    }
    assert (
        git_http.git(f"--git-dir={bare}", "for-each-ref", "--format=%(refname)")
        == "refs/heads/main"
    )
    assert not plants.holds(log, sshd.key)
    assert not plants.holds(message.read_text(), sshd.key)
