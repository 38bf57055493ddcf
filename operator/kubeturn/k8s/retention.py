"""Finished Turns stay visible for a while: ``kubectl get agentturns`` lists them,
``Settled`` with their outcome and cause, for their retention (ADR 0106).

A settled AgentTurn is held by the retain finalizer it was made with, after kopf removed
the sweep finalizer: it is being deleted, so nothing changes it any more, and nothing
counts it as running (its settlement is written). It is let go by removing that
finalizer, its one write:

- when its retention, counted from the settlement's ``settledAt``, has passed;
- at once when its Turn did not end by its state's exit (``status.exit`` absent: a
  person deleted it, or its Run is going), so ``kubectl delete`` returns as before;
- when its Run is deleted (the Run's finalizer lets its Turns go, ``release``).

The deadline is read from the object, never kept only in memory: after a restart the
watch lists every held AgentTurn again and each is scheduled anew. One task per operator
sleeps until the earliest deadline (``Releases``), rather than a timer or daemon per
object, each of which kopf would run as a task with its own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kopf

from kubeturn.api.agentturn import RETAIN_FINALIZER, SWEEP_FINALIZER
from kubeturn.api.common import GROUP, VERSION
from kubeturn.api.durations import parse_duration
from kubeturn.errors import Conflict, NotFound
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, Kube

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""An AgentTurn's namespace and name."""

RETRY_S = 10.0
"""When a release failed (the API server did not answer), how long until it is tried
again."""


def retention(named: str | None, default_s: float) -> str | None:
    """What a new AgentTurn carries as its ``spec.retention``: the Run's
    ``spec.turnRetention`` (``named``, checked when the Run was loaded), else the
    operator's default; None when it is zero (the AgentTurn goes at once, and carries no
    retain finalizer)."""
    if named is not None:
        return named if parse_duration(named) > 0 else None
    return f"{default_s:g}s" if default_s > 0 else None


def held(body: Mapping[str, Any]) -> bool:
    """Whether the AgentTurn is settled and held by the retain finalizer alone of
    kubeturn's: being deleted, its sweep done."""
    meta = body.get("metadata") or {}
    finalizers = meta.get("finalizers") or []
    return (
        bool(meta.get("deletionTimestamp"))
        and RETAIN_FINALIZER in finalizers
        and SWEEP_FINALIZER not in finalizers
    )


def release_at(body: Mapping[str, Any]) -> float | None:
    """When the held AgentTurn is let go (seconds since the epoch); None when it is not
    held. One without a readable settlement or retention, or whose Turn did not end by
    its state's exit, is let go at once (0)."""
    if not held(body):
        return None
    status = body.get("status") or {}
    settled = _epoch((status.get("settlement") or {}).get("settledAt"))
    kept = (body.get("spec") or {}).get("retention")
    if settled is None or not status.get("exit") or not kept:
        return 0.0
    try:
        return settled + parse_duration(kept)
    except ValueError:
        return 0.0


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


async def release(kube: Kube, body: Mapping[str, Any]) -> None:
    """Remove the retain finalizer (the AgentTurn then goes), against the version read:
    one changed since is read again and let go if it is still held. Gone is done."""
    current: Mapping[str, Any] | None = body
    while current is not None and held(current):
        meta = current["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != RETAIN_FINALIZER]
        version = {"resourceVersion": meta["resourceVersion"]} if "resourceVersion" in meta else {}
        try:
            await kube.patch(
                AGENTTURNS,
                meta["namespace"],
                meta["name"],
                {"metadata": {"finalizers": rest, **version}},
            )
            return
        except NotFound:
            return
        except Conflict:
            current = await kube.get(AGENTTURNS, meta["namespace"], meta["name"])


@dataclass
class Releases:
    """The held AgentTurns by deadline, and the one task that lets each go at its own."""

    kube: Kube
    clock: Callable[[], float] = time.time
    _due: dict[Key, tuple[float, Mapping[str, Any]]] = field(default_factory=dict)
    _order: list[tuple[float, Key]] = field(default_factory=list)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def saw(self, key: Key, body: Mapping[str, Any]) -> None:
        """An AgentTurn as the watch shows it now: scheduled if held, forgotten if not."""
        at = release_at(body)
        if at is None:
            self._due.pop(key, None)
            return
        before = self._due.get(key)
        self._due[key] = (at, body)
        if before is None or before[0] != at:
            heapq.heappush(self._order, (at, key))
            self._wake.set()

    def gone(self, key: Key) -> None:
        """The AgentTurn went (its DELETED event): its heap entry is dropped when it
        comes up."""
        self._due.pop(key, None)

    def __len__(self) -> int:
        """How many held AgentTurns wait for their deadline."""
        return len(self._due)

    async def run(self) -> None:
        """Let go each held AgentTurn when its deadline comes, the earliest first."""
        while True:
            self._wake.clear()
            while self._order:
                at, key = self._order[0]
                scheduled = self._due.get(key)
                if scheduled is None or scheduled[0] != at:
                    heapq.heappop(self._order)  # let go already, or scheduled anew
                    continue
                if at > self.clock():
                    break
                heapq.heappop(self._order)
                del self._due[key]
                try:
                    await release(self.kube, scheduled[1])
                except Exception as failed:  # the API server: try again later
                    log.warning("letting AgentTurn %s/%s go: %s; trying again", *key, failed)
                    self._due[key] = (self.clock() + RETRY_S, scheduled[1])
                    heapq.heappush(self._order, (self._due[key][0], key))
            wait = self._order[0][0] - self.clock() if self._order else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()


def register(hub: Hub, registry: kopf.OperatorRegistry) -> None:
    """Schedule every held AgentTurn the watch shows (those listed at the start too), and
    run the one task that lets them go while the handlers run."""
    releases = Releases(hub.kube)
    running: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start(**_: Any) -> None:
        running.append(asyncio.create_task(releases.run(), name="agentturn releases"))

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        for task in running:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @kopf.on.event(GROUP, VERSION, "agentturns", registry=registry)
    async def turn_seen(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> None:
        key = (namespace or "", name)
        if event.get("type") == "DELETED":
            releases.gone(key)
        else:
            releases.saw(key, _plain(body))


def _plain(body: kopf.Body) -> dict[str, Any]:
    """What ``release_at`` and ``release`` read of kopf's live body, as a plain copy."""
    meta = body["metadata"]
    return {
        "metadata": {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "finalizers": list(meta.get("finalizers") or []),
        },
        "spec": {"retention": (body.get("spec") or {}).get("retention")},
        "status": {
            "exit": (body.get("status") or {}).get("exit"),
            "settlement": dict((body.get("status") or {}).get("settlement") or {}),
        },
    }
