"""The operator's Prometheus metrics (served on the metrics port by ``operator``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

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
RECONCILE_ERRORS = Counter(
    "kubeturn_reconcile_errors",
    "Handler failures, by resource (kopf retries them).",
    ["resource"],
)


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
