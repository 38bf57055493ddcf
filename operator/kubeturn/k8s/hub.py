"""What the operator's controllers share in one process: the Kubernetes facade, the
Orchestrator API's registry, each Workspace's Harness client, and the sweeps in flight.

Each shared thing has one writer, and the others ask the hub through methods named for
what they do: the Workspace controller alone offers, withholds and retires a Workspace's
Harness client (``harness_ready``, ``withholding_harness``, ``harness_gone``), which the
others ask for (``harness_of``); the Run controller alone says which Runs it drives and in
which phase (``run_started``, ``run_phase``, ``run_gone``, ``runs_stopping``), which the
others ask about (``actor_of``, ``runs_in``). The hub owns the clients it holds: it closes
them when the operator stops (ADR 0100).

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kubeturn.k8s import metrics
from kubeturn.k8s.apiserver import ApiServerAddresses
from kubeturn.k8s.kube import Kube
from kubeturn.orchestrator.actor import RunActor, Settled
from kubeturn.orchestrator.api import Registry
from kubeturn.orchestrator.caps import NAMESPACE, Caps
from kubeturn.orchestrator.delivery import Pusher
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.settings import OperatorSettings
from kubeturn.tracing import Tracing

REPORT_KEEP_S = 600.0
"""How long a finalizer's report waits for its Run to take it: a Run's actor takes it
within a sweep's bound (120 s) or, after an operator restart, once it resumed; a report
still there after 10 minutes belongs to a Run that is gone."""

Key = tuple[str, str]
"""(namespace, name) of a Workspace or an AgentTurn."""


@dataclass
class Hub:
    kube: Kube
    settings: OperatorSettings
    api_server: ApiServerAddresses = field(init=False)
    caps: Caps = field(init=False)
    """The slots of the Runs' Turns under the caps on live Turns (ADR 0116): each
    Workspace's cap is set by its controller, the namespaces' is the settings'."""
    """The API server's addresses, which sandboxes' egress keeps out."""
    registry: Registry = field(default_factory=Registry)
    """The Run actors and Workspace tokens the Orchestrator API answers from."""
    sweeps: dict[Key, list[Settled]] = field(default_factory=dict)
    """(namespace, AgentTurn) → what its finalizer's sweep settled."""
    phases: metrics.PhaseCounts = field(default_factory=metrics.PhaseCounts)
    """Runs by phase, for the runs-by-phase gauge."""
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Fire-and-forget work (Events), kept referenced until done."""
    clock: Callable[[], float] = time.monotonic
    """Monotonic seconds, for how long an unclaimed report is kept."""
    pusher: Pusher | None = None
    tracing: Tracing | None = None
    """Where Runs' spans go; None: Runs are not traced (ADR 0107)."""
    """What pushes a Run's delivered branch (``kubeturn.k8s.deliveries.KubePusher``, a
    short-lived Pod that alone mounts the slot's Secret); None: a ``deliver`` with
    ``push: true`` fails saying this operator has no pusher."""
    _harnesses: dict[Key, HarnessClient] = field(default_factory=dict)
    """(namespace, Workspace) → its Harness's client, once the Workspace is Ready."""
    _withheld: set[Key] = field(default_factory=set)
    """Workspaces whose client no new caller gets for now (their Pod may be rolled)."""
    _swept: dict[Key, asyncio.Event] = field(default_factory=dict)
    _reported_at: dict[Key, float] = field(default_factory=dict)
    _resuming: set[str] = field(default_factory=set)
    _resume_by: float = 0.0
    _resumed: asyncio.Event = field(default_factory=asyncio.Event)
    _opening: asyncio.TimerHandle | None = None

    def __post_init__(self) -> None:
        self.api_server = ApiServerAddresses(self.kube, self.settings.api_server_look_s)
        self.caps = Caps(
            {NAMESPACE: self.settings.namespace_max_live_turns}, waiting=metrics.turns_waiting
        )
        metrics.turns_waiting({})

    def harness_of(self, namespace: str, workspace: str) -> HarnessClient | None:
        """The client of the Workspace's Harness; None until it is Ready, while its
        sandbox is made (again), and while its Pod is about to be rolled. A caller asks
        again after every wait and every failure to reach it, and keeps none across them."""
        key = (namespace, workspace)
        return None if key in self._withheld else self._harnesses.get(key)

    def harness_ready(self, key: Key, client: HarnessClient) -> None:
        """The Workspace's Harness answers: callers get ``client`` from now on (the hub
        owns it; the Workspace controller alone calls this, when it holds none)."""
        assert key not in self._harnesses, "a Workspace holds one Harness client"
        self._harnesses[key] = client

    @contextlib.contextmanager
    def withholding_harness(self, key: Key) -> Iterator[None]:
        """No new caller gets the Workspace's Harness client meanwhile; it stays here, and
        is offered again after, unless ``harness_gone`` took it."""
        self._withheld.add(key)
        try:
            yield
        finally:
            self._withheld.discard(key)

    def harness_gone(self, key: Key) -> HarnessClient | None:
        """The Workspace's Harness client is of a Pod, address or tokens that are no more:
        no caller gets it from now on, and the one answered closes it."""
        return self._harnesses.pop(key, None)

    def run_started(self, key: str, actor: RunActor, workspace: str) -> None:
        """The Run (``namespace/name``) is driven here by ``actor``, its Turns running in
        ``workspace`` (``namespace/name``): the Orchestrator API answers for it."""
        self.registry.actors[key] = actor
        self.registry.workspaces[key] = workspace

    def run_phase(self, key: str, phase: str) -> None:
        """The Run is in ``phase`` now (the runs-by-phase gauge)."""
        self.phases.put(key, phase)

    def run_gone(self, key: str) -> None:
        """The Run was deleted: nothing here answers for it, nor counts it, any more."""
        self.registry.actors.pop(key, None)
        self.registry.workspaces.pop(key, None)
        self.phases.drop(key)

    def runs_stopping(self) -> None:
        """This process is stopping: its Run actors are closing or closed, so a Turn it
        cannot find may be live in one of them (ADR 0047)."""
        self.registry.stopping = True

    def actor_of(self, key: str) -> RunActor | None:
        """The actor driving the Run (``namespace/name``) here, if any."""
        return self.registry.actors.get(key)

    def runs_in(self, workspace: str) -> list[tuple[str, RunActor]]:
        """The Runs driven here whose Turns run in ``workspace`` (``namespace/name``), with
        their actors."""
        return [
            (run, actor)
            for run, where in list(self.registry.workspaces.items())
            if where == workspace and (actor := self.registry.actors.get(run)) is not None
        ]

    def expect(self, runs: Iterable[str], grace_s: float) -> None:
        """The Runs (``namespace/name``) to resume before the Orchestrator API may say
        that a Turn it does not know is over; after ``grace_s`` it says so anyway."""
        self._resuming = set(runs)
        self._resume_by = time.monotonic() + grace_s
        if not self._resuming:
            self._resumed.set()
        else:
            # No waiting Turn goes before the Turns that were live hold their slots again.
            self.caps.hold_back()
            self._opening = asyncio.get_running_loop().call_later(grace_s, self.caps.open)

    def resumed(self, run: str) -> None:
        """The Run's actor is registered (or the Run has none to register)."""
        self._resuming.discard(run)
        if not self._resuming:
            self._resumed.set()
            self.caps.open()

    def resuming(self) -> bool:
        return not self._resumed.is_set() and time.monotonic() < self._resume_by

    async def wait_resumed(self, seconds: float) -> None:
        """Until every expected Run is resumed, ``seconds`` pass, or the grace ends."""
        left = min(seconds, self._resume_by - time.monotonic())
        if left > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):  # not wait_for: see sweep_result
                    await self._resumed.wait()

    def swept(self, key: Key, settled: list[Settled]) -> None:
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

    def sweep_done(self, key: Key) -> list[Settled] | None:
        """What the finalizer's sweep settled, if it reported already (taken once)."""
        event = self._swept.get(key)
        if event is None or not event.is_set():
            return None
        self._swept.pop(key, None)
        self._reported_at.pop(key, None)
        return self.sweeps.pop(key, [])

    async def sweep_result(self, key: Key, seconds: float) -> list[Settled] | None:
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
        if self._opening is not None:
            self._opening.cancel()
        for client in self._harnesses.values():
            await client.close()
        self._harnesses.clear()
