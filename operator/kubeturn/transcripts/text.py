"""A transcript as a person reads it in a terminal: one Turn after another, each under a
header line, its prompt (the Briefing folded to a count of its lines), the model's words,
each tool call on one line (``→ name {arguments}``) with its result indented under it,
each pick and its receipt, nudges and notices, and how the Turn ended.

``-o json`` is for everything folded here: it prints each ``Entry`` whole. Pure: no IO.
"""

from __future__ import annotations

import json
from typing import Any

from kubeturn.transcripts.model import Entry, EntryKind

CALL_CHARS = 200
"""The widest a tool call's line gets: the call stays one line a person can scan (a
``write`` carries a whole file as an argument); ``-o json`` shows its arguments."""
INDENT = "  "


def lines(entry: Entry) -> list[str]:
    """The lines of one entry."""
    kind = entry.kind
    if kind is EntryKind.TURN:
        return [f"── {entry.turn} · {entry.agent} · {entry.state} · {entry.at}"]
    if kind is EntryKind.PROMPT or kind is EntryKind.NUDGE:
        label = "prompt" if kind is EntryKind.PROMPT else "nudge"
        shown = _block(f"{label}: ", entry.text, INDENT)
        briefing = entry.data.get("briefing")
        if briefing:
            count = len(str(briefing).splitlines())
            shown.append(f"{INDENT}briefing: {count} lines (use -o json)")
        return shown
    if kind is EntryKind.NOTICE:
        return _block(f"notice ({entry.name}): ", entry.text, INDENT)
    if kind is EntryKind.TEXT:
        status = entry.data.get("status")
        text = f"{entry.text} [{status}]" if status else entry.text
        return _block("", text, INDENT)
    if kind is EntryKind.TOOL_CALL:
        return [_cut(f"{INDENT}→ {entry.name} {_compact(entry.data.get('arguments'))}")]
    if kind is EntryKind.TOOL_RESULT:
        return _block("", entry.text or "(no output)", INDENT * 2)
    if kind is EntryKind.PICK:
        # Its payload is on the call's line just above.
        return [f"{INDENT}⚑ picked {entry.name}"]
    if kind is EntryKind.RECEIPT:
        how = str(entry.data.get("result", "answered"))
        return _block(f"← {how}: ", entry.text, INDENT * 2)
    return [_settlement(entry)]


def _settlement(entry: Entry) -> str:
    data = entry.data
    line = f"{INDENT}■ {data.get('outcome', entry.text)}"
    if data.get("cause"):
        line += f" (cause: {data['cause']})"
    usage = data.get("usage")
    if usage:
        line += f" · tokens {usage.get('promptTokens', 0)}/{usage.get('completionTokens', 0)}"
        if usage.get("cost") is not None:
            line += f" · ${usage['cost']}"
    if data.get("message"):
        line += f" · {_one_line(str(data['message']))}"
    return line


def _block(label: str, text: str, indent: str) -> list[str]:
    """``text`` under ``label``: its first line beside the label, the rest indented."""
    first, *rest = text.rstrip("\n").splitlines() or [""]
    return [f"{indent}{label}{first}", *(f"{indent}  {line}" if line else "" for line in rest)]


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return _one_line(value)
    return json.dumps(value, ensure_ascii=False)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(line: str) -> str:
    return line if len(line) <= CALL_CHARS else line[: CALL_CHARS - 1] + "…"
