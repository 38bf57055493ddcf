"""The operator's settings and their defaults, in one place: the operator
(``kubeturn.k8s``) runs by them, and ``kubeturn operator`` takes each flag's default
from here, so a default is written once.

Pure: no IO, no environment. The flags and their environment twins (which the chart's
Deployment sets) are parsed by ``kubeturn.cli`` only; it imports neither kopf nor
kubernetes, nor may this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeturn.api.egress import SandboxEgress
from kubeturn.api.tracing import SandboxTracing
from kubeturn.api.workspace import SandboxResources

API_PORT = 8081
"""Where the Orchestrator API listens, and the port of the chart's Service before it."""
CONSOLE_PORT = 8443
"""Where the aggregated console listens (HTTPS), and the target port of the chart's
Service the APIService names."""
ORCHESTRATOR_SERVICE = "kubeturn-orchestrator"
"""The chart's Service before the Orchestrator API, in the operator's namespace."""

LEASE_DURATION_S = 15
"""How long a standby waits, after it last saw the Lease renewed, before it takes it:
client-go's default. It bounds the time without a leader after a leader dies without
releasing (a crash, a lost node); a stopping leader releases, and is replaced at once."""
RENEW_DEADLINE_S = 10.0
"""How long the leader keeps failing to renew before it gives up leading: client-go's
default. Shorter than the lease duration, so the leader stops its handlers (kopf takes a
few seconds) before any standby may take the Lease."""
RETRY_PERIOD_S = 2.0
"""How often a standby tries to take the Lease, and the leader renews it: client-go's
default; a renewal every 2 s is a small write for the API server."""


@dataclass(frozen=True)
class OperatorSettings:
    """What one operator process runs by; every field's default is the operator's."""

    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty watches the whole cluster."""
    harness_image: str = "ghcr.io/kubeturn/harness:latest"
    """The sandbox image, unless a Workspace names its own."""
    orchestrator_url: str = f"http://{ORCHESTRATOR_SERVICE}:{API_PORT}"
    """How sandbox pods reach the Orchestrator API (a Service in the operator's namespace)."""
    providers_yaml: str = "{}\n"
    """The model providers file every sandbox gets (names, URLs, key variables; no keys)."""
    default_model: str | None = None
    """'provider/model' every sandbox's Harness runs an Agent on when neither the Agent
    nor the Turn names a model and its Workspace names no ``spec.defaultModel`` (the
    chart's ``defaultModel``); None: such a Turn is refused by the Harness. Its provider
    is one of ``providers_yaml``'s (the command refuses to start otherwise)."""
    operator_labels: tuple[tuple[str, str], ...] = (
        ("app.kubernetes.io/name", "kubeturn"),
        ("app.kubernetes.io/component", "operator"),
    )
    """Labels of the operator's pods: the only ones sandbox NetworkPolicies admit."""
    operator_namespace: str | None = None
    """The operator's namespace; sandbox NetworkPolicies admit its pods from there only,
    and let sandboxes reach them there only."""
    require_confinement: bool = False
    """Refuse to run an Agent's tools where the node's kernel cannot confine them
    (Landlock): on such a node the tools hold no secret, but the Runs of one Workspace
    are not isolated from each other (ADR 0035). Off by default, so that a cluster of
    older kernels works on its first day; a Turn's tool calls fail, saying why, when on."""
    sandbox_resources: SandboxResources = field(default_factory=SandboxResources)
    """Requests and limits of every sandbox container (the chart's ``sandbox.resources``);
    a Workspace's ``spec.resources`` overrides the tools container's (ADR 0053)."""
    sandbox_egress: SandboxEgress = field(default_factory=SandboxEgress)
    """What every sandbox may reach (the chart's ``sandbox.egress``); a Workspace's
    ``spec.egress`` adds to it (ADR 0034). Default: DNS, and the public internet on 443
    and 22."""
    sandbox_tracing: SandboxTracing = field(default_factory=SandboxTracing)
    """Where every sandbox's Harness exports its spans (the chart's ``tracing``, ADR 0107);
    default: nowhere, and the Harness loads no tracing SDK."""
    api_server_look_s: float = 30.0
    """How often the API server's addresses are read again (one GET, shared by every
    Workspace): a new address is kept out of sandboxes within this plus a Workspace's
    look (20 s). Control planes change addresses rarely (an upgrade, a failover)."""
    health_port: int = 8080
    """``/healthz`` (the event loop answers) and ``/readyz`` (the handlers run)."""
    metrics_port: int = 9090
    """Prometheus ``/metrics``."""
    api_port: int = API_PORT
    """Where the Orchestrator API listens."""
    api_host: str = "0.0.0.0"
    turn_retention_s: float = 3600.0
    """How long a settled AgentTurn stays, for ``kubectl get agentturns``, when its Run
    names no ``spec.turnRetention`` (the chart's ``turnRetention``); 0 lets it go at once
    (ADR 0106). It costs one write per Turn, when it is let go, and one object per Turn
    settled within the period."""
    console_port: int = CONSOLE_PORT
    """Where the aggregated console (``console.kubeturn.dev``, ADR 0110) listens, over TLS,
    for kube-apiserver's proxied requests."""
    console_certificate: str | None = None
    """The console's serving certificate file (PEM, the chart's Secret); None, or no
    ``console_key``: the console is not served."""
    console_key: str | None = None
    """The serving certificate's private key file (PEM)."""
    namespace_max_live_turns: int | None = None
    """At most this many Turns live at once in one namespace, over every Workspace in it
    (the chart's ``maxLiveTurnsPerNamespace``); the next wait, Pending, in the order they
    started (ADR 0116). None: no cap but each Workspace's ``spec.maxLiveTurns``."""
    sweep_look_s: float = 10.0
    """While a Run waits for an AgentTurn's finalizer to report its sweep (as long as the
    AgentTurn is there, ADR 0028), how often it looks whether the AgentTurn went without
    a report here: one read each, and rare (its finalizer was removed by hand, or ran in
    another operator), so such a Turn is recorded within seconds at little cost."""
