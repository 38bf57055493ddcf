"""The Orchestrator API's routes and its OpenAPI document, both from one table.

``api.make_app`` adds exactly the routes ``OPERATIONS`` names, and ``/openapi.json``
serves the document built from it with the Harness's generator
(``kubeturn_harness.openapi.build``) over the wire models the Harness reads, so the
Harness's client, this server and the document share one source of truth. Pure: no IO.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel

from kubeturn.orchestrator import bodies
from kubeturn_harness.openapi import Answer, Operation, build, refused
from kubeturn_harness.wire import (
    PICK_KEY_HEADER,
    PICK_KEY_MAX,
    ErrorBody,
    Pick,
    Receipt,
    Refusal,
    Status,
    Surface,
)

IID = {
    "name": "iid",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The Instance ID, percent-encoded as one path segment.",
}
DELIVERY = {
    "name": "delivery",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The delivery id a Receipt of an outstanding pick named.",
}
KEY = {
    "name": PICK_KEY_HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": PICK_KEY_MAX},
    "description": "A repeat of a key this Turn took is answered as its first send was, "
    "and not delivered again.",
}
FORBIDDEN = refused("The token's Workspace did not admit a Turn at this Instance ID.")
BUSY = Answer(
    "The Orchestrator is starting or stopping and cannot tell yet whether the Turn is "
    "live: send the same request again (`Retry-After`).",
    ErrorBody,
    headers={"Retry-After": {"schema": {"type": "integer"}}},
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "GET",
        "/agents/{iid}/surface",
        "surface",
        "The live Turn's Menu, allowed picks, cwd and notices.",
        {
            200: Answer("The surface.", Surface),
            403: FORBIDDEN,
            404: refused("No live Turn: never prompt."),
            503: BUSY,
        },
        parameters=(IID,),
    ),
    Operation(
        "POST",
        "/agents/{iid}/events",
        "pick",
        "A pick: {type, ...payload}. A Harness sends it again, with the same "
        f"{PICK_KEY_HEADER}, while the answer is 503 or none comes.",
        {
            200: Answer("Delivered.", Receipt),
            400: refused(
                "Not a JSON object with a string `type`: not JSON, nested deeper than "
                f"{bodies.MAX_DEPTH} levels, or a number that is not finite (NaN, Infinity); "
                f"or a {PICK_KEY_HEADER} that is empty or longer than {PICK_KEY_MAX}; "
                "`field` names where."
            ),
            403: FORBIDDEN,
            404: refused("The Turn is over."),
            409: Answer("Refused; nothing delivered.", Refusal),
            422: refused("The payload does not fit the event's schema."),
            503: BUSY,
        },
        body=Pick,
        parameters=(IID, KEY),
    ),
    Operation(
        "GET",
        "/agents/{iid}/deliveries/{delivery}",
        "delivery",
        "Long-poll an outstanding pick's answer (≤ 25 s).",
        {
            200: Answer("Answered.", Receipt),
            204: Answer("Still being worked on."),
            403: FORBIDDEN,
            404: refused("No such delivery, or no live Turn."),
            503: BUSY,
        },
        parameters=(IID, DELIVERY),
    ),
    Operation(
        "GET", "/healthz", "healthz", "Liveness.", {200: Answer("Alive.", Status)}, open=True
    ),
    Operation(
        "GET",
        "/openapi.json",
        "openapi_json",
        "This document.",
        {200: Answer("The OpenAPI document.", schema={"type": "object"})},
        open=True,
    ),
)
MODELS: tuple[type[BaseModel], ...] = (Surface, Pick, Receipt, Refusal, Status, ErrorBody)


@cache
def document() -> dict[str, Any]:
    return build("kubeturn Orchestrator", OPERATIONS, MODELS)
