"""A Run's delivered branch is pushed from a short-lived Pod of its own
(``kubeturn.k8s.deliveries``, ADR 0065): :class:`KubePusher`, as the chart's
ServiceAccount, against the API emulator, the kubelet running the push Pod's program as
a real process beside a real sandbox, and git's own ``http-backend`` behind basic auth on
127.0.0.1 (:mod:`git_http`).

Each case starts from a Workspace whose sandbox Pod runs (made as the operator makes it,
``objects.sandbox_pod``: its clone container clones the private repository with the
slot's Secret) and a bundle on its work volume: a real git bundle of a real commit on top
of the clone's HEAD, made in a repository that borrows the clone's objects, so that the
commit's own objects are in the bundle alone.

Cases:
- the push Pod is on the sandbox's node, owned by the Run, labelled as a delivery, with
  the work volume read-only and the slot's Secret (optional), which neither the Harness
  nor the tools container of the sandbox mounts; the branch is pushed (the server's ref
  is the commit), the Pod is deleted, one Pod was made, and nothing held the password in
  a command line or environment while git pushed;
- the slot's Secret missing: the Pod runs all the same and says so, naming the Secret
  and the key, before git asks the server anything;
- a wrong password: not pushed, "credentials refused", naming the slot, the Secret and
  the URL, not the password; the remote branch is not made;
- the remote branch moved to a commit the delivered one does not build on: not pushed,
  "not a fast-forward"; the remote branch is left where it was;
- the bundle is a symbolic link to a file holding the Secret's password, or is reached
  through a linked directory: refused as a link; the password is nowhere (the Pod's log,
  its termination message, the result), and nothing is pushed;
- a push that cannot begin (its Run gone, no sandbox Pod, a commit id that is not full)
  says so and makes no Pod;
- an operator that stops mid-push (the call cancelled once the Pod exists) and is asked
  again finds that Pod and reads its end: one Pod in all, the branch pushed; asked once
  more after that Pod went, a second Pod finds the remote at the commit: pushed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import clones, deliveries, objects, operator
from kubeturn.k8s.kube import Kube
from kubeturn.orchestrator.delivery import PushRequest, PushResult
from tests.operator import emulator, git_http
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    eventually,
    names,
)
from tests.operator.world import OperatorWorld

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the kubelet mounts the work volume read-only: needs root"
)

SLOT = "target"
USER, PASSWORD = "kubeturn-bot", "ghp-not-a-real-token-7d1e"
SECRET = "git-credentials"
WORKSPACE = "private"
RUN = "r1"
BRANCH = f"kubeturn/{RUN}"
BUNDLE = f".deliveries/{RUN}/{SLOT}.bundle"
CLONE = f".repos/{SLOT}"
PROVIDERS = "scripted:\n  type: openai\n  baseUrl: http://127.0.0.1:9/v1\n"
"""No Turn runs here: the Harness needs a providers file, not a model."""

CLAIMS = "v1/persistentvolumeclaims"

Body = dict[str, Any]


class DeliveryWorld(OperatorWorld):
    """The operator world with no operator running: the test plays its deliverer
    (``pusher``) for the Run, against the private repository ``server`` serves."""

    def __init__(
        self,
        world: OperatorWorld,
        server: git_http.GitServer,
        pusher: deliveries.KubePusher,
        work: Path,
        scratch: Path,
    ) -> None:
        super().__init__(world.k8s, world.api, workspace=WORKSPACE, kubelet=world.kubelet)
        self.server, self.pusher, self.scratch = server, pusher, scratch
        self.work = work
        """The directory standing for the sandbox's /work."""

    @property
    def url(self) -> str:
        return f"{self.server.url}/private.git"

    @property
    def bare(self) -> Path:
        return self.server.root / "private.git"

    def remote(self, ref: str) -> str | None:
        """The commit a ref of the server's repository is at, or None."""
        try:
            return git_http.git(f"--git-dir={self.bare}", "rev-parse", "--verify", "-q", ref)
        except Exception:
            return None

    def request(self, commit: str) -> PushRequest:
        return PushRequest(
            namespace=NAMESPACE,
            run=RUN,
            workspace=WORKSPACE,
            slot=SLOT,
            branch=BRANCH,
            commit=commit,
            bundle=BUNDLE,
            clone=CLONE,
            url=self.url,
            secret=SECRET,
        )

    def deliver(self, message: str = "the Agent's work") -> str:
        """A commit on top of the clone's HEAD, made in a repository that borrows the
        clone's objects, and its bundle at ``BUNDLE`` on the work volume: its id."""
        clone = self.work / CLONE
        making = self.scratch / "making"
        base = git_http.git("-c", "safe.directory=*", "-C", str(clone), "rev-parse", "HEAD")
        git_http.git("init", "--quiet", str(making))
        alternates = making / ".git" / "objects" / "info" / "alternates"
        alternates.write_text(f"{clone / '.git' / 'objects'}\n")
        here = ("-C", str(making))
        git_http.git(*here, "update-ref", f"refs/heads/{BRANCH}", base)
        git_http.git(*here, "checkout", "--quiet", BRANCH)
        (making / "WORK.md").write_text(f"{message}\n")
        git_http.git(*here, "add", "WORK.md")
        git_http.git(*here, "commit", "--quiet", "-m", message)
        commit = git_http.git(*here, "rev-parse", "HEAD")
        bundle = self.work / BUNDLE
        bundle.parent.mkdir(parents=True, exist_ok=True)
        git_http.git(*here, "bundle", "create", "--quiet", str(bundle), BRANCH, f"^{base}")
        shutil.rmtree(making)
        assert not _has_object(clone, commit), "the commit must be in the bundle alone"
        return commit

    def pods_made(self) -> int:
        """How many Pods the operator's identity created (the sandbox is the tests')."""
        return sum(
            (asked.verb, asked.resource, asked.subresource) == ("create", "pods", "")
            for asked, _ in self.k8s.authorizations
        )

    def secret_seen(self) -> list[str]:
        """Where the password is in what the push Pods left: their logs."""
        return [
            str(log)
            for log in self.kubelet.logs.rglob("push.log")
            if PASSWORD in log.read_text(errors="replace")
        ]


def _has_object(repository: Path, commit: str) -> bool:
    try:
        git_http.git("-c", "safe.directory=*", "-C", str(repository), "cat-file", "-e", commit)
    except Exception:
        return False
    return True


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory git may use as any user (pytest's temp dirs are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="kubeturn-delivery-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kube(installation: Installation) -> Iterator[Kube]:
    """The operator's Kube facade, as the chart's ServiceAccount."""
    client = operator.kube_client(str(installation.kubeconfig))
    yield Kube(client)
    client.close()


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    kubelet: kubelet_.Kubelet,
    kube: Kube,
    scratch: Path,
) -> AsyncIterator[DeliveryWorld]:
    """The private repository served, the Workspace's sandbox running on it, the Run."""
    async with git_http.serving(scratch / "srv", USER, PASSWORD) as server:
        server.bare("private", "one", "two")
        api = OperatorWorld(k8s, k8s_client, workspace=WORKSPACE, kubelet=kubelet)
        await api.create(secret(PASSWORD))
        repo = {"url": f"{server.url}/private.git", "ref": "main", "secretRef": {"name": SECRET}}
        spec = {"repos": {SLOT: repo}}
        await api.create(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Workspace",
                "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
                "spec": spec,
            }
        )
        workspace = k8s.read_object("kubeturn.dev/v1alpha1/workspaces", NAMESPACE, WORKSPACE)
        assert workspace is not None
        for body in sandbox_objects(workspace, WorkspaceSpec.model_validate(spec)):
            await api.create(body)
        claim = k8s.read_object(CLAIMS, NAMESPACE, objects.claim_name(WORKSPACE, "work"))
        assert claim is not None
        await eventually(
            lambda: sandbox_phase(k8s) == "Running",
            "the sandbox Pod Running, its clone made",
            describe=lambda: f"{sandbox_phase(k8s)}; kubelet: {kubelet.errors}",
        )
        await api.create(run())
        work = kubelet.claims[claim["metadata"]["uid"]] / objects.WORK_SUBPATH
        yield DeliveryWorld(api, server, deliveries.KubePusher(kube), work, scratch)


def sandbox_phase(k8s: emulator.KubernetesApi) -> str | None:
    pod = k8s.read_object("v1/pods", NAMESPACE, objects.sandbox_name(WORKSPACE)) or {}
    return (pod.get("status") or {}).get("phase")


def secret(password: str) -> Body:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": {"username": USER, "password": password},
    }


def sandbox_objects(workspace: Body, spec: WorkspaceSpec) -> list[Body]:
    """What the operator makes for a Workspace for its sandbox to run, as it makes them."""
    harness, orchestrator = "harness-token", "orchestrator-token"
    digest = hashlib.sha256(harness.encode()).hexdigest()
    return [
        objects.token_secret(workspace, harness, orchestrator),
        objects.providers_config_map(workspace, PROVIDERS),
        objects.volume_claim(workspace, spec),
        objects.harness_claim(workspace, spec),
        objects.sandbox_pod(
            workspace,
            spec,
            image="kubeturn-harness:test",
            orchestrator_url="http://127.0.0.1:9",
            providers_yaml=PROVIDERS,
            harness_token_sha256=digest,
        ),
    ]


def run() -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": RUN, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {"coder": {"model": "scripted/any", "instructions": "Work."}},
            "machine": {"initial": "done", "states": {"done": {"type": "final"}}},
        },
    }


def failed(world: DeliveryWorld, why: str) -> PushResult:
    return PushResult(False, f"cannot push repo slot '{SLOT}' to {world.url}: {why}")


# ----------------------------------------------------------------------------- cases


async def test_the_branch_is_pushed_from_a_pod_an_operator_asked_again_finds(
    world: DeliveryWorld,
) -> None:
    commit = world.deliver()
    request = world.request(commit)
    name = deliveries.pod_name(RUN, SLOT, commit)
    world.kubelet.held = True  # the node is slow to take the Pod: the push waits on it
    first = asyncio.create_task(world.pusher.push(request))
    await eventually(
        lambda: world.k8s.read_object("v1/pods", NAMESPACE, name) is not None,
        "the push Pod made",
    )
    pod = world.k8s.read_object("v1/pods", NAMESPACE, name)
    first.cancel()  # the operator stops
    with pytest.raises(asyncio.CancelledError):
        await first
    world.kubelet.held = False

    result = await world.pusher.push(request)

    assert result == PushResult(True)
    assert world.remote(f"refs/heads/{BRANCH}") == commit
    assert world.pods_made() == 1
    assert world.k8s.read_object("v1/pods", NAMESPACE, name) is None
    assert world.server.exposed == []
    assert world.secret_seen() == []
    assert pod is not None
    sandbox = world.k8s.read_object("v1/pods", NAMESPACE, objects.sandbox_name(WORKSPACE))
    run = world.k8s.read_object(f"{GROUP_VERSION}/runs", NAMESPACE, RUN)
    assert sandbox is not None
    assert run is not None
    assert pod["spec"]["nodeName"] == sandbox["spec"]["nodeName"] == kubelet_.NODE
    assert [(o["kind"], o["name"], o["uid"]) for o in pod["metadata"]["ownerReferences"]] == [
        ("Run", RUN, run["metadata"]["uid"])
    ]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "delivery"
    assert pod["metadata"]["labels"][objects.RUN_LABEL] == RUN
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[objects.WORK_ROOT]["readOnly"] is True
    assert mounts[clones.CREDENTIALS_PATH]["readOnly"] is True
    secrets = [v["secret"] for v in pod["spec"]["volumes"] if "secret" in v]
    assert secrets == [{"secretName": SECRET, "defaultMode": 0o400, "optional": True}]
    # The sandbox mounts the Secret in its clone container alone, as before.
    holders = [
        c["name"]
        for c in [*sandbox["spec"]["initContainers"], *sandbox["spec"]["containers"]]
        if any(m["name"] == clones.name(SLOT) for m in c.get("volumeMounts", []))
    ]
    assert holders == [clones.name(SLOT)]

    again = await world.pusher.push(request)  # its Pod read and gone: the remote has it

    assert again == PushResult(True)
    assert world.pods_made() == 2


async def test_refused_pushes_say_why_and_change_nothing(
    world: DeliveryWorld, k8s_client: aiohttp.ClientSession
) -> None:
    commit = world.deliver()
    served = world.server.served
    path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"
    async with k8s_client.delete(path) as answer:
        assert answer.status == 200, await answer.text()

    missing = await world.pusher.push(world.request(commit))

    assert missing == failed(
        world,
        f"the Secret '{SECRET}' is missing or has no key 'username' (or it is empty);"
        " the URL needs 'username' and 'password'",
    )
    assert (world.server.served, world.server.refused, world.pods_made()) == (served, 1, 1)

    await world.create(secret("not-the-password"))

    wrong = await world.pusher.push(world.request(commit))

    assert not wrong.pushed
    assert wrong.error is not None
    said = f"cannot push repo slot '{SLOT}' to {world.url}: credentials refused"
    assert wrong.error.startswith(f"{said} (the Secret '{SECRET}'): "), wrong.error
    assert "Authentication failed" in wrong.error
    assert "not-the-password" not in wrong.error
    assert world.remote(f"refs/heads/{BRANCH}") is None
    assert (world.server.served, world.pods_made()) == (served, 2)

    async with k8s_client.put(path, json=secret(PASSWORD)) as answer:
        assert answer.status == 200, await answer.text()
    tip = world.remote("refs/heads/main")
    assert tip is not None
    bare = f"--git-dir={world.bare}"
    tree = git_http.git(bare, "rev-parse", f"{tip}^{{tree}}")
    moved = git_http.git(bare, "commit-tree", tree, "-p", tip, "-m", "someone else's")
    git_http.git(bare, "update-ref", f"refs/heads/{BRANCH}", moved)

    behind = await world.pusher.push(world.request(commit))

    assert behind == failed(
        world,
        f"not a fast-forward: the remote branch '{BRANCH}' has commits the delivered"
        f" {commit[:12]} does not build on (nothing is forced)",
    )
    assert world.remote(f"refs/heads/{BRANCH}") == moved
    assert world.pods_made() == 3
    assert world.secret_seen() == []


async def test_a_linked_bundle_is_refused_and_the_secret_read_nowhere(world: DeliveryWorld) -> None:
    commit = world.deliver()
    served = world.server.served
    # What an Agent plants: a link to a file holding the Secret's password (standing for
    # the push Pod's mounted Secret, whose directory the kubelet makes as the Pod starts),
    # at the bundle, then at the directory on its way.
    loot = world.scratch / "mounted-secret"
    loot.mkdir()
    (loot / "password").write_text(PASSWORD)
    (loot / f"{SLOT}.bundle").write_text(PASSWORD)
    bundle = world.work / BUNDLE
    bundle.unlink()
    bundle.symlink_to(loot / "password")
    results = [await world.pusher.push(world.request(commit))]
    shutil.rmtree(bundle.parent)
    bundle.parent.symlink_to(loot)
    assert bundle.read_text() == PASSWORD  # the link works, for whoever follows it
    results.append(await world.pusher.push(world.request(commit)))

    refused = failed(
        world, f"the delivered bundle '{BUNDLE}' is, or is reached through, a symbolic link"
    )
    assert results == [refused, refused]
    assert world.remote(f"refs/heads/{BRANCH}") is None
    assert (world.server.served, world.pods_made()) == (served, 2)
    logs = list(world.kubelet.logs.rglob("push.log"))
    assert len(logs) == 2
    assert world.secret_seen() == []
    said = f"kubeturn: {refused.error}"
    assert [said in log.read_text() for log in logs] == [True, True]


async def test_a_push_that_cannot_begin_says_why_and_makes_nothing(
    k8s: emulator.KubernetesApi, k8s_client: aiohttp.ClientSession, kube: Kube
) -> None:
    pusher = deliveries.KubePusher(kube)
    url = "https://git.example/team/repo.git"
    request = PushRequest(
        NAMESPACE, RUN, WORKSPACE, SLOT, BRANCH, "f" * 40, BUNDLE, CLONE, url, SECRET
    )
    said = f"cannot push repo slot '{SLOT}' to {url}: "

    assert await pusher.push(request) == PushResult(False, f"{said}the Run '{RUN}' is gone")
    await OperatorWorld(k8s, k8s_client).create(run())
    assert await pusher.push(request) == PushResult(
        False, f"{said}the Workspace has no sandbox Pod, whose node holds its work volume"
    )
    short = dataclasses.replace(request, commit="f" * 12)
    assert await pusher.push(short) == PushResult(
        False, f"{said}'{'f' * 12}' is not a full commit id"
    )
    assert names(k8s, "v1/pods") == []
