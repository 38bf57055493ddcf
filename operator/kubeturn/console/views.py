"""What the console's pages show of a Run object, read from its metadata, spec and status.

A Run object is what the API stores (or a local Run's files, shaped alike): a status is
read defensively, since an older operator may have written it and a Run not started yet
has none. A cost shows only where the usage has one: a model with no price shows its
tokens alone, never a cost of 0 (ADR 0114). Pure: no IO; the clock is an argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from kubeturn.api.status import FINISHED
from kubeturn.errors import DefinitionErrors
from kubeturn.machine import graph
from kubeturn.machine.load import load_run
from kubeturn.machine.model import Chart
from kubeturn.orchestrator import usages
from kubeturn_harness.wire import decimal_text


@dataclass(frozen=True)
class RunRow:
    name: str
    namespace: str
    phase: str
    state: str
    turns: int
    tokens: str
    cost: str
    age: str


@dataclass(frozen=True)
class TurnRow:
    name: str
    number: int | None
    agent: str
    state: str
    outcome: str
    cause: str
    tokens: str
    cost: str
    """Empty when the Turn's usage has no cost (a model with no price)."""
    duration: str
    live: bool


@dataclass(frozen=True)
class Used:
    """Tokens and cost as the console shows them: ``1200 in / 300 out``, ``$0.0123``."""

    tokens: str
    cost: str
    """Empty when the usage has no cost (a model with no price)."""


@dataclass(frozen=True)
class RunUsage:
    """A Run's ``status.usage``: in all, and per Agent slot."""

    total: Used
    agents: list[tuple[str, Used]]


@dataclass(frozen=True)
class Diagram:
    mermaid: str | None
    problem: str | None
    """Why no diagram could be drawn (the spec does not load)."""


def status_of(run: Mapping[str, Any]) -> Mapping[str, Any]:
    status = run.get("status")
    return status if isinstance(status, Mapping) else {}


def phase_of(run: Mapping[str, Any]) -> str:
    return str(status_of(run).get("phase") or "Pending")


def finished(run: Mapping[str, Any]) -> bool:
    return phase_of(run) in FINISHED


def run_row(run: Mapping[str, Any], now: float) -> RunRow:
    metadata = run.get("metadata") or {}
    status = status_of(run)
    usage = status.get("usage")
    total = usage.get("total") if isinstance(usage, Mapping) else None
    return RunRow(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace") or "default"),
        phase=phase_of(run),
        state=str(status.get("state") or ""),
        turns=int(status.get("turnCount") or 0) + len(live_turns(status)),
        tokens=tokens(total),
        cost=cost(total),
        age=age(metadata.get("creationTimestamp"), now),
    )


def live_turns(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Turns under way (their state active, or their sweep coming back)."""
    snapshot = status.get("snapshot")
    turns = snapshot.get("turns") if isinstance(snapshot, Mapping) else None
    return [t for t in turns if isinstance(t, Mapping)] if isinstance(turns, list) else []


def turn_rows(run: Mapping[str, Any], now: float) -> list[TurnRow]:
    """The Run's Turns, oldest first: the settled ones its status keeps, then the live."""
    status = status_of(run)
    settled = [t for t in status.get("turns") or [] if isinstance(t, Mapping)]
    rows = [
        TurnRow(
            name=str(record.get("name", "")),
            number=_number(record.get("name")),
            agent=str(record.get("agent", "")),
            state=str(record.get("state", "")),
            outcome=str(record.get("outcome", "")),
            cause=str(record.get("cause") or ""),
            tokens=tokens(record.get("tokens")),
            cost=cost(record.get("tokens")),
            duration=duration(record.get("startedAt"), record.get("settledAt")),
            live=False,
        )
        for record in settled
    ]
    for turn in live_turns(status):
        used = [s.get("usage") for s in turn.get("submissions") or [] if isinstance(s, Mapping)]
        summed = _summed(used)
        rows.append(
            TurnRow(
                name=str(turn.get("id", "")),
                number=_number(turn.get("id")),
                agent=str(turn.get("agent", "")),
                state=str(turn.get("state", "")),
                outcome=str(turn.get("phase", "live")),
                cause="",
                tokens=tokens(summed),
                cost=cost(summed),
                duration=duration(turn.get("startedAt"), now),
                live=True,
            )
        )
    return rows


def run_usage(run: Mapping[str, Any]) -> RunUsage | None:
    """The Run's tokens and cost so far (``status.usage``), in all and per Agent slot;
    None before any Turn used tokens."""
    usage = status_of(run).get("usage")
    if not isinstance(usage, Mapping) or not tokens(usage.get("total")):
        return None
    agents = usage.get("agents")
    return RunUsage(
        total=Used(tokens(usage.get("total")), cost(usage.get("total"))),
        agents=[
            (str(agent), Used(tokens(used), cost(used)))
            for agent, used in sorted((agents if isinstance(agents, Mapping) else {}).items())
            if tokens(used)
        ],
    )


def turn_of(run: Mapping[str, Any], name: str, now: float) -> TurnRow | None:
    return next((row for row in turn_rows(run, now) if row.name == name), None)


def diagram(run: Mapping[str, Any], charts: Charts) -> Diagram:
    """The Run's machine as mermaid text, marked as its status says: every active state
    of the Run's Machine (``status.state``) and of its fan-outs' children."""
    try:
        chart = charts.of(run)
    except DefinitionErrors as errors:
        return Diagram(None, "; ".join(str(e) for e in errors.errors[:3]))
    status = status_of(run)
    trail = [e for e in status.get("trail") or [] if isinstance(e, Mapping)]
    states = [status.get("state"), *(child.state for child in children(run))]
    state = ", ".join(str(s) for s in states if s)
    shown = graph.marks(chart, state or None, trail)
    return Diagram(graph.mermaid(chart, shown), None)


@dataclass(frozen=True)
class ChildRow:
    """A running fan-out's child, as the Run's status lists it (``status.children``)."""

    fan_out: str
    key: str
    status: str
    state: str
    message: str


def children(run: Mapping[str, Any]) -> list[ChildRow]:
    """The children of the Run's running fan-outs, in the status's order."""
    return [
        ChildRow(
            fan_out=str(item.get("fanOut") or ""),
            key=str(item.get("key") or ""),
            status=str(item.get("status") or ""),
            state=str(item.get("state") or ""),
            message=str(item.get("message") or ""),
        )
        for item in status_of(run).get("children") or []
        if isinstance(item, Mapping)
    ]


class Charts:
    """Compiled machines by their spec, the last ``kept``: a page polled every two seconds
    compiles its Run's machine once, not each time."""

    def __init__(self, kept: int = 64) -> None:
        self._kept = kept
        self._charts: dict[str, Chart] = {}

    def of(self, run: Mapping[str, Any]) -> Chart:
        """The Run's compiled machine; ``DefinitionErrors`` when its spec does not load."""
        metadata = run.get("metadata") or {}
        document = {
            "apiVersion": run.get("apiVersion", "kubeturn.dev/v1alpha1"),
            "kind": "Run",
            "metadata": {
                "name": metadata.get("name", "run"),
                "namespace": metadata.get("namespace"),
            },
            "spec": run.get("spec") or {},
        }
        key = json.dumps(document["spec"], default=str)
        chart = self._charts.get(key)
        if chart is None:
            chart = load_run(document).chart
            if len(self._charts) >= self._kept:
                self._charts.pop(next(iter(self._charts)))
            self._charts[key] = chart
        return chart


def accepted(run: Mapping[str, Any]) -> list[dict[str, str]]:
    """The events the Run accepts now: event, state and description of each."""
    return [
        {key: str(item.get(key) or "") for key in ("event", "state", "description")}
        for item in status_of(run).get("acceptedEvents") or []
        if isinstance(item, Mapping)
    ]


def processed(run: Mapping[str, Any]) -> list[dict[str, str]]:
    """The signals the Run received: id, result (handled or ignored) and why."""
    return [
        {
            "id": str(item.get("id") or ""),
            "result": str(item.get("result") or "handled"),
            "message": str(item.get("message") or ""),
        }
        for item in status_of(run).get("processedSignals") or []
        if isinstance(item, Mapping)
    ]


def output_text(run: Mapping[str, Any]) -> str | None:
    output = status_of(run).get("output")
    return None if output is None else json.dumps(output, indent=2, sort_keys=True)


def tokens(usage: Any) -> str:
    if not isinstance(usage, Mapping):
        return ""
    prompt, completion = (
        int(usage.get("promptTokens") or 0),
        int(usage.get("completionTokens") or 0),
    )
    return f"{prompt} in / {completion} out" if prompt or completion else ""


def cost(usage: Any) -> str:
    """The usage's cost as shown (``usages.shown_cost``); empty when it has none."""
    priced = _priced(usage)
    return "" if priced is None else usages.shown_cost(decimal_text(priced))


def _priced(usage: Any) -> Decimal | None:
    """The usage's cost (decimal USD text), if it has one that reads as a number."""
    value = usage.get("cost") if isinstance(usage, Mapping) else None
    if not isinstance(value, str):
        return None
    try:
        priced = Decimal(value)
    except InvalidOperation:
        return None
    return priced if priced.is_finite() and priced >= 0 else None


def _summed(used: Sequence[Any]) -> dict[str, Any] | None:
    """The Submissions' usage summed; a cost only when each has one (``Usage.plus``)."""
    found = [u for u in used if isinstance(u, Mapping)]
    if not found:
        return None
    summed: dict[str, Any] = {
        key: sum(int(u.get(key) or 0) for u in found)
        for key in ("promptTokens", "completionTokens")
    }
    costs = [_priced(u) for u in found]
    if all(c is not None for c in costs):
        summed["cost"] = decimal_text(sum((c for c in costs if c is not None), Decimal(0)))
    return summed


def duration(start: Any, end: Any) -> str:
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return ""
    return span(max(0.0, float(end) - float(start)))


def span(seconds: float) -> str:
    """A duration as kubectl shows an age: 42s, 3m5s, 2h4m, 3d5h."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def age(created: Any, now: float) -> str:
    if not isinstance(created, str):
        return ""
    try:
        at = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return span(max(0.0, now - at.timestamp()))


def _number(name: Any) -> int | None:
    """A Turn's number in its Run, from its name ``t<n>``."""
    text = str(name or "")
    return int(text[1:]) if text[:1] == "t" and text[1:].isdigit() else None
