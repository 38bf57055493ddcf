"""OpenTelemetry traces of the Harness (ADR 0107): a span per model request (``chat``) and
per tool call (``execute_tool``), in the GenAI semantic conventions' words, each a child of
the Turn span that the operator names in the Submission's ``traceparent``.

Off unless an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``): then no SDK module is even imported, no provider is made
and no exporter thread starts; the tool loop's tracer is the API's no-op one. On, the SDK
reads the rest of its standard ``OTEL_*`` variables from the process's environment itself
(service name, resource attributes, headers, sampler, batch delays); the endpoint is
read from the mapping the caller passes. A Submission admitted without a
``traceparent`` (its operator traces nothing) makes no span.

The operator's shell (``kubeturn.tracing``) builds its provider here too, so both read the
same variables the same way. The toolbox never sees these variables: its environment is
an allowlist (``tools.environment``), so an exporter's headers stay the Harness's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import Attributes

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import IdGenerator

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""Either one turns tracing on (the traces one wins, as the OTLP exporter reads them)."""
SCOPE = "kubeturn"
"""The instrumentation scope every kubeturn span is written under."""


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` asks for traces: an OTLP endpoint, and the SDK not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINTS)


def provider(
    environ: Mapping[str, str], *, service: str, ids: IdGenerator | None = None
) -> TracerProvider | None:
    """A provider exporting over OTLP/HTTP in batches, or None when tracing is off.

    ``service`` names the service unless ``OTEL_SERVICE_NAME`` or the resource attributes
    do; ``ids`` draws the span ids (the operator derives its own, ADR 0107)."""
    if not enabled(environ):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    made = TracerProvider(resource=resource, id_generator=ids)
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(environ))))
    return made


def traces_url(environ: Mapping[str, str]) -> str:
    """Where spans are sent, as the OTLP exporter reads the two variables: the traces
    one as it is, the general one with ``/v1/traces`` added."""
    traces = environ.get(ENDPOINTS[0], "").strip()
    if traces:
        return traces
    return environ.get(ENDPOINTS[1], "").strip().rstrip("/") + "/v1/traces"


class Tracing:
    """The process's tracer, and its provider to flush when the process stops."""

    def __init__(self, made: TracerProvider | None) -> None:
        self._provider = made
        self.tracer: trace.Tracer = made.get_tracer(SCOPE) if made else trace.NoOpTracer()

    @classmethod
    def of(cls, environ: Mapping[str, str], *, service: str) -> Tracing:
        return cls(provider(environ, service=service))

    @property
    def on(self) -> bool:
        return self._provider is not None

    def shutdown(self) -> None:
        """Export what is left and stop the exporter (bounded by the SDK's timeouts)."""
        if self._provider is not None:
            self._provider.shutdown()


def parent(traceparent: str | None) -> Context | None:
    """The context a Submission's spans are children of; None: make no span."""
    if traceparent is None:
        return None
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


@contextlib.contextmanager
def span(
    tracer: trace.Tracer,
    name: str,
    under: Context | None,
    *,
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    attributes: Attributes = None,
    cuts: tuple[type[BaseException], ...] = (),
) -> Iterator[trace.Span]:
    """A span of ``name`` under ``under``, ended when the block ends; with no parent, a
    span that records nothing. An exception of ``cuts`` (a sweep's cancellation) marks
    it ``kubeturn.cut``; any other marks it an error of that type."""
    if under is None:
        yield trace.INVALID_SPAN
        return
    current = tracer.start_span(name, context=under, kind=kind, attributes=attributes)
    try:
        yield current
    except cuts:
        current.set_attribute("kubeturn.cut", True)
        raise
    except Exception as error:
        current.set_attribute("error.type", type(error).__qualname__)
        current.set_status(trace.StatusCode.ERROR, str(error))
        raise
    finally:
        current.end()
