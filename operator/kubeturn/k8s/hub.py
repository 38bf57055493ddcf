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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubeturn.k8s.apiserver import ApiServerAddresses
from kubeturn.k8s.kube import Kube
from kubeturn.k8s.metrics import PhaseCounts
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.api import Registry
from kubeturn.orchestrator.delivery import Pusher
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.settings import OperatorSettings

REPORT_KEEP_S = 600.0
"""How long a finalizer's report waits for its Run to take it: a Run's actor takes it
within a sweep's bound (120 s) or, after an operator restart, once it resumed; a report
still there after 10 minutes belongs to a Run that is gone."""


@dataclass
class Hub:
    kube: Kube
    settings: OperatorSettings
    api_server: ApiServerAddresses = field(init=False)
    """The API server's addresses, which sandboxes' egress keeps out."""
    registry: Registry = field(default_factory=Registry)
    harnesses: dict[tuple[str, str], HarnessClient] = field(default_factory=dict)
    """(namespace, Workspace) → its Harness's client, once the Workspace is Ready."""
    sweeps: dict[tuple[str, str], list[Settled]] = field(default_factory=dict)
    """(namespace, AgentTurn) → what its finalizer's sweep settled."""
    phases: PhaseCounts = field(default_factory=PhaseCounts)
    """Runs by phase, for the runs-by-phase gauge."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Fire-and-forget work (Events), kept referenced until done."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds, for how long an unclaimed report is kept."""
    pusher: Pusher | None = None
    """What pushes a Run's delivered branch (``kubeturn.k8s.deliveries.KubePusher``, a
    short-lived Pod that alone mounts the slot's Secret); None: a ``deliver`` with
    ``push: true`` fails saying this operator has no pusher."""
    _swept: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict)
    _reported_at: dict[tuple[str, str], float] = field(default_factory=dict)
    _resuming: set[str] = field(default_factory=set)
    _resume_by: float = 0.0
    _resumed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.api_server = ApiServerAddresses(self.kube, self.settings.api_server_look_s)

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
                async with asyncio.timeout(left):  # not wait_for: see sweep_result
                    await self._resumed.wait()

    def swept(self, key: tuple[str, str], settled: list[Settled]) -> None:
        """The finalizer's report, kept for its Run (taken once); reports nobody took
        within ``REPORT_KEEP_S`` (their Run was deleted) are dropped."""
        now = self.clock()
        for stale in [k for k, at in self._reported_at.items() if now - at > REPORT_KEEP_S]:
            self._reported_at.pop(stale, None)
            self.sweeps.pop(stale, None)
            self._swept.pop(stale, None)
        self.sweeps[key] = settled
        self._reported_at[key] = now
        self._swept.setdefault(key, asyncio.Event()).set()

    def sweep_done(self, key: tuple[str, str]) -> list[Settled] | None:
        """What the finalizer's sweep settled, if it reported already (taken once)."""
        event = self._swept.get(key)
        if event is None or not event.is_set():
            return None
        self._swept.pop(key, None)
        self._reported_at.pop(key, None)
        return self.sweeps.pop(key, [])

    async def sweep_result(self, key: tuple[str, str], seconds: float) -> list[Settled] | None:
        event = self._swept.setdefault(key, asyncio.Event())
        try:
            # Not ``wait_for``: on Python 3.11 it drops a cancellation that lands once the
            # event is set, and a finalizer cut by the operator's stop must stop here.
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return None
        self._swept.pop(key, None)
        self._reported_at.pop(key, None)
        return self.sweeps.pop(key, [])

    async def close(self) -> None:
        for client in self.harnesses.values():
            await client.close()
        self.harnesses.clear()
