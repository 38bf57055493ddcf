"""The sandbox Pod's clone init containers (``kubeturn.k8s.clones``, as ``objects.sandbox_pod``
places them); their scripts run for real in tests/operator/test_private_clones.py.

Cases:
- a slot's ``secretRef`` becomes a ``secret`` volume (mode 0400) mounted read-only into
  that slot's clone container only: not into another slot's, not into the Harness's,
  whose env does not name the Secret either; the Pod's ``fsGroup`` is the clone's uid
  (how it reads a 0400 file); a slot without one mounts the work directory alone;
- the clone container's env: the URL, ref, Secret's name, the https URL's host (without
  its user), no terminal prompt; its failure message reaches the Pod's status
  (``FallbackToLogsOnError``);
- ``transport``: https, ssh (URL and scp-like), other; ``is_commit``: 7-64 hex digits;
- ``ssh_command``: the mounted key alone, no prompt, ``StrictHostKeyChecking=yes`` with
  the Secret's ``known_hosts``, else ``accept-new`` with no file kept;
- the script: a commit is cloned without checkout then checked out detached; a branch or
  tag with ``--branch``; a ``secretRef`` on another kind of URL fails before git runs;
- names: a slot that is a DNS label names its container as it is; slots the label cannot
  spell (``a_b``, ``a-b``, ``a.b``, capitals, long ones) never share a name.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.api.workspace import Repo, WorkspaceSpec
from kubeturn.k8s import clones, objects
from kubeturn.k8s.clones import Transport

WORKSPACE = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Workspace",
    "metadata": {"name": "shared", "namespace": "team", "uid": "ws-uid"},
}
SPEC = WorkspaceSpec.model_validate(
    {
        "repos": {
            "target": {
                "url": "https://bot@git.example.invalid:8443/team/a.git",
                "secretRef": {"name": "target-credentials"},
            },
            "docs": {"url": "https://git.example.invalid/team/docs.git"},
        }
    }
)
POD = objects.sandbox_pod(
    WORKSPACE,
    SPEC,
    image="harness:1",
    orchestrator_url="http://o",
    providers_yaml="{}\n",
    harness_token_sha256="t1",
)


def container(name: str) -> dict[str, Any]:
    spec = POD["spec"]
    (found,) = [c for c in [*spec["initContainers"], *spec["containers"]] if c["name"] == name]
    return dict(found)


def env(name: str) -> dict[str, str]:
    return {v["name"]: v["value"] for v in container(name)["env"] if "value" in v}


class TestCredentials:
    def test_the_secret_is_a_volume_readable_by_its_owner_alone(self) -> None:
        secrets = [v for v in POD["spec"]["volumes"] if "secret" in v]
        assert secrets == [
            {
                "name": "clone-target",
                "secret": {"secretName": "target-credentials", "defaultMode": 0o400},
            }
        ]
        # 0400 files are root's; the kubelet gives them the fsGroup, a group of the clone
        # container's user (the Workspace tree's), as of every container's in the Pod.
        assert POD["spec"]["securityContext"]["fsGroup"] == objects.HARNESS_UID
        clone = container("clone-target")["securityContext"]
        assert (clone["runAsUser"], clone["runAsGroup"]) == (objects.TOOL_UID,) * 2

    def test_only_its_slots_clone_container_mounts_it(self) -> None:
        mounted = {
            c["name"]: [m for m in c.get("volumeMounts", []) if m["name"] == "clone-target"]
            for c in [*POD["spec"]["initContainers"], *POD["spec"]["containers"]]
        }
        assert mounted == {
            "clone-target": [
                {"name": "clone-target", "mountPath": clones.CREDENTIALS_PATH, "readOnly": True}
            ],
            "clone-docs": [],
            "harness": [],
            "tools": [],
        }
        assert container("clone-docs")["volumeMounts"] == [
            {"name": "workspace", "mountPath": "/work", "subPath": "work"}
        ]

    def test_the_harness_does_not_name_the_secret(self) -> None:
        harness = container("harness")
        assert "target-credentials" not in repr(harness)
        assert "REPO_SECRET" not in env("harness")


class TestEnvironment:
    def test_the_clone_gets_its_repo_and_no_prompt(self) -> None:
        assert env("clone-target") == {
            "REPO_URL": "https://bot@git.example.invalid:8443/team/a.git",
            "REPO_REF": "main",
            "HOME": "/tmp",
            "GIT_TERMINAL_PROMPT": "0",
            "REPO_SECRET": "target-credentials",
            "REPO_HOST": "git.example.invalid:8443",
        }
        assert "REPO_SECRET" not in env("clone-docs")
        assert "REPO_HOST" not in env("clone-docs")

    def test_no_host_for_ssh(self) -> None:
        repo = Repo(url="git@git.example.invalid:team/a.git", secretRef={"name": "key"})
        built = clones.container("target", repo, image="i", work={}, security={})
        assert {v["name"] for v in built["env"]} == {
            "REPO_URL",
            "REPO_REF",
            "HOME",
            "GIT_TERMINAL_PROMPT",
            "REPO_SECRET",
        }

    def test_a_failure_reaches_the_pods_status(self) -> None:
        for name in ("clone-target", "clone-docs"):
            assert container(name)["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/a/b.git", Transport.HTTPS),
        ("HTTP://127.0.0.1:8080/b.git", Transport.HTTPS),
        ("ssh://git@github.com/a/b.git", Transport.SSH),
        ("git+ssh://github.com/a/b.git", Transport.SSH),
        ("git@github.com:a/b.git", Transport.SSH),
        ("github.com:a/b.git", Transport.SSH),
        ("file:///srv/b.git", Transport.OTHER),
        ("git://github.com/a/b.git", Transport.OTHER),
        ("/srv/b.git", Transport.OTHER),
        ("./b:c.git", Transport.OTHER),
    ],
)
def test_transport(url: str, expected: Transport) -> None:
    assert clones.transport(url) is expected


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("3f2a9c1", True),
        ("3F2A9C1D", True),
        ("0123456789abcdef0123456789abcdef01234567", True),
        ("a" * 64, True),
        ("3f2a9c", False),
        ("a" * 65, False),
        ("main", False),
        ("v1.2.3", False),
        ("release/3f2a9c1", False),
    ],
)
def test_is_commit(ref: str, expected: bool) -> None:
    assert clones.is_commit(ref) is expected


def test_ssh_command() -> None:
    key = f"{clones.CREDENTIALS_PATH}/ssh-privatekey"
    common = f"ssh -i {key} -o IdentitiesOnly=yes -o BatchMode=yes"
    assert clones.ssh_command(known_hosts=True) == (
        f"{common} -o StrictHostKeyChecking=yes"
        f" -o UserKnownHostsFile={clones.CREDENTIALS_PATH}/known_hosts"
    )
    assert clones.ssh_command(known_hosts=False) == (
        f"{common} -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/dev/null"
    )


class TestScript:
    def test_a_commit_is_checked_out_detached(self) -> None:
        script = clones.script("target", Repo(url="https://h/a.git", ref="3f2a9c1"))
        assert 'clone --quiet --no-checkout -- "$REPO_URL"' in script
        assert 'checkout --quiet --detach "$REPO_REF^{commit}"' in script
        assert "--branch" not in script

    def test_a_branch_or_tag_is_cloned_by_name(self) -> None:
        script = clones.script("target", Repo(url="https://h/a.git", ref="v1.2.3"))
        assert 'clone --quiet --branch "$REPO_REF" -- "$REPO_URL"' in script
        assert "--detach" not in script

    def test_a_secret_on_another_kind_of_url_fails_before_git_runs(self) -> None:
        repo = Repo(url="file:///srv/a.git", secretRef={"name": "s"})
        script = clones.script("target", repo)
        assert script.rstrip().endswith(
            'fail "a secretRef takes an https or ssh URL, not $REPO_URL"'
        )
        assert "git " not in script


class TestNames:
    def test_a_slot_that_is_a_dns_label_is_named_as_it_is(self) -> None:
        assert clones.name("target") == "clone-target"

    def test_slots_the_label_cannot_spell_never_share_a_name(self) -> None:
        names = {clones.name(slot) for slot in ("a_b", "a-b", "a.b", "A_b", "x" * 70, "x" * 71)}
        assert len(names) == 6
        assert all(len(n) <= 63 and n.replace("-", "").isalnum() and n == n.lower() for n in names)
