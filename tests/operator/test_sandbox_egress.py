"""A sandbox's egress follows its Workspace and the API server (ADR 0034): the real operator
(kopf, in a thread of its own) against the API emulator, whose EndpointSlice
``default/kubernetes`` names the emulator itself (127.0.0.1, its port). No kubelet: the
NetworkPolicy is what is looked at, not the Pod.

Cases:
- a Workspace gets a NetworkPolicy with Ingress and Egress: to the Orchestrator (the
  operator's pods on its API port), DNS, and the public internet on 443 and 22, whose
  IPv4 block excepts the API server's address (127.0.0.1/32) and whose IPv6 block its
  NAT64 form;
- a changed ``spec.egress`` (a rule of its own; ``apiServer: true``) changes the policy:
  the rule follows the operator's, and the API server is reached at its address and port
  and excepted no more;
- a changed EndpointSlice changes the policy within a few looks: a new port is the opt-in
  rule's; no endpoint left, nothing is excepted for the API server; in both of the
  chart's RBAC shapes (the operator may get that one EndpointSlice, in ``default``);
- a ``spec.egress`` the operator cannot take (an ipBlock inside the cloud metadata range)
  makes the Workspace ``Failed``, ``Ready=False`` with reason ``Invalid`` naming the
  field, and leaves the policy as last made; fixed, the policy follows the fix.

The emulator applies the CRDs' schemas and rules as the API server does, with no
admission plugins; its lifecycle rules are :mod:`lifecycle`'s, the kubelet's are in
:mod:`kubelet`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.operator import emulator
from tests.operator.installation import IN_BOTH_SHAPES, RELEASE_NAMESPACE, Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    WORKSPACES,
    OperatorThread,
    eventually,
    fail_on_logged_errors,
    read,
    settings,
    status,
)

WORKSPACE = "egress"
POLICY = f"{WORKSPACE}-kubeturn-sandbox"
POLICIES = "networking.k8s.io/v1/networkpolicies"
SLICES = "discovery.k8s.io/v1/endpointslices"
SLICE_PATH = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
WORKSPACE_PATH = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces/{WORKSPACE}"
LOOK_S = 0.2
"""How often the operator reads the API server's addresses here (30 s in a cluster)."""
LOOPBACK_NAT64 = "64:ff9b::7f00:1/128"
"""127.0.0.1 in NAT64 form."""
GIT_RULE = {
    "to": [{"podSelector": {"matchLabels": {"app": "git"}}}],
    "ports": [{"port": 8022, "protocol": "TCP"}],
}
"""A Workspace's own rule: an in-cluster git server."""

Body = dict[str, Any]


@dataclasses.dataclass
class World:
    k8s: emulator.KubernetesApi
    api: aiohttp.ClientSession
    operator: OperatorThread

    def policy(self) -> Body:
        found = read(self.k8s, POLICIES, POLICY)
        return dict((found or {}).get("spec") or {})

    def egress(self) -> list[Body]:
        return list(self.policy().get("egress") or [])

    async def send(self, method: str, path: str, body: Body) -> None:
        """POST ``body``, or PATCH it as a merge patch, as kubectl would."""
        kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Content-Type": kind}
        async with self.api.request(method, path, data=json.dumps(body), headers=headers) as sent:
            assert sent.status in (200, 201), await sent.text()

    async def until(self, check: Any, what: str) -> Any:
        return await eventually(
            check, what, describe=lambda: json.dumps({"policy": self.policy(), **self.said()})
        )

    def said(self) -> Body:
        return {"status": status(self.k8s, WORKSPACES, WORKSPACE)}


def api_server_slice(port: int, *, endpoints: bool = True) -> Body:
    """The EndpointSlice the API server keeps of itself: here, the emulator."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"]}] if endpoints else [],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[World]:
    """The emulator naming itself the API server, the operator, and a Workspace; the test
    fails if the operator logged an error."""
    operating = dataclasses.replace(
        settings(installation, providers_yaml="{}\n"), api_server_look_s=LOOK_S
    )
    made = World(k8s, k8s_client, OperatorThread(operating, installation.kubeconfig))
    await made.send("POST", SLICE_PATH, api_server_slice(k8s.url.port or 0))
    try:
        await made.operator.start()
        await made.send(
            "POST",
            f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces",
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Workspace",
                "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
                "spec": {"repos": {"target": {"url": "file:///nowhere.git"}}},
            },
        )
        yield made
    finally:
        await made.operator.stop()
    fail_on_logged_errors(caplog, ())


def public_rule(egress: list[Body]) -> Body:
    """The one rule whose peers include 0.0.0.0/0: the public internet."""
    (rule,) = [
        r
        for r in egress
        if any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in r.get("to", []))
    ]
    return rule


def excepted(rule: Body) -> set[str]:
    """Every range a rule's ipBlocks leave out, of either family."""
    return {entry for peer in rule["to"] for entry in peer["ipBlock"].get("except", [])}


def ports_of(egress: list[Body]) -> list[Body]:
    """Every port of every rule."""
    return [port for rule in egress for port in rule.get("ports", [])]


async def test_a_workspace_gets_default_egress_that_keeps_the_api_server_out(world: World) -> None:
    await world.until(lambda: "127.0.0.1/32" in str(world.egress()), "the policy, its egress")
    policy = world.policy()
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    orchestrator, dns, public = world.egress()
    assert orchestrator == {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": RELEASE_NAMESPACE}
                },
                "podSelector": {"matchLabels": dict(world.operator.settings.operator_labels)},
            }
        ],
        "ports": [{"port": world.operator.settings.api_port, "protocol": "TCP"}],
    }
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    assert public == public_rule(world.egress())
    assert public["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 22, "protocol": "TCP"}]
    assert {"127.0.0.1/32", LOOPBACK_NAT64, "169.254.0.0/16", "fd00:ec2::254/128"} <= excepted(
        public
    )


async def test_a_changed_spec_egress_changes_the_policy(world: World) -> None:
    await world.until(lambda: "127.0.0.1/32" in str(world.egress()), "the policy, its egress")
    await world.send("PATCH", WORKSPACE_PATH, {"spec": {"egress": {"rules": [GIT_RULE]}}})
    await world.until(lambda: world.egress()[-1] == GIT_RULE, "the Workspace's rule")

    await world.send("PATCH", WORKSPACE_PATH, {"spec": {"egress": {"apiServer": True}}})
    port = world.k8s.url.port
    allowed = {
        "to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    }
    await world.until(lambda: allowed in world.egress(), "the API server allowed")
    assert world.egress()[-1] == GIT_RULE
    assert not {"127.0.0.1/32", LOOPBACK_NAT64} & excepted(public_rule(world.egress()))


@IN_BOTH_SHAPES
async def test_a_changed_endpoint_slice_changes_the_policy(world: World) -> None:
    await world.send("PATCH", WORKSPACE_PATH, {"spec": {"egress": {"apiServer": True}}})
    port = world.k8s.url.port or 0
    await world.until(
        lambda: {"port": port, "protocol": "TCP"} in ports_of(world.egress()),
        "the API server allowed",
    )
    moved = api_server_slice(port + 1)
    await world.send("PATCH", f"{SLICE_PATH}/kubernetes", {"ports": moved["ports"]})
    await world.until(
        lambda: {"port": port + 1, "protocol": "TCP"} in ports_of(world.egress()),
        "the API server allowed at its new port",
    )

    await world.send("PATCH", WORKSPACE_PATH, {"spec": {"egress": {"apiServer": False}}})
    await world.until(
        lambda: "127.0.0.1/32" in excepted(public_rule(world.egress())), "it kept out"
    )
    await world.send("PATCH", f"{SLICE_PATH}/kubernetes", {"endpoints": []})
    await world.until(
        lambda: "127.0.0.1/32" not in excepted(public_rule(world.egress())),
        "no address kept out for an API server with no endpoint",
    )
    assert "127.0.0.0/8" in excepted(public_rule(world.egress()))  # loopback, as ever


async def test_a_spec_egress_the_operator_cannot_take_is_said_and_changes_nothing(
    world: World,
) -> None:
    await world.until(lambda: "127.0.0.1/32" in str(world.egress()), "the policy, its egress")
    before = world.policy()
    metadata = {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}]}
    await world.send("PATCH", WORKSPACE_PATH, {"spec": {"egress": {"rules": [metadata]}}})

    def invalid() -> Body | None:
        found = [c for c in world.said()["status"].get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found and found[0]["reason"] == "Invalid" else None

    ready = await world.until(invalid, "the Workspace to say its spec is invalid")
    assert ready["status"] == "False"
    assert ready["message"].startswith(
        "spec.egress: rules[0].to[0].ipBlock.cidr 169.254.169.254/32"
    )
    assert "cloudMetadata: true" in ready["message"]
    assert world.said()["status"]["phase"] == "Failed"
    assert world.policy() == before

    await world.send(
        "PATCH", WORKSPACE_PATH, {"spec": {"egress": {"rules": [metadata], "cloudMetadata": True}}}
    )
    await world.until(lambda: world.egress()[-1] == metadata, "the opted-in rule")
    await world.until(lambda: invalid() is None, "the Workspace to take its spec")
