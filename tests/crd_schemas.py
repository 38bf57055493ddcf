"""The committed CRDs and the example manifests as tests read them: the schema of each
kind as the API server reads it, the manifests under examples/ as kubectl sends them,
and the JSON Schema that checks what the API server checks.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "crds"
EXAMPLES = REPO / "examples"

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"

Node = dict[str, Any]


def committed() -> dict[str, Node]:
    """The committed CRDs by kind, as the API server would read them."""
    documents = (yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml")))
    return {document["spec"]["names"]["kind"]: document for document in documents}


def schema_of(kind: str) -> Node:
    schema: Node = committed()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def as_kubectl_sends(value: Any) -> Any:
    """``value`` (read by PyYAML, YAML 1.1 like kubectl) as the JSON kubectl sends: keys
    are strings (the boolean key of a bare ``on:`` becomes ``"true"``), times are text."""
    if isinstance(value, dict):
        return {_key(key): as_kubectl_sends(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_kubectl_sends(item) for item in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)


def as_json_schema(node: Node) -> Node:
    """The JSON Schema that checks what the API server checks with ``node``: nullable
    and int-or-string as type lists, and unknown fields refused wherever the schema does
    not keep them (kubectl's strict field validation, its default)."""
    result: Node = {}
    for key, value in node.items():
        if key == "properties":
            result[key] = {name: as_json_schema(child) for name, child in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            result[key] = as_json_schema(value)
        elif key != "nullable" and not key.startswith("x-kubernetes-"):
            result[key] = value
    if node.get(INT_OR_STRING):
        result["type"] = ["integer", "string"]
    if node.get("nullable"):
        result["type"] = [node["type"], "null"]
    if "properties" in node and not node.get(PRESERVE):
        result["additionalProperties"] = False
    return result


def example_manifests() -> list[tuple[str, Node]]:
    manifests = []
    for path in sorted([*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.yml")]):
        for number, document in enumerate(yaml.safe_load_all(path.read_text())):
            if isinstance(document, dict) and str(document.get("apiVersion", "")).startswith(
                "kubeturn.dev/"
            ):
                name = path.relative_to(EXAMPLES).as_posix()
                manifests.append((f"{name}#{number}", as_kubectl_sends(document)))
    return manifests


def example_run() -> Node:
    """``examples/task-with-review.yaml``: the commented example, with bare ``on`` keys."""
    [run] = [
        manifest for name, manifest in example_manifests() if name == "task-with-review.yaml#0"
    ]
    return run
