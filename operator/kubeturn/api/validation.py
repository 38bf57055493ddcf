"""pydantic's validation errors as ``DefinitionError``s: the one place they are translated.

pydantic reports where in the document a problem is as a tuple; this turns it into the
manifest path users read (``spec.agents.coder.workspace``, ``…on.approve[1].target``)
and rewrites pydantic's wording where it speaks Python (``Extra inputs are not
permitted``) into what to change (``unknown field 'gaurd' (did you mean 'guard'?)``).
A value it quotes has any URL credentials in it redacted. No IO.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Tag, ValidationError
from pydantic_core import ErrorDetails

from kubeturn.api.depth import depth_problems
from kubeturn.api.machine import TRANSITION_SHAPES
from kubeturn.api.run import Run
from kubeturn.api.workspace import Workspace, redacted
from kubeturn.errors import DefinitionError, DefinitionErrors, manifest_path

_KEY = "[key]"
"""pydantic's location item for a mapping's key (rather than its value)."""

BOOLEAN_KEY = (
    "this key was read as a boolean: YAML 1.1 parsers (kubectl's and PyYAML among them) "
    'read an unquoted on, off, yes or no as true or false; quote it, e.g. "on":'
)


def validate_run(document: Any) -> Run:
    """``document`` as a ``Run``; ``DefinitionErrors`` with every shape problem otherwise.

    A spec nested too deep is refused first, with only that: everything after walks the
    spec recursively (``kubeturn.api.depth``)."""
    too_deep = depth_problems(document)
    if too_deep:
        raise DefinitionErrors(too_deep)
    try:
        return Run.model_validate(on_keys_restored(document))
    except ValidationError as error:
        raise DefinitionErrors(definition_errors(error, Run)) from error


def validate_workspace(document: Any) -> Workspace:
    """``document`` as a ``Workspace``; ``DefinitionErrors`` with every shape problem
    otherwise, each at its path (``spec.repos.target.url``)."""
    too_deep = depth_problems(document)
    if too_deep:
        raise DefinitionErrors(too_deep)
    try:
        return Workspace.model_validate(document)
    except ValidationError as error:
        raise DefinitionErrors(definition_errors(error, Workspace)) from error


def on_keys_restored(document: Any) -> Any:
    """The document with ``on`` back where YAML 1.1 read a bare ``on:`` as ``true``.

    kubectl and PyYAML read a bare ``on`` key as the boolean true (kubectl then sends the
    key ``"true"``). No machine or state field is called ``true``, so at those places such
    a key can only be ``on`` (ADR 0011), a fan-out's child Machine's too. A copy is
    changed; the input is not.
    """
    if not isinstance(document, Mapping):
        return document
    spec = document.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("machine"), Mapping):
        return document
    return {**document, "spec": {**spec, "machine": _state_on(spec["machine"])}}


def _state_on(node: Mapping[Any, Any]) -> dict[Any, Any]:
    result = dict(node)
    for key in (True, "true"):
        if key in result and "on" not in result:
            result["on"] = result.pop(key)
    states = result.get("states")
    if isinstance(states, Mapping):
        result["states"] = {
            name: _state_on(state) if isinstance(state, Mapping) else state
            for name, state in states.items()
        }
    invoke = result.get("invoke")
    if isinstance(invoke, Mapping):
        fan_out = invoke.get("forEach")
        if isinstance(fan_out, Mapping) and isinstance(fan_out.get("machine"), Mapping):
            # A fan-out's child Machine is a machine too: its states' `on` read the same.
            child = {**fan_out, "machine": _state_on(fan_out["machine"])}
            result["invoke"] = {**invoke, "forEach": child}
    return result


def definition_errors(error: ValidationError, model: type[BaseModel]) -> list[DefinitionError]:
    """Each of ``error``'s problems at its manifest path; ``model`` is what was validated."""
    return [_translate(detail, model) for detail in error.errors(include_url=False)]


def _translate(detail: ErrorDetails, model: type[BaseModel]) -> DefinitionError:
    loc = detail["loc"]
    kind = detail["type"]
    if loc and loc[-1] == _KEY:  # a key is not an index, even when YAML made it a number
        path = manifest_path("", *_written(loc[:-2]), str(loc[-2]))
        return DefinitionError(path, f"the key {loc[-2]!r}: {_lower(detail['msg'])}")
    if kind == "invalid_key":  # pydantic locates it by the key itself, a bool as 1 or 0
        key = detail["input"]
        path = manifest_path("", *_written(loc[:-1]), _key_text(key))
        message = BOOLEAN_KEY if isinstance(key, bool) else f"a key must be a string; got {key!r}"
        return DefinitionError(path, message)
    path = manifest_path("", *_written(loc))
    if kind == "missing":
        return DefinitionError(path, "is required; add it")
    if kind == "extra_forbidden":
        name = str(loc[-1])
        if name.lower() in {"true", "false"}:
            return DefinitionError(path, BOOLEAN_KEY)
        close = difflib.get_close_matches(name, _fields_at(model, loc[:-1]), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return DefinitionError(path, f"unknown field {name!r}{hint}")
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return DefinitionError(
            path, f"should be a mapping (an object); got {_type_name(detail['input'])}"
        )
    if kind == "value_error":
        cause = (detail.get("ctx") or {}).get("error")
        return DefinitionError(path, str(cause) if cause is not None else detail["msg"])
    message = _lower(detail["msg"])
    given = detail.get("input")
    if isinstance(given, str):
        given = redacted(given)
    if isinstance(given, str | int | float | bool) and kind != "transition_shape":
        message += f"; got {given!r}"
    return DefinitionError(path, message)


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model found at ``loc`` (as pydantic wrote it, shape tags
    included), or none if no model is there."""
    node: Any = model
    for part in loc:
        node = _step(node, part)
        if node is None:
            return []
    node = _unwrap(node, None)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return [info.alias or name for name, info in node.model_fields.items()]
    return []


def _step(node: Any, part: int | str) -> Any:
    """The type found one location item below ``node``."""
    if isinstance(part, str) and part in TRANSITION_SHAPES:
        return _unwrap(node, part)
    node = _unwrap(node, None)
    if isinstance(node, type) and issubclass(node, BaseModel):
        for name, info in node.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
        return None
    origin, args = typing.get_origin(node), typing.get_args(node)
    if origin is dict and isinstance(part, str):
        return args[1]
    if origin is list and isinstance(part, int):
        return args[0]
    return None


def _unwrap(node: Any, tag: str | None) -> Any:
    """``node`` without ``Annotated`` and ``| None``; a union's member tagged ``tag``."""
    while True:
        origin = typing.get_origin(node)
        if origin is typing.Annotated:
            node = typing.get_args(node)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [m for m in typing.get_args(node) if m is not type(None)]
            tagged = [m for m in members if tag is not None and _tag(m) == tag]
            if tagged:
                node = tagged[0]
            elif len(members) == 1:
                node = members[0]
            else:
                return node
        else:
            return node


def _tag(node: Any) -> str | None:
    if typing.get_origin(node) is typing.Annotated:
        for meta in node.__metadata__:
            if isinstance(meta, Tag):
                return meta.tag
    return None


def _written(loc: tuple[int | str, ...]) -> list[int | str]:
    """``loc`` as the user wrote it: without the tags of a transition's shape."""
    return [part for part in loc if part not in TRANSITION_SHAPES]


def _key_text(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _lower(message: str) -> str:
    return message[:1].lower() + message[1:]


def _type_name(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {redacted(value)!r}"
    if value is None:
        return "null"
    return f"{type(value).__name__} {value!r}"
