"""The sandbox Pod's clone init containers (``kubeturn.k8s.clones``, as ``objects.sandbox_pod``
places them); their scripts run for real in tests/operator/test_private_clones.py.

Cases:
- a slot's ``secretRef`` becomes a ``secret`` volume (mode 0400) mounted read-only into
  that slot's clone container only: not into another slot's, not into the Harness's,
  whose env does not name the Secret either; the Pod's ``fsGroup`` is the clone's uid
  (how it reads a 0400 file); a slot without one mounts the work directory alone;
- the clone container's env: the URL, ref, Secret's name, the https URL's protocol and
  host with its port (what the credential helper answers); it starts in ``/``, not the
  image's ``/work``; its failure message reaches the Pod's status
  (``FallbackToLogsOnError``);
- ``protocol`` and ``transport``: https, ssh (URL, aliases and scp-like), other;
  ``is_commit``: 7-64 hex digits;
- ``ssh_command``: no configuration file, no prompt; the mounted key alone, or no
  identity at all; ``StrictHostKeyChecking=yes`` with the Secret's ``known_hosts``, else
  ``accept-new`` with no file kept;
- the script trusts nothing on the volume: it starts in ``/`` and exports ``SAFE_GIT``
  before git runs; every git command has no hooks and no fsmonitor; ``clone`` speaks the
  URL's protocol alone (a redirect to another is refused) and writes a directory the
  script has just removed; ``checkout`` names that clone as its repository and work tree
  (nothing is discovered); git runs nowhere else;
- the script: a commit is cloned without checkout then checked out detached; a branch or
  tag with ``--branch``; a ``secretRef`` on another kind of URL fails before git runs;
  ssh without a ``secretRef`` says the host key is trusted on first use;
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
                "url": "https://git.example.invalid:8443/team/a.git",
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
    def test_the_clone_gets_its_repo_and_what_the_helper_answers(self) -> None:
        assert env("clone-target") == {
            "REPO_URL": "https://git.example.invalid:8443/team/a.git",
            "REPO_REF": "main",
            "REPO_SECRET": "target-credentials",
            "REPO_PROTOCOL": "https",
            "REPO_HOST": "git.example.invalid:8443",
        }
        assert env("clone-docs") == {
            "REPO_URL": "https://git.example.invalid/team/docs.git",
            "REPO_REF": "main",
        }

    def test_no_host_for_ssh(self) -> None:
        repo = Repo(url="git@git.example.invalid:team/a.git", secretRef={"name": "key"})
        built = clones.container("target", repo, image="i", work={}, security={}, resources={})
        assert {v["name"] for v in built["env"]} == {"REPO_URL", "REPO_REF", "REPO_SECRET"}

    def test_it_starts_off_the_volume(self) -> None:
        for name in ("clone-target", "clone-docs"):
            assert container(name)["workingDir"] == "/"

    def test_a_failure_reaches_the_pods_status(self) -> None:
        for name in ("clone-target", "clone-docs"):
            assert container(name)["terminationMessagePolicy"] == "FallbackToLogsOnError"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/a/b.git", "https"),
        ("HTTP://127.0.0.1:8080/b.git", "http"),
        ("ssh://git@github.com/a/b.git", "ssh"),
        ("git+ssh://github.com/a/b.git", "ssh"),
        ("ssh+git://github.com/a/b.git", "ssh"),
        ("git@github.com:a/b.git", "ssh"),
        ("file:///srv/b.git", "file"),
        ("git://github.com/a/b.git", "git"),
        ("/srv/b.git", "file"),
    ],
)
def test_protocol(url: str, expected: str) -> None:
    assert clones.protocol(url) == expected


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
    common = "ssh -F /dev/null -o BatchMode=yes"
    first_use = "-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/dev/null"
    assert clones.ssh_command(key=True, known_hosts=True) == (
        f"{common} -i {key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes"
        f" -o UserKnownHostsFile={clones.CREDENTIALS_PATH}/known_hosts"
    )
    assert clones.ssh_command(key=True, known_hosts=False) == (
        f"{common} -i {key} -o IdentitiesOnly=yes {first_use}"
    )
    assert clones.ssh_command(key=False, known_hosts=False) == (
        f"{common} -o IdentityFile=none {first_use}"
    )


SAFE = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
PARTIAL = f"{clones.REPOS}/.partial-target"
REPOS = [
    Repo(url="https://h/a.git", ref="3f2a9c1", secretRef={"name": "s"}),
    Repo(url="http://h:8080/a.git"),
    Repo(url="ssh://git@h/a.git", ref="3f2a9c1", secretRef={"name": "s"}),
    Repo(url="git@h:a.git"),
    Repo(url="file:///srv/a.git", ref="3f2a9c1"),
]


@pytest.mark.parametrize("repo", REPOS, ids=[repo.url for repo in REPOS])
class TestScriptTrustsNothingOnTheVolume:
    def test_it_starts_in_the_root_with_safe_git_before_git_runs(self, repo: Repo) -> None:
        lines = clones.script("target", repo).splitlines()
        assert lines[:3] == [
            "set -eu",
            "cd /",
            "export HOME=/tmp GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null"
            f" GIT_CEILING_DIRECTORIES={clones.REPOS} GIT_TERMINAL_PROMPT=0",
        ]
        assert dict(clones.SAFE_GIT)["HOME"] == "/tmp"

    def test_git_runs_only_in_what_it_has_just_made(self, repo: Repo) -> None:
        script = clones.script("target", repo)
        runs = [line for line in script.splitlines() if line.startswith("git ")]
        assert len(runs) == (2 if clones.is_commit(repo.ref) else 1)
        assert all(line.startswith(f"{SAFE} ") for line in runs)
        checkout = "--no-checkout" if clones.is_commit(repo.ref) else '--branch "$REPO_REF"'
        assert runs[0].endswith(
            f' clone --quiet {checkout} -- "$REPO_URL" "{PARTIAL}"'
            ' || fail "git could not clone $REPO_URL at $REPO_REF (its words are above)"'
        )
        assert script.index(f'rm -rf "{PARTIAL}"') < script.index(runs[0])
        if clones.is_commit(repo.ref):
            assert runs[1].startswith(
                f'{SAFE} --git-dir="{PARTIAL}/.git" --work-tree="{PARTIAL}" checkout '
            )
        assert script.count("git ") == len(runs) + script.count("git could not")

    def test_clone_speaks_the_urls_protocol_alone(self, repo: Repo) -> None:
        clone = [line for line in clones.script("target", repo).splitlines() if " clone --" in line]
        allowed = f"-c protocol.allow=never -c protocol.{clones.protocol(repo.url)}.allow=always"
        assert f"{SAFE} {allowed} " in clone[0]


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

    def test_ssh_without_a_secret_trusts_the_host_on_first_use_and_says_so(self) -> None:
        script = clones.script("target", Repo(url="git@h:a.git"))
        command = clones.ssh_command(key=False, known_hosts=False)
        assert f"GIT_SSH_COMMAND='{command}'\nexport GIT_SSH_COMMAND\n" in script
        assert (
            "kubeturn: repo slot 'target' has no secretRef: the host key is trusted on first use"
        ) in script


class TestNames:
    def test_a_slot_that_is_a_dns_label_is_named_as_it_is(self) -> None:
        assert clones.name("target") == "clone-target"

    def test_slots_the_label_cannot_spell_never_share_a_name(self) -> None:
        names = {clones.name(slot) for slot in ("a_b", "a-b", "a.b", "A_b", "x" * 70, "x" * 71)}
        assert len(names) == 6
        assert all(len(n) <= 63 and n.replace("-", "").isalnum() and n == n.lower() for n in names)
