"""Leader election by a ``coordination.k8s.io/v1`` Lease: which operator replica is active.

The algorithm is client-go's (``tools/leaderelection``), so the Lease reads as every
Kubernetes controller's does (``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime``, ``leaseTransitions``):

- a replica takes the Lease when nobody holds it (absent, or ``holderIdentity`` empty
  after a release) or when its holder has not renewed it for ``leaseDurationSeconds``,
  measured on this replica's own monotonic clock from when it last saw the Lease change
  (never by comparing ``renewTime`` with its own wall clock, which may be skewed);
- the leader renews it every retry period; when no renewal succeeded for the renew
  deadline, or another replica holds it, the leader has lost it (``LeadershipLost``);
- every write names the ``resourceVersion`` it was made against, so of two replicas that
  race for one Lease exactly one wins (the other gets a conflict and stays a standby);
- a leader that stops releases the Lease (holder cleared), so a standby takes it at once.

This module only keeps the Lease. It must not import kopf, nor decide what leading
means: ``kubeturn.k8s.operator`` starts kopf's handlers and the Orchestrator API once this
replica leads, and stops them when it loses the Lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import random
import secrets
import time
from typing import Any, Protocol

from kubeturn.errors import Conflict, LeadershipLost, NotFound
from kubeturn.k8s.kube import LEASES, Kube
from kubeturn.settings import LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S

log = logging.getLogger(__name__)

JITTER = 1.2
"""A standby waits a retry period plus up to this many more between tries (client-go's
``JitterFactor``), so that standbys started together do not try in step. The renew
deadline must exceed this many retry periods, so that one late try cannot end a lead."""
RELEASE_TRIES = 3
"""Writes a release may take: a renewal still in flight when the renewing stopped may
land first, once, and then the release is written again over the version it made."""
RELEASED_LEASE_S = 1
"""The ``leaseDurationSeconds`` a released Lease keeps (client-go writes the same): a
replica that does not read an empty holder as free still waits only this long."""
IDENTITY_SUFFIX_BYTES = 4
"""Random bytes after the pod name in an identity: a restarted container in the same pod
is a new candidate, never the holder its previous process was."""


def identity(pod_name: str) -> str:
    """A candidate's identity: its pod's name (what people look for in the Lease) and a
    random suffix (one per process)."""
    return f"{pod_name}_{secrets.token_hex(IDENTITY_SUFFIX_BYTES)}"


@dataclasses.dataclass(frozen=True)
class Election:
    """Which Lease decides, who this replica is, and the timings (client-go's names;
    their defaults are ``kubeturn.settings``')."""

    namespace: str
    """The Lease's namespace: the operator's own."""
    name: str
    """The Lease's name; replicas that share it elect one leader among them."""
    identity: str
    """This replica's ``holderIdentity`` (see :func:`identity`)."""
    lease_duration_s: int = LEASE_DURATION_S
    """Whole seconds: ``leaseDurationSeconds`` is an integer field."""
    renew_deadline_s: float = RENEW_DEADLINE_S
    retry_period_s: float = RETRY_PERIOD_S

    def __post_init__(self) -> None:
        if not (self.lease_duration_s > self.renew_deadline_s > JITTER * self.retry_period_s > 0):
            raise ValueError(
                f"the lease duration ({self.lease_duration_s:g} s) must exceed the renew "
                f"deadline ({self.renew_deadline_s:g} s), which must exceed {JITTER:g} × the "
                f"retry period ({self.retry_period_s:g} s), which must be above 0"
            )


class Clock(Protocol):
    """Time for an elector: tests pass one they advance by hand."""

    def monotonic(self) -> float:
        """Seconds that never go back: expiry and deadlines are measured on it."""
        ...

    def now(self) -> datetime.datetime:
        """The wall clock (UTC), for the Lease's ``acquireTime`` and ``renewTime``."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.UTC)


def micro_time(moment: datetime.datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One replica's candidacy for one Lease.

    :meth:`try_acquire_or_renew` is one round (client-go's ``tryAcquireOrRenew``);
    :meth:`acquire`, :meth:`keep` and :meth:`release` are the loops and the end around it.
    """

    def __init__(self, kube: Kube, election: Election, clock: Clock | None = None) -> None:
        self.election = election
        self._kube = kube
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lease: dict[str, Any] | None = None
        """The Lease as this replica last read or wrote it."""
        self._seen_at = 0.0
        """When (monotonic) this replica last saw the Lease's spec change."""
        self._renewed_at = 0.0
        """When (monotonic) this replica's last successful write began."""

    @property
    def holder(self) -> str:
        """The holder of the Lease as last seen ('' for nobody)."""
        return str(self._spec().get("holderIdentity") or "")

    @property
    def leading(self) -> bool:
        """This replica holds the Lease, as last seen: from a successful take until a
        release, or until a round finds another holder."""
        return self._lease is not None and self.holder == self.election.identity

    def _spec(self) -> dict[str, Any]:
        return dict((self._lease or {}).get("spec") or {})

    def _observe(self, lease: dict[str, Any], at: float) -> None:
        if self._lease is None or (lease.get("spec") or {}) != self._spec():
            self._seen_at = at
        self._lease = lease

    def _expired(self, at: float) -> bool:
        """The holder let the Lease lapse, by its own ``leaseDurationSeconds``."""
        duration = self._spec().get("leaseDurationSeconds") or self.election.lease_duration_s
        return at >= self._seen_at + float(duration)

    def _body(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The Lease to write: over the version last seen (its resourceVersion), if any."""
        meta: dict[str, Any] = {"name": self.election.name, "namespace": self.election.namespace}
        if self._lease is not None:
            meta = {**self._lease["metadata"], **meta}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def _record(self, now: datetime.datetime) -> dict[str, Any]:
        """The spec this replica writes to take or renew the Lease."""
        old = self._spec()
        stamp = micro_time(now)
        ours = self.leading
        return {
            "holderIdentity": self.election.identity,
            "leaseDurationSeconds": self.election.lease_duration_s,
            "acquireTime": old.get("acquireTime", stamp) if ours else stamp,
            "renewTime": stamp,
            "leaseTransitions": int(old.get("leaseTransitions") or 0) + (0 if ours else 1),
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round: create the Lease, take it when free or expired, or renew it when
        ours. True when this replica holds it afterwards. API errors other than a
        conflict propagate; the loops count them as a failed round."""
        start, now = self._clock.monotonic(), self._clock.now()
        if self.leading:
            # The leader's fast path: write over the version it last saw; a conflict or a
            # missing Lease means something changed, which a fresh read shows.
            try:
                written = await self._kube.replace(self._body(self._record(now)))
            except (Conflict, NotFound):
                pass
            else:
                self._observe(written, start)
                self._renewed_at = start
                return True
        lease = await self._kube.get(LEASES, self.election.namespace, self.election.name)
        if lease is None:
            self._lease = None
            spec = {**self._record(now), "leaseTransitions": 0}
            # A create that loses a race answers the winner's Lease: observed, not ours.
            self._observe(await self._kube.create(self._body(spec)), start)
            if self.leading:
                self._renewed_at = start
            return self.leading
        self._observe(lease, start)
        if self.holder and not self.leading and not self._expired(start):
            return False
        try:
            written = await self._kube.replace(self._body(self._record(now)))
        except Conflict:
            return False  # another replica wrote first; the next round reads what it wrote
        self._observe(written, start)
        self._renewed_at = start
        return True

    async def _round(self) -> bool:
        """A round whose API errors count as not holding the Lease (logged)."""
        try:
            return await self.try_acquire_or_renew()
        except Exception as error:
            log.warning("the Lease %s could not be read or written: %s", self._name(), error)
            return False

    def _name(self) -> str:
        return f"{self.election.namespace}/{self.election.name}"

    async def acquire(self) -> None:
        """Return once this replica leads: a round every retry period (jittered)."""
        reported = ""
        while not await self._round():
            if self.holder and self.holder != reported:
                log.info("standby: the Lease %s is held by %s", self._name(), self.holder)
            reported = self.holder
            period = self.election.retry_period_s
            await asyncio.sleep(period + random.uniform(0, JITTER * period))
        log.info(
            "leading: this replica (%s) holds the Lease %s", self.election.identity, self._name()
        )

    async def keep(self) -> None:
        """Renew the Lease every retry period while this replica leads; raise
        ``LeadershipLost`` as soon as another holds it, or when no renewal succeeded for
        the renew deadline (each round is cut at that deadline). Never returns."""
        deadline = self.election.renew_deadline_s
        while True:
            await asyncio.sleep(self.election.retry_period_s)
            left = self._renewed_at + deadline - self._clock.monotonic()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    renewed = await self._round()
            except TimeoutError:
                renewed = False
            if renewed:
                continue
            if self._lease is not None and not self.leading:
                raise LeadershipLost(
                    f"the Lease {self._name()} is held by {self.holder or 'nobody'}, "
                    f"not by this replica ({self.election.identity})"
                )
            if self._clock.monotonic() >= self._renewed_at + deadline:
                self._lease = None  # not leading any more, whatever the API holds
                raise LeadershipLost(
                    f"the Lease {self._name()} was not renewed for {deadline:g} s "
                    "(the renew deadline)"
                )

    async def release(self) -> bool:
        """Give the Lease up if this replica holds it (holder cleared), so that a standby
        takes it at once. True when released; a failure is logged, and the Lease then
        lapses after its duration."""
        if not self.leading:
            return False
        try:
            released = await self._release()
        except Exception as error:
            log.warning("the Lease %s was not released (it lapses): %s", self._name(), error)
            return False
        if released:
            log.info("released the Lease %s", self._name())
        else:
            log.info("the Lease %s is not this replica's any more: not released", self._name())
        return released

    async def _release(self) -> bool:
        """Clear the holder over the version last seen; after a conflict (a renewal still
        in flight landed first), again over the version read, as long as it is ours."""
        for _ in range(RELEASE_TRIES):
            stamp = micro_time(self._clock.now())
            spec = {
                "holderIdentity": "",
                "leaseDurationSeconds": RELEASED_LEASE_S,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": int(self._spec().get("leaseTransitions") or 0),
            }
            try:
                released = await self._kube.replace(self._body(spec))
            except Conflict:
                self._lease = await self._kube.get(
                    LEASES, self.election.namespace, self.election.name
                )
                if not self.leading:
                    return False
            except NotFound:
                self._lease = None
                return False
            else:
                self._observe(released, self._clock.monotonic())
                return True
        raise Conflict(f"{self._name()} changed {RELEASE_TRIES} times while it was released")
