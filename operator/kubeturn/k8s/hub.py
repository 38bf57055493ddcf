"""What the operator's controllers share in one process: the Kubernetes facade, the
Orchestrator API's registry, each Workspace's Harness client, and the sweeps in flight.

The Run actors, the Orchestrator API and the AgentTurn finalizers meet here: a Run
actor deletes an AgentTurn to sweep it and waits for the finalizer to report what the
sweep settled. After a start, it also knows which unfinished Runs are not resumed yet:
until they are, the Orchestrator API cannot tell a Turn that is over from a Turn of one
of them. Only ``kubeturn.k8s`` uses it; it imports no kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
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
    _resuming: set[str] = field(default_factory=set)
    _resume_by: float = 0.0
    _resumed: asyncio.Event = field(default_factory=asyncio.Event)

    def expect(self, runs: Iterable[str], grace_s: float) -> None:
        """The Runs (``namespace/name``) to resume before the Orchestrator API may say
        that a Turn it does not know is over; after ``grace_s`` it says so anyway."""
        self._resuming = set(runs)
        self._resume_by = time.monotonic() + grace_s
        if not self._resuming:
            self._resumed.set()

    def resumed(self, run: str) -> None:
        """The Run's actor is registered (or the Run has none to register)."""
        self._resuming.discard(run)
        if not self._resuming:
            self._resumed.set()

    def resuming(self) -> bool:
        return not self._resumed.is_set() and time.monotonic() < self._resume_by

    async def wait_resumed(self, seconds: float) -> None:
        """Until every expected Run is resumed, ``seconds`` pass, or the grace ends."""
        left = min(seconds, self._resume_by - time.monotonic())
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._resumed.wait(), left)

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
