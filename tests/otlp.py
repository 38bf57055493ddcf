"""A real OTLP/HTTP traces receiver on 127.0.0.1, for the tests of kubeturn's traces.

``OtlpReceiver`` serves ``POST /v1/traces`` with aiohttp, in a thread of its own (a test
may block on subprocesses, or run an operator in a thread), decodes each
``ExportTraceServiceRequest`` protobuf with ``opentelemetry-proto`` and keeps every span it
carried, with its resource's attributes. Every wait is bounded and says what it waited for.
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

HOST = "127.0.0.1"
WAIT_S = 20.0


@dataclass(frozen=True)
class Span:
    service: str
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: tuple[tuple[str, dict[str, Any]], ...]
    error: str | None
    """The status message of a span whose status is an error."""


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    pairs: list[KeyValue] = list(items)
    return {pair.key: _value(pair.value) for pair in pairs}


ERROR = 2  # Status.STATUS_CODE_ERROR


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    @property
    def endpoint(self) -> str:
        """``OTEL_EXPORTER_OTLP_ENDPOINT``: the exporter adds ``/v1/traces``."""
        return f"http://{HOST}:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        assert self._ready.wait(WAIT_S), "the OTLP receiver did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(WAIT_S)

    def _serve(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/traces", self._export)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    async def _export(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        decoded = ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource in decoded.resource_spans:
            described = _attributes(resource.resource.attributes)
            service = str(described.get("service.name"))
            for scope in resource.scope_spans:
                for span in scope.spans:
                    spans.append(
                        Span(
                            service=service,
                            resource=described,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            name=span.name,
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes=_attributes(span.attributes),
                            events=tuple(
                                (event.name, _attributes(event.attributes)) for event in span.events
                            ),
                            error=span.status.message if span.status.code == ERROR else None,
                        )
                    )
        with self._lock:
            self.spans.extend(spans)
            self.requests += 1
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def received(self) -> list[Span]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[Span]], bool], what: str) -> list[Span]:
        deadline = time.monotonic() + WAIT_S
        while True:
            spans = self.received()
            if check(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no {what} within {WAIT_S:g} s; spans: {[s.name for s in spans]}"
                )
            time.sleep(0.05)
