"""The egress rules of a sandbox's NetworkPolicy, from the operator's settings, the
Workspace's ``spec.egress`` and the API server's addresses (ADR 0034). Pure: the Workspace
controller reads the addresses (``apiserver``) and writes the policy (``objects``).

The rules, in this order:

1. the Orchestrator: the operator's pods, in its namespace, on its API port (always);
2. DNS: port 53, UDP and TCP, to the operator's ``dns.to`` peers, or anywhere;
3. the public internet: ``0.0.0.0/0`` and ``::/0`` except ``NON_PUBLIC``, on the public
   ports;
4. with ``cloudMetadata``: the metadata ranges, every port;
5. with ``apiServer``: the API server's addresses, on its ports;
6. the operator's extra rules, then the Workspace's.

Every ipBlock of rules 3 and 6 excepts each *guarded* range it holds: the metadata ranges
unless ``cloudMetadata``, and the API server's addresses (each alone, and in NAT64 form)
unless ``apiServer``. Each is listed even where a wider except covers it already, so the
policy shows what it keeps out. A peer that lies wholly inside an API server address
cannot except it, so it is dropped, and a rule left with no peer goes too (a rule
without peers would reach every destination); ``Egress.withheld`` says what went and why.
While the API server's addresses are unknown, no ipBlock is written at all (unless the
Workspace opted in to the API server): a policy that cannot keep the API server out does
not let the internet in. DNS peers are written as given: they reach port 53 alone.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeturn.api import egress as api
from kubeturn.api.egress import Network

Object = dict[str, Any]

DNS_PORT = 53
SELECTORS = frozenset({"podSelector", "namespaceSelector"})
"""Keys whose empty map means "every": the API server keeps them, unlike other empties."""
UNKNOWN = (
    "the API server's addresses are not known yet: no ipBlock is written (the public "
    "rule among them) until they are"
)


@dataclass(frozen=True)
class ApiServer:
    """Where the cluster's API server answers: its endpoints' addresses and TCP ports."""

    addresses: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def hosts(self) -> tuple[Network, ...]:
        """Each address as a one-address network."""
        return tuple(ipaddress.ip_network(address) for address in self.addresses)

    @property
    def networks(self) -> tuple[Network, ...]:
        """What keeps the API server out: ``hosts``, and each IPv4 one in NAT64 form."""
        v4 = [host for host in self.hosts if isinstance(host, ipaddress.IPv4Network)]
        return (*self.hosts, *map(api.nat64, v4))


def api_server_of(endpoint_slice: Mapping[str, Any] | None) -> ApiServer:
    """What the ``kubernetes`` EndpointSlice says (None: there is none, so no address):
    every IP address of its endpoints, ready or not (keeping out one more address is
    safe), and its TCP ports."""
    if endpoint_slice is None or endpoint_slice.get("addressType") not in ("IPv4", "IPv6"):
        return ApiServer()
    addresses: set[str] = set()
    for endpoint in endpoint_slice.get("endpoints") or ():
        for address in endpoint.get("addresses") or ():
            try:
                addresses.add(str(ipaddress.ip_address(address)))
            except ValueError:
                continue
    ports = {
        int(port["port"])
        for port in endpoint_slice.get("ports") or ()
        if port.get("port") is not None and port.get("protocol", "TCP") == "TCP"
    }
    return ApiServer(tuple(sorted(addresses, key=ipaddress.ip_address)), tuple(sorted(ports)))


@dataclass(frozen=True)
class Operator:
    """The operator's pods as sandboxes see them: their labels and namespace (None:
    any namespace, for an operator run outside the cluster) and the Orchestrator API's
    port."""

    labels: tuple[tuple[str, str], ...]
    namespace: str | None
    port: int

    def peer(self) -> Object:
        """The NetworkPolicy peer that selects the operator's pods."""
        namespaces: Object = (
            {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}}
            if self.namespace
            else {}
        )
        return {"namespaceSelector": namespaces, "podSelector": {"matchLabels": dict(self.labels)}}


@dataclass(frozen=True)
class Egress:
    """A sandbox's egress rules, and what was left out of them and why."""

    rules: tuple[Object, ...]
    withheld: tuple[str, ...] = ()


def plan(
    settings: api.SandboxEgress,
    spec: api.WorkspaceEgress,
    operator: Operator,
    api_server: ApiServer | None,
) -> Egress:
    """The egress rules of one sandbox (the module docstring gives their order and rules)."""
    kept_out = () if spec.apiServer or api_server is None else api_server.networks
    guarded = [*(() if spec.cloudMetadata else api.METADATA), *kept_out]
    # Only ipBlocks can hold the API server; while its addresses are unknown none is written.
    blocks = spec.apiServer or api_server is not None
    withheld: list[str] = [] if blocks else [UNKNOWN]
    rules: list[Object] = [{"to": [operator.peer()], "ports": [_tcp(operator.port)]}]
    if settings.dns.enabled if spec.dns.enabled is None else spec.dns.enabled:
        dns: Object = {"ports": [_port(DNS_PORT, "UDP"), _port(DNS_PORT, "TCP")]}
        if settings.dns.to:
            dns = {"to": [_peer(peer) for peer in settings.dns.to], **dns}
        rules.append(dns)
    public = settings.public.enabled if spec.public.enabled is None else spec.public.enabled
    if public and blocks:
        ports = settings.public.ports if spec.public.ports is None else spec.public.ports
        to = [_block(network, api.NON_PUBLIC, guarded) for network in api.PUBLIC]
        rules.append({"to": to, "ports": [_policy_port(port) for port in ports]})
    if spec.cloudMetadata and blocks:
        rules.append({"to": [{"ipBlock": {"cidr": str(n)}} for n in api.METADATA_ALLOWED]})
    if spec.apiServer:
        if api_server is None or not api_server.addresses:
            withheld.append("the API server's addresses are not known: it cannot be allowed yet")
        else:
            rule: Object = {"to": [{"ipBlock": {"cidr": str(n)}} for n in api_server.hosts]}
            if api_server.ports:
                rule["ports"] = [_tcp(port) for port in api_server.ports]
            rules.append(rule)
    for where, extra in (("sandbox.egress", settings.rules), ("spec.egress", spec.rules)):
        for index, written in enumerate(extra):
            kept, dropped = _rule(written, guarded, kept_out, blocks, f"{where}.rules[{index}]")
            withheld += dropped
            if kept is not None:
                rules.append(kept)
    return Egress(tuple(rules), tuple(withheld))


def _rule(
    rule: api.EgressRule,
    guarded: Sequence[Network],
    kept_out: Sequence[Network],
    blocks: bool,
    where: str,
) -> tuple[Object | None, list[str]]:
    """One extra rule with its ipBlocks guarded; the peers it loses (those inside the API
    server's ``kept_out`` addresses) and why."""
    peers: list[Object] = []
    dropped: list[str] = []
    for index, peer in enumerate(rule.to):
        if peer.ipBlock is None:
            peers.append(_peer(peer))
            continue
        if not blocks:
            continue  # said once, by UNKNOWN
        network = peer.ipBlock.network
        inside = api.enclosing(network, kept_out)
        if inside is not None:
            dropped.append(
                f"{where}.to[{index}]: {peer.ipBlock.cidr} holds only the API server's address "
                f"{inside.network_address}; a Workspace reaches it with spec.egress.apiServer: true"
            )
            continue
        peers.append(_block(network, peer.ipBlock.except_, guarded))
    if not peers:
        if blocks:
            dropped.append(f"{where}: no destination is left, so the rule is left out")
        return None, dropped
    kept: Object = {"to": peers}
    if rule.ports:
        kept["ports"] = [_policy_port(port) for port in rule.ports]
    return kept, dropped


def _block(
    network: Network, written: Sequence[Network | str], guarded: Sequence[Network]
) -> Object:
    """An ipBlock peer of ``network``: ``written`` excepts (those of its family), then every
    guarded range strictly inside it, each once."""
    excepted: list[str] = []
    for candidate in [*written, *guarded]:
        inner = ipaddress.ip_network(candidate)
        if api.within(inner, network) and inner != network and str(inner) not in excepted:
            excepted.append(str(inner))
    block: Object = {"cidr": str(network)}
    if excepted:
        block["except"] = excepted
    return {"ipBlock": block}


def _peer(peer: api.Peer) -> Object:
    """A peer as written (a DNS peer's ipBlock included: it reaches port 53 alone)."""
    if peer.ipBlock is not None:
        block: Object = {"cidr": peer.ipBlock.cidr}
        if peer.ipBlock.except_:
            block["except"] = list(peer.ipBlock.except_)
        return {"ipBlock": block}
    written: Object = {}
    if peer.namespaceSelector is not None:
        written["namespaceSelector"] = _selector(peer.namespaceSelector)
    if peer.podSelector is not None:
        written["podSelector"] = _selector(peer.podSelector)
    return written


def _selector(selector: api.LabelSelector) -> Object:
    written: Object = {}
    if selector.matchLabels:
        written["matchLabels"] = dict(selector.matchLabels)
    if selector.matchExpressions:
        written["matchExpressions"] = [
            {
                "key": term.key,
                "operator": term.operator,
                **({"values": term.values} if term.values else {}),
            }
            for term in selector.matchExpressions
        ]
    return written


def _policy_port(port: api.PolicyPort) -> Object:
    written: Object = {} if port.port is None else {"port": port.port}
    if port.endPort is not None:
        written["endPort"] = port.endPort
    return {**written, "protocol": port.protocol}


def _port(number: int, protocol: str) -> Object:
    return {"port": number, "protocol": protocol}


def _tcp(number: int) -> Object:
    return _port(number, "TCP")


def same_spec(have: Any, want: Any) -> bool:
    """Whether a stored NetworkPolicy's spec says what ``want`` says: equal once the empty
    lists and maps that the API server leaves out are left out of both (a selector's ``{}``
    stays: it selects everything). Equality, not coverage: a stored rule wider than the one
    asked for (a peer with a selector fewer) is put right."""
    return bool(_pruned(have) == _pruned(want))


def _pruned(value: Any) -> Any:
    if isinstance(value, Mapping):
        kept = {}
        for key, item in value.items():
            pruned = _pruned(item)
            if pruned is None or (pruned in ([], {}) and key not in SELECTORS):
                continue
            kept[key] = pruned
        return kept
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value
