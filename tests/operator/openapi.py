"""The API server's OpenAPI v3 documents, for clients that validate what they send
(``kubectl apply`` and ``helm install`` without ``--validate=false``).

``/openapi/v3`` lists one document per served group-version; each
(``/openapi/v3/apis/<group>/<version>``) holds, under ``components.schemas``, the schema of
every kind of that group-version (``x-kubernetes-group-version-kind`` says which) and of
every definition they refer to. Built-in kinds come from the Kubernetes 1.35 definitions
``kubernetes-validate`` bundles, written back from its JSON Schema dialect into OpenAPI's
(``type: [string, "null"]`` is ``type: string, nullable: true``; an int-or-string is
``x-kubernetes-int-or-string``, as kube-openapi writes it); custom resources from their
CRDs' ``openAPIV3Schema``, with ``apiVersion``, ``kind`` and ``metadata`` as the API server
adds them. Pure: no IO but reading the bundled definitions and the CRDs once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from collections.abc import Mapping
from typing import Any

import yaml

from tests.operator import builtin_kinds

Body = dict[str, Any]
REF = "#/$defs/"
COMPONENTS = "#/components/schemas/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"
"""The CRDs whose kinds the emulator serves (``emulator.CRDS``)."""
SCALARS = frozenset({"string", "integer", "number", "boolean", "null"})


def path_of(group: str, version: str) -> str:
    """The document's path under ``/openapi/v3/``: ``api/v1`` or ``apis/<group>/<version>``."""
    return f"api/{version}" if not group else f"apis/{group}/{version}"


Served = tuple[tuple[str, str, bool], ...]
"""A group-version's resources: (plural, kind, namespaced) each."""


def index(group_versions: Mapping[tuple[str, str], Served]) -> Body:
    """``/openapi/v3``: each group-version's document and its hash (clients cache by it)."""
    paths = {}
    for (group, version), served in sorted(group_versions.items()):
        path = path_of(group, version)
        made = document(group, version, served)
        digest = hashlib.sha256(json.dumps(made).encode()).hexdigest()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest.upper()[:64]}"}
    return {"paths": paths}


@functools.cache
def document(group: str, version: str, served: Served) -> Body:
    """The group-version's OpenAPI v3 document: its kinds' schemas, and for each resource
    the PATCH of one object, which takes the ``fieldValidation`` query parameter (kubectl
    and helm then leave validation to the server rather than download OpenAPI v2)."""
    found: dict[str, Any] = {}
    for name, schema in _kinds(group, version).items():
        found[name] = schema
    todo = [ref for schema in found.values() for ref in _refs(schema)]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found[name] = _openapi(builtin_kinds._definitions()[name])
        todo.extend(_refs(found[name]))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": _paths(group, version, served),
        "components": {"schemas": dict(sorted(found.items()))},
    }


def _paths(group: str, version: str, served: Served) -> Body:
    root = f"/{path_of(group, version)}"
    paths: Body = {}
    for plural, kind, namespaced in served:
        where = (
            f"{root}/namespaces/{{namespace}}/{plural}/{{name}}"
            if namespaced
            else (f"{root}/{plural}/{{name}}")
        )
        paths[where] = {
            "patch": {
                "operationId": f"patch{kind}",
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string"}}
                    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
                ],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {
                    "group": group,
                    "version": version,
                    "kind": kind,
                },
            }
        }
    return paths


def _kinds(group: str, version: str) -> dict[str, Any]:
    """The schemas of the group-version's kinds, by definition name."""
    kinds: dict[str, Any] = {}
    for name, definition in builtin_kinds._definitions().items():
        gvks = definition.get("x-kubernetes-group-version-kind") or []
        if any((g.get("group", ""), g.get("version")) == (group, version) for g in gvks):
            kinds[name] = _openapi(definition)
    for resource in _custom():
        if (resource["group"], resource["version"]) == (group, version):
            kinds[resource["definition"]] = resource["schema"]
    return kinds


@functools.cache
def _custom() -> tuple[Mapping[str, Any], ...]:
    """The CRDs' kinds (their storage versions) as the API server publishes them."""
    published = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        spec = crd["spec"]
        group, kind = spec["group"], spec["names"]["kind"]
        served = next(v for v in spec["versions"] if v.get("storage"))
        schema = _openapi(served["schema"]["openAPIV3Schema"])
        properties = dict(schema.get("properties") or {})
        properties |= {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": COMPONENTS + OBJECT_META},
        }
        schema = {
            **schema,
            "properties": properties,
            "x-kubernetes-group-version-kind": [
                {"group": group, "version": served["name"], "kind": kind}
            ],
        }
        reversed_group = ".".join(reversed(group.split(".")))
        published.append(
            {
                "group": group,
                "version": served["name"],
                "definition": f"{reversed_group}.{served['name']}.{kind}",
                "schema": schema,
            }
        )
    return tuple(published)


def _refs(node: Any) -> list[str]:
    """The definitions ``node`` refers to."""
    if isinstance(node, dict):
        found = []
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(COMPONENTS):
            found.append(ref.removeprefix(COMPONENTS))
        for value in node.values():
            found += _refs(value)
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def _openapi(node: Any) -> Any:
    """A JSON Schema of ``kubernetes-validate``'s dialect in OpenAPI v3's."""
    if isinstance(node, list):
        return [_openapi(item) for item in node]
    if not isinstance(node, dict):
        return node
    choices = node.get("oneOf")
    if isinstance(choices, list) and all(_scalar(choice) for choice in choices):
        # An int-or-string (or a quantity): kube-openapi's extension, no type.
        rest = {k: v for k, v in node.items() if k not in ("oneOf", "type")}
        return {**_openapi(rest), "x-kubernetes-int-or-string": True}
    result: Body = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            result[key] = COMPONENTS + value.removeprefix(REF)
        elif key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            if len(kinds) == 1:
                result["type"] = kinds[0]
            if "null" in value:
                result["nullable"] = True
        elif key in ("properties", "patternProperties", "$defs"):
            result[key] = {name: _openapi(child) for name, child in value.items()}
        else:
            result[key] = _openapi(value)
    return result


def _scalar(choice: Any) -> bool:
    if not isinstance(choice, dict) or set(choice) - {"type", "format", "description"}:
        return False
    kinds = choice.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return bool(kinds) and set(kinds) <= SCALARS
