"""What a person reads: the live table of a running Run, its summary, its Turn history.

The functions here are pure: rows from the core's state, text from rows. ``LiveView`` is
the one writer: on a terminal it redraws the table in place when something changes (and
each second, for the ages); into a pipe or a file it prints one line per change instead,
as ``kubectl get -w`` does. The columns follow ``kubectl get agentturns``.
"""

from __future__ import annotations

import datetime
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from kubeturn.api import agentturn
from kubeturn.api.status import FINISHED, RunPhase, SignalResult
from kubeturn.orchestrator import usages
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.turns import Turn, TurnPhase

LIVE_COLUMNS = ("TURN", "AGENT", "STATE", "PHASE", "OUTCOME", "AGE", "TOOLS")
HISTORY_COLUMNS = (
    "TURN",
    "AGENT",
    "STATE",
    "OUTCOME",
    "CAUSE",
    "TOKENS",
    "COST",
    "DURATION",
    "MESSAGE",
)
WIDE_COLUMNS = (*HISTORY_COLUMNS, "STARTED", "SUBMISSIONS", "INSTANCE")
"""``-o wide``: when each Turn started (RFC 3339), its Submissions, its conversation."""
TTY_ROWS = 20
"""Rows the live table keeps on a terminal: the most recent Turns; the summary has all."""
MESSAGE_WIDTH = 100
"""A message longer than this is cut in a table (``-o json`` has it whole)."""


@dataclass(frozen=True)
class Row:
    turn: str
    agent: str
    state: str
    phase: agentturn.TurnPhase
    outcome: str
    started: float
    ended: float | None
    tools: int

    def cells(self, now: float) -> tuple[str, ...]:
        age = (self.ended if self.ended is not None else now) - self.started
        return (
            self.turn,
            self.agent,
            self.state,
            self.phase,
            self.outcome,
            duration(age),
            str(self.tools),
        )

    @property
    def key(self) -> tuple[str, ...]:
        """What a change is: anything but the age."""
        return (self.turn, self.agent, self.state, self.phase, self.outcome, str(self.tools))


def rows(core: RunCore, tool_calls: Mapping[str, int]) -> list[Row]:
    """Every Turn of the Run, settled ones first, in the order they started."""

    def tools(submissions: Sequence[Any]) -> int:
        return sum(tool_calls.get(s.id, 0) for s in submissions)

    found = [
        Row(
            r.name,
            r.agent,
            r.state,
            agentturn.TurnPhase.SETTLED,
            r.outcome.value,
            r.startedAt,
            r.settledAt,
            tools(r.submissions),
        )
        for r in core.history
    ]
    for turn in core.turns.values():
        found.append(
            Row(
                turn.id,
                turn.agent,
                turn.state,
                phase_of(turn),
                "-",
                turn.startedAt,
                None,
                tools(turn.submissions),
            )
        )
    return sorted(found, key=lambda row: (row.started, _number(row.turn)))


def phase_of(turn: Turn) -> agentturn.TurnPhase:
    """The AgentTurn phase a Turn would show on a cluster."""
    if turn.phase is TurnPhase.SWEEPING:
        return agentturn.TurnPhase.SETTLING
    if turn.phase is TurnPhase.SETTLED:
        return agentturn.TurnPhase.SETTLED
    if turn.running is not None:
        return agentturn.TurnPhase.RUNNING
    if turn.phase is TurnPhase.LIVE and not turn.admitting:
        return agentturn.TurnPhase.IDLE
    return agentturn.TurnPhase.PENDING


def align(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart, as kubectl prints them."""
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *lines]
    ]


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{second:02d}s"
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m"


def tokens(usage: Mapping[str, Any] | None) -> str:
    if not usage:
        return "-"
    return f"{usage.get('promptTokens', 0)}/{usage.get('completionTokens', 0)}"


def cost(usage: Mapping[str, Any] | None) -> str:
    """A usage's cost in USD as a table shows it (``$0.0123``); ``-`` without one: a
    model with no price shows tokens only, never a cost of 0."""
    if not usage or usage.get("cost") is None:
        return "-"
    return usages.shown_cost(str(usage["cost"]))


def usage_lines(usage: Mapping[str, Any] | None) -> list[str]:
    """``kubeturn status``'s lines of a Run's ``status.usage``: the whole, then each Agent
    slot's, then how much of each limit is spent; none before any Turn used tokens."""
    if not usage:
        return []
    lines = [f"usage: {_used(usage.get('total') or {})}"]
    for agent, used in sorted((usage.get("agents") or {}).items()):
        lines.append(f"  {agent}: {_used(used)}")
    limits = [use for use in usage.get("limits") or [] if isinstance(use, Mapping)]
    if limits:
        lines.append("limits:")
    for use in limits:
        unit = " USD" if str(use.get("limit")).endswith(".cost") else " tokens"
        spent = "no price" if use.get("used") == "unpriced" else use.get("used")
        reached = ", reached" if use.get("reached") else ""
        lines.append(f"  {use.get('limit')}: {spent} of {use.get('of')}{unit}{reached}")
    return lines


def _used(usage: Mapping[str, Any]) -> str:
    cached = usage.get("cacheReadTokens", 0)
    cache = f", {cached} read from the cache" if cached else ""
    priced = f", {cost(usage)}" if usage.get("cost") is not None else ""
    return f"{tokens(usage)} tokens in/out{cache}{priced}"


def turn_message(record: Mapping[str, Any]) -> str:
    """Why a Turn ended as it did: its own message, or its failed Submission's."""
    if record.get("message"):
        return str(record["message"])
    for submission in reversed(record.get("submissions") or []):
        if submission.get("outcome") not in (None, "ended", "completed") and submission.get(
            "message"
        ):
            return f"{submission['outcome']}: {submission['message']}"
    return ""


def history_table(records: Sequence[Mapping[str, Any]], *, wide: bool = False) -> list[str]:
    """Settled Turns (``Run.status.turns`` records) as a table, in the order they started;
    a record has the same fields on a cluster and in a local Run's ``snapshot.json``.
    ``wide`` adds when each started, its Submissions and its conversation."""
    lines = []
    ordered = sorted(
        records,
        key=lambda r: (float(r.get("startedAt", 0)), _number(str(r.get("name", "")))),
    )
    for record in ordered:
        message = " ".join(turn_message(record).split())
        if len(message) > MESSAGE_WIDTH:
            message = message[: MESSAGE_WIDTH - 1] + "…"
        cells: tuple[str, ...] = (
            str(record.get("name", "")),
            str(record.get("agent", "")),
            str(record.get("state", "")),
            str(record.get("outcome", "")),
            str(record.get("cause") or "-"),
            tokens(record.get("tokens")),
            cost(record.get("tokens")),
            duration(float(record.get("settledAt", 0)) - float(record.get("startedAt", 0))),
            message or "-",
        )
        if wide:
            cells += (
                timestamp(float(record.get("startedAt", 0))),
                str(len(record.get("submissions") or [])),
                str(record.get("instanceId") or "-"),
            )
        lines.append(cells)
    return align(WIDE_COLUMNS if wide else HISTORY_COLUMNS, lines)


def dropped_line(dropped: int) -> str:
    """What the history table leaves out: its oldest Turns, dropped from the status."""
    turns = "Turn is" if dropped == 1 else "Turns are"
    return f"({dropped} earlier settled {turns} not listed: a Run keeps its most recent ones)"


def status_lines(name: str, status: Mapping[str, Any], *, wide: bool = False) -> list[str]:
    """``kubeturn status``: what a Run is doing and what it waits for, as ``key: value``
    lines; ``wide`` adds each accepted event's schema and every processed signal.

    A local Run that no ``kubeturn run`` drives (``driven`` false) is not running,
    whatever it was saved as: it says so, and how to continue it."""
    phase = status.get("phase") or RunPhase.PENDING
    shown_phase = phase
    if status.get("driven") is False and phase not in FINISHED:
        shown_phase = (
            f"Stopped (saved {phase}; no `kubeturn run` drives it: "
            f"`kubeturn run --resume {name}` continues it)"
        )
    lines = [
        f"run: {name}",
        f"phase: {shown_phase}",
        f"state: {status.get('state') or '-'}",
        f"turns: {status.get('turnCount', 0)}",
    ]
    lines.extend(usage_lines(status.get("usage")))
    if status.get("liveTurns"):
        lines.append(f"live turns: {status['liveTurns']}")
    if status.get("childProgress"):
        lines.append(f"children: {status['childProgress']}")
    accepted = list(status.get("acceptedEvents") or [])
    if "acceptedEvents" in status and phase not in FINISHED:
        names = ", ".join(str(a.get("event")) for a in accepted) or "no outside event"
        lines.append(f"waiting for: {names}")
        for item in accepted:
            described = f": {item['description']}" if item.get("description") else ""
            lines.append(f"  {item.get('event')} ({item.get('state')}){described}")
            if wide and item.get("schema") is not None:
                lines.append(f"    schema: {_compact(item['schema'])}")
    for signal in status.get("processedSignals") or []:
        if isinstance(signal, Mapping) and signal.get("result") == SignalResult.IGNORED:
            lines.append(f"ignored signal {signal.get('id')}: {signal.get('message') or '-'}")
        elif wide:
            shown_id = signal.get("id") if isinstance(signal, Mapping) else signal
            lines.append(f"signal {shown_id}: handled")
    return lines + _said(status)


TIME_KEYS = ("At", "Time", "Timestamp")
"""A key ending so holds a time: ``startedAt``, ``lastTransitionTime``."""


def timestamp(seconds: float) -> str:
    """Unix seconds as RFC 3339 in UTC, to the millisecond: ``2026-12-01T18:44:33.123Z``."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def rfc3339(value: Any) -> Any:
    """``value`` (a status, records) with every time kept as Unix seconds written as RFC
    3339 in UTC, for ``-o json|yaml``: what kubectl users read and parse."""
    if isinstance(value, Mapping):
        return {
            key: timestamp(float(item))
            if isinstance(key, str)
            and key.endswith(TIME_KEYS)
            and isinstance(item, int | float)
            and not isinstance(item, bool)
            else rfc3339(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [rfc3339(item) for item in value]
    return value


def summary(name: str, status: Mapping[str, Any], elapsed: float | None) -> list[str]:
    """The end of ``kubeturn run``: each Turn the status keeps (outcome, cause, tokens,
    duration) and how many earlier ones it dropped, then the Run's phase, message and
    output, from a status shaped like ``Run.status``."""
    records = list(status.get("turns") or [])
    lines = ["", *history_table(records)] if records else ["", "no Turns"]
    if status.get("droppedTurns"):
        lines.append(dropped_line(int(status["droppedTurns"])))
    lines.append("")
    state = status.get("state") or "-"
    where = f" in state {state}" if state != "-" else ""
    after = f" after {duration(elapsed)}" if elapsed is not None else ""
    lines.append(f"run {name}: {status.get('phase') or RunPhase.PENDING}{where}{after}")
    return lines + _said(status)


def _said(status: Mapping[str, Any]) -> list[str]:
    """The lines that end a Run's view: its message and its output, where it has them."""
    lines = []
    if status.get("message"):
        lines.append(f"message: {status['message']}")
    if status.get("output") is not None:
        lines.append(f"output: {_compact(status['output'])}")
    return lines


def _state(core: RunCore) -> str:
    """The active state, or the one the Run ended in; ``-`` before the start."""
    return core.state or "-"


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _number(turn: str) -> int:
    digits = turn.lstrip("t")
    return int(digits) if digits.isdigit() else 0


class LiveView:
    """Writes the live table to ``stream``: redrawn in place on a terminal, one line per
    change otherwise."""

    def __init__(self, stream: TextIO, *, tty: bool) -> None:
        self._stream = stream
        self._tty = tty
        self._drawn = 0
        """Lines of the table on the terminal now (to redraw over them)."""
        self._shown: dict[str, tuple[str, ...]] = {}
        self._run_shown: tuple[str, str] | None = None
        self._header_shown = False

    def say(self, line: str) -> None:
        """A line above the table (a notice), kept when the table is redrawn."""
        self._clear()
        self._stream.write(line + "\n")
        self._stream.flush()

    def update(self, core: RunCore, tool_calls: Mapping[str, int], now: float) -> None:
        current = rows(core, tool_calls)
        run = (_state(core), core.phase.value)
        if self._tty:
            self._redraw(core, current, run, now)
            return
        if run != self._run_shown:
            self._run_shown = run
            self._stream.write(f"run {core.run.name}: state {run[0]}, phase {run[1]}\n")
        for row in current:
            if self._shown.get(row.turn) == row.key:
                continue
            self._shown[row.turn] = row.key
            if not self._header_shown:
                self._header_shown = True
                self._stream.write(_fixed(LIVE_COLUMNS) + "\n")
            self._stream.write(_fixed(row.cells(now)) + "\n")
        self._stream.flush()

    def finish(self) -> None:
        """Leave what is drawn in place."""
        self._drawn = 0

    def _redraw(self, core: RunCore, current: list[Row], run: tuple[str, str], now: float) -> None:
        width = shutil.get_terminal_size((120, 24)).columns
        started = min((row.started for row in current), default=now)
        head = f"run {core.run.name} · state {run[0]} · {run[1]} · {duration(now - started)}"
        table = align(LIVE_COLUMNS, [row.cells(now) for row in current[-TTY_ROWS:]])
        lines = [head, *table] if current else [head]
        self._clear()
        self._stream.write("".join(line[:width] + "\n" for line in lines))
        self._stream.flush()
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self._tty and self._drawn:
            # Up to the table's first line, then clear to the end of the screen.
            self._stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0


def _fixed(cells: Sequence[str]) -> str:
    """A row of the line-per-change output: fixed widths, since later rows are not known."""
    widths = (5, 12, 24, 9, 9, 7, 5)
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
