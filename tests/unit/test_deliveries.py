"""The push Pod as ``kubeturn.k8s.deliveries`` builds and reads it, and the judgements of
its program (``kubeturn.k8s.push_program``), as pure functions.

Cases:
- the Pod's name: the same for the same Run, slot and commit, another for another of any;
  a Pod name a kubelet runs whatever the Run's and slot's names;
- URLs in messages lose their user;
- the Pod: on the sandbox's node, in the Harness's image and service account, owned by the
  Run and labelled a delivery; the work volume read-only (mount and claim), the Secret
  optional and owner-read, mounted read-only; no Secret, no credentials volume or
  environment; hardened (no token, no privilege, read-only root, a deadline); its
  settings name no credential; an ssh URL gets the Secret's key and known hosts;
- its result: pushed; refused, with the program's words; a program that left no line
  (its log's end); a Pod that never ran its container (the Pod's reason);
- a sandbox Pod a push Pod cannot go beside: none, deleted, unbound, not Running;
- the program's judgement of git's words: not a fast-forward (either way git says it),
  another refusal by the remote, credentials refused, unreachable, anything else.

How the program copies the bundle, on a real filesystem, is
``tests/operator/test_push_bundle.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeturn.api import common
from kubeturn.k8s import clones, deliveries, names, objects, push_program
from kubeturn.orchestrator.delivery import PushRequest, shown_url

COMMIT = "0123456789abcdef0123456789abcdef01234567"
Body = dict[str, Any]

RUN: Body = {
    "apiVersion": common.GROUP_VERSION,
    "kind": "Run",
    "metadata": {"name": "r1", "namespace": "team", "uid": "run-uid"},
}
SANDBOX: Body = {
    "metadata": {"name": "ws-kubeturn-sandbox"},
    "spec": {
        "nodeName": "node-7",
        "serviceAccountName": "puller",
        "containers": [
            {"name": "harness", "image": "registry.example/harness:0.5.0"},
            {"name": "tools", "image": "registry.example/harness:0.5.0"},
        ],
    },
    "status": {"phase": "Running"},
}


def request(
    url: str = "https://git.example/team/repo.git", secret: str | None = "creds"
) -> PushRequest:
    return PushRequest(
        namespace="team",
        run="r1",
        workspace="ws",
        slot="target",
        branch="kubeturn/r1",
        commit=COMMIT,
        bundle=".deliveries/r1/target.bundle",
        clone=".repos/target",
        url=url,
        secret=secret,
    )


def build(url: str = "https://git.example/team/repo.git", secret: str | None = "creds") -> Body:
    return deliveries.push_pod(request(url, secret), RUN, SANDBOX, resources={"limits": {}})


def settings(pod: Body) -> Body:
    (container,) = pod["spec"]["containers"]
    loaded: Body = json.loads(container["args"][0])
    return loaded


# ----------------------------------------------------------------------------- names


def test_the_same_push_gets_the_same_name_and_another_another() -> None:
    name = deliveries.pod_name("r1", "target", COMMIT)
    assert name == "r1-push-target-0123456789ab"
    assert deliveries.pod_name("r1", "target", COMMIT) == name
    others = {
        deliveries.pod_name("r2", "target", COMMIT),
        deliveries.pod_name("r1", "docs", COMMIT),
        deliveries.pod_name("r1", "target", "f" * 40),
        deliveries.pod_name("r1", "Target", COMMIT),
    }
    assert name not in others
    assert len(others) == 4


def test_any_run_and_slot_give_a_pod_name_a_kubelet_runs() -> None:
    name = deliveries.pod_name("r." * 126 + "r", "Slot_" + "x" * 58, COMMIT)
    assert len(name) <= names.POD_NAME_MAX
    assert name.endswith(f"-{COMMIT[:12]}")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://git.example/a.git", "https://git.example/a.git"),
        ("https://bot:token@git.example:8443/a.git", "https://git.example:8443/a.git"),
        ("ssh://git@git.example/a.git", "ssh://git.example/a.git"),
        ("git@git.example:team/a.git", "git.example:team/a.git"),
        ("/srv/a.git", "/srv/a.git"),
    ],
)
def test_a_url_is_shown_without_its_user(url: str, shown: str) -> None:
    assert shown_url(url) == shown


# ----------------------------------------------------------------------------- the Pod


def test_the_pod_goes_beside_the_sandbox_owned_by_the_run() -> None:
    pod = build()
    meta, spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"]) == (
        deliveries.pod_name("r1", "target", COMMIT),
        "team",
    )
    assert meta["ownerReferences"] == [objects.owner_reference(RUN)]
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "kubeturn",
        "app.kubernetes.io/name": "kubeturn",
        "app.kubernetes.io/component": "delivery",
        objects.RUN_LABEL: "r1",
        objects.WORKSPACE_LABEL: "ws",
    }
    assert spec["nodeName"] == "node-7"
    assert spec["serviceAccountName"] == "puller"
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/harness:0.5.0"
    assert container["command"][:3] == [deliveries.PYTHON, "-I", "-c"]
    assert container["command"][3] == Path(push_program.__file__).read_text()


def test_the_work_volume_is_read_only_and_the_secret_optional() -> None:
    pod = build()
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [
        {"name": "workspace", "mountPath": "/work", "subPath": "work", "readOnly": True},
        {"name": "scratch", "mountPath": "/tmp"},
        {"name": "clone-target", "mountPath": clones.CREDENTIALS_PATH, "readOnly": True},
    ]
    assert spec["volumes"] == [
        {
            "name": "workspace",
            "persistentVolumeClaim": {"claimName": "ws-kubeturn-work", "readOnly": True},
        },
        {"name": "scratch", "emptyDir": {}},
        {
            "name": "clone-target",
            "secret": {"secretName": "creds", "defaultMode": 0o400, "optional": True},
        },
    ]
    assert container["env"] == [
        {"name": "REPO_SECRET", "value": "creds"},
        {"name": "REPO_PROTOCOL", "value": "https"},
        {"name": "REPO_HOST", "value": "git.example"},
    ]


def test_the_pod_is_hardened() -> None:
    spec = build()["spec"]
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["fsGroup"] == objects.HARNESS_UID
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["activeDeadlineSeconds"] == int(deliveries.PUSH_TIMEOUT_S)
    assert container["terminationMessagePath"] == "/dev/termination-log"


def test_its_settings_name_what_to_push_and_how_never_a_credential() -> None:
    found = settings(build())
    assert {k: found[k] for k in ("bundle", "clone", "branch", "commit", "url", "secret")} == {
        "bundle": ".deliveries/r1/target.bundle",
        "clone": ".repos/target",
        "branch": "kubeturn/r1",
        "commit": COMMIT,
        "url": "https://git.example/team/repo.git",
        "secret": "creds",
    }
    assert found["needs"] == ["username", "password"]
    assert found["env"] == dict(clones.SAFE_GIT)
    assert found["push_options"] == clones.git_options(found["url"], credentials=True)
    assert "protocol.https.allow=always" in found["push_options"]
    assert "protocol.file.allow=always" not in found["push_options"]
    assert found["ssh"] is None


def test_without_a_secret_nothing_of_one_is_mounted() -> None:
    pod = build(secret=None)
    (container,) = pod["spec"]["containers"]
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["workspace", "scratch"]
    assert container["env"] == []
    assert settings(pod)["needs"] == []
    assert "credential.helper=" not in settings(pod)["push_options"]


def test_an_ssh_url_pushes_with_the_secrets_key() -> None:
    found = settings(build("git@git.example:team/repo.git"))
    assert found["needs"] == ["ssh-privatekey"]
    assert found["ssh"] == {
        "known_hosts": clones.ssh_command(key=True, known_hosts=True),
        "first_use": clones.ssh_command(key=True, known_hosts=False),
    }


# ----------------------------------------------------------------------------- its end


def ended(terminated: Body | None, **status: Any) -> Body:
    statuses = [{"name": "push", "state": {"terminated": terminated}}] if terminated else []
    return {"status": {"phase": "Failed", "containerStatuses": statuses, **status}}


def test_a_pushed_result() -> None:
    message = push_program.result_line(True) + "\n"
    assert deliveries.read_result(ended({"exitCode": 0, "message": message})) == (True, None)


def test_a_refusal_is_the_programs_words_on_one_line() -> None:
    message = push_program.result_line(False, "credentials", "credentials refused:\n  401")
    assert deliveries.read_result(ended({"exitCode": 1, "message": message})) == (
        False,
        "credentials refused: 401",
    )


def test_a_program_that_left_no_line_is_said_by_its_logs_end() -> None:
    message = "Traceback (most recent call last):\nOSError: no space left\n"
    assert deliveries.read_result(ended({"exitCode": 1, "message": message})) == (
        False,
        "the push Pod ended with exit code 1: OSError: no space left",
    )


def test_a_pod_whose_container_never_ran_says_the_pods_reason() -> None:
    pod = ended(None, reason="DeadlineExceeded", message="Pod was active too long")
    assert deliveries.read_result(pod) == (False, "the push Pod failed: Pod was active too long")


@pytest.mark.parametrize(
    ("sandbox", "problem"),
    [
        (None, "the Workspace has no sandbox Pod, whose node holds its work volume"),
        (
            {**SANDBOX, "metadata": {"deletionTimestamp": "now"}},
            "the Workspace's sandbox Pod is not running on a node",
        ),
        ({**SANDBOX, "spec": {}}, "the Workspace's sandbox Pod is not running on a node"),
        (
            {**SANDBOX, "status": {"phase": "Pending"}},
            "the Workspace's sandbox Pod is Pending, not Running",
        ),
        (SANDBOX, None),
    ],
)
def test_where_a_push_pod_cannot_go(sandbox: Body | None, problem: str | None) -> None:
    assert deliveries.sandbox_problem(sandbox) == problem


# ----------------------------------------------------------------------------- the program

PROGRAM_SETTINGS: push_program.Settings = json.loads(json.dumps(settings(build())))


@pytest.mark.parametrize(
    ("stdout", "stderr", "cause"),
    [
        (
            "To x\n!\t0123:refs/heads/b\t[rejected] (non-fast-forward)\nDone\n",
            "",
            "non-fast-forward",
        ),
        ("To x\n!\t0123:refs/heads/b\t[rejected] (fetch first)\nDone\n", "", "non-fast-forward"),
        ("To x\n!\t0123:refs/heads/b\t[remote rejected] (protected branch)\n", "", "rejected"),
        ("", "fatal: Authentication failed for 'https://git.example/a.git/'\n", "credentials"),
        ("", "git@host: Permission denied (publickey).\nfatal: Could not read", "credentials"),
        ("", "fatal: unable to access 'x': Failed to connect to git.example\n", "unreachable"),
        ("", "error: RPC failed; curl 92 HTTP/2 stream 5 was not closed cleanly\n", "git"),
    ],
)
def test_the_program_says_why_git_did_not_push(stdout: str, stderr: str, cause: str) -> None:
    assert push_program.judge(stdout, stderr, PROGRAM_SETTINGS).cause == cause


def test_a_remote_refusal_quotes_its_reason() -> None:
    said = push_program.judge(
        "!\t0123:refs/heads/b\t[remote rejected] (protected branch)\n", "", PROGRAM_SETTINGS
    )
    assert str(said) == "the remote refused the branch: [remote rejected] (protected branch)"
