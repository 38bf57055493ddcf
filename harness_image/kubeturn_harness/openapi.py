"""The Harness's OpenAPI document, generated from the wire models (served at /openapi.json)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from kubeturn_harness.wire import (
    AbortRequest,
    AbortResponse,
    AdmitRequest,
    AdmitResponse,
    ErrorBody,
    ForgetRunRequest,
    History,
    ReposResponse,
    RunForgotten,
    StreamEvent,
    WorktreesRequest,
    WorktreesResponse,
)

REF = "#/components/schemas/{model}"
AGENT = "/agents/{name}/{id}"
PATH_PARAMS = [
    {
        "name": "name",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The Agent slot's name.",
    },
    {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "The Instance ID, percent-encoded as one path segment.",
    },
]


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": REF.format(model=model.__name__)}}},
    }


def _params(model: type[BaseModel], *path: str) -> list[dict[str, Any]]:
    """A route's parameters from a wire model: those named in ``path`` in the path, the
    rest in the query."""
    schema = model.model_json_schema()
    return [
        {
            "name": name,
            "in": "path" if name in path else "query",
            "required": True,
            "schema": {key: value for key, value in field.items() if key != "description"},
            "description": field.get("description", ""),
        }
        for name, field in schema["properties"].items()
    ]


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(status): _json(ErrorBody, "What is wrong, and which field.") for status in statuses}


@cache
def document() -> dict[str, Any]:
    models: list[type[BaseModel]] = [
        AdmitRequest,
        AdmitResponse,
        AbortRequest,
        AbortResponse,
        History,
        StreamEvent,
        WorktreesRequest,
        WorktreesResponse,
        ReposResponse,
        RunForgotten,
        ErrorBody,
    ]
    _, schemas = models_json_schema([(model, "validation") for model in models], ref_template=REF)
    security: list[dict[str, list[str]]] = [{"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "kubeturn Harness", "version": "v1alpha1"},
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": security,
        "paths": {
            AGENT: {
                "parameters": PATH_PARAMS,
                "post": {
                    "summary": "Admit one Submission to the conversation; its run queues.",
                    "requestBody": {"required": True, **_json(AdmitRequest, "The Turn's input.")},
                    "responses": {
                        "200": _json(AdmitResponse, "Admitted."),
                        **_errors(400, 401),
                    },
                },
                "get": {
                    "summary": "Read events from an offset, or the history.",
                    "parameters": [
                        {
                            "name": "offset",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                        {"name": "live", "in": "query", "schema": {"enum": ["long-poll"]}},
                        {"name": "view", "in": "query", "schema": {"enum": ["history"]}},
                    ],
                    "responses": {
                        "200": {
                            "description": "Events (an array), or the history.",
                            "headers": {
                                "stream-next-offset": {"schema": {"type": "integer"}},
                                "stream-up-to-date": {"schema": {"type": "boolean"}},
                            },
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "oneOf": [
                                            {
                                                "type": "array",
                                                "items": {"$ref": REF.format(model="StreamEvent")},
                                            },
                                            {"$ref": REF.format(model="History")},
                                        ]
                                    }
                                }
                            },
                        },
                        "204": {"description": "Long-poll parked with nothing new."},
                        **_errors(400, 401, 404),
                    },
                },
            },
            f"{AGENT}/abort": {
                "parameters": PATH_PARAMS,
                "post": {
                    "summary": "The sweep: end the conversation's running and queued Submissions.",
                    "requestBody": {"required": False, **_json(AbortRequest, "The cause.")},
                    "responses": {"200": _json(AbortResponse, "What it settled."), **_errors(401)},
                },
            },
            "/worktrees": {
                "post": {
                    "summary": "Make (or find) a Run's worktree of each repo slot; idempotent.",
                    "requestBody": {
                        "required": True,
                        **_json(WorktreesRequest, "The Run, its branch, the slots."),
                    },
                    "responses": {
                        "200": _json(WorktreesResponse, "Each slot's worktree and branch."),
                        **_errors(400, 401, 409),
                    },
                }
            },
            "/runs/{run}": {
                "delete": {
                    "summary": "Forget a deleted Run: remove its worktrees (their branch stays) "
                    "and its conversations; idempotent.",
                    "parameters": _params(ForgetRunRequest, "run"),
                    "responses": {
                        "200": _json(RunForgotten, "What was removed; nothing the second time."),
                        **_errors(400, 401, 409),
                    },
                }
            },
            "/repos": {
                "get": {
                    "summary": "The Workspace's clones: each repo slot's path and commit.",
                    "responses": {
                        "200": _json(ReposResponse, "Repo slot → clone."),
                        **_errors(401),
                    },
                }
            },
            "/healthz": {
                "get": {
                    "security": [],
                    "summary": "Liveness.",
                    "responses": {"200": {"description": "Alive."}},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "Readiness: recovered and the data dir is writable.",
                    "responses": {
                        "200": {"description": "Ready."},
                        "503": {"description": "Not ready."},
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics.",
                    "responses": {"200": {"description": "Text exposition."}},
                }
            },
        },
    }
