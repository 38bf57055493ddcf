"""The OpenAPI documents of both HTTP APIs agree with the routes their apps serve.

Cases, for the Harness and for the Orchestrator API:
- every route the aiohttp app serves is in the document with exactly its methods, and
  the document lists no route the app does not serve (``/exec`` among them);
- every operation that needs a token documents 401 with the error body, and the app's
  auth middleware lets through without a token exactly the operations documented open;
- every operation that takes a body documents 400 and 413;
- every status documented is answered with a body of a schema in the document, or none;
- a body the document's schema allows is read by the server's model, and one the server
  refuses is refused by the schema too (``cwd`` absolute and without NUL, a command
  without NUL, slot names, unknown fields, booleans and numbers of their JSON type).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from aiohttp import web
from pydantic import BaseModel, ValidationError

from kubeturn.orchestrator import api
from kubeturn.orchestrator import openapi as orchestrator_openapi
from kubeturn_harness import app as harness_app
from kubeturn_harness import openapi as harness_openapi
from kubeturn_harness.__main__ import toolbox_client
from kubeturn_harness.clock import SystemClock
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.providers import Providers
from kubeturn_harness.service import Harness
from kubeturn_harness.settings import Settings
from kubeturn_harness.wire import AdmitRequest, ExecRequest, WorktreesRequest

API = ["harness", "orchestrator"]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    """A Harness that is never started: its app is only looked at."""
    settings = Settings(
        data_dir=tmp_path / "data",
        token_sha256=hashlib.sha256(b"token").hexdigest(),
        orchestrator_url=None,
        orchestrator_token=None,
        providers_file=None,
    )
    return Harness(
        settings,
        clock=SystemClock(),
        model=OpenAIModels(),
        orchestrator=None,
        providers=Providers.load(None),
        metrics=HarnessMetrics(),
        toolbox=toolbox_client(settings, tmp_path / "toolbox.sock"),
    )


def _app_and_document(
    which: str, harness: Harness
) -> tuple[web.Application, dict[str, Any], frozenset[str]]:
    if which == "harness":
        return harness_app.make_app(harness), harness_openapi.document(), harness_app.OPEN_PATHS
    return api.make_app(api.Registry()), orchestrator_openapi.document(), api.OPEN_PATHS


def _served(app: web.Application) -> dict[str, set[str]]:
    routes: dict[str, set[str]] = {}
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        assert path is not None, f"a route with no path: {route}"
        routes.setdefault(path, set()).add(route.method.lower())
    return routes


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


@pytest.mark.parametrize("which", API)
def test_every_route_served_is_documented_with_its_methods(which: str, harness: Harness) -> None:
    app, document, _ = _app_and_document(which, harness)
    documented = {path: set(item) for path, item in document["paths"].items()}
    assert _served(app) == documented
    if which == "harness":
        assert documented["/exec"] == {"post"}


@pytest.mark.parametrize("which", API)
def test_auth_is_documented_as_served(which: str, harness: Harness) -> None:
    _, document, open_paths = _app_and_document(which, harness)
    assert document["security"] == [{"bearer": []}]
    documented_open = set()
    for path, method, operation in _operations(document):
        if operation.get("security") == []:
            documented_open.add(path)
            assert "401" not in operation["responses"], f"{method} {path}"
        else:
            unauthorized = operation["responses"]["401"]["content"]["application/json"]
            assert unauthorized["schema"]["$ref"].endswith("/ErrorBody"), f"{method} {path}"
    assert documented_open == set(open_paths)
    assert "/healthz" in open_paths


@pytest.mark.parametrize("which", API)
def test_bodies_and_answers_are_documented(which: str, harness: Harness) -> None:
    _, document, _ = _app_and_document(which, harness)
    schemas = document["components"]["schemas"]
    for path, method, operation in _operations(document):
        if "requestBody" in operation:
            assert {"400", "413"} <= set(operation["responses"]), f"{method} {path}"
        for status, answer in operation["responses"].items():
            for media in answer.get("content", {}).values():
                for ref in _refs(media["schema"]):
                    assert ref.removeprefix("#/components/schemas/") in schemas, (status, ref)


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        if "$ref" in schema:
            yield schema["$ref"]
        for value in schema.values():
            yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _schema_allows(model: type[BaseModel], body: Any) -> bool:
    document = harness_openapi.document()
    schema = {"$ref": f"#/components/schemas/{model.__name__}", **document}
    try:
        jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    except jsonschema.ValidationError:
        return False
    return True


def _server_allows(model: type[BaseModel], body: Any) -> bool:
    try:
        model.model_validate(body)
    except ValidationError:
        return False
    return True


DEFINITION = {"instructions": "You review."}
BODIES = [
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "cwd": "/work/a"}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "cwd": "work/a"}),
    (AdmitRequest, {"prompt": "", "definition": DEFINITION}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "extra": 1}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "key": "k" * 201}),
    (ExecRequest, {"command": "true"}),
    (ExecRequest, {"command": "true", "cwd": "relative"}),
    (ExecRequest, {"command": "true", "timeoutSeconds": 0}),
    (ExecRequest, {"command": "true", "timeoutSeconds": 86_401}),
    (WorktreesRequest, {"run": "default.a", "branch": "kubeturn/a", "slots": ["target"]}),
    (WorktreesRequest, {"run": "default.a", "branch": "kubeturn/a", "slots": []}),
    (WorktreesRequest, {"run": "Default", "branch": "kubeturn/a", "slots": ["t"]}),
    (WorktreesRequest, {"run": "default.a", "branch": "kubeturn/a", "slots": [".."]}),
    (WorktreesRequest, {"run": "default.a", "branch": "kubeturn/a", "slots": ["a\u0000"]}),
    (ExecRequest, {"command": "echo \u0000"}),
    (ExecRequest, {"command": "true", "timeoutSeconds": "5"}),
    (ExecRequest, {"command": "true", "timeoutSeconds": 5}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "continue": 0}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "continue": "true"}),
    (ExecRequest, {"command": "true", "cwd": "/work\u0000"}),
    (AdmitRequest, {"prompt": "x", "definition": DEFINITION, "cwd": "/work\u0000"}),
]


@pytest.mark.parametrize(
    ("model", "body"), BODIES, ids=[f"{m.__name__}-{i}" for i, (m, _) in enumerate(BODIES)]
)
def test_the_schema_and_the_server_take_the_same_bodies(
    model: type[BaseModel], body: dict[str, Any]
) -> None:
    assert _schema_allows(model, body) == _server_allows(model, body)
