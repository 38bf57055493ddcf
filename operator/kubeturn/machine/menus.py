"""Menus: the events a state offers the Agent it invokes, as tools the Agent can call.

An agent state's Menu is every event handled in ``on`` of that state and of all the
states inside it, in document order (the state's own first, then its descendants'
depth-first); when an event is handled at several places, its first definition gives
the tool's description and schema. Each event becomes a tool of the same name, so a
name must be a valid tool name that no Working tool has, and a description (the
tool's only manual) is required. ``agent.fault``, ``error.expression`` and ``CANCEL``
are raised by the machine, never picked, so they are never offered. No IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeturn.errors import DefinitionError, manifest_path
from kubeturn.machine import model, targets

WORKING_TOOLS = frozenset({"read", "write", "edit", "bash", "grep", "glob"})
"""The Harness's Working tools (``kubeturn_harness.tools.schemas.ToolName``; a test keeps
the two equal). A pick under one of these names would be ambiguous to the model."""

MACHINE_EVENTS = frozenset({"agent.fault", model.ERROR_EXPRESSION, "CANCEL"})
"""Events the machine raises itself; a state may handle them, no Agent picks them."""

MENU_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
"""A tool name every OpenAI-compatible provider accepts."""


def _no_parameters() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True)
class MenuEntry:
    """One event offered to an Agent: a tool of that name."""

    name: str
    description: str
    schema: Mapping[str, Any] = field(default_factory=_no_parameters)
    """JSON Schema of the pick's payload: the tool's parameters."""


def build(
    chart: model.Chart,
) -> tuple[dict[model.StatePath, tuple[MenuEntry, ...]], list[DefinitionError]]:
    """Every agent state's Menu, and the problems of the events they offer, each reported
    once and for the innermost Agent offering the event."""
    menus: dict[model.StatePath, tuple[MenuEntry, ...]] = {}
    problems: dict[tuple[str, str], DefinitionError] = {}
    for state in chart.agent_states():  # document order: an inner Agent's come later
        agent = state.invoke.agent if state.invoke is not None else None
        if agent is None:
            continue
        entries: list[MenuEntry] = []
        for event, first in _offered(chart, state.path).items():
            problems.update(_problems(event, first, agent.slot))
            entries.append(
                MenuEntry(
                    name=event,
                    description=first.description or "",
                    schema=first.schema if first.schema is not None else _no_parameters(),
                )
            )
        menus[state.path] = tuple(entries)
    return menus, list(problems.values())


def _offered(chart: model.Chart, agent_state: model.StatePath) -> dict[str, model.Transition]:
    """Each offered event and the first transition handling it, in document order."""
    offered: dict[str, model.Transition] = {}
    machine = model.machine_of(agent_state)
    for path, state in chart.states.items():
        if path == model.ROOT or not chart.is_within(path, agent_state):
            continue
        if model.machine_of(path) != machine:
            continue  # a fan-out's child Machine hears its own Agents' picks only
        for event, group in state.on.items():
            if event not in MACHINE_EVENTS and group:
                offered.setdefault(event, group[0])
    return offered


def _problems(
    event: str, first: model.Transition, slot: str
) -> dict[tuple[str, str], DefinitionError]:
    """The problems of offering ``event``, keyed by what and where they are."""
    problems = {}
    key_where = manifest_path(targets.state_where(first.source), "on", event)
    if not MENU_NAME.match(event):
        problems[("name", key_where)] = DefinitionError(
            key_where,
            f"{event!r} cannot be offered to the Agent {slot!r}: an offered event is a tool, "
            "so its name is a letter or '_' and then letters, digits, '_' or '-' "
            "(at most 64 characters)",
        )
    elif event in WORKING_TOOLS:
        problems[("name", key_where)] = DefinitionError(
            key_where,
            f"{event!r} is a Working tool's name; an event offered to the Agent {slot!r} "
            "needs another name",
        )
    if not first.description:
        problems[("description", first.where)] = DefinitionError(
            first.where,
            f"an event offered to the Agent {slot!r} needs a description: "
            "add description: saying what the pick means",
        )
    return problems
