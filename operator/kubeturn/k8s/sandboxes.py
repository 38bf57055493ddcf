"""What a Workspace's sandbox Pod's state means, and what its controller does about it:
leave it, probe its Harness, delete it, or make it (again, after a bounded back-off).

The Pod runs with ``restartPolicy: Always``: a container that exits is restarted in the
same Pod by the kubelet, with the kubelet's own back-off, and the Pod keeps its address.
A Pod ends (``Failed``) only when it is evicted, its node shuts down or it is deleted;
then a new one is made, with the same name and volume, once the old one is gone (so two
Harnesses never share the conversation logs; ADR 0024). Pure: no IO, no clock, no kopf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kubeturn.api.status import WorkspacePhase
from kubeturn.k8s import conditions

BACKOFF_FIRST_S = 10.0
"""The wait before the second new Pod in a row that never got Ready: the kubelet's first
CrashLoopBackOff step, so a sandbox that cannot start costs the cluster what a crashing
container does."""
BACKOFF_MAX_S = 300.0
"""The longest wait between new Pods (5 minutes, the kubelet's cap)."""
STABLE_S = 600.0
"""How long a Harness must have been Ready before its Pod's next end counts as the first
again (10 minutes, as the kubelet resets a container's back-off)."""


DELETED = "the sandbox Pod was deleted"


class PodState(Enum):
    MISSING = "missing"
    TERMINATING = "terminating"
    ENDED = "ended"
    """``Failed`` or ``Succeeded``: it will not run again; it is deleted and made anew."""
    STARTING = "starting"
    RUNNING = "running"


@dataclass(frozen=True)
class Pod:
    """The parts of a sandbox Pod its Workspace's controller acts on."""

    state: PodState
    uid: str | None = None
    ip: str | None = None
    said: str = ""
    """What the Pod says, for a person: its phase, why it ended, containers waiting."""


def read_pod(pod: Mapping[str, Any] | None) -> Pod:
    if pod is None:
        return Pod(PodState.MISSING, said=DELETED)
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    uid = meta.get("uid")
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        return Pod(PodState.TERMINATING, uid, said=DELETED)
    if phase in ("Failed", "Succeeded"):
        why = ": ".join(part for part in (status.get("reason"), status.get("message")) if part)
        said = f"the sandbox Pod {'failed' if phase == 'Failed' else 'exited'}"
        return Pod(PodState.ENDED, uid, said=f"{said}: {why}" if why else said)
    waiting = _waiting(status)
    if phase == "Running" and status.get("podIP"):
        return Pod(PodState.RUNNING, uid, status["podIP"], said=waiting)
    said = f"the sandbox Pod is {phase}" + (f" ({waiting})" if waiting else "")
    return Pod(PodState.STARTING, uid, said=said)


def _waiting(status: Mapping[str, Any]) -> str:
    """Containers waiting for something other than their start: ``name: reason: message``."""
    found = []
    for container in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in ("ContainerCreating", "PodInitializing"):
            parts = (container.get("name"), reason, waiting.get("message"))
            found.append(": ".join(part for part in parts if part))
    return "; ".join(found)


def backoff_s(made: int) -> float:
    """Seconds between the new Pod ``made`` (1 for the first new one since the Harness was
    last Ready for good) and the next: 10, 20, 40, … up to 300."""
    return min(BACKOFF_FIRST_S * 2.0 ** max(made - 1, 0), BACKOFF_MAX_S)


@dataclass
class Recreation:
    """What the controller remembers between its looks at the Pod (in memory: after an
    operator restart the next new Pod is the first again)."""

    seen: bool = False
    """A Pod of this Workspace was seen: one that is gone now is made *again*."""
    why: str | None = None
    """Why the current recreation began (the old Pod's end), until a Harness is Ready."""
    refusal: str | None = None
    """Why the API refused the last Pod made (a quota, an invalid spec), until one is made."""
    made: int = 0
    """Pods made again since a Harness was last Ready for ``STABLE_S``."""
    next_at: float = 0.0
    """When (monotonic seconds) the next Pod may be made."""
    ready_since: float | None = None

    def making(self, now: float) -> None:
        """A Pod is being made now. The Workspace's first is free; each one made again
        (or after a refusal) moves the next one out by the back-off."""
        if self.seen or self.refusal:
            self.made += 1
            self.next_at = now + backoff_s(self.made)
        self.refusal = None

    def refused(self, why: str) -> None:
        self.refusal = why

    def ready(self, now: float) -> None:
        """The Harness answers: the recreation is over; once it has answered for
        ``STABLE_S``, the back-off starts over."""
        self.why = None
        if self.ready_since is None:
            self.ready_since = now
        elif now - self.ready_since >= STABLE_S:
            self.made = 0

    def not_ready(self) -> None:
        self.ready_since = None


class Action(Enum):
    NOTHING = "nothing"
    PROBE = "probe"
    """The Pod runs: ask its Harness whether it is ready."""
    DELETE = "delete"
    """The Pod ended: delete it, so a new one can take its name."""
    CREATE = "create"
    """No Pod: make it (and whatever else of the Workspace is missing)."""


@dataclass(frozen=True)
class Plan:
    action: Action
    phase: WorkspacePhase
    reason: str
    message: str
    wait_s: float | None = None
    """When to look again at the latest (None: the controller's usual pace)."""


def plan(pod: Pod, memory: Recreation, *, now: float, deleting: bool) -> Plan:
    """What to do about the Pod now, and what the Workspace's status says meanwhile.

    ``memory`` learns here that a Pod was seen and why a recreation began; the caller
    tells it when it makes a Pod (``making``) and how the Harness answered. A ``PROBE``
    plan's message is what to say before the Harness's own answer.
    """
    pending = WorkspacePhase.PENDING
    if pod.state is not PodState.MISSING:
        memory.seen = True
    if deleting:
        return Plan(
            Action.NOTHING,
            WorkspacePhase.TERMINATING,
            conditions.TERMINATING,
            "the Workspace is being deleted",
        )
    if pod.state is PodState.RUNNING:
        return Plan(Action.PROBE, pending, _starting(memory), _said(memory, pod.said))
    if pod.state is PodState.STARTING:
        return Plan(Action.NOTHING, pending, _starting(memory), _said(memory, pod.said))
    if pod.state is PodState.ENDED:
        memory.why = pod.said
        return Plan(
            Action.DELETE, pending, conditions.RECREATING, f"{pod.said}; deleting it to make anew"
        )
    if pod.state is PodState.TERMINATING:
        memory.why = memory.why or pod.said
        return Plan(
            Action.NOTHING,
            pending,
            conditions.RECREATING,
            f"{memory.why}; a new one follows once it is gone",
        )
    if memory.seen:
        memory.why = memory.why or pod.said
    left = memory.next_at - now
    if memory.refusal is not None:
        if left > 0:
            return Plan(
                Action.NOTHING,
                WorkspacePhase.FAILED,
                conditions.FAILED,
                f"{memory.refusal}; trying again after a back-off of {backoff_s(memory.made):g} s",
                wait_s=left,
            )
        return Plan(Action.CREATE, WorkspacePhase.FAILED, conditions.FAILED, memory.refusal)
    if not memory.seen:
        return Plan(Action.CREATE, pending, conditions.STARTING, "making the sandbox Pod")
    if left > 0:
        return Plan(
            Action.NOTHING,
            pending,
            conditions.RECREATING,
            f"{memory.why}; a new one is made after a back-off of {backoff_s(memory.made):g} s",
            wait_s=left,
        )
    return Plan(Action.CREATE, pending, conditions.RECREATING, f"{memory.why}; making a new one")


def _starting(memory: Recreation) -> str:
    return conditions.RECREATING if memory.why else conditions.STARTING


def _said(memory: Recreation, said: str) -> str:
    """``said``, after why the sandbox is being made again (kept until it is Ready)."""
    return "; ".join(part for part in (memory.why, said) if part)
