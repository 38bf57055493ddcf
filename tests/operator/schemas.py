"""Custom resources held to their CRDs, as kube-apiserver's apiextensions server does.

:func:`load` reads CRD files (the repository's ``crds/``, never restated here) into
:class:`CustomResource` objects: their names and printer columns for discovery, and the
served version's structural ``openAPIV3Schema`` as a tree of :class:`Node`. A body
written to a custom resource then goes through what the API server does on a create,
an update, a patch or a write to ``/status``:

1. *decoding* (:meth:`CustomResource.prepare`): fields the schema does not declare
   are dropped, silently (*pruning*; ``x-kubernetes-preserve-unknown-fields`` keeps a
   node's unknown fields, ``metadata`` keeps ``ObjectMeta``'s); nulls where the schema
   is not ``nullable`` and has no default are dropped; missing (or null) fields with a
   ``default`` get it, recursively;
2. *validation* (:meth:`CustomResource.validate`), every error at once, each worded
   as the API server words it (kube-openapi's messages inside
   :mod:`tests.operator.fielderrors`' causes): ``type`` (``integer`` also takes an
   integral number; ``x-kubernetes-int-or-string`` takes ``integer,string``;
   ``nullable`` takes null), ``enum``, ``required``, ``minimum``/``maximum`` (and
   exclusive), ``minLength``/``maxLength`` (in characters), ``pattern`` (searched, not
   anchored, as Go's ``regexp.MatchString``), ``minItems``/``maxItems``,
   ``minProperties``/``maxProperties``, ``additionalProperties``; the uniqueness of
   ``x-kubernetes-list-type: set`` and ``map`` items (by their map keys); then the
   ``x-kubernetes-validations`` CEL rules (:mod:`tests.operator.celrules`), unless an
   error above blocks them, as the API server's ``hasBlockingErr`` decides. Transition
   rules see the old value where the API server correlates one: through properties,
   map values (by key) and ``map`` list items (by their keys); never through other
   lists.

A schema keyword the emulator does not apply (``format``, ``multipleOf``,
``x-kubernetes-embedded-resource``...) refuses the CRD at :func:`load`
(:class:`celrules.CrdError`), so a CRD never passes here for a rule unchecked. Not
emulated: validation ratcheting (an update may keep an invalid value it does not
change; stored objects here were always valid under the one CRD loaded), conversion
between versions (only the storage version is served), the cost budget of CEL rules.

Pure but for :func:`load`, which reads files: no state.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.operator import celrules, fielderrors
from tests.operator.celrules import MISSING, CrdError
from tests.operator.fielderrors import FieldError

Body = dict[str, Any]

OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
"""``ObjectMeta``'s fields: anything else in ``metadata`` is dropped on decoding."""

_VALIDATING = frozenset(
    {
        "type",
        "nullable",
        "enum",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "x-kubernetes-int-or-string",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-validations",
    }
)
_DOCUMENTING = frozenset({"description", "title", "example", "externalDocs"})


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of a structural schema, with its CEL rules compiled."""

    type: str = ""
    nullable: bool = False
    enum: tuple[Any, ...] | None = None
    default: Any = MISSING
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_properties: int | None = None
    max_properties: int | None = None
    required: tuple[str, ...] = ()
    properties: Mapping[str, Node] = dataclasses.field(default_factory=dict)
    additional: Node | None = None
    items: Node | None = None
    int_or_string: bool = False
    preserve_unknown: bool = False
    list_type: str = "atomic"
    list_map_keys: tuple[str, ...] = ()
    rules: tuple[celrules.Rule, ...] = ()

    @classmethod
    def of(cls, schema: Mapping[str, Any], where: str = "") -> Node:
        """The node of a structural schema; ``CrdError`` for what is not emulated."""
        unknown = set(schema) - _VALIDATING - _DOCUMENTING
        if unknown:
            raise CrdError(f"{where or '<root>'}: schema keywords not emulated: {sorted(unknown)}")
        extra = schema.get("additionalProperties")
        if extra is not None and not isinstance(extra, Mapping):
            raise CrdError(f"{where}: additionalProperties must be a schema in a structural CRD")
        rules = tuple(
            celrules.Rule.of(rule, f"{where or '<root>'} x-kubernetes-validations[{i}]")
            for i, rule in enumerate(schema.get("x-kubernetes-validations") or ())
        )
        return cls(
            type=str(schema.get("type") or ""),
            nullable=bool(schema.get("nullable")),
            enum=tuple(schema["enum"]) if "enum" in schema else None,
            default=copy.deepcopy(schema["default"]) if "default" in schema else MISSING,
            minimum=schema.get("minimum"),
            maximum=schema.get("maximum"),
            exclusive_minimum=bool(schema.get("exclusiveMinimum")),
            exclusive_maximum=bool(schema.get("exclusiveMaximum")),
            min_length=schema.get("minLength"),
            max_length=schema.get("maxLength"),
            pattern=schema.get("pattern"),
            min_items=schema.get("minItems"),
            max_items=schema.get("maxItems"),
            min_properties=schema.get("minProperties"),
            max_properties=schema.get("maxProperties"),
            required=tuple(schema.get("required") or ()),
            properties={
                name: cls.of(child, fielderrors.child(where, name))
                for name, child in (schema.get("properties") or {}).items()
            },
            additional=cls.of(extra, f"{where}.*") if extra is not None else None,
            items=cls.of(schema["items"], f"{where}[]") if "items" in schema else None,
            int_or_string=bool(schema.get("x-kubernetes-int-or-string")),
            preserve_unknown=bool(schema.get("x-kubernetes-preserve-unknown-fields")),
            list_type=str(schema.get("x-kubernetes-list-type") or "atomic"),
            list_map_keys=tuple(schema.get("x-kubernetes-list-map-keys") or ()),
            rules=rules,
        )

    def child(self, name: str) -> Node | None:
        """The schema of an object's field ``name``: a property, else the map's values."""
        return self.properties.get(name, self.additional)

    @property
    def type_name(self) -> str:
        """What a CEL error calls the node's value (its type; ``int-or-string`` ...)."""
        if self.int_or_string:
            return "int-or-string"
        return self.type or "any"


# --- Decoding: pruning, nulls, defaults -----------------------------------------------


def prune(value: Any, node: Node | None) -> Any:
    """``value`` without the object fields ``node`` does not declare."""
    if node is None:
        return value
    if isinstance(value, dict):
        kept = {}
        for name, item in value.items():
            child = node.child(name)
            if child is not None:
                kept[name] = prune(item, child)
            elif node.preserve_unknown:
                kept[name] = item
        return kept
    if isinstance(value, list):
        return [prune(item, node.items) for item in value]
    return value


def unknown_fields(value: Any, node: Node | None, path: str = "") -> list[str]:
    """The paths of the fields ``prune`` drops: what ``fieldValidation=Strict`` refuses."""
    if node is None:
        return []
    found: list[str] = []
    if isinstance(value, dict):
        for name, item in value.items():
            child = node.child(name)
            where = f"{path}.{name}" if path else str(name)
            if child is not None:
                found += unknown_fields(item, child, where)
            elif not node.preserve_unknown:
                found.append(where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += unknown_fields(item, node.items, f"{path}[{index}]")
    return found


def drop_nulls(value: Any, node: Node | None) -> Any:
    """``PruneNonNullableNullsWithoutDefaults``: remove null fields that may not be null
    and have no default to take their place."""
    if node is None:
        return value
    if isinstance(value, dict):
        kept = {}
        for name, item in value.items():
            child = node.child(name)
            dropped = child is not None and not child.nullable and child.default is MISSING
            if item is None and dropped:
                continue
            kept[name] = drop_nulls(item, child)
        return kept
    if isinstance(value, list):
        return [drop_nulls(item, node.items) for item in value]
    return value


def with_defaults(value: Any, node: Node | None) -> Any:
    """``structuraldefaulting.Default``: each property with a default that is missing (or
    null where it may not be) takes it; then its fields take theirs, recursively."""
    if node is None:
        return value
    if isinstance(value, dict):
        result = dict(value)
        for name, child in node.properties.items():
            if child.default is MISSING:
                continue
            if name not in result or (result[name] is None and not child.nullable):
                result[name] = copy.deepcopy(child.default)
        return {name: with_defaults(item, node.child(name)) for name, item in result.items()}
    if isinstance(value, list):
        return [with_defaults(item, node.items) for item in value]
    return value


# --- Validation -----------------------------------------------------------------------


def _json_type(value: Any) -> str:
    """The JSON type kube-openapi infers from a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(value: Any, node: Node) -> bool:
    allowed = ["integer", "string"] if node.int_or_string else [node.type] if node.type else []
    found = _json_type(value)
    if not allowed or (found == "null" and node.nullable):
        return True
    if found in allowed:
        return True
    if found == "integer" and "number" in allowed:
        return True
    return found == "number" and "integer" in allowed and float(value).is_integer()


def schema_errors(value: Any, node: Node, path: str) -> list[FieldError]:
    """kube-openapi's validation of ``value`` against ``node``, at ``path`` (``spec.x``),
    as ``ValidateCustomResource`` turns each into a field error."""
    if not _type_ok(value, node):
        allowed = "integer,string" if node.int_or_string else node.type
        found = _json_type(value)
        detail = f'{path} in body must be of type {allowed}: "{found}"'
        return [fielderrors.type_invalid(path, found, detail)]
    if value is None:  # kube-openapi checks only the type and the enum of a null
        return _enum_errors(value, node, path)
    errors: list[FieldError] = []
    if isinstance(value, str):
        errors += _string_errors(value, node, path)
    if isinstance(value, int | float) and not isinstance(value, bool):
        errors += _number_errors(value, node, path)
    if isinstance(value, list):
        if node.items is not None:
            for position, item in enumerate(value):
                errors += schema_errors(item, node.items, fielderrors.index(path, position))
        if node.min_items is not None and len(value) < node.min_items:
            detail = f"{path} in body should have at least {node.min_items} items"
            errors.append(fielderrors.invalid(path, len(value), detail))
        if node.max_items is not None and len(value) > node.max_items:
            errors.append(fielderrors.too_many(path, len(value), node.max_items))
    errors += _enum_errors(value, node, path)
    if isinstance(value, dict):
        errors += _object_errors(value, node, path)
    return errors


def _enum_errors(value: Any, node: Node, path: str) -> list[FieldError]:
    if node.enum is None or value in node.enum:
        return []
    choices = [c if isinstance(c, str) else json.dumps(c) for c in node.enum]
    return [fielderrors.not_supported(path, value, choices)]


def _string_errors(value: str, node: Node, path: str) -> list[FieldError]:
    errors = []
    if node.max_length is not None and len(value) > node.max_length:
        errors.append(fielderrors.too_long_max_length(path, node.max_length))
    if node.min_length is not None and len(value) < node.min_length:
        detail = f"{path} in body should be at least {node.min_length} chars long"
        errors.append(fielderrors.invalid(path, value, detail))
    if node.pattern is not None and re.search(node.pattern, value) is None:
        detail = f"{path} in body should match '{node.pattern}'"
        errors.append(fielderrors.invalid(path, value, detail))
    return errors


def _number_errors(value: float, node: Node, path: str) -> list[FieldError]:
    errors = []
    if node.maximum is not None and (
        value >= node.maximum if node.exclusive_maximum else value > node.maximum
    ):
        words = "less than" if node.exclusive_maximum else "less than or equal to"
        detail = f"{path} in body should be {words} {_number(node.maximum)}"
        errors.append(fielderrors.invalid(path, value, detail))
    if node.minimum is not None and (
        value <= node.minimum if node.exclusive_minimum else value < node.minimum
    ):
        words = "greater than" if node.exclusive_minimum else "greater than or equal to"
        detail = f"{path} in body should be {words} {_number(node.minimum)}"
        errors.append(fielderrors.invalid(path, value, detail))
    return errors


def _number(bound: float) -> str:
    return str(int(bound)) if math.isfinite(bound) and float(bound).is_integer() else str(bound)


def _object_errors(value: Mapping[str, Any], node: Node, path: str) -> list[FieldError]:
    count = len(value)
    # kube-openapi answers a property count alone, without looking inside.
    if node.min_properties is not None and count < node.min_properties:
        detail = f"{path} in body should have at least {node.min_properties} properties"
        return [fielderrors.invalid(path, count, detail)]
    if node.max_properties is not None and count > node.max_properties:
        return [fielderrors.too_many(path, count, node.max_properties)]
    errors = []
    for name, item in value.items():
        child = node.child(name)
        if child is not None:
            errors += schema_errors(item, child, f"{path}.{name}" if path else name)
    for name in node.required:
        if name not in value:
            errors.append(fielderrors.required(f"{path}.{name}" if path else name))
    return errors


def list_type_errors(value: Any, node: Node | None, path: str) -> list[FieldError]:
    """``ValidateListSetsAndMaps``: ``set`` items are unique; ``map`` items have their
    keys, and no two the same keys."""
    if node is None:
        return []
    errors = []
    if isinstance(value, dict):
        for name, item in value.items():
            where = f"{path}.{name}" if path else name
            errors += list_type_errors(item, node.child(name), where)
    elif isinstance(value, list):
        seen: list[Any] = []
        for position, item in enumerate(value):
            where = fielderrors.index(path, position)
            if node.list_type == "set":
                if item in seen:
                    errors.append(fielderrors.duplicate(where, item))
                seen.append(item)
            elif node.list_type == "map" and isinstance(item, dict):
                missing = [k for k in node.list_map_keys if k not in item]
                errors += [fielderrors.required(f"{where}.{k}") for k in missing]
                keys = {k: item[k] for k in node.list_map_keys if k in item}
                if not missing and keys in seen:
                    errors.append(fielderrors.duplicate(where, _go_map(keys)))
                seen.append(keys)
            errors += list_type_errors(item, node.items, where)
    return errors


def _go_map(keys: Mapping[str, Any]) -> fielderrors.GoSyntax:
    """A list-map item's keys as Go prints them in a Duplicate error."""
    inner = ", ".join(
        f"{fielderrors.go_value(k)}:{fielderrors.go_value(v)}" for k, v in keys.items()
    )
    return fielderrors.GoSyntax(f"map[string]interface {{}}{{{inner}}}")


def rule_errors(value: Any, old: Any, node: Node | None, path: str) -> list[FieldError]:
    """Every ``x-kubernetes-validations`` rule at and below ``node``, each at every value
    it applies to, with the old value correlated where the API server correlates one."""
    if node is None or value is None:
        return []
    errors = [
        found
        for rule in node.rules
        if (found := rule.check(value, old, field=path, type_name=node.type_name)) is not None
    ]
    for child_value, child_old, child, where in _children(value, old, node, path):
        errors += rule_errors(child_value, child_old, child, where)
    return errors


def _children(
    value: Any, old: Any, node: Node, path: str
) -> Iterator[tuple[Any, Any, Node | None, str]]:
    if isinstance(value, dict):
        before = old if isinstance(old, dict) else {}
        for name, item in value.items():
            where = f"{path}.{name}" if path else name
            yield item, before.get(name, MISSING), node.child(name), where
    elif isinstance(value, list) and node.items is not None:
        previous = _by_map_keys(old, node) if node.list_type == "map" else {}
        for position, item in enumerate(value):
            key = _map_key(item, node) if node.list_type == "map" else None
            yield item, previous.get(key, MISSING), node.items, fielderrors.index(path, position)


def _map_key(item: Any, node: Node) -> Any:
    if not isinstance(item, dict):
        return None
    return tuple(repr(item.get(key)) for key in node.list_map_keys)


def _by_map_keys(old: Any, node: Node) -> dict[Any, Any]:
    if not isinstance(old, list):
        return {}
    return {_map_key(item, node): item for item in old}


BLOCKING = frozenset(
    {
        fielderrors.ErrorType.NOT_SUPPORTED,
        fielderrors.ErrorType.REQUIRED,
        fielderrors.ErrorType.TOO_LONG,
        fielderrors.ErrorType.TOO_MANY,
        fielderrors.ErrorType.TYPE_INVALID,
    }
)
"""Errors after which the API server does not run the CEL rules (``hasBlockingErr``)."""

NOT_CHECKED = fielderrors.invalid(
    "<nil>",
    None,
    "some validation rules were not checked because the object was invalid; correct the "
    "existing errors to complete validation",
)


def _has_rules(node: Node) -> bool:
    children = [*node.properties.values(), node.additional, node.items]
    return bool(node.rules) or any(_has_rules(c) for c in children if c is not None)


def check_transition_rules(node: Node, where: str, correlated: bool = True) -> None:
    """Refuse a transition rule below a list the API server cannot correlate: it
    refuses such a CRD ("oldSelf cannot be used ... atomic list")."""
    for rule in node.rules:
        if rule.transition and not correlated:
            raise CrdError(
                f"{where}: {rule.rule!r} reads oldSelf under a list that is not a map list: "
                "the API server refuses this CRD"
            )
    for name, child in node.properties.items():
        check_transition_rules(child, fielderrors.child(where, name), correlated)
    if node.additional is not None:
        check_transition_rules(node.additional, f"{where}.*", correlated)
    if node.items is not None:
        check_transition_rules(node.items, f"{where}[]", correlated and node.list_type == "map")


# --- The resource ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CustomResource:
    """A custom resource as its CRD defines it (its storage version)."""

    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    subresources: tuple[str, ...]
    printer_columns: tuple[tuple[str, str, str], ...]
    schema: Node

    @property
    def key(self) -> str:
        """``group/version/plural``, as KMock names resources."""
        return f"{self.group}/{self.version}/{self.plural}"

    def prepare(self, body: Body) -> Body:
        """The body as the API server decodes it: pruned, nulls dropped, defaulted."""
        meta = {k: v for k, v in (body.get("metadata") or {}).items() if k in OBJECT_META_FIELDS}
        content = {k: v for k, v in body.items() if k != "metadata"}
        content = with_defaults(drop_nulls(prune(content, self.schema), self.schema), self.schema)
        return {**content, "metadata": meta}

    def unknown(self, body: Body) -> list[str]:
        """The fields of ``body`` its decoding would drop, as ``fieldValidation=Strict``
        names them."""
        meta = body.get("metadata") or {}
        strays = [f"metadata.{k}" for k in meta if k not in OBJECT_META_FIELDS]
        content = {k: v for k, v in body.items() if k not in ("metadata", "apiVersion", "kind")}
        return strays + unknown_fields(content, self.schema)

    def validate(self, body: Body, old: Body | None) -> list[FieldError]:
        """Every schema, list-type and CEL error of a prepared body (``old``: the object
        it replaces, for transition rules)."""
        content = {k: v for k, v in body.items() if k not in ("metadata", "apiVersion", "kind")}
        errors = schema_errors(content, self.schema, "")
        errors += list_type_errors(content, self.schema, "")
        if not _has_rules(self.schema):
            return errors
        if any(error.type in BLOCKING for error in errors):
            return [*errors, NOT_CHECKED]
        before = MISSING if old is None else old
        return errors + rule_errors(content, before, self.schema, "")


def load(directory: Path) -> list[CustomResource]:
    """Every CRD in ``directory`` (``*.yaml``), as the resources it defines."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
            continue
        try:
            found.append(_resource(document))
        except (KeyError, TypeError) as error:
            raise CrdError(f"{path}: not a CRD the emulator can read: {error!r}") from error
        except CrdError as error:
            raise CrdError(f"{path}: {error}") from error
    return found


def _resource(crd: Mapping[str, Any]) -> CustomResource:
    spec = crd["spec"]
    names = spec["names"]
    versions: Sequence[Mapping[str, Any]] = spec["versions"]
    version = next(v for v in versions if v.get("storage"))
    schema = Node.of(version["schema"]["openAPIV3Schema"])
    check_transition_rules(schema, "")
    columns = tuple(
        (str(column["name"]), str(column["jsonPath"]), str(column["type"]))
        for column in version.get("additionalPrinterColumns") or ()
    )
    return CustomResource(
        group=spec["group"],
        version=version["name"],
        plural=names["plural"],
        kind=names["kind"],
        singular=names.get("singular") or names["kind"].lower(),
        namespaced=spec["scope"] == "Namespaced",
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        subresources=tuple(version.get("subresources") or {}),
        printer_columns=columns,
        schema=schema,
    )
