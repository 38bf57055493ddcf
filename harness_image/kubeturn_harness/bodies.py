"""The Harness's one reader of JSON it is sent: request bodies, a model's tool-call
arguments, the Orchestrator's error answers. Strict JSON, bounded nesting, finite
numbers; whatever the text, it answers a value or raises ``NotJson`` saying why and
where, never another exception.

Python's ``json`` is lenient where a wire must not be: it takes ``NaN``, ``Infinity`` and
``-Infinity``, which are not JSON (RFC 8259 §6), and it recurses once per level, so a
text nested 200,000 deep raises ``RecursionError``. pydantic-core's parser (pydantic's
own) refuses those words, and stops at a fixed depth of its own without Python
recursion. One iterative walk of the value then bounds its depth at ``MAX_DEPTH`` and
refuses what still is not a finite number (``1e999`` parses to infinity), naming where.
The operator has its own (``kubeturn.orchestrator.bodies``): the Harness imports nothing
of it. Pure: no IO.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import from_json

from kubeturn_harness.errors import NotJson

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects read (``[]`` is 1). The Harness's own bodies
are a few levels deep; a pick's arguments go on to the Orchestrator, which refuses a
payload deeper than its own 64 (``kubeturn.orchestrator.bodies.MAX_DEPTH``), so the model
hears of it here, before anything is sent."""
TOO_DEEP = "recursion limit exceeded"
"""How pydantic-core's parser says a text nests deeper than its own limit (200 levels)."""
NOT_FINITE = "is not a finite number: JSON has no NaN or Infinity, and a number must fit a double"


def parse(raw: str | bytes, *, what: str = "the body") -> Any:
    """The JSON value of ``raw``; ``NotJson`` saying what makes it unreadable, naming the
    field at fault or ``what`` (a singular noun: "the body", "the arguments object")."""
    try:
        value = from_json(raw, allow_inf_nan=False)
    except ValueError as error:
        if TOO_DEEP in str(error):
            raise _too_deep(what) from error
        try:
            # If NaN or Infinity is its one fault, the walk names the field that holds it.
            value = from_json(raw)
        except ValueError:
            raise NotJson(f"{what} is not JSON: {error}") from error
    _walk(value, what)
    return value


def _walk(value: Any, what: str) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and numbers that are not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NotJson(f"{what} {NOT_FINITE}")
    todo: list[tuple[Any, int, tuple[str | int, ...]]] = []
    if isinstance(value, dict | list):
        todo.append((value, 1, ()))
    while todo:
        node, depth, path = todo.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(what)
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in children:
            if isinstance(child, dict | list):
                todo.append((child, depth + 1, (*path, key)))
            elif isinstance(child, float) and not math.isfinite(child):
                field = ".".join(str(part) for part in (*path, key))
                raise NotJson(f"{field} {NOT_FINITE}", field=field)


def _too_deep(what: str) -> NotJson:
    return NotJson(f"{what} nests deeper than {MAX_DEPTH} levels")
