"""The sound part of a machine whose shape is wrong in places, so that its other problems
(unknown targets, bad CEL, Menus) are reported with the shape problems at once.

Each part a shape problem names is cut at the smallest enclosing unit that is optional:
the bad field itself; else its transition, which becomes a stub that handles the same
event and goes nowhere (so Menus and list positions stay as written); a state that is
itself no mapping becomes an empty atomic state, so its name still resolves as a target.
No state is ever removed, and no state's ``states`` is ever cut: then the machine would
lack names the manifest gives, and targets would be wrongly reported unknown. What cannot
be cut so (the machine's ``initial`` or ``states``, a state's ``states``, a key of the
wrong type) leaves no sound part: ``None``. No IO.
"""

from __future__ import annotations

import copy
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, Tag, ValidationError

from kubeturn import api
from kubeturn.api.machine import TRANSITION_SHAPES, OneTransition, TransitionSpec
from kubeturn.errors import manifest_path

Loc = tuple[int | str, ...]

ROUNDS = 8
"""Re-validations at most: a cut can only expose a problem of its enclosing unit (an
invoke left with neither agent nor exec), so a few rounds reach a sound machine."""

JUDGED_BY: Mapping[str, tuple[str, ...]] = {"type": ("output", "outcome")}
"""A state's fields whose problems a cut field decides: a state whose type is cut is no
final, so its output and outcome are wrong only for the cut."""

STUB: dict[str, Any] = {"description": "-"}
"""What a malformed transition becomes: it handles its event (described, so a Menu offers
it as before) and goes nowhere."""


class _Cut(Enum):
    REMOVE = "remove"
    STUB = "stub"
    EMPTY_STATE = "empty state"


def sound_part(machine: Any, base: str) -> tuple[api.MachineSpec, tuple[str, ...]] | None:
    """``machine`` (as written) with its malformed parts cut, and the paths cut (under
    ``base``, its manifest path); ``None`` when some malformed part cannot be cut."""
    if not isinstance(machine, Mapping):
        return None
    written: Any = copy.deepcopy(dict(machine))
    cut: list[Loc] = []
    for _ in range(ROUNDS):
        try:
            spec = api.MachineSpec.model_validate(written)
        except ValidationError as error:
            cuts = [_cut_for(detail["loc"], detail["type"]) for detail in error.errors()]
            if any(c is None for c in cuts):
                return None
            for where, how in sorted({c for c in cuts if c is not None}, key=lambda c: -len(c[0])):
                if _apply(written, where, how):
                    cut.append(where)
                    judged = JUDGED_BY.get(str(where[-1]), ())
                    cut.extend((*where[:-1], field) for field in judged)
            continue
        return spec, tuple(manifest_path(base, *where) for where in cut)
    return None


def _cut_for(loc: Loc, kind: str) -> tuple[Loc, _Cut] | None:
    """Where and how to cut for a problem at ``loc`` (pydantic's, shape tags included)."""
    if kind == "invalid_key" or (loc and loc[-1] == "[key]"):
        return None
    node: Any = api.MachineSpec
    best: tuple[Loc, _Cut] | None = None
    path: list[int | str] = []
    for index, part in enumerate(loc):
        if part in TRANSITION_SHAPES:
            node = _tagged(node, str(part))
            continue
        last = index == len(loc) - 1
        parent = _bare(node)
        path.append(part)
        here = tuple(path)
        if isinstance(parent, type) and issubclass(parent, BaseModel):
            field = _field(parent, part)
            if field is None:  # an unknown field
                return here, _Cut.REMOVE
            node = field.annotation
            if part == "states":  # never cut: its states' names are targets
                best = None
            elif _is_transition(node):
                best = (here, _Cut.STUB)
            elif not field.is_required():
                best = (here, _Cut.REMOVE)
        elif typing.get_origin(parent) is dict:
            node = typing.get_args(parent)[1]
            if _bare(node) is api.StateSpec:
                best = (here, _Cut.EMPTY_STATE) if last else None
            elif _is_transition(node):
                best = (here, _Cut.STUB)
            else:
                best = (here, _Cut.REMOVE)
        elif typing.get_origin(parent) is list:
            node = typing.get_args(parent)[0]
            if _is_transition(node):
                best = (here, _Cut.STUB)
        else:
            break
    return best


def _apply(written: Any, where: Loc, how: _Cut) -> bool:
    """Cut ``where`` in ``written``; ``False`` if an earlier cut already took it away."""
    node = written
    for part in where[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = where[-1]
    if isinstance(node, dict) and last in node:
        if how is _Cut.REMOVE:
            del node[last]
        else:
            node[last] = dict(STUB) if how is _Cut.STUB else {}
        return True
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = dict(STUB)
        return True
    return False


def _field(model: type[BaseModel], name: int | str) -> Any:
    for field_name, info in model.model_fields.items():
        if name in (field_name, info.alias):
            return info
    return None


def _is_transition(node: Any) -> bool:
    return _optional(node) in (TransitionSpec, OneTransition)


def _optional(node: Any) -> Any:
    """``node`` without ``| None``."""
    if typing.get_origin(node) in (typing.Union, types.UnionType):
        members = [m for m in typing.get_args(node) if m is not type(None)]
        if len(members) == 1:
            return members[0]
    return node


def _tagged(node: Any, tag: str) -> Any:
    """The member of the union ``node`` that the shape tag ``tag`` names."""
    for member in typing.get_args(_bare(node)):
        if typing.get_origin(member) is typing.Annotated and any(
            isinstance(meta, Tag) and meta.tag == tag for meta in member.__metadata__
        ):
            return member
    return node


def _bare(node: Any) -> Any:
    """``node`` without ``| None`` and ``Annotated``."""
    node = _optional(node)
    while typing.get_origin(node) is typing.Annotated:
        node = _optional(typing.get_args(node)[0])
    return node
