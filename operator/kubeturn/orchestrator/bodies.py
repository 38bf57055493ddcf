"""The Orchestrator API's one reader of request bodies: strict JSON, bounded nesting,
finite numbers. Whatever the bytes, it answers a value or raises ``WireError`` (a 400
naming the field, or the body); never another exception.

Python's ``json`` is lenient where a wire must not be: it takes ``NaN``, ``Infinity`` and
``-Infinity``, which are not JSON (RFC 8259 §6), and it recurses once per level, so a
body nested 200,000 deep raises ``RecursionError``. pydantic-core's parser (pydantic's
own) refuses those words, and stops at a fixed depth of its own without Python
recursion. One iterative walk of the value then bounds its depth at ``MAX_DEPTH`` and
refuses what still is not a finite number (``1e999`` parses to infinity), naming where.
Pure: no IO, no aiohttp.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic_core import from_json

from kubeturn.errors import WireError

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a body may have (``[]`` is 1). A pick's
payload is a tool call's arguments, shaped by a Menu's JSON Schema: a few levels. What is
read is walked again by recursive code (JSON Schema validation, the Machine's event in
CEL, the Run's snapshot on its way to the Kubernetes API), a few Python frames a level,
so 64 keeps each far inside Python's 1000. The Harness bounds a model's pick arguments
alike (``kubeturn_harness.bodies.MAX_DEPTH``), so the model hears of it first."""
TOO_DEEP = "recursion limit exceeded"
"""How pydantic-core's parser says a body nests deeper than its own limit (200 levels)."""
NOT_FINITE = "is not a finite number: JSON has no NaN or Infinity, and a number must fit a double"


def parse(raw: bytes) -> Any:
    """The body's JSON value; ``WireError`` saying what makes it unreadable."""
    try:
        value = from_json(raw, allow_inf_nan=False)
    except ValueError as error:
        if TOO_DEEP in str(error):
            raise _too_deep() from error
        try:
            # If NaN or Infinity is its one fault, the walk names the field that holds it.
            value = from_json(raw)
        except ValueError:
            raise WireError(f"the body is not JSON: {error}") from error
    _walk(value)
    return value


def _walk(value: Any) -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and numbers that are not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise WireError(f"the body {NOT_FINITE}")
    todo: list[tuple[Any, int, tuple[str | int, ...]]] = []
    if isinstance(value, dict | list):
        todo.append((value, 1, ()))
    while todo:
        node, depth, path = todo.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        children = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in children:
            if isinstance(child, dict | list):
                todo.append((child, depth + 1, (*path, key)))
            elif isinstance(child, float) and not math.isfinite(child):
                field = ".".join(str(part) for part in (*path, key))
                raise WireError(f"{field} {NOT_FINITE}", field=field)


def _too_deep() -> WireError:
    return WireError(f"the body nests deeper than {MAX_DEPTH} levels")
