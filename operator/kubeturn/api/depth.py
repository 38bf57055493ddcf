"""How deep a Run's spec may nest: checked by one iterative walk before anything recursive
reads the spec, each too-deep place refused with its path (ADR 0050).

The API server takes JSON nested 10,000 levels deep where a schema keeps unknown fields
(``spec.input``, ``spec.machine``'s states), and a few KiB of YAML get there. Everything
that reads a spec after this walk recurses once per level or more: pydantic (a nested
state is a nested model), the Machine compiler, CEL's conversion of ``input`` and
``context``, JSON Schema validation of a pick, the snapshot written to ``Run.status``.
These bounds keep each of them far inside Python's recursion limit (1,000 frames), and
far beyond what a Run needs. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, auto
from typing import Any

from kubeturn.errors import DefinitionError, manifest_path

MAX_VALUE_DEPTH = 64
"""Levels of objects and lists in free JSON a Run carries: ``spec.input``,
``spec.machine.context``, a signal's ``data``, a transition's ``schema`` (``{}`` is one).
The same bound as a pick's payload (``kubeturn.orchestrator.bodies.MAX_DEPTH``): these
values meet a pick's in the same CEL activations, Menus and snapshot, each walked by a
few Python frames a level. A task description or a payload schema is a few levels."""

MAX_STATE_DEPTH = 32
"""Levels of states in states (a top-level state is at level 1). The compiler and
pydantic take a few frames per level; statecharts people write nest a handful."""

MAX_SPEC_DEPTH = 256
"""Levels of objects and lists anywhere in ``spec``, counted from ``spec``: room for the
deepest states with transitions and a schema of the deepest free JSON (about 2 ×
``MAX_STATE_DEPTH`` + ``MAX_VALUE_DEPTH`` + a few), and a bound on whatever else a
schema that keeps unknown fields lets through, before pydantic reads it."""

MAX_PATH_PARTS = 10
"""A too-deep path is shown to this many parts, then ``…``: enough to find the place."""
MAX_KEY_SHOWN = 40
"""A key in a shown path is cut to this many characters."""


class _Role(Enum):
    """What a node of the spec is, which says how deep it may nest."""

    SPEC = auto()
    MACHINE = auto()
    STATES = auto()
    STATE = auto()
    TRANSITIONS = auto()
    """The values of ``on`` or ``after``: event (or delay) to transition(s)."""
    TRANSITION = auto()
    """A target, a transition object, or a list of them."""
    INVOKE = auto()
    FAN_OUT = auto()
    """An invoke's ``forEach``: its ``machine`` nests states as deep as its state's."""
    VALUE = auto()
    """Free JSON: bounded by ``MAX_VALUE_DEPTH`` from its root."""
    OTHER = auto()


_FREE_VALUE = {
    (_Role.SPEC, "input"),
    (_Role.MACHINE, "context"),
    (_Role.TRANSITION, "schema"),
}


def depth_problems(document: Any) -> list[DefinitionError]:
    """Every place in ``document``'s spec that nests deeper than its bound, one per
    subtree (nothing below a too-deep place is looked at); none when all fit."""
    if not isinstance(document, Mapping) or not isinstance(document.get("spec"), Mapping):
        return []
    problems: list[DefinitionError] = []
    # (node, role, levels below spec, levels of free JSON or of states, path)
    todo: list[tuple[Any, _Role, int, int, tuple[str | int, ...]]] = [
        (document["spec"], _Role.SPEC, 0, 0, ("spec",))
    ]
    while todo:
        node, role, depth, inner, path = todo.pop()
        if depth > MAX_SPEC_DEPTH:
            problems.append(_too_deep(path, f"nested deeper than {MAX_SPEC_DEPTH} levels"))
            continue
        if role is _Role.VALUE and inner > MAX_VALUE_DEPTH:
            problems.append(_too_deep(path, f"nested deeper than {MAX_VALUE_DEPTH} levels"))
            continue
        if role is _Role.STATE and inner > MAX_STATE_DEPTH:
            problems.append(_too_deep(path, f"states nested deeper than {MAX_STATE_DEPTH} levels"))
            continue
        children: Any = (
            ((_key(key), child) for key, child in node.items())
            if isinstance(node, Mapping)
            else enumerate(node)
        )
        for key, child in children:
            if not isinstance(child, Mapping | list):
                continue
            child_role, child_inner = _child(role, inner, path, key)
            todo.append((child, child_role, depth + 1, child_inner, (*path, key)))
    return sorted(problems, key=lambda problem: problem.path)


def _child(role: _Role, inner: int, path: tuple[str | int, ...], key: Any) -> tuple[_Role, int]:
    """The role of the child at ``key`` of a node of ``role``, and its inner depth."""
    if role is _Role.VALUE:
        return _Role.VALUE, inner + 1
    if (role, key) in _FREE_VALUE:
        return _Role.VALUE, 1
    if role is _Role.SPEC:
        return (_Role.MACHINE if key == "machine" else _Role.OTHER), 0
    if role is _Role.OTHER and len(path) == 3 and path[1] == "signals" and key == "data":
        return _Role.VALUE, 1
    if role in (_Role.MACHINE, _Role.STATE):
        if key == "states":
            return _Role.STATES, inner
        if key in ("on", "after"):
            return _Role.TRANSITIONS, 0
        if key in ("always", "onDone"):
            return _Role.TRANSITION, 0
        if key == "invoke":
            return _Role.INVOKE, inner
        return _Role.OTHER, 0
    if role is _Role.STATES:
        return _Role.STATE, inner + 1
    if role is _Role.TRANSITIONS:
        return _Role.TRANSITION, 0
    if role is _Role.TRANSITION:
        return (_Role.TRANSITION if isinstance(key, int) else _Role.OTHER), 0
    if role is _Role.INVOKE and key in ("onDone", "onError"):
        return _Role.TRANSITION, 0
    if role is _Role.INVOKE and key == "forEach":
        return _Role.FAN_OUT, inner
    if role is _Role.FAN_OUT and key == "machine":
        return _Role.MACHINE, inner
    return _Role.OTHER, 0


def _key(key: Any) -> str:
    """A mapping's key as a path part (YAML may make a key a number or a boolean)."""
    return key if isinstance(key, str) else str(key)


def _too_deep(path: tuple[str | int, ...], said: str) -> DefinitionError:
    return DefinitionError(shown_path(path), said)


def shown_path(path: tuple[str | int, ...]) -> str:
    """``path`` as a manifest path, cut to ``MAX_PATH_PARTS`` parts and long keys cut."""
    parts = [
        part if isinstance(part, int) or len(part) <= MAX_KEY_SHOWN else part[:MAX_KEY_SHOWN] + "…"
        for part in path[:MAX_PATH_PARTS]
    ]
    shown = manifest_path("", *parts)
    return shown + "…" if len(path) > MAX_PATH_PARTS else shown
