"""The operator's Prometheus metrics (served on the metrics port by ``operator``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from kubeturn.api.agentturn import PendingReason
from kubeturn.api.status import RunPhase

SWEEP_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0
)  # fmt: skip
"""Sweep → settled: milliseconds on a healthy Harness; 15 s is one sweep's own timeout at a
Harness that does not answer, and the tail reaches the finalizer's bound (120 s, while a
sandbox Pod is made again)."""

TURNS = Counter(
    "kubeturn_turns",
    "Turns recorded, by outcome and cause.",
    ["outcome", "cause"],
)
SWEEP_SECONDS = Histogram(
    "kubeturn_sweep_to_settled_seconds",
    "From an AgentTurn's sweep being sent to its settlement being known.",
    buckets=SWEEP_BUCKETS,
)
RUNS = Gauge("kubeturn_runs", "Runs this operator drives, by phase.", ["phase"])
TURNS_WAITING = Gauge(
    "kubeturn_turns_waiting",
    "Turns waiting for a slot under a cap on live Turns, by why each waits now: "
    "WorkspaceFull, NamespaceFull, or Resuming (held while an operator that started "
    "finds the Turns that were live).",
    ["reason"],
)
RUN_SPEC_READS = Counter(
    "kubeturn_run_spec_reads",
    "Times a Run's daemon read its spec for signals and a cancel: once as it starts, then "
    "once per new generation.",
)
RECONCILE_ERRORS = Counter(
    "kubeturn_reconcile_errors",
    "Handler failures, by resource (kopf retries them).",
    ["resource"],
)


class PhaseCounts:
    """The runs-by-phase gauge, kept as counts: a Run that changes phase moves from one
    count to another, and a deleted one leaves its count; nothing walks every Run.

    The gauge shows this object's counts (the Runs this operator drives): its first change
    sets every phase's, so an operator started again in the same process starts afresh."""

    def __init__(self, gauge: Gauge = RUNS) -> None:
        self._gauge = gauge
        self._phases: dict[str, str] = {}
        self._counts: dict[str, int] = {phase.value: 0 for phase in RunPhase}
        self._shown = False

    def put(self, run: str, phase: str) -> None:
        """``run`` (``namespace/name``) is in ``phase`` now."""
        before = self._phases.get(run)
        if before != phase:
            self._phases[run] = phase
            self._move(before, phase)

    def drop(self, run: str) -> None:
        """``run`` was deleted: it counts nowhere."""
        before = self._phases.pop(run, None)
        if before is not None:
            self._move(before, None)

    def counts(self) -> dict[str, int]:
        """Phase → Runs in it, of the phases some Run is in."""
        return {phase: count for phase, count in self._counts.items() if count}

    def _move(self, before: str | None, after: str | None) -> None:
        if before is not None:
            self._counts[before] -= 1
        if after is not None:
            self._counts[after] = self._counts.get(after, 0) + 1
        changed = (before, after) if self._shown else tuple(self._counts)
        self._shown = True
        for phase in changed:
            if phase is not None:
                self._gauge.labels(phase=phase).set(self._counts[phase])


def turns_waiting(counts: Mapping[PendingReason, int], gauge: Gauge = TURNS_WAITING) -> None:
    """Show the caps' waiting Turns by reason (``orchestrator.caps.Caps``'s hook): every
    reason's series, at 0 when none waits for it, so a dashboard reads 0, not nothing."""
    for reason in PendingReason:
        gauge.labels(reason=reason.value).set(counts.get(reason, 0))


Handler = Callable[..., Awaitable[None]]


def counting_errors(resource: str) -> Callable[[Handler], Handler]:
    """Count a handler's failures under ``resource``; kopf still sees (and retries) them."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def counted(**kwargs: Any) -> None:
            try:
                await handler(**kwargs)
            except asyncio.CancelledError:
                raise
            except Exception:
                RECONCILE_ERRORS.labels(resource=resource).inc()
                raise

        return counted

    return wrap
