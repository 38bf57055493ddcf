"""Merge patches of a resource's status, built from the models its CRD is generated from.

A status patch is a status model whose set fields (``model_fields_set``) are the fields
to write, dumped by their CRD names: a field the models lack cannot be written, and
every message in it was cut to its bound (``kubeturn.api.status.bounded``) when the model
was built. A merge patch removes a map's key by writing it null, which a model cannot
hold: ``removed`` names those keys. Pure: nothing here does IO.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubeturn.api.status import Status


def status(
    model: Status,
    *,
    removed: Mapping[str, Iterable[str]] | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    """The merge patch writing ``model``'s set fields into the object's status, removing
    the keys ``removed`` names from the map fields it names; with ``version``, a patch
    the API server applies only to that ``metadata.resourceVersion``."""
    body = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    for field, keys in (removed or {}).items():
        body[field] = {**dict.fromkeys(keys), **body.get(field, {})}
    patch: dict[str, Any] = {"status": body}
    if version is not None:
        patch["metadata"] = {"resourceVersion": version}
    return patch
