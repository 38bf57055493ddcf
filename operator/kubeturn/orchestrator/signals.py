"""Whether a Run takes an outside event (a signal) now, and why not: one judgement for the
core, which records a refused signal as ignored, and for ``kubeturn send``, which refuses
it before it is sent (ADR 0067).

A signal is handled the moment it arrives, or not at all: one that no active state
accepts is refused, never queued for a state entered later, where it would fire in a
context its sender never saw. What a Run accepts is ``Run.status.acceptedEvents``
(``interpreter.accepted`` in status form): each event's name, the state that takes it,
its description and its payload's schema. Pure: no IO.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from kubeturn.api.status import AcceptedEvent, bounded
from kubeturn.machine import interpreter

MAX_ACCEPTED = 16
"""Accepted events a status lists at most: a Machine's active states handle a handful;
one left out is still accepted (``kubeturn send`` leaves it to the Run to judge)."""
SCHEMA_LIMIT = 4096
"""Bytes of JSON of a schema the status shows; a larger one is left out (the core still
checks a signal against it), so the status stays small: 16 × 4 KiB at most."""


def accepted_events(found: Sequence[interpreter.Accepted]) -> list[AcceptedEvent]:
    """What ``Run.status.acceptedEvents`` lists of ``found``."""
    shown = []
    for item in found[:MAX_ACCEPTED]:
        schema = dict(item.schema) if item.schema is not None else None
        if schema is not None and len(json.dumps(schema)) > SCHEMA_LIMIT:
            schema = None
        shown.append(
            AcceptedEvent(
                event=item.event,
                state=item.state,
                description=item.description,
                schema=schema,
            )
        )
    return shown


def waiting_for(found: Sequence[Mapping[str, Any]]) -> str:
    """The events a Run accepts as one word, for a printer column: ``approve,reject``."""
    return ",".join(str(item["event"]) for item in found) or "-"


def listing(found: Sequence[Mapping[str, Any]]) -> str:
    """The accepted events with their states, for a message: ``approve (humanReview)``."""
    if not found:
        return "nothing: no active state takes an outside event"
    return ", ".join(f"{item['event']} ({item['state']})" for item in found)


def refusal(found: Sequence[Mapping[str, Any]], event: str, data: Mapping[str, Any]) -> str | None:
    """Why the Run, accepting ``found`` (``acceptedEvents`` entries), does not take
    ``event`` with ``data``; None when it does (a guard may still refuse it)."""
    entry = next((item for item in found if item["event"] == event), None)
    if entry is None:
        return bounded(f"no active state accepts {event}; the Run accepts now: {listing(found)}")
    problem = data_problem(entry.get("schema"), data)
    if problem is not None:
        return bounded(f"the data of {event} does not fit its schema: {problem}")
    return None


def data_problem(schema: Mapping[str, Any] | None, data: Mapping[str, Any]) -> str | None:
    """What is wrong with ``data`` for ``schema`` (the first problem, naming its field);
    None when it fits or there is no schema."""
    if schema is None:
        return None
    validator = jsonschema.validators.validator_for(schema)(schema)
    problem = jsonschema.exceptions.best_match(validator.iter_errors(dict(data)))
    if problem is None:
        return None
    where = "/".join(str(p) for p in problem.absolute_path) or "the data"
    return f"{where}: {problem.message}"
