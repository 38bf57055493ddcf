"""Where a Run's spans sit in its trace, and what they say (ADR 0107). Pure: no
OpenTelemetry, no IO, no clock; the shells (``kubeturn.tracing``) hand these plans to the SDK.

A Run's trace id and its spans' ids are derived, never drawn: the trace id from the Run's
uid (the uid itself when it is a UUID, as on a cluster, so ``metadata.uid`` finds the
trace), the Run span's id from the uid, and each Turn span's id from the uid and the
Turn's id. So an operator that restarts mid-Run still knows every id, the Harness's spans
(exported while a Turn runs) name a parent whose id was fixed when the Turn was admitted,
and the Turn span, written once the Turn settles, with its real start time, is that parent.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.turns import Exit, TurnRecord
from kubeturn_harness.wire import Outcome

AttributeValue = str | bool | int | float | Sequence[str]

RUN_SPAN = "run"
TURN_SPAN = "invoke_agent {agent}"
"""A Turn is an Agent's invocation in the GenAI conventions' words; its model requests and
tool calls are the Harness's ``chat`` and ``execute_tool`` spans below it."""
SWEEP_EVENT = "kubeturn.sweep"
"""The event on a Turn's span when its state exited and the sweep went out."""


def trace_id(run_uid: str) -> int:
    """The Run's trace id: its uid when that is a UUID, else 128 bits of its SHA-256."""
    try:
        value = uuid.UUID(run_uid).int
    except ValueError:
        value = 0
    return value or _bits(run_uid, 16)


def run_span_id(run_uid: str) -> int:
    return _bits(f"{run_uid}/run", 8)


def turn_span_id(run_uid: str, turn: str) -> int:
    return _bits(f"{run_uid}/turn/{turn}", 8)


def traceparent(trace: int, span: int, *, sampled: bool) -> str:
    """The W3C ``traceparent`` header naming ``span`` of ``trace`` as the parent."""
    return f"00-{trace:032x}-{span:016x}-{'01' if sampled else '00'}"


def _bits(text: str, size: int) -> int:
    """``size`` bytes of the text's SHA-256, never zero (W3C forbids an all-zero id)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:size], "big") or 1


@dataclass(frozen=True)
class SpanEvent:
    name: str
    at: float
    """Seconds since the epoch."""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanPlan:
    """One span to write, whole: the shell starts it at ``start`` and ends it at ``end``."""

    name: str
    span_id: int
    parent_id: int | None
    start: float
    end: float
    attributes: Mapping[str, AttributeValue]
    events: tuple[SpanEvent, ...] = ()
    error: str | None = None
    """Set: the span's status is an error saying this."""


def turn_span(run_uid: str, run: str, record: TurnRecord, exit_: Exit | None) -> SpanPlan:
    """The span of a settled Turn, below its Run's span; the sweep as an event on it."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": record.agent,
        "kubeturn.run": run,
        "kubeturn.turn": record.name,
        "kubeturn.agent": record.agent,
        "kubeturn.state": record.state,
        "kubeturn.instance_id": record.instanceId,
        "kubeturn.outcome": record.outcome.value,
        "kubeturn.submissions": len(record.submissions),
    }
    if record.cause is not None:
        attributes["kubeturn.cause"] = record.cause
    if record.tokens is not None:
        attributes["kubeturn.tokens.input"] = record.tokens.promptTokens
        attributes["kubeturn.tokens.output"] = record.tokens.completionTokens
    events: tuple[SpanEvent, ...] = ()
    if exit_ is not None and (record.submissions or exit_.admitting):
        # A Turn refused before its admission exited with nothing to sweep.
        swept: dict[str, AttributeValue] = {}
        if exit_.cause is not None:
            swept["kubeturn.cause"] = exit_.cause
        if exit_.submission is not None:
            swept["kubeturn.submission"] = exit_.submission
        events = (SpanEvent(SWEEP_EVENT, exit_.at, swept),)
    failed = record.outcome is Outcome.FAILED
    return SpanPlan(
        name=TURN_SPAN.format(agent=record.agent),
        span_id=turn_span_id(run_uid, record.name),
        parent_id=run_span_id(run_uid),
        start=record.startedAt,
        end=max(record.settledAt, record.startedAt),
        attributes=attributes,
        events=events,
        error=(record.message or "the Turn failed") if failed else None,
    )


def run_span(
    run_uid: str,
    *,
    namespace: str,
    run: str,
    phase: str,
    started: float,
    ended: float,
    message: str | None = None,
) -> SpanPlan:
    """The Run's span, the root of its trace, written when the Run finishes."""
    attributes: dict[str, AttributeValue] = {
        "kubeturn.namespace": namespace,
        "kubeturn.run": run,
        "kubeturn.run.uid": run_uid,
        "kubeturn.phase": phase,
    }
    return SpanPlan(
        name=RUN_SPAN,
        span_id=run_span_id(run_uid),
        parent_id=None,
        start=min(started, ended),
        end=ended,
        attributes=attributes,
        error=(message or f"the Run ended {phase}") if phase == RunPhase.FAILED else None,
    )
