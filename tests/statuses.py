"""A status patch against the models its CRD is generated from, strictly.

The status models keep unknown fields when they read (an older operator may have written
some), so validating alone would let a field the models lack through. ``unfit`` also
walks the validated model and names every field that went to a model's extras: what
the operator writes must be what the CRD describes, field for field.

A merge patch's null removes the field (or a map's key) it names, and the API server
drops a null a field may not hold: nulls are taken out before the patch is validated.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from kubeturn.api.agentturn import AgentTurnStatus
from kubeturn.api.status import RunStatus, WorkspaceStatus

MODELS: dict[str, type[BaseModel]] = {
    "runs": RunStatus,
    "workspaces": WorkspaceStatus,
    "agentturns": AgentTurnStatus,
}
"""The status model of each kubeturn resource, by its plural."""


def unfit(model: type[BaseModel], status: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``status`` (a status patch's body) as ``model``: its validation
    errors, or the path of every field the models lack; empty when it fits."""
    try:
        validated = model.model_validate(without_nulls(status))
    except ValidationError as error:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
    return [f"{path}: not a field of the models" for path in extras(validated, "status")]


def without_nulls(value: Any) -> Any:
    """``value`` with every null an object holds taken out, at every depth."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def extras(value: Any, path: str) -> Iterator[str]:
    """The paths of the fields that went to a model's extras, in ``value`` and below."""
    if isinstance(value, BaseModel):
        for name in value.model_extra or {}:
            yield f"{path}.{name}"
        for name in type(value).model_fields:
            yield from extras(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from extras(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from extras(item, f"{path}.{key}")
