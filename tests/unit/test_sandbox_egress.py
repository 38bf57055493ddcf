"""A sandbox's egress (ADR 0034): the models' checks (``kubeturn.api.egress``), the pure
builder of the rules (``kubeturn.k8s.egress``) and the NetworkPolicy around them
(``kubeturn.k8s.objects.network_policy``).

Addresses here are data, never dialled: the documentation ranges (192.0.2.0/24,
2001:db8::/32) stand for public ones, and 169.254.169.254 for the metadata endpoint.

Cases:
- the policy: Ingress and Egress both, the operator alone admitted to the Harness;
- defaults: exactly the Orchestrator rule (the operator's pods, in its namespace, on its
  API port; any namespace for an operator with none), DNS anywhere on 53 UDP and TCP,
  and the public rule on 443 and 22 whose ipBlocks except the private, CGNAT, loopback
  and link-local ranges, their NAT64 forms, the other metadata endpoints and the API
  server's addresses (IPv4 with its NAT64 form, IPv6 as /128); nothing withheld;
- switches: the operator's DNS or public rule off, and a Workspace turning either back
  on or off; the operator's DNS peers; a Workspace's public ports;
- opt-ins: ``cloudMetadata`` adds the metadata ranges on every port and stops excepting
  them from the Workspace's ipBlocks (the public rule still keeps link-local out);
  ``apiServer`` adds the API server's addresses on its ports and stops excepting them;
  with no address known, it is withheld and said;
- extra rules: the operator's, then the Workspace's, as written (selectors, ports,
  ranges, named ports, protocols); an ipBlock excepts the guarded ranges inside it after
  its own, each once; a peer holding only an API server address is dropped, and a rule
  left with no peer too, each said with its path;
- the API server unknown: no ipBlock at all (the public rule, ipBlock peers), selector
  peers kept, and said once;
- ``api_server_of``: addresses of every endpoint, once, sorted, non-addresses skipped;
  TCP ports only; an FQDN slice or none reads as no address;
- ``same_spec``: equal once empties are left out, a selector's ``{}`` kept; a stored peer
  wider than asked for (a selector fewer) is not the same;
- the models refuse, each saying what: a CIDR that does not parse or has host bits, an
  except outside or equal to its cidr, a peer of both kinds or none, a rule without
  destinations, bad port names and ranges, In without values and Exists with some, a
  bad label key, no public ports; an ipBlock inside the metadata ranges (its NAT64 form
  too) unless the Workspace opts in, and never in the operator's rules; an ipBlock that
  only holds them is accepted; a Run's Workspace template reports these at their
  manifest paths;
- reading the API server's addresses: once per period however often it is asked; a
  failed read keeps what was read before (None before any), each new failure logged
  once; no EndpointSlice reads as no address, with a warning.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kubeturn.api.egress import (
    EgressRule,
    IPBlock,
    LabelSelector,
    Peer,
    PolicyPort,
    SandboxEgress,
    WorkspaceEgress,
)
from kubeturn.api.validation import validate_run
from kubeturn.errors import DefinitionErrors
from kubeturn.k8s import egress, objects
from kubeturn.k8s.apiserver import ApiServerAddresses

Object = dict[str, Any]

OPERATOR = egress.Operator(
    (("app.kubernetes.io/name", "kubeturn"), ("app.kubernetes.io/component", "operator")),
    "kubeturn-system",
    8081,
)
API_SERVER = egress.ApiServer(("192.0.2.10", "2001:db8::10"), (443,))
WORKSPACE = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Workspace",
    "metadata": {"name": "ws", "namespace": "team", "uid": "ws-uid"},
}

ORCHESTRATOR_RULE = {
    "to": [
        {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "kubeturn-system"}
            },
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "kubeturn",
                    "app.kubernetes.io/component": "operator",
                }
            },
        }
    ],
    "ports": [{"port": 8081, "protocol": "TCP"}],
}
DNS_RULE = {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
NON_PUBLIC_V4 = [
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
]
NON_PUBLIC_V6 = [
    "::1/128",
    "fc00::/7",
    "fe80::/10",
    "64:ff9b::a00:0/104",
    "64:ff9b::6440:0/106",
    "64:ff9b::7f00:0/104",
    "64:ff9b::a9fe:0/112",
    "64:ff9b::ac10:0/108",
    "64:ff9b::c0a8:0/112",
]
METADATA_V4 = ["100.100.100.200/32"]
"""The metadata endpoints the non-public ranges do not already list, by family."""
METADATA_V6 = ["fd00:ec2::254/128", "64:ff9b::6464:64c8/128"]
API_V4 = ["192.0.2.10/32"]
API_V6 = ["2001:db8::10/128", "64:ff9b::c000:20a/128"]
PUBLIC_PORTS = [{"port": 443, "protocol": "TCP"}, {"port": 22, "protocol": "TCP"}]


def public_rule(v4: list[str], v6: list[str], ports: list[Object] | None = None) -> Object:
    return {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/0", "except": v4}},
            {"ipBlock": {"cidr": "::/0", "except": v6}},
        ],
        "ports": PUBLIC_PORTS if ports is None else ports,
    }


DEFAULT_PUBLIC = public_rule(
    NON_PUBLIC_V4 + METADATA_V4 + API_V4, NON_PUBLIC_V6 + METADATA_V6 + API_V6
)


def plan(
    workspace: Object | None = None,
    settings: Object | None = None,
    api_server: egress.ApiServer | None = API_SERVER,
    operator: egress.Operator = OPERATOR,
) -> egress.Egress:
    return egress.plan(
        SandboxEgress.model_validate(settings or {}),
        WorkspaceEgress.model_validate(workspace or {}),
        operator,
        api_server,
    )


def rules(**given: Any) -> list[Object]:
    planned = plan(**given)
    assert not planned.withheld, planned.withheld
    return list(planned.rules)


# ----------------------------------------------------------------------------- the policy


def test_the_policy_denies_egress_but_its_rules_and_admits_only_the_operator() -> None:
    policy = objects.network_policy(WORKSPACE, OPERATOR, [DNS_RULE])
    assert policy["metadata"]["name"] == "ws-kubeturn-sandbox"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "ws-uid"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["podSelector"] == {"matchLabels": objects.workspace_labels("ws")}
    assert spec["ingress"] == [
        {"from": ORCHESTRATOR_RULE["to"], "ports": [{"port": 8080, "protocol": "TCP"}]}
    ]
    assert spec["egress"] == [DNS_RULE]
    assert objects.network_policy(WORKSPACE, OPERATOR, [])["spec"]["egress"] == []


# ----------------------------------------------------------------------------- defaults


def test_defaults_reach_the_orchestrator_dns_and_the_public_internet_on_443_and_22() -> None:
    assert rules() == [ORCHESTRATOR_RULE, DNS_RULE, DEFAULT_PUBLIC]


def test_an_operator_outside_the_cluster_is_reached_in_any_namespace() -> None:
    outside = egress.Operator(OPERATOR.labels, None, 9000)
    orchestrator = rules(operator=outside)[0]
    assert orchestrator["to"][0]["namespaceSelector"] == {}
    assert orchestrator["ports"] == [{"port": 9000, "protocol": "TCP"}]


# ----------------------------------------------------------------------------- switches


def test_the_operators_dns_and_public_rule_can_be_turned_off() -> None:
    off = {"dns": {"enabled": False}, "public": {"enabled": False}}
    assert rules(settings=off) == [ORCHESTRATOR_RULE]


def test_a_workspace_turns_dns_and_the_public_rule_on_or_off_for_itself() -> None:
    off = {"dns": {"enabled": False}, "public": {"enabled": False}}
    on = {"dns": {"enabled": True}, "public": {"enabled": True}}
    assert rules(workspace=off) == [ORCHESTRATOR_RULE]
    assert rules(workspace=on, settings=off) == [ORCHESTRATOR_RULE, DNS_RULE, DEFAULT_PUBLIC]


def test_the_operators_dns_peers_and_a_workspaces_public_ports() -> None:
    kube_dns = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
    }
    dns = rules(settings={"dns": {"to": [kube_dns]}})[1]
    assert dns == {"to": [kube_dns], **DNS_RULE}
    ports = [{"port": 443}, {"port": 8000, "endPort": 8100, "protocol": "TCP"}]
    public = rules(workspace={"public": {"ports": ports}})[2]
    assert public["ports"] == [
        {"port": 443, "protocol": "TCP"},
        {"port": 8000, "endPort": 8100, "protocol": "TCP"},
    ]
    assert public["to"] == DEFAULT_PUBLIC["to"]


# ----------------------------------------------------------------------------- opt-ins


def test_cloud_metadata_opted_in_is_reached_on_every_port() -> None:
    rule = {"to": [{"ipBlock": {"cidr": "169.0.0.0/8"}}], "ports": [{"port": 80}]}
    found = rules(workspace={"cloudMetadata": True, "rules": [rule]})
    public = public_rule(NON_PUBLIC_V4 + API_V4, NON_PUBLIC_V6 + API_V6)
    metadata = {
        "to": [
            {"ipBlock": {"cidr": "169.254.0.0/16"}},
            {"ipBlock": {"cidr": "100.100.100.200/32"}},
            {"ipBlock": {"cidr": "fe80::/10"}},
            {"ipBlock": {"cidr": "fd00:ec2::254/128"}},
        ]
    }
    # The Workspace's ipBlock holds the metadata range and excepts it no more.
    own = {"to": [{"ipBlock": {"cidr": "169.0.0.0/8"}}], "ports": [{"port": 80, "protocol": "TCP"}]}
    assert found == [ORCHESTRATOR_RULE, DNS_RULE, public, metadata, own]


def test_the_api_server_opted_in_is_reached_on_its_ports() -> None:
    found = rules(workspace={"apiServer": True})
    public = public_rule(NON_PUBLIC_V4 + METADATA_V4, NON_PUBLIC_V6 + METADATA_V6)
    api_server = {
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}, {"ipBlock": {"cidr": "2001:db8::10/128"}}],
        "ports": [{"port": 443, "protocol": "TCP"}],
    }
    assert found == [ORCHESTRATOR_RULE, DNS_RULE, public, api_server]


def test_the_api_server_opted_in_but_unknown_is_withheld_and_said() -> None:
    for unknown in (None, egress.ApiServer()):
        planned = plan(workspace={"apiServer": True}, api_server=unknown)
        public = public_rule(NON_PUBLIC_V4 + METADATA_V4, NON_PUBLIC_V6 + METADATA_V6)
        assert list(planned.rules) == [ORCHESTRATOR_RULE, DNS_RULE, public]
        assert planned.withheld == (
            "the API server's addresses are not known: it cannot be allowed yet",
        )


# ----------------------------------------------------------------------------- extra rules

VLLM = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "models"}},
            "podSelector": {
                "matchLabels": {"app": "vllm"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
            },
        }
    ],
    "ports": [{"port": 8000, "protocol": "TCP"}],
}
GIT = {
    "to": [{"ipBlock": {"cidr": "198.51.100.0/24", "except": ["198.51.100.128/25"]}}],
    "ports": [{"port": "ssh", "protocol": "TCP"}, {"port": 9418}],
}


def test_extra_rules_follow_as_written_the_operators_first() -> None:
    found = rules(settings={"rules": [VLLM]}, workspace={"rules": [GIT]})
    assert found[:3] == [ORCHESTRATOR_RULE, DNS_RULE, DEFAULT_PUBLIC]
    assert found[3] == VLLM
    assert found[4] == {
        "to": [{"ipBlock": {"cidr": "198.51.100.0/24", "except": ["198.51.100.128/25"]}}],
        "ports": [{"port": "ssh", "protocol": "TCP"}, {"port": 9418, "protocol": "TCP"}],
    }


def test_an_ip_block_excepts_the_guarded_ranges_it_holds_after_its_own() -> None:
    wide = {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/1", "except": ["10.0.0.0/8"]}},
            {"ipBlock": {"cidr": "128.0.0.0/1"}},
            {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
        ]
    }
    (found,) = rules(workspace={"rules": [wide]})[3:]
    assert found == {
        "to": [
            {"ipBlock": {"cidr": "0.0.0.0/1", "except": ["10.0.0.0/8", "100.100.100.200/32"]}},
            {"ipBlock": {"cidr": "128.0.0.0/1", "except": ["169.254.0.0/16", "192.0.2.10/32"]}},
            {
                "ipBlock": {
                    "cidr": "::/0",
                    "except": [
                        "fd00:ec2::254/128",
                        "fe80::/10",
                        "64:ff9b::a9fe:0/112",
                        "64:ff9b::6464:64c8/128",
                        *API_V6,
                    ],
                }
            },
        ]
    }


def test_a_peer_holding_only_the_api_server_is_dropped_and_said() -> None:
    mixed = {
        "to": [{"ipBlock": {"cidr": "192.0.2.10/32"}}, {"podSelector": {}}],
        "ports": [{"port": 443}],
    }
    alone = {"to": [{"ipBlock": {"cidr": "2001:db8::10/128"}}]}
    planned = plan(settings={"rules": [mixed]}, workspace={"rules": [alone]})
    assert list(planned.rules)[3:] == [
        {"to": [{"podSelector": {}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    ]
    assert planned.withheld == (
        "sandbox.egress.rules[0].to[0]: 192.0.2.10/32 holds only the API server's address "
        "192.0.2.10; a Workspace reaches it with spec.egress.apiServer: true",
        "spec.egress.rules[0].to[0]: 2001:db8::10/128 holds only the API server's address "
        "2001:db8::10; a Workspace reaches it with spec.egress.apiServer: true",
        "spec.egress.rules[0]: no destination is left, so the rule is left out",
    )
    # Opted in, the peer is the Workspace's to keep.
    opted = plan(workspace={"rules": [alone], "apiServer": True})
    assert list(opted.rules)[-1] == alone
    assert not opted.withheld


def test_while_the_api_server_is_unknown_no_ip_block_is_written() -> None:
    selectors = {"to": [{"podSelector": {}}, {"ipBlock": {"cidr": "198.51.100.0/24"}}]}
    planned = plan(workspace={"rules": [selectors, GIT]}, api_server=None)
    assert list(planned.rules) == [ORCHESTRATOR_RULE, DNS_RULE, {"to": [{"podSelector": {}}]}]
    assert planned.withheld == (egress.UNKNOWN,)
    # No slice at all reads as no address: nothing of it to keep out, nothing withheld.
    assert plan(api_server=egress.api_server_of(None)).rules[2] == public_rule(
        NON_PUBLIC_V4 + METADATA_V4, NON_PUBLIC_V6 + METADATA_V6
    )


# ----------------------------------------------------------------------------- the API server


def test_api_server_of_reads_the_endpoint_slice() -> None:
    read = egress.api_server_of(
        {
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["192.0.2.20", "192.0.2.10"], "conditions": {"ready": False}},
                {"addresses": ["192.0.2.10", "not-an-address"]},
                {},
            ],
            "ports": [
                {"name": "https", "port": 6443, "protocol": "TCP"},
                {"name": "other", "port": 53, "protocol": "UDP"},
                {"name": "default", "port": 443},
                {"name": "none"},
            ],
        }
    )
    assert read == egress.ApiServer(("192.0.2.10", "192.0.2.20"), (443, 6443))
    assert [str(n) for n in read.networks] == [
        "192.0.2.10/32",
        "192.0.2.20/32",
        "64:ff9b::c000:20a/128",
        "64:ff9b::c000:214/128",
    ]
    assert egress.api_server_of({"addressType": "FQDN", "endpoints": []}) == egress.ApiServer()
    assert egress.api_server_of(None) == egress.ApiServer()


# ----------------------------------------------------------------------------- comparing


def test_same_spec_is_equality_once_empties_are_left_out() -> None:
    wanted = objects.network_policy(WORKSPACE, OPERATOR, rules())["spec"]
    assert egress.same_spec(wanted, wanted)
    # The API server leaves out an empty egress list and empty selector maps' keys.
    stored = {**wanted, "egress": []}
    assert egress.same_spec({k: v for k, v in stored.items() if k != "egress"}, stored)
    assert egress.same_spec({"podSelector": {}, "ingress": []}, {"podSelector": {}})
    assert not egress.same_spec({"ingress": []}, {"podSelector": {}})
    # Stored wider than asked for: a peer without the namespaceSelector asked for.
    narrow = {"egress": [{"to": [{"namespaceSelector": {}, "podSelector": {}}]}]}
    wide = {"egress": [{"to": [{"namespaceSelector": {}, "podSelector": {}, "x": 1}]}]}
    assert not egress.same_spec(wide, narrow)
    assert not egress.same_spec({"egress": [{"to": [{"podSelector": {}}]}]}, narrow)


# ----------------------------------------------------------------------------- the models


@pytest.mark.parametrize(
    ("model", "given", "said"),
    [
        (IPBlock, {"cidr": "10.0.0.0"}, "should match pattern"),
        (IPBlock, {"cidr": "10.0.0.300/8"}, "'10.0.0.300/8' is not a CIDR"),
        (IPBlock, {"cidr": "10.0.0.1/8"}, "10.0.0.1/8 has bits set after its /8: write 10.0.0.0/8"),
        (
            IPBlock,
            {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]},
            "except entry 11.0.0.0/16 does not lie inside cidr 10.0.0.0/8",
        ),
        (
            IPBlock,
            {"cidr": "10.0.0.0/8", "except": ["fd00::/8"]},
            "except entry fd00::/8 does not lie inside cidr 10.0.0.0/8",
        ),
        (
            IPBlock,
            {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]},
            "except entry 10.0.0.0/8 is the whole of cidr 10.0.0.0/8",
        ),
        (Peer, {}, "a peer is either an ipBlock or pod/namespace selectors"),
        (
            Peer,
            {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
            "a peer is either an ipBlock or pod/namespace selectors",
        ),
        (EgressRule, {"to": []}, "at least 1 item"),
        (EgressRule, {"ports": [{"port": 80}]}, "required"),
        (PolicyPort, {"port": 0}, "greater than or equal to 1"),
        (PolicyPort, {"port": "HTTPS"}, "neither a number nor a port name"),
        (PolicyPort, {"port": "8080"}, "neither a number nor a port name"),
        (PolicyPort, {"endPort": 90}, "endPort needs a numeric port"),
        (PolicyPort, {"port": "http", "endPort": 90}, "endPort needs a numeric port"),
        (PolicyPort, {"port": 90, "endPort": 80}, "endPort 80 is below port 90"),
        (PolicyPort, {"port": 53, "protocol": "ICMP"}, "'TCP', 'UDP' or 'SCTP'"),
        (
            LabelSelector,
            {"matchExpressions": [{"key": "a", "operator": "In"}]},
            "operator In needs at least one value",
        ),
        (
            LabelSelector,
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "operator Exists takes no values",
        ),
        (LabelSelector, {"matchLabels": {"a b": "c"}}, "'a b' is not a label key"),
        (LabelSelector, {"matchLabels": {"a": "c d"}}, "should match pattern"),
        (SandboxEgress, {"public": {"ports": []}}, "at least 1 item"),
        (WorkspaceEgress, {"public": {"ports": []}}, "at least 1 item"),
    ],
)
def test_the_models_refuse(model: Any, given: Object, said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(given)
    assert said in str(refused.value)


def test_the_models_accept_what_kubernetes_does() -> None:
    PolicyPort.model_validate({"port": "https"})
    PolicyPort.model_validate({"protocol": "UDP"})
    IPBlock.model_validate({"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]})
    Peer.model_validate({"namespaceSelector": {}, "podSelector": {"matchLabels": {"a/b": ""}}})


METADATA_PEERS = [
    "169.254.169.254/32",
    "100.100.100.200/32",
    "fe80::1/128",
    "64:ff9b::a9fe:a9fe/128",
]


@pytest.mark.parametrize("cidr", METADATA_PEERS)
def test_an_ip_block_inside_the_metadata_ranges_needs_the_workspaces_opt_in(cidr: str) -> None:
    rule = {"to": [{"podSelector": {}}, {"ipBlock": {"cidr": cidr}}]}
    with pytest.raises(ValidationError) as refused:
        WorkspaceEgress.model_validate({"rules": [rule]})
    assert f"rules[0].to[1].ipBlock.cidr {cidr} lies inside the cloud metadata range" in str(
        refused.value
    )
    assert "set cloudMetadata: true to let this sandbox reach it" in str(refused.value)
    WorkspaceEgress.model_validate({"rules": [rule], "cloudMetadata": True})
    with pytest.raises(ValidationError) as operators:
        SandboxEgress.model_validate({"rules": [rule]})
    assert "only a Workspace may opt in to it (spec.egress.cloudMetadata: true)" in str(
        operators.value
    )


def test_an_ip_block_that_holds_the_metadata_ranges_is_accepted() -> None:
    wide = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]}
    WorkspaceEgress.model_validate({"rules": [wide]})
    SandboxEgress.model_validate({"rules": [wide]})


def test_a_runs_workspace_template_reports_egress_problems_at_their_paths() -> None:
    run = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "r"},
        "spec": {
            "workspace": {
                "template": {
                    "repos": {"target": {"url": "https://example.invalid/a.git"}},
                    "egress": {
                        "rules": [
                            {"to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}]},
                            {"to": [{"ipBlock": {"cidr": "10.0.0.1/8"}}]},
                        ]
                    },
                }
            },
            "agents": {"a": {"model": "p/m", "instructions": "x"}},
            "machine": {"initial": "s", "states": {"s": {"type": "final"}}},
        },
    }
    with pytest.raises(DefinitionErrors) as refused:
        validate_run(run)
    said = [str(error) for error in refused.value.errors]
    assert said == [
        "spec.workspace.template.egress.rules[1].to[0].ipBlock: 10.0.0.1/8 has bits set after "
        "its /8: write 10.0.0.0/8"
    ]
    run["spec"]["workspace"]["template"]["egress"]["rules"].pop()
    with pytest.raises(DefinitionErrors) as contradiction:
        validate_run(run)
    assert [str(error) for error in contradiction.value.errors] == [
        "spec.workspace.template.egress: rules[0].to[0].ipBlock.cidr 169.254.169.254/32 lies "
        "inside the cloud metadata range 169.254.0.0/16, which sandboxes do not reach; set "
        "cloudMetadata: true to let this sandbox reach it"
    ]


# ----------------------------------------------------------------------------- reading it


class SliceReads:
    """A stand-in for the Kubernetes facade: each ``get`` answers the next of ``answers``
    (an EndpointSlice, None for 404, or an exception to raise), and counts."""

    def __init__(self, *answers: Object | Exception | None) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []

    async def get(self, kind: Any, namespace: str, name: str) -> Object | None:
        self.asked.append((namespace, name))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


SLICE = {
    "addressType": "IPv4",
    "endpoints": [{"addresses": ["192.0.2.10"]}],
    "ports": [{"port": 443, "protocol": "TCP"}],
}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_the_api_servers_addresses_are_read_at_most_every_so_often() -> None:
    reads, clock = SliceReads(SLICE, {**SLICE, "endpoints": []}), Clock()
    addresses = ApiServerAddresses(reads, 30.0, clock)  # type: ignore[arg-type]
    assert await addresses.look() == egress.ApiServer(("192.0.2.10",), (443,))
    clock.now = 29.0
    assert await addresses.look() == egress.ApiServer(("192.0.2.10",), (443,))
    assert reads.asked == [("default", "kubernetes")]
    clock.now = 30.0
    assert await addresses.look() == egress.ApiServer((), (443,))
    assert len(reads.asked) == 2


async def test_a_failed_read_keeps_what_was_read_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forbidden = ApiException(status=403, reason="Forbidden")
    reads, clock = SliceReads(forbidden, forbidden, SLICE, OSError("unreachable")), Clock()
    addresses = ApiServerAddresses(reads, 1.0, clock)  # type: ignore[arg-type]
    assert await addresses.look() is None
    clock.now = 1.0
    assert await addresses.look() is None
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        "cannot read the EndpointSlice default/kubernetes (the API server's addresses): "
        "HTTP 403 Forbidden; sandboxes get no ipBlock egress (the public rule among them) "
        "until it is"
    ]
    clock.now = 2.0
    assert await addresses.look() == egress.ApiServer(("192.0.2.10",), (443,))
    clock.now = 3.0
    assert await addresses.look() == egress.ApiServer(("192.0.2.10",), (443,))
    assert caplog.records[-1].getMessage().endswith("unreachable; the addresses last read stay")


async def test_no_endpoint_slice_reads_as_no_address(caplog: pytest.LogCaptureFixture) -> None:
    addresses = ApiServerAddresses(SliceReads(None), 30.0, Clock())  # type: ignore[arg-type]
    assert await addresses.look() == egress.ApiServer()
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith("there is none; none of its addresses can be kept out")
    )
