"""A fan-out's children, decided without moving anything: the items made children with
their keys (or why they cannot be), and the done event once every child ended. The
microsteps start and end the children (``kubeturn.machine.microsteps``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from kubeturn.errors import ExpressionError
from kubeturn.machine.configuration import DONE_INVOKE, Cause, Child, Event, InvokeEntry
from kubeturn.machine.model import FanOut, StatePath

MAX_ITEMS = 100
"""Children of one fan-out: each holds its item and context in the Run's status, which
the API server keeps under 1.5 MiB (ADR 0112)."""
MAX_ITEMS_BYTES = 256 * 1024
"""The items' JSON, all together: each child keeps its item in the Run's status, beside
the context the list came from, so a list this large already costs twice that there."""


KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$")
"""A fan-out child's key: one segment of its states' paths and of its Instance IDs."""


def make_children(
    fan: FanOut, entry: InvokeEntry, activation: Mapping[str, Any]
) -> list[Child] | str:
    """The children of ``fan``'s items (its list evaluated in ``activation``, its state's),
    or why there are none."""
    where = fan.items.source
    try:
        items = fan.items.evaluate(activation)
    except ExpressionError as error:
        return f"forEach.items ({where}) failed: {error.cause}"
    if not isinstance(items, list):
        return f"forEach.items ({where}) is a {type(items).__name__}, not a list"
    if len(items) > MAX_ITEMS:
        return f"forEach.items ({where}) has {len(items)} items; a fan-out takes {MAX_ITEMS}"
    size = len(json.dumps(items, separators=(",", ":")))
    if size > MAX_ITEMS_BYTES:
        return (
            f"forEach.items ({where}) is {size:,} bytes of JSON; a fan-out takes "
            f"{MAX_ITEMS_BYTES:,}: give each child a name or an index, and let it read "
            "what it needs from the Run's input"
        )
    children: list[Child] = []
    keys: dict[str, int] = {}
    for index, item in enumerate(items):
        try:
            key = _key(fan, item, index)
        except ExpressionError as error:
            return f"forEach.key ({error.source}) failed for item {index}: {error.cause}"
        if not isinstance(key, str):
            return (
                f"item {index}'s key {key!r} is a {type(key).__name__}, not a string; "
                "say one with forEach.key"
            )
        if not KEY.match(key):
            return (
                f"item {index}'s key {key!r} is not a key: letters, digits, '_' and '-' "
                "(at most 63); say one with forEach.key"
            )
        if key in keys:
            return (
                f"items {keys[key]} and {index} have the same key {key!r}; say one that "
                "tells them apart with forEach.key"
            )
        keys[key] = index
        children.append(
            Child(
                scope=StatePath(f"{entry.state}[{key}]"),
                invocation=entry.id,
                key=key,
                index=index,
                item=item,
                context=dict(fan.context),
            )
        )
    return children


def _key(fan: FanOut, item: Any, index: int) -> Any:
    """A child's key: ``forEach.key``'s value (a number as its digits), else its item when
    that is a key, else its index; ``ExpressionError`` when ``forEach.key`` fails."""
    if fan.key is None:
        text = str(item) if _whole(item) else item if isinstance(item, str) else ""
        return text if KEY.match(text) else str(index)
    value = fan.key.evaluate({"input": item, "context": {}, "event": {}, "workspace": {}})
    return str(value) if _whole(value) else value


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def done_event(children: list[Child], cause: Cause, invocation: str) -> Event:
    results = [
        {"key": c.key, "status": c.status.value, "output": c.output, "message": c.message}
        for c in sorted(children, key=lambda c: c.index)
    ]
    fields = {"output": [r["output"] for r in results], "results": results}
    return Event(DONE_INVOKE, fields, cause, origin=invocation)
