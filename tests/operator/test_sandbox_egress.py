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
    eventually,
    fail_on_logged_errors,
)
from tests.operator.world import OperatorWorld, operator_world

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


def policy_spec(world: OperatorWorld) -> Body:
    found = world.read(POLICIES, POLICY)
    return dict((found or {}).get("spec") or {})


def egress_rules(world: OperatorWorld) -> list[Body]:
    return list(policy_spec(world).get("egress") or [])


async def until(world: OperatorWorld, check: Any, what: str) -> Any:
    """``eventually``, showing the policy and the Workspace's status when it fails."""
    return await eventually(
        check,
        what,
        describe=lambda: json.dumps(
            {"policy": policy_spec(world), "status": world.workspace_status()}
        ),
    )


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
) -> AsyncIterator[OperatorWorld]:
    """The emulator naming itself the API server, the operator, and a Workspace; the test
    fails if the operator logged an error."""
    async with operator_world(
        k8s,
        k8s_client,
        installation,
        first=[api_server_slice(k8s.url.port or 0)],
        workspace={
            "apiVersion": GROUP_VERSION,
            "kind": "Workspace",
            "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
            "spec": {"repos": {"target": {"url": "file:///nowhere.git"}}},
        },
        ready=False,
        api_server_look_s=LOOK_S,
    ) as made:
        yield made
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


async def test_a_workspace_gets_default_egress_that_keeps_the_api_server_out(
    world: OperatorWorld,
) -> None:
    await until(world, lambda: "127.0.0.1/32" in str(egress_rules(world)), "the policy, its egress")
    policy = policy_spec(world)
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    orchestrator, dns, public = egress_rules(world)
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
    assert public == public_rule(egress_rules(world))
    assert public["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 22, "protocol": "TCP"}]
    assert {"127.0.0.1/32", LOOPBACK_NAT64, "169.254.0.0/16", "fd00:ec2::254/128"} <= excepted(
        public
    )


async def test_a_changed_spec_egress_changes_the_policy(world: OperatorWorld) -> None:
    await until(world, lambda: "127.0.0.1/32" in str(egress_rules(world)), "the policy, its egress")
    await world.patch(WORKSPACE_PATH, {"spec": {"egress": {"rules": [GIT_RULE]}}})
    await until(world, lambda: egress_rules(world)[-1] == GIT_RULE, "the Workspace's rule")

    await world.patch(WORKSPACE_PATH, {"spec": {"egress": {"apiServer": True}}})
    port = world.k8s.url.port
    allowed = {
        "to": [{"ipBlock": {"cidr": "127.0.0.1/32"}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    }
    await until(world, lambda: allowed in egress_rules(world), "the API server allowed")
    assert egress_rules(world)[-1] == GIT_RULE
    assert not {"127.0.0.1/32", LOOPBACK_NAT64} & excepted(public_rule(egress_rules(world)))


@IN_BOTH_SHAPES
async def test_a_changed_endpoint_slice_changes_the_policy(world: OperatorWorld) -> None:
    await world.patch(WORKSPACE_PATH, {"spec": {"egress": {"apiServer": True}}})
    port = world.k8s.url.port or 0
    await until(
        world,
        lambda: {"port": port, "protocol": "TCP"} in ports_of(egress_rules(world)),
        "the API server allowed",
    )
    moved = api_server_slice(port + 1)
    await world.patch(f"{SLICE_PATH}/kubernetes", {"ports": moved["ports"]})
    await until(
        world,
        lambda: {"port": port + 1, "protocol": "TCP"} in ports_of(egress_rules(world)),
        "the API server allowed at its new port",
    )

    await world.patch(WORKSPACE_PATH, {"spec": {"egress": {"apiServer": False}}})
    await until(
        world, lambda: "127.0.0.1/32" in excepted(public_rule(egress_rules(world))), "it kept out"
    )
    await world.patch(f"{SLICE_PATH}/kubernetes", {"endpoints": []})
    await until(
        world,
        lambda: "127.0.0.1/32" not in excepted(public_rule(egress_rules(world))),
        "no address kept out for an API server with no endpoint",
    )
    assert "127.0.0.0/8" in excepted(public_rule(egress_rules(world)))  # loopback, as ever


async def test_a_spec_egress_the_operator_cannot_take_is_said_and_changes_nothing(
    world: OperatorWorld,
) -> None:
    await until(world, lambda: "127.0.0.1/32" in str(egress_rules(world)), "the policy, its egress")
    before = policy_spec(world)
    metadata = {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}]}
    await world.patch(WORKSPACE_PATH, {"spec": {"egress": {"rules": [metadata]}}})

    def invalid() -> Body | None:
        found = [c for c in world.workspace_status().get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found and found[0]["reason"] == "Invalid" else None

    ready = await until(world, invalid, "the Workspace to say its spec is invalid")
    assert ready["status"] == "False"
    assert ready["message"].startswith(
        "spec.egress: rules[0].to[0].ipBlock.cidr 169.254.169.254/32"
    )
    assert "cloudMetadata: true" in ready["message"]
    assert world.workspace_status()["phase"] == "Failed"
    assert policy_spec(world) == before

    await world.patch(
        WORKSPACE_PATH, {"spec": {"egress": {"rules": [metadata], "cloudMetadata": True}}}
    )
    await until(world, lambda: egress_rules(world)[-1] == metadata, "the opted-in rule")
    await until(world, lambda: invalid() is None, "the Workspace to take its spec")
