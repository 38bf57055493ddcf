"""The Harness's routes and its OpenAPI document, both from one table (``OPERATIONS``).

The app adds exactly the routes this table names (``app.make_app``), and the document
served at ``/openapi.json`` is built from the same table and from the wire models'
JSON Schemas, so the two cannot drift apart: a route is documented with its methods,
its body, every status it answers and its auth. ``build`` also writes the Orchestrator
API's document (``kubeturn.orchestrator.openapi``): one generator for both.

What every operation answers besides its own table: 401 (no valid bearer token) unless
it is open; for a route that takes a body, 400 for one it refuses and 413 for one larger
than the app reads. No status is documented for a failure of the server's own (500): such
a 5xx is a bug, and the fuzz test (``tests/system/test_fuzz_apis.py``), which runs with
the toolbox up, fails on any 5xx.
Pure: no IO, no aiohttp.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from kubeturn_harness.wire import (
    MAX_INSTANCE_ID,
    SLOT_NAME,
    AbortRequest,
    AbortResponse,
    AdmitRequest,
    AdmitResponse,
    DeliverRequest,
    DeliverResponse,
    DeliveryAuthor,
    ErrorBody,
    EventType,
    ExecRequest,
    ExecResponse,
    ForgetRunRequest,
    History,
    ReposResponse,
    RunForgotten,
    Status,
    Streamed,
    StreamEvent,
    WorktreesRequest,
    WorktreesResponse,
)

REF = "#/components/schemas/{model}"
JSON = "application/json"


def ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


@dataclass(frozen=True)
class Answer:
    """One documented response: a wire model, or a schema of its own."""

    description: str
    model: type[BaseModel] | None = None
    schema: Mapping[str, Any] | None = None
    media: str = JSON
    headers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def render(self) -> dict[str, Any]:
        rendered: dict[str, Any] = {"description": self.description}
        schema = ref(self.model) if self.model is not None else self.schema
        if schema is not None:
            rendered["content"] = {self.media: {"schema": dict(schema)}}
        if self.headers:
            rendered["headers"] = {name: dict(h) for name, h in self.headers.items()}
        return rendered


def refused(description: str) -> Answer:
    return Answer(description, ErrorBody)


BAD_REQUEST = refused("A parameter or the body is refused; `field` names it.")


@dataclass(frozen=True)
class Operation:
    """One route and method: what it takes and every status it answers."""

    method: str
    path: str
    name: str
    """The operationId; the app's handler of the same name serves it."""
    summary: str
    answers: Mapping[int, Answer]
    body: type[BaseModel] | None = None
    body_schema: Mapping[str, Any] | None = None
    """A body schema other than ``body``'s (a body read leniently)."""
    body_required: bool = True
    parameters: Sequence[Mapping[str, Any]] = ()
    open: bool = False
    """Served without a token."""

    def responses(self) -> dict[str, Any]:
        answers = dict(self.answers)
        if self.body is not None or self.body_schema is not None:
            answers.setdefault(400, BAD_REQUEST)
            answers.setdefault(413, refused("The body is larger than the server reads."))
        if not self.open:
            answers.setdefault(401, refused("No valid bearer token."))
        return {str(status): answers[status].render() for status in sorted(answers)}

    def render(self) -> dict[str, Any]:
        rendered: dict[str, Any] = {
            "operationId": self.name,
            "summary": self.summary,
            "responses": self.responses(),
        }
        if self.open:
            rendered["security"] = []
        if self.parameters:
            rendered["parameters"] = [dict(p) for p in self.parameters]
        schema = ref(self.body) if self.body is not None else self.body_schema
        if schema is not None:
            rendered["requestBody"] = {
                "required": self.body_required,
                "content": {JSON: {"schema": dict(schema)}},
            }
        return rendered


def build(
    title: str, operations: Sequence[Operation], models: Sequence[type[BaseModel]]
) -> dict[str, Any]:
    """An OpenAPI 3.1 document of ``operations``, with ``models`` as its components."""
    _, schemas = models_json_schema([(model, "validation") for model in models], ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = operation.render()
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "v1alpha1"},
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def query_parameters(model: type[BaseModel], *path: str) -> list[dict[str, Any]]:
    """A route's parameters from a wire model: those named in ``path`` in the path, the
    rest in the query; each as required as the model makes it."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    return [
        {
            "name": name,
            "in": "path" if name in path else "query",
            "required": name in path or name in required,
            "schema": {key: value for key, value in prop.items() if key != "description"},
            "description": prop.get("description", ""),
        }
        for name, prop in schema["properties"].items()
    ]


AGENT = "/agents/{name}/{id}"
AGENT_PARAMETERS = (
    {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": SLOT_NAME},
        "description": "The Agent slot's name.",
    },
    {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_INSTANCE_ID},
        "description": "The Instance ID, percent-encoded as one path segment.",
    },
)
NOT_READY = refused("The toolbox (where commands and git run) cannot serve now; ask again.")
GIT_REFUSED = refused("The Workspace's clones refuse it (e.g. a slot with no clone).")

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "POST",
        AGENT,
        "admit",
        "Admit one Submission to the conversation; its run queues.",
        {200: Answer("Admitted.", AdmitResponse)},
        body=AdmitRequest,
        parameters=AGENT_PARAMETERS,
    ),
    Operation(
        "GET",
        AGENT,
        "read",
        "Read events from an offset, or the history.",
        {
            200: Answer(
                "Events (an array), or the history.",
                schema={
                    "oneOf": [{"type": "array", "items": ref(StreamEvent)}, ref(History)],
                },
                headers={
                    "stream-next-offset": {"schema": {"type": "integer", "minimum": 0}},
                    "stream-up-to-date": {"schema": {"type": "boolean"}},
                },
            ),
            204: Answer(
                "Long-poll parked with nothing new.",
                headers={
                    "stream-next-offset": {"schema": {"type": "integer", "minimum": 0}},
                    "stream-up-to-date": {"schema": {"type": "boolean"}},
                },
            ),
            400: BAD_REQUEST,
            404: refused("No conversation of that Agent at that Instance ID."),
        },
        parameters=(
            *AGENT_PARAMETERS,
            {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            {"name": "live", "in": "query", "schema": {"type": "string", "enum": ["long-poll"]}},
            {"name": "view", "in": "query", "schema": {"type": "string", "enum": ["history"]}},
            {
                "name": "types",
                "in": "query",
                "description": "Only events of these types (a long-poll waits for one); "
                "the next offset is past every event looked at.",
                "style": "form",
                "explode": False,
                "schema": {
                    "type": "array",
                    "items": {"type": "string", "enum": [item.value for item in EventType]},
                },
            },
        ),
    ),
    Operation(
        "POST",
        f"{AGENT}/abort",
        "abort",
        "The sweep: end the conversation's running and queued Submissions. Any body is "
        "taken: one that is not an AbortRequest (or none) settles what runs `aborted`.",
        {200: Answer("What it settled.", AbortResponse)},
        body_schema={"anyOf": [ref(AbortRequest), {}]},
        body_required=False,
        parameters=AGENT_PARAMETERS,
    ),
    Operation(
        "POST",
        "/exec",
        "run_exec",
        "Run one command in the Workspace, as the Agents' tools run (an `exec` invoke).",
        {200: Answer("Its exit code and the tail of its output.", ExecResponse), 503: NOT_READY},
        body=ExecRequest,
    ),
    Operation(
        "POST",
        "/deliveries",
        "deliver",
        "Commit a Run's worktree of a repo slot on its branch, as the Agents' tools run, and "
        "bundle the branch where no Agent can write (a `deliver` invoke).",
        {
            200: Answer("The branch's commit, whether it is new, and its bundle.", DeliverResponse),
            409: refused(
                "Nothing to deliver, or the worktree cannot be: no worktree, not on its "
                "branch, git refused."
            ),
            503: NOT_READY,
        },
        body=DeliverRequest,
    ),
    Operation(
        "POST",
        "/worktrees",
        "worktrees",
        "Make (or find) a Run's worktree of each repo slot; idempotent.",
        {
            200: Answer("Each slot's worktree and branch.", WorktreesResponse),
            409: GIT_REFUSED,
            503: NOT_READY,
        },
        body=WorktreesRequest,
    ),
    Operation(
        "DELETE",
        "/runs/{run}",
        "forget_run",
        "Forget a deleted Run: remove its worktrees (their branch stays) and its "
        "conversations; idempotent.",
        {
            200: Answer("What was removed; nothing the second time.", RunForgotten),
            400: BAD_REQUEST,
            409: refused("A Submission of the Run is unsettled, or the clones refuse it."),
            503: NOT_READY,
        },
        parameters=query_parameters(ForgetRunRequest, "run"),
    ),
    Operation(
        "GET",
        "/repos",
        "repos",
        "The Workspace's clones: each repo slot's path and commit.",
        {200: Answer("Repo slot → clone.", ReposResponse), 409: GIT_REFUSED, 503: NOT_READY},
    ),
    Operation(
        "GET", "/healthz", "healthz", "Liveness.", {200: Answer("Alive.", Status)}, open=True
    ),
    Operation(
        "GET",
        "/readyz",
        "readyz",
        "Readiness: recovered, and the data dir is writable.",
        {200: Answer("Ready.", Status), 503: refused("Not ready, and why.")},
    ),
    Operation(
        "GET",
        "/metrics",
        "metrics",
        "Prometheus metrics.",
        {200: Answer("Text exposition.", schema={"type": "string"}, media="text/plain")},
    ),
    Operation(
        "GET",
        "/openapi.json",
        "openapi_json",
        "This document.",
        {200: Answer("The OpenAPI document.", schema={"type": "object"})},
    ),
)

MODELS: tuple[type[BaseModel], ...] = (
    AdmitRequest,
    AdmitResponse,
    AbortRequest,
    AbortResponse,
    DeliverRequest,
    DeliverResponse,
    DeliveryAuthor,
    ExecRequest,
    ExecResponse,
    History,
    StreamEvent,
    Streamed,
    WorktreesRequest,
    WorktreesResponse,
    ReposResponse,
    RunForgotten,
    Status,
    ErrorBody,
)


@cache
def document() -> dict[str, Any]:
    return build("kubeturn Harness", OPERATIONS, MODELS)
