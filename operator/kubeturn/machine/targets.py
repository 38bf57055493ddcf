"""State paths, and how a transition's ``target`` names a state (SCXML/xstate-lite).

A path joins state names with ``.``; names never hold a dot, so a path's parent is its
text before the last dot, and the top-level states' parent is ``ROOT`` (``""``).

A fan-out state's child Machine lives under ``<state>[]`` (``targets.child_root``), its
own root: its targets resolve among its own states only, never its parent's.

A target is resolved from the transition's source state:

- ``name``: the nearest state of that name among the children of the source's parent
  (its siblings, itself included), then of each further ancestor, up to the root's
  children. A transition on the root (``spec.machine.on``) starts at the root's children.
- ``a.b.c``: ``a`` is found as above, then ``b`` is its child and ``c`` that one's.
- ``.b``: a child of the source itself (``.b.c`` goes on down).

Nearest wins, so a state's own siblings can shadow a top-level state of the same name;
a path from the top (``work.review``) reaches past them. No IO.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection

from kubeturn.errors import manifest_path
from kubeturn.machine.model import ROOT, StatePath

STATE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,62}$")
"""A state's name: one segment of its path and of instance ids, so no dot or slash."""

CHILD_ROOT = "[]"
"""What a fan-out state's path takes to name its child Machine's root."""

_TARGET = re.compile(r"^\.?[A-Za-z0-9_][A-Za-z0-9_-]*(\.[A-Za-z0-9_][A-Za-z0-9_-]*)*$")


def parent(path: StatePath) -> StatePath:
    """The parent of a state other than the root (a child Machine's root's: its fan-out
    state)."""
    if path.endswith(CHILD_ROOT):
        return StatePath(path[: -len(CHILD_ROOT)])
    return StatePath(path.rpartition(".")[0])


def child_root(path: StatePath) -> StatePath:
    """The root of the child Machine of the fan-out state ``path`` (``fix[]``)."""
    return StatePath(path + CHILD_ROOT)


def child(path: StatePath, name: str) -> StatePath:
    return StatePath(f"{path}.{name}" if path else name)


def name_of(path: StatePath) -> str:
    return path.rpartition(".")[2]


def state_where(path: StatePath) -> str:
    """The manifest path a state is written at: ``spec.machine.states.a.states.b``; a
    child Machine's states are under its fan-out's ``invoke.forEach.machine``."""
    where = "spec.machine"
    for name in path.split(".") if path else ():
        if name.endswith(CHILD_ROOT):
            name = name[: -len(CHILD_ROOT)]
            where = manifest_path(where, "states", name, "invoke", "forEach", "machine")
        else:
            where = manifest_path(where, "states", name)
    return where


def is_target(text: str) -> bool:
    """Whether ``text`` has the shape of a target (names joined by dots, maybe a leading dot)."""
    return bool(_TARGET.match(text))


def resolve(states: Collection[StatePath], source: StatePath, target: str) -> StatePath | None:
    """The state ``target`` names from ``source``, or None; ``target`` must pass ``is_target``."""
    if target.startswith("."):
        found = _down(source, target[1:])
        return found if found in states else None
    first = target.partition(".")[0]
    scope = parent(source) if source != ROOT and not source.endswith(CHILD_ROOT) else source
    while True:
        if child(scope, first) in states:
            found = _down(scope, target)
            return found if found in states else None
        if scope == ROOT or scope.endswith(CHILD_ROOT):
            return None  # a child Machine's transitions stay inside it
        scope = parent(scope)


def child_machine(path: StatePath) -> StatePath:
    """The root of the innermost child Machine ``path`` belongs to (``fix[]``), or ROOT."""
    return (
        StatePath(path[: path.rindex(CHILD_ROOT) + len(CHILD_ROOT)]) if CHILD_ROOT in path else ROOT
    )


def outside_child(
    states: Collection[StatePath], source: StatePath, target: str
) -> StatePath | None:
    """The state ``target`` would name were ``source``'s child Machine not closed: one of
    an enclosing Machine, out of reach (None when there is none, or ``source`` is in the
    Run's own Machine)."""
    machine = child_machine(source)
    while machine != ROOT:
        fan_out = parent(machine)
        found = resolve(states, fan_out, target)
        if found is not None:
            return found
        machine = child_machine(fan_out)
    return None


def suggest(states: Collection[StatePath], target: str) -> str | None:
    """What the user probably meant by a ``target`` that names no state: the path of a
    state of that very name (out of reach from where it was written), else the closest
    state name or path."""
    name = target.rpartition(".")[2]
    for path in states:
        if path != ROOT and name_of(path) == name and path != target.lstrip("."):
            return path
    candidates = {name_of(p) for p in states if p != ROOT} | {p for p in states if p != ROOT}
    close = difflib.get_close_matches(target.lstrip("."), sorted(candidates - {target}), n=1)
    return close[0] if close else None


def did_you_mean(suggestion: str | None) -> str:
    return f" (did you mean {suggestion!r}?)" if suggestion else ""


def _down(base: StatePath, relative: str) -> StatePath:
    path = base
    for name in relative.split("."):
        path = child(path, name)
    return path
