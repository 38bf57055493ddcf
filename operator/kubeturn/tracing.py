"""OpenTelemetry traces of Runs (ADR 0107): the shells' writer of the spans that
``kubeturn.orchestrator.traces`` plans. The operator and ``kubeturn run`` make one
``Tracing`` for their process, from the standard ``OTEL_*`` variables, and hand each Run's
actor a ``RunTrace``.

Off unless an OTLP endpoint is set (``kubeturn_harness.tracing.enabled``): ``Tracing.of``
answers None, no SDK module is imported, no exporter thread starts, and actors get no
``TracePort``. On, the spans carry the ids the plans derive: the SDK draws them from
``_PlannedIds``, which hands out the planned id for the one span being started (spans are
started synchronously, on the event loop, so nothing comes between the plan and the start).
A span is written whole, when what it covers has ended, with its real start and end times.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context

from kubeturn.orchestrator import traces
from kubeturn.orchestrator.ids import TurnId
from kubeturn.orchestrator.turns import Exit, TurnRecord
from kubeturn_harness import tracing as harness_tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator

log = logging.getLogger(__name__)

SERVICE = "kubeturn"
"""The service the operator's and ``kubeturn run``'s spans are of, unless
``OTEL_SERVICE_NAME`` names another."""
NS = 1_000_000_000


def _planned_ids() -> tuple[IdGenerator, _Plan]:
    """An SDK id generator that hands out the planned ids, random ones otherwise."""
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    plan = _Plan()

    class PlannedIds(IdGenerator):
        def generate_span_id(self) -> int:
            planned, plan.span = plan.span, None
            return planned or random.getrandbits(64) or 1

        def generate_trace_id(self) -> int:
            planned, plan.trace = plan.trace, None
            return planned or random.getrandbits(128) or 1

    return PlannedIds(), plan


class _Plan:
    """The ids of the next span started: taken once each."""

    span: int | None = None
    trace: int | None = None


class Tracing:
    """The process's provider of Run traces."""

    def __init__(self, provider: TracerProvider, plan: _Plan) -> None:
        self._provider = provider
        self._plan = plan
        self._tracer = provider.get_tracer(harness_tracing.SCOPE)

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> Tracing | None:
        """The tracing ``environ`` asks for; None when it sets no OTLP endpoint."""
        if not harness_tracing.enabled(environ):
            return None
        ids, plan = _planned_ids()
        provider = harness_tracing.provider(environ, service=SERVICE, ids=ids)
        assert provider is not None
        return cls(provider, plan)

    def run(self, uid: str, *, namespace: str, name: str, started: float) -> RunTrace:
        """The ``TracePort`` of one Run; ``uid`` fixes its trace (``traces.trace_id``)."""
        trace_id = traces.trace_id(uid)
        from opentelemetry.sdk.trace.sampling import Decision

        decided = self._provider.sampler.should_sample(None, trace_id, traces.RUN_SPAN)
        sampled = decided.decision is Decision.RECORD_AND_SAMPLE
        return RunTrace(
            self, uid, trace_id, sampled, namespace=namespace, name=name, started=started
        )

    def write(self, trace_id: int, sampled: bool, plan: traces.SpanPlan) -> None:
        """Write one planned span, whole."""
        under = Context()
        if plan.parent_id is None:
            self._plan.trace = trace_id
        else:
            flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else 0)
            parent = trace.SpanContext(trace_id, plan.parent_id, is_remote=True, trace_flags=flags)
            under = trace.set_span_in_context(trace.NonRecordingSpan(parent))
        self._plan.span = plan.span_id
        span = self._tracer.start_span(
            plan.name, context=under, start_time=_ns(plan.start), attributes=dict(plan.attributes)
        )
        self._plan.span = self._plan.trace = None
        for event in plan.events:
            span.add_event(event.name, dict(event.attributes), timestamp=_ns(event.at))
        if plan.error is not None:
            span.set_status(trace.StatusCode.ERROR, plan.error)
        span.end(end_time=_ns(plan.end))

    def shutdown(self) -> None:
        """Export what is left and stop the exporter (bounded by the SDK's timeouts)."""
        self._provider.shutdown()


class RunTrace:
    """One Run's ``TracePort``: its Turns' trace context, and its spans once they end."""

    def __init__(
        self,
        tracing: Tracing,
        uid: str,
        trace_id: int,
        sampled: bool,
        *,
        namespace: str,
        name: str,
        started: float,
    ) -> None:
        self._tracing = tracing
        self._uid = uid
        self._trace_id = trace_id
        self._sampled = sampled
        self._namespace = namespace
        self._name = name
        self._started = started

    def traceparent(self, turn: TurnId) -> str | None:
        span = traces.turn_span_id(self._uid, turn)
        return traces.traceparent(self._trace_id, span, sampled=self._sampled)

    def turn(self, record: TurnRecord, exit_: Exit | None) -> None:
        self._write(traces.turn_span(self._uid, self._name, record, exit_))

    def finished(self, phase: str, message: str | None, at: float) -> None:
        self._write(
            traces.run_span(
                self._uid,
                namespace=self._namespace,
                run=self._name,
                phase=phase,
                started=self._started,
                ended=at,
                message=message,
            )
        )

    def _write(self, plan: traces.SpanPlan) -> None:
        try:
            self._tracing.write(self._trace_id, self._sampled, plan)
        except Exception:  # a span lost is no reason to stop a Run
            log.exception("run %s: the span %s could not be written", self._name, plan.name)


def _ns(seconds: float) -> int:
    return int(seconds * NS)
