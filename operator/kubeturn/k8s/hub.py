"""What the operator's controllers share in one process: the Kubernetes facade, the
Orchestrator API's registry, each Workspace's Harness client, and the sweeps in flight.

The Run actors, the Orchestrator API and the AgentTurn finalizers meet here: a Run
actor deletes an AgentTurn to sweep it and waits for the finalizer to report what the
sweep settled. Only ``kubeturn.k8s`` uses it; it imports no kopf.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kubeturn.k8s.kube import Kube
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.api import Registry
from kubeturn.orchestrator.harness_client import HarnessClient


@dataclass(frozen=True)
class OperatorSettings:
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty watches the whole cluster."""
    harness_image: str = "ghcr.io/kubeturn/harness:latest"
    """The sandbox image, unless a Workspace names its own."""
    orchestrator_url: str = "http://kubeturn-orchestrator:8081"
    """How sandbox pods reach the Orchestrator API (a Service in the operator's namespace)."""
    providers_yaml: str = "{}\n"
    """The model providers file every sandbox gets (names, URLs, key variables; no keys)."""
    operator_labels: tuple[tuple[str, str], ...] = (
        ("app.kubernetes.io/name", "kubeturn"),
        ("app.kubernetes.io/component", "operator"),
    )
    """Labels of the operator's pods: the only ones sandbox NetworkPolicies admit."""
    operator_namespace: str | None = None
    """The operator's namespace; sandbox NetworkPolicies admit its pods from there only."""
    health_port: int = 8080
    """``/healthz`` (the event loop answers) and ``/readyz`` (the handlers run)."""
    metrics_port: int = 9090
    """Prometheus ``/metrics``."""
    api_port: int = 8081
    """Where the Orchestrator API listens."""
    api_host: str = "0.0.0.0"
    sweep_wait_s: float = 30.0
    """How long a Run waits for an AgentTurn's finalizer to report its sweep: above the
    Harness's 10 s wait for a lost sweep, so a sweep that lands is always recorded."""


@dataclass
class Hub:
    kube: Kube
    settings: OperatorSettings
    registry: Registry = field(default_factory=Registry)
    harnesses: dict[tuple[str, str], HarnessClient] = field(default_factory=dict)
    """(namespace, Workspace) → its Harness's client, once the Workspace is Ready."""
    sweeps: dict[tuple[str, str], list[Settled]] = field(default_factory=dict)
    """(namespace, AgentTurn) → what its finalizer's sweep settled."""
    phases: dict[str, str] = field(default_factory=dict)
    """Run key → its phase, for the runs-by-phase gauge."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Fire-and-forget work (Events), kept referenced until done."""
    _swept: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)

    def swept(self, key: tuple[str, str], settled: list[Settled]) -> None:
        self.sweeps[key] = settled
        self._swept.setdefault(key, asyncio.Event()).set()

    def sweep_done(self, key: tuple[str, str]) -> list[Settled] | None:
        """What the finalizer's sweep settled, if it reported already (taken once)."""
        event = self._swept.get(key)
        if event is None or not event.is_set():
            return None
        self._swept.pop(key, None)
        return self.sweeps.pop(key, [])

    async def sweep_result(self, key: tuple[str, str], seconds: float) -> list[Settled] | None:
        event = self._swept.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except TimeoutError:
            return None
        self._swept.pop(key, None)
        return self.sweeps.pop(key, [])

    async def close(self) -> None:
        for client in self.harnesses.values():
            await client.close()
        self.harnesses.clear()
