"""What a sandbox may reach: NetworkPolicy egress rules as Kubernetes spells them, and the
switches a Workspace (``spec.egress``) and the operator (the chart's ``sandbox.egress``)
turn them on with (ADR 0034).

A sandbox's NetworkPolicy denies every destination but those allowed: the Orchestrator
(always), DNS, the public internet on a few ports, and the extra rules written here. Two
kinds of address are *guarded*: the cloud metadata endpoints (they hand out the node's
cloud credentials) and the cluster's API server. No rule reaches them unless the
Workspace opts in (``cloudMetadata``, ``apiServer``): the builder
(``kubeturn.k8s.egress``) excepts them from every ipBlock that contains them. An ipBlock
that lies wholly inside a guarded range could not be excepted from itself, so it is a
contradiction, refused here for the metadata ranges, which are fixed; the API server's
addresses are known only at run time, and the builder drops such a peer.

These models hold the shapes and every check that needs no cluster: CIDRs parse, an
``except`` lies inside its ``cidr``, a peer is an ipBlock or selectors, a rule names its
destinations. Nothing here does IO.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal, Self, TypeAlias

from pydantic import ConfigDict, Field, field_validator, model_validator

from kubeturn.api.common import Spec

Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network

NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): in an IPv6 cluster with a NAT64 translator,
``64:ff9b::a9fe:a9fe`` reaches 169.254.169.254, so every IPv4 range kept from sandboxes is
kept in this form too."""


def nat64(network: ipaddress.IPv4Network) -> ipaddress.IPv6Network:
    """``network`` as the NAT64 well-known prefix embeds it (its last 32 bits)."""
    address = ipaddress.IPv6Address(int(NAT64.network_address) | int(network.network_address))
    return ipaddress.IPv6Network((address, 96 + network.prefixlen))


def within(inner: Network, outer: Network) -> bool:
    """Whether ``inner`` lies wholly inside ``outer`` (both of one IP version)."""
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def enclosing(network: Network, ranges: Iterable[Network]) -> Network | None:
    """The first of ``ranges`` that holds all of ``network``, if any."""
    return next((candidate for candidate in ranges if within(network, candidate)), None)


def parse_cidr(text: str) -> Network:
    """``text`` as a network; a ValueError saying what is wrong otherwise."""
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not a CIDR (e.g. 203.0.113.0/24)") from None
    raise ValueError(f"{text} has bits set after its /{loose.prefixlen}: write {loose}")


def _networks(*cidrs: str) -> tuple[Network, ...]:
    v4 = [n for n in map(ipaddress.ip_network, cidrs) if isinstance(n, ipaddress.IPv4Network)]
    return (*map(ipaddress.ip_network, cidrs), *map(nat64, v4))


METADATA: tuple[Network, ...] = _networks(
    "169.254.0.0/16",  # link-local: AWS, GCP, Azure, OCI, OpenStack at 169.254.169.254
    "100.100.100.200/32",  # Alibaba Cloud's metadata endpoint (inside CGNAT space)
    "fe80::/10",  # IPv6 link-local
    "fd00:ec2::254/128",  # AWS's IPv6 metadata endpoint
)
"""The cloud metadata ranges, guarded: reached only with ``spec.egress.cloudMetadata``."""

METADATA_ALLOWED: tuple[Network, ...] = tuple(n for n in METADATA if not within(n, NAT64))
"""What ``cloudMetadata: true`` allows, every port: the metadata ranges themselves."""

NON_PUBLIC: tuple[Network, ...] = _networks(
    "10.0.0.0/8",  # RFC 1918
    "100.64.0.0/10",  # carrier-grade NAT (RFC 6598): pod networks of some clouds
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, the metadata endpoints among them
    "172.16.0.0/12",  # RFC 1918
    "192.168.0.0/16",  # RFC 1918
    "::1/128",  # IPv6 loopback
    "fc00::/7",  # IPv6 unique local
    "fe80::/10",  # IPv6 link-local
)
"""What the public rule excepts: every range where a cluster's own pods, Services, nodes
and the clouds' internal endpoints live. In-cluster destinations take an extra rule."""

PUBLIC: tuple[Network, ...] = (
    ipaddress.IPv4Network("0.0.0.0/0"),
    ipaddress.IPv6Network("::/0"),
)
"""The public rule's ipBlocks, before their ``except``."""

CIDR_SHAPE = r"^[0-9A-Fa-f.:]+/[0-9]{1,3}$"
"""What a CIDR looks like, so the API server refuses e.g. a bare address at admission;
the operator parses it fully."""

PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
"""A named port (IANA service name, as Kubernetes checks it): 1 to 15 lowercase letters,
digits and inner '-', at least one letter."""

LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A label key: an optional DNS-subdomain prefix and '/', and a name of at most 63."""

LABEL_VALUE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
"""A label value: empty, or at most 63 letters, digits, '-', '_' and '.' inside."""

MAX_RULES = 64
"""Rules per list, peers per rule, ports per rule: far above what a sandbox needs, and
bounded so that the API server's cost estimate of the CRD's CEL rules stays small."""
MAX_EXCEPT = 64
"""``except`` entries one ipBlock may carry as written."""

Protocol: TypeAlias = Literal["TCP", "UDP", "SCTP"]
PortNumber: TypeAlias = Annotated[int, Field(ge=1, le=65535)]


class Requirement(Spec):
    """One term of a label selector's matchExpressions."""

    key: str = Field(min_length=1, description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist."
    )
    values: list[Annotated[str, Field(pattern=LABEL_VALUE)]] = Field(
        default_factory=list,
        description="The values, for In and NotIn (at least one); none for the others.",
    )

    @model_validator(mode="after")
    def _values(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Spec):
    """A Kubernetes label selector; empty selects everything."""

    matchLabels: dict[str, Annotated[str, Field(pattern=LABEL_VALUE)]] = Field(
        default_factory=dict, description="Labels the selected objects carry, each exactly."
    )
    matchExpressions: list[Requirement] = Field(
        default_factory=list, description="Requirements the selected objects' labels meet."
    )

    @field_validator("matchLabels")
    @classmethod
    def _keys(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in labels:
            if not LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a label key")
        return labels


class IPBlock(Spec):
    """Addresses by CIDR, as a NetworkPolicy's ipBlock."""

    cidr: str = Field(
        pattern=CIDR_SHAPE, description="The range, e.g. 203.0.113.0/24 or 2001:db8::/32."
    )
    except_: list[Annotated[str, Field(pattern=CIDR_SHAPE)]] = Field(
        default_factory=list,
        alias="except",
        max_length=MAX_EXCEPT,
        description="Ranges inside cidr left out of it.",
    )

    @model_validator(mode="after")
    def _ranges(self) -> Self:
        network = parse_cidr(self.cidr)
        for entry in self.except_:
            inner = parse_cidr(entry)
            if not within(inner, network):
                raise ValueError(f"except entry {entry} does not lie inside cidr {self.cidr}")
            if inner == network:
                raise ValueError(f"except entry {entry} is the whole of cidr {self.cidr}")
        return self

    @property
    def network(self) -> Network:
        return parse_cidr(self.cidr)


class Peer(Spec):
    """A destination: an ipBlock, or pods chosen by namespace and pod selectors."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.ipBlock) != (has(self.podSelector) || "
                    "has(self.namespaceSelector))",
                    "message": "a peer is either an ipBlock or pod/namespace selectors",
                }
            ]
        }
    )

    ipBlock: IPBlock | None = Field(default=None, description="Addresses by CIDR.")
    namespaceSelector: LabelSelector | None = Field(
        default=None,
        description="The pods' namespaces ({}: every namespace; absent: the Workspace's).",
    )
    podSelector: LabelSelector | None = Field(
        default=None, description="The pods ({} or absent: every pod of those namespaces)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Self:
        selectors = self.namespaceSelector is not None or self.podSelector is not None
        if (self.ipBlock is not None) == selectors:
            raise ValueError(
                "a peer is either an ipBlock or pod/namespace selectors: give one of them"
            )
        return self


class PolicyPort(Spec):
    """A port, or a range of ports, of one protocol."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "!has(self.endPort) || has(self.port)", "message": "endPort needs a port"}
            ]
        }
    )

    port: PortNumber | str | None = Field(
        default=None,
        description="A number (1-65535) or a named port; absent: every port of the protocol.",
    )
    endPort: PortNumber | None = Field(
        default=None, description="The last port of a range that starts at port (a number)."
    )
    protocol: Protocol = Field(default="TCP", description="TCP, UDP or SCTP.")

    @model_validator(mode="after")
    def _port(self) -> Self:
        if isinstance(self.port, str) and not PORT_NAME.match(self.port):
            raise ValueError(
                f"port {self.port!r} is neither a number nor a port name (1 to 15 lowercase "
                "letters, digits and '-', with a letter)"
            )
        if self.endPort is not None:
            if not isinstance(self.port, int):
                raise ValueError("endPort needs a numeric port where the range starts")
            if self.endPort < self.port:
                raise ValueError(f"endPort {self.endPort} is below port {self.port}")
        return self


class EgressRule(Spec):
    """Destinations the sandbox may reach, and on which ports."""

    to: list[Peer] = Field(
        min_length=1,
        max_length=MAX_RULES,
        description=(
            "The destinations; at least one. (A rule for every destination on some ports "
            "would reach the guarded addresses: use the public rule's ports instead.)"
        ),
    )
    ports: list[PolicyPort] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description="The ports; absent or empty: every port.",
    )


Rules: TypeAlias = Annotated[list[EgressRule], Field(max_length=MAX_RULES)]

DEFAULT_PUBLIC_PORTS = (PolicyPort(port=443), PolicyPort(port=22))
"""HTTPS and ssh: what the public model providers and git hosts most users have answer on."""


# ----------------------------------------------------------------------------- the operator's


class DnsEgress(Spec):
    """Name resolution: port 53, UDP and TCP."""

    enabled: bool = Field(default=True, description="Allow DNS.")
    to: list[Peer] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description=(
            "Where DNS may go; empty: every destination, on port 53 only (the cluster's "
            "DNS pods, NodeLocal DNSCache and the cloud's resolver alike)."
        ),
    )


class PublicEgress(Spec):
    """The public internet: every address but private, loopback, link-local and CGNAT ones."""

    enabled: bool = Field(default=True, description="Allow the public internet.")
    ports: list[PolicyPort] = Field(
        default_factory=lambda: list(DEFAULT_PUBLIC_PORTS),
        min_length=1,
        max_length=MAX_RULES,
        description=(
            "The ports (443 and 22, TCP, by default); at least one: every port is a range "
            "written out (port 1, endPort 65535)."
        ),
    )


class SandboxEgress(Spec):
    """The operator's egress for every sandbox (the chart's sandbox.egress)."""

    dns: DnsEgress = Field(default_factory=DnsEgress, description="DNS.")
    public: PublicEgress = Field(default_factory=PublicEgress, description="The internet.")
    rules: Rules = Field(
        default_factory=list, description="Extra rules for every sandbox, as NetworkPolicy's."
    )

    @model_validator(mode="after")
    def _guarded(self) -> Self:
        check_guarded(self.rules, opt_in=None)
        return self


# ----------------------------------------------------------------------------- a Workspace's


class WorkspaceDns(Spec):
    """Whether the sandbox may resolve names."""

    enabled: bool | None = Field(
        default=None, description="Absent: as the operator's sandbox.egress.dns (on)."
    )


class WorkspacePublic(Spec):
    """Whether, and on which ports, the sandbox reaches the public internet."""

    enabled: bool | None = Field(
        default=None,
        description="Absent: as the operator's sandbox.egress.public (on); false: strict, "
        "only what the rules name.",
    )
    ports: list[PolicyPort] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_RULES,
        description="Absent: the operator's ports (443 and 22 by default).",
    )


class WorkspaceEgress(Spec):
    """What the sandbox may reach besides the Orchestrator (ADR 0034)."""

    dns: WorkspaceDns = Field(default_factory=WorkspaceDns, description="DNS (port 53).")
    public: WorkspacePublic = Field(
        default_factory=WorkspacePublic,
        description=(
            "The public internet: every address but private, loopback, link-local and "
            "CGNAT ones, the API server's and the cloud metadata endpoints."
        ),
    )
    rules: Rules = Field(
        default_factory=list,
        description=(
            "Extra rules, after the operator's, as NetworkPolicy egress rules: an "
            "in-cluster model provider, a private git host. Guarded addresses inside an "
            "ipBlock are excepted from it."
        ),
    )
    cloudMetadata: bool = Field(
        default=False,
        description=(
            "Let the sandbox reach the cloud metadata endpoints (169.254.0.0/16, "
            "100.100.100.200, fe80::/10, fd00:ec2::254), every port: the node's cloud "
            "credentials may be had there."
        ),
    )
    apiServer: bool = Field(
        default=False,
        description="Let the sandbox reach the cluster's API server at its endpoints' addresses.",
    )

    @model_validator(mode="after")
    def _guarded(self) -> Self:
        if not self.cloudMetadata:
            check_guarded(self.rules, opt_in="cloudMetadata")
        return self


def check_guarded(rules: Sequence[EgressRule], *, opt_in: str | None) -> None:
    """Refuse an ipBlock that lies wholly inside a metadata range: an except cannot be all
    of its cidr, so it could be reached only by opting in, with the field ``opt_in`` (None:
    these rules cannot opt in)."""
    for rule_index, rule in enumerate(rules):
        for peer_index, peer in enumerate(rule.to):
            if peer.ipBlock is None:
                continue
            inside = enclosing(peer.ipBlock.network, METADATA)
            if inside is None:
                continue
            fix = (
                "only a Workspace may opt in to it (spec.egress.cloudMetadata: true)"
                if opt_in is None
                else f"set {opt_in}: true to let this sandbox reach it"
            )
            raise ValueError(
                f"rules[{rule_index}].to[{peer_index}].ipBlock.cidr {peer.ipBlock.cidr} lies "
                f"inside the cloud metadata range {inside}, which sandboxes do not reach; {fix}"
            )
