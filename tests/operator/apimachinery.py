"""Kubernetes API semantics as pure functions: paths, selectors, patches, metadata, Tables.

The rules a kube-apiserver applies to requests and objects, as far as the operator
tests need them, for :mod:`tests.operator.emulator` to serve. Everything here works on
plain JSON-like dicts and does no IO, keeps no state and knows nothing of HTTP or KMock;
a refusal is an :class:`ApiError` carrying the status code Kubernetes would answer with.
Where the emulation is partial, the function says so (set-based selectors, strategic
merge directives, JSONPath); the emulator's docstring lists the limits as a whole.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import jsonpatch
import jsonpointer

Body = dict[str, Any]
Column = tuple[str, str] | tuple[str, str, str]
"""A printer column: its header, a JSONPath (``.a.b``, ``.a[0]``, ``.a[*].b``) and, as
a CRD declares it, its type (``date``, ``string``, ``integer``...); without one, a path
ending in ``Timestamp`` is a date."""


def column_type(column: Column) -> str:
    """The column's type: declared, else a date for a ``...Timestamp`` path."""
    if len(column) == 3:
        return column[2]
    return "date" if column[1].endswith("Timestamp") else "string"


SERVER_MANAGED = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
)
"""Metadata that only the server writes: a client's values are ignored on updates."""


class ApiError(Exception):
    """A request the API refuses; served as a ``Status`` body with its HTTP code."""

    REASONS: ClassVar[Mapping[int, str]] = {
        400: "BadRequest",
        404: "NotFound",
        405: "MethodNotAllowed",
        409: "Conflict",
        410: "Expired",
        413: "RequestEntityTooLarge",
        415: "UnsupportedMediaType",
        422: "Invalid",
        500: "InternalError",
    }

    def __init__(self, code: int, message: str, *, reason: str = "", **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details
        self.reason = reason or self.REASONS[code]

    def status(self) -> Body:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


# --- Paths -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Route:
    """What a Kubernetes API path names; ``group`` is ``""`` for the core API."""

    group: str
    version: str | None
    plural: str | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse_route(path: str) -> Route | None:
    """Parse ``/api/v1/...`` and ``/apis/GROUP/VERSION/...``; None for other paths.

    ``/api/v1/namespaces/X/status`` is namespace X's status, while ``/api/v1/namespaces/X/
    pods`` is the pods in namespace X: KMock 0.8 fails on the former and on ``/api/v1/
    namespaces`` itself.
    """
    parts = [part for part in path.split("/") if part]
    version: str | None
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 2 and parts[0] == "apis":
        group, version, rest = parts[1], (parts[2] if len(parts) > 2 else None), parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    return Route(
        group=group,
        version=version,
        plural=rest[0] if rest else None,
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource="/".join(rest[2:]) or None,
    )


def verb_of(method: str, route: Route, params: Mapping[str, str]) -> str | None:
    """The Kubernetes verb of a request on a resource path (None if there is none)."""
    if method == "GET":
        if params.get("watch") in ("true", "1"):
            return "watch"
        return "get" if route.name else "list"
    if route.name is None:
        return {"POST": "create", "DELETE": "deletecollection"}.get(method)
    if method == "POST":  # a subresource made by a POST: pods/binding, pods/eviction
        return "create" if route.subresource else None
    return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)


# --- Selectors -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One term of a selector: ``key=value``, ``key!=value``, ``key`` or ``!key``."""

    key: str
    operator: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def matches(self, values: Mapping[str, str]) -> bool:
        present = self.key in values
        match self.operator:
            case "=":
                return present and values[self.key] == self.value
            case "!=":
                return not present or values[self.key] != self.value
            case "exists":
                return present
            case _:
                return not present


TERM = re.compile(r"\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*))?\s*")
FIELDS = ("metadata.name", "metadata.namespace")
EVENT_FIELDS = {
    **{
        f"involvedObject.{name}": ("involvedObject", name)
        for name in (
            "kind",
            "namespace",
            "name",
            "uid",
            "apiVersion",
            "resourceVersion",
            "fieldPath",
        )
    },
    "reason": ("reason",),
    "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"),
    "type": ("type",),
}
"""The field selectors core v1 Events take besides the metadata's (kube-apiserver's
``pkg/registry/core/event``'s ``ToSelectableFields``): ``kubectl describe`` lists an
object's Events by ``involvedObject.*``. The path of each in the Event."""


def _event_fields(body: Body) -> dict[str, str]:
    found = {}
    for field, path in EVENT_FIELDS.items():
        node: Any = body
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        found[field] = "" if node is None else str(node)
    return found


def parse_selector(
    text: str, *, fields: bool = False, events: bool = False
) -> tuple[Requirement, ...]:
    """Parse an equality-based label selector, or a field selector if ``fields`` (of core
    v1 Events if ``events``)."""
    terms = []
    for term in filter(None, text.split(",")):
        found = TERM.fullmatch(term)
        if found is None or (found[1] and found[3]):
            raise ApiError(
                400,
                f"unable to parse requirement: {term!r} (the "
                "emulator supports =, ==, != and existence, not set-based terms)",
            )
        negated, key, operator, value = found.groups()
        known = (*FIELDS, *EVENT_FIELDS) if events else FIELDS
        if fields and (key not in known or not operator):
            raise ApiError(400, f'field label not supported: "{key}"')
        operator = {"==": "=", None: "!exists" if negated else "exists"}.get(operator, operator)
        terms.append(Requirement(key, operator, value or ""))
    return tuple(terms)


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which objects a list or watch request sees."""

    namespace: str | None = None
    name: str | None = None
    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    events: bool = False
    """Core v1 Events: their own fields are selectable too."""

    @classmethod
    def of(cls, route: Route, params: Mapping[str, str]) -> Selection:
        events = (route.group, route.plural) == ("", "events")
        return cls(
            namespace=route.namespace,
            name=route.name,
            labels=parse_selector(params.get("labelSelector", "")),
            fields=parse_selector(params.get("fieldSelector", ""), fields=True, events=events),
            events=events,
        )

    def matches(self, body: Body | None) -> bool:
        if body is None:
            return False
        meta = body.get("metadata", {})
        fields = {
            "metadata.name": meta.get("name", ""),
            "metadata.namespace": meta.get("namespace", ""),
        }
        if self.events:
            fields |= _event_fields(body)
        return (
            (self.namespace is None or meta.get("namespace") == self.namespace)
            and (self.name is None or meta.get("name") == self.name)
            and all(term.matches(meta.get("labels") or {}) for term in self.labels)
            and all(term.matches(fields) for term in self.fields)
        )


# --- Patches ---------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_as_merge(patch: Any) -> Any:
    """Drop ordering hints of a strategic merge patch; refuse the directives that change meaning.

    ``$setElementOrder/...`` and ``$retainKeys`` only order or retain what a merge patch
    keeps anyway; ``$patch``, ``$deleteFromPrimitiveList/...`` and the like are refused.
    """
    if isinstance(patch, list):
        return [strategic_as_merge(item) for item in patch]
    if not isinstance(patch, dict):
        return patch
    result = {}
    for key, value in patch.items():
        if key.startswith(("$setElementOrder/", "$retainKeys")):
            continue
        if key.startswith("$"):
            raise ApiError(422, f"strategic merge directive {key} is not emulated")
        result[key] = strategic_as_merge(value)
    return result


def patcher(content_type: str) -> Callable[[Body, Any], Body]:
    """What applies a PATCH body of this media type; 415 before anything else if none does."""
    match content_type:
        case "application/merge-patch+json":
            return apply_merge_patch
        case "application/strategic-merge-patch+json":
            return lambda target, patch: apply_merge_patch(target, strategic_as_merge(patch))
        case "application/json-patch+json":
            return apply_json_patch
        case "application/apply-patch+yaml" | "application/apply-patch+cbor":
            raise ApiError(415, "server-side apply is not emulated")
        case _:
            raise ApiError(415, f"PATCH of type {content_type!r}")


def apply_merge_patch(target: Body, patch: Any) -> Body:
    if not isinstance(patch, dict):
        raise ApiError(400, "a merge patch must be a JSON object")
    result: Body = merge_patch(target, patch)
    return result


def apply_json_patch(target: Body, ops: Any) -> Body:
    """RFC 6902 JSON patch; a failed ``test`` is 422, as kopf's optimistic locking expects."""
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    try:
        result: Body = jsonpatch.JsonPatch(ops).apply(target)
    except jsonpatch.InvalidJsonPatch as error:
        raise ApiError(400, f"invalid JSON patch: {error}") from error
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
        raise ApiError(422, f"the JSON patch cannot be applied: {error}") from error
    return result


# --- Objects ---------------------------------------------------------------------------


def timestamp(moment: datetime.datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as Kubernetes writes ``metav1.Time``."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def content(body: Body, *, has_status: bool) -> Body:
    """What ``generation`` counts: everything but metadata (and status, if a subresource)."""
    skipped = {"metadata", "apiVersion", "kind"} | ({"status"} if has_status else set())
    return {key: value for key, value in body.items() if key not in skipped}


def tidy(body: Body) -> Body:
    """Drop empty metadata lists and maps, which Kubernetes omits (``omitempty``)."""
    meta = body["metadata"]
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]
    return body


def with_status_of(body: Body, source: Body) -> Body:
    """``body`` with its ``.status`` replaced by ``source``'s (absent if absent there)."""
    result = dict(body)
    result.pop("status", None)
    if "status" in source:
        result["status"] = copy.deepcopy(source["status"])
    return result


def check_update(old: Body, new: Body) -> None:
    """Refuse an update naming another object (400) or an older resourceVersion (409)."""
    meta, name = new.get("metadata") or {}, old["metadata"]["name"]
    if meta.get("name", name) != name:
        raise ApiError(400, "the name of the object does not match the URL")
    wanted = meta.get("resourceVersion")
    if wanted and wanted != old["metadata"]["resourceVersion"]:
        message = f'Operation cannot be fulfilled on {old["kind"]} "{name}": the object has been '
        raise ApiError(409, message + "modified; please apply your changes to the latest version")


def keep_server_fields(result: Body, old: Body) -> Body:
    """``result`` with the metadata only the server writes, and the identity, of ``old``."""
    meta = dict(result.get("metadata") or {})
    for field in (*SERVER_MANAGED, "name", "namespace"):
        if field in old["metadata"]:
            meta[field] = old["metadata"][field]
        else:
            meta.pop(field, None)
    return result | {"metadata": meta, "apiVersion": old["apiVersion"], "kind": old["kind"]}


def check_finalizers(old: Body, new: Body) -> None:
    """Refuse new finalizers on an object being deleted (422), as Kubernetes does."""
    added = set(new["metadata"].get("finalizers") or ()) - set(
        old["metadata"].get("finalizers") or ()
    )
    if "deletionTimestamp" in old["metadata"] and added:
        raise ApiError(
            422,
            f"metadata.finalizers: Forbidden: no new finalizers can be added "
            f"if the object is being deleted, found new finalizers {sorted(added)}",
        )


# --- Tables (kubectl get) --------------------------------------------------------------

PATH_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+|\*)\]|\['([^']+)'\]")


def json_path(body: Any, path: str) -> list[Any]:
    """Evaluate the JSONPath subset of printer columns; every value found, in order."""
    found = [body]
    position = 0
    while position < len(path):
        step = PATH_STEP.match(path, position)
        if step is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {position}")
        key, index = step[1] or step[3], step[2]
        following: list[Any] = []
        for value in found:
            if key is not None and isinstance(value, dict) and key in value:
                following.append(value[key])
            elif index == "*" and isinstance(value, list):
                following.extend(value)
            elif index not in (None, "*") and isinstance(value, list) and int(index) < len(value):
                following.append(value[int(index)])
        found, position = following, step.end()
    return found


def human_age(seconds: float) -> str:
    """Kubernetes' HumanDuration (``kubectl get``'s AGE column): 45s, 5m3s, 3h, 12d, 2y."""
    s = int(seconds)
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 730:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 2920 and days % 365 else f"{days // 365}y"


def table(
    bodies: Iterable[Body],
    columns: Sequence[Column],
    *,
    revision: int,
    include: str,
    now: datetime.datetime,
) -> Body:
    """A ``meta.k8s.io/v1`` Table as kube-apiserver makes one for a custom resource.

    As there, a column shows the first value its JSONPath finds; dates (by the column's
    type) become ages;
    non-string values other than numbers and booleans are shown as compact JSON.
    """

    def cell(body: Body, column: Column) -> Any:
        values = json_path(body, column[1])
        if not values or values[0] is None:
            return None
        value = values[0]
        if column_type(column) == "date" and isinstance(value, str):
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return human_age((now - when).total_seconds())
        if isinstance(value, str | int | float | bool):
            return value
        return json.dumps(value, separators=(",", ":"))

    def row_object(body: Body) -> Body | None:
        if include == "None":
            return None
        if include == "Object":
            return body
        meta = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
        return meta | {"metadata": body["metadata"]}

    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "priority": 0,
            "description": "Name must be unique within a namespace.",
        }
    ]
    for column in columns:
        definitions.append(
            {
                "name": column[0],
                "type": column_type(column),
                "format": "",
                "priority": 0,
                "description": f"Custom resource definition column: {column[1]}",
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(revision)},
        "columnDefinitions": definitions,
        "rows": [
            {
                "cells": [body["metadata"]["name"]] + [cell(body, column) for column in columns],
                "object": row_object(body),
            }
            for body in bodies
        ],
    }
