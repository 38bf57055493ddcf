"""Loading a Run manifest: validated, compiled and checked as a whole, or refused with
every problem at once.

``load_run`` is the one way from a manifest to a runnable machine. Shape problems
(pydantic) come first; then the machine is compiled and every whole-manifest check runs
(targets, kinds, reachability, Menus, expressions, durations, and on request the
Workspace that Agents and commands need), each problem collected with its manifest path
into one ``DefinitionErrors``. A shape problem does not hide the machine's other
problems: the machine, its malformed parts cut away, is checked all the same, and both
are reported at once. No IO:
``load_run_yaml`` parses text it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from kubeturn import api
from kubeturn.api.depth import MAX_SPEC_DEPTH, MAX_STATE_DEPTH, MAX_VALUE_DEPTH, depth_problems
from kubeturn.api.validation import on_keys_restored, validate_run
from kubeturn.errors import DefinitionError, DefinitionErrors
from kubeturn.machine import model, reachability, targets
from kubeturn.machine.compiler import Compiled, compile_machine
from kubeturn.machine.menus import MenuEntry
from kubeturn.machine.menus import build as build_menus
from kubeturn.machine.pruning import sound_part

__all__ = [
    "DEFAULT_NAMESPACE",
    "LoadedRun",
    "MenuEntry",
    "load_run",
    "load_run_yaml",
    "parse_yaml",
    "parse_yaml_documents",
]

DEFAULT_NAMESPACE = "default"
"""The namespace of a manifest that names none, as kubectl's default context gives it;
only a manifest read outside a cluster (the local runner) lacks one."""


@dataclass(frozen=True)
class LoadedRun:
    """A Run whose manifest passed every check: its spec, compiled Chart and Menus."""

    name: str
    namespace: str
    """``metadata.namespace``, or ``DEFAULT_NAMESPACE`` when the manifest names none."""
    spec: api.RunSpec
    chart: model.Chart
    agents: Mapping[str, api.AgentSlot]
    menus: Mapping[model.StatePath, tuple[MenuEntry, ...]]
    """Each agent state's Menu, in document order (see ``kubeturn.machine.menus``)."""

    def menu(self, state: model.StatePath) -> list[MenuEntry]:
        """The Menu the state at ``state`` offers its Agent; ``KeyError`` if it invokes none."""
        try:
            return list(self.menus[model.template(state)])
        except KeyError:
            raise KeyError(f"the state {state!r} invokes no Agent, so it has no Menu") from None


def load_run(document: Mapping[str, Any], *, workspace_required: bool = False) -> LoadedRun:
    """The checked, compiled Run of ``document``; ``DefinitionErrors`` listing every problem.

    ``workspace_required``: a Run that invokes an Agent or a command must name
    ``spec.workspace``. The operator asks for it, since on a cluster they run only in a
    Workspace's sandbox; the local runner does not, since it lends such a Run its workdir
    (ADR 0023).
    """
    try:
        run = validate_run(document)
    except DefinitionErrors as shape:
        beyond = _machine_problems_beyond(document, shape.errors)
        if not beyond:
            raise
        raise DefinitionErrors([*shape.errors, *beyond]) from shape
    compiled = compile_machine(run.spec.machine, run.spec.agents)
    menus, whole = _whole_machine(compiled)
    problems = [*compiled.problems, *whole]
    problems.extend(_deliver_slots(compiled.chart, run.spec))
    problems.extend(_continued_at_once(compiled.chart))
    if workspace_required and run.spec.workspace is None:
        problems.extend(_without_workspace(compiled.chart))
    if problems:
        raise DefinitionErrors(problems)
    return LoadedRun(
        name=run.metadata.name,
        namespace=run.metadata.namespace or DEFAULT_NAMESPACE,
        spec=run.spec,
        chart=compiled.chart,
        agents=run.spec.agents,
        menus=menus,
    )


def _whole_machine(
    compiled: Compiled, *, reachability_too: bool = True
) -> tuple[dict[model.StatePath, tuple[MenuEntry, ...]], list[DefinitionError]]:
    """The Menus of a compiled machine, and the problems of its Menus and (unless told not
    to) its reachability."""
    menus, problems = build_menus(compiled.chart)
    if not reachability_too:
        return menus, problems
    problems.extend(
        DefinitionError(
            targets.state_where(path),
            f"no transition leads to the state {path!r}: target it from another state, or "
            "remove it",
        )
        for path in reachability.unreachable(compiled.chart, assumed=compiled.explained)
    )
    return menus, problems


def _machine_problems_beyond(
    document: Any, shape: Sequence[DefinitionError]
) -> list[DefinitionError]:
    """The machine's own problems (targets, expressions, Menus) in a manifest that has shape
    problems, so that one edit fixes them all.

    Shape problems inside the machine are cut away first (``kubeturn.machine.pruning``);
    then what is said at or around a cut place is not said again, nor is reachability (a
    state may be unreachable only because the transition to it was cut). None when the
    whole, the spec or the machine itself is wrong, the machine cannot be cut sound, or
    the manifest nests too deep (then only that is said)."""
    if any(p.path in ("", "spec", "spec.machine") for p in shape) or depth_problems(document):
        return []
    restored = on_keys_restored(document)
    spec = restored.get("spec") if isinstance(restored, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    sound = sound_part(spec.get("machine"), "spec.machine")
    if sound is None:
        return []
    machine, cut = sound
    agents: dict[str, api.AgentSlot] = {}
    written = spec.get("agents")
    for name, slot in written.items() if isinstance(written, Mapping) else []:
        try:
            agents[str(name)] = api.AgentSlot.model_validate(slot)
        except ValidationError:
            # Its problems are among the shape's; the machine may still name it.
            agents[str(name)] = api.AgentSlot.model_construct(instructions="-")
    compiled = compile_machine(machine, agents)
    said = {str(problem) for problem in shape}
    whole = _whole_machine(compiled, reachability_too=not cut)[1]
    return [
        problem
        for problem in [*compiled.problems, *whole]
        if str(problem) not in said and not any(_around(problem.path, place) for place in cut)
    ]


def _around(path: str, place: str) -> bool:
    """Whether ``path`` is ``place``, inside it, or one of its ancestors."""
    inner, outer = (path, place) if len(path) >= len(place) else (place, path)
    return inner == outer or inner.startswith((outer + ".", outer + "["))


def _without_workspace(chart: model.Chart) -> list[DefinitionError]:
    """The problem of a Run with no Workspace whose states invoke something (none if none
    does: a Machine of timers and signals alone runs anywhere)."""
    needs = []
    for path, state in chart.states.items():
        if state.invoke is None:
            continue
        if state.invoke.agent is not None:
            needs.append(f"the state {path!r} invokes the Agent {state.invoke.agent.slot!r}")
        elif state.invoke.deliver is not None:
            needs.append(f"the state {path!r} delivers the repo slot {state.invoke.deliver.slot!r}")
        else:
            needs.append(f"the state {path!r} runs a command (exec)")
    if not needs:
        return []
    return [
        DefinitionError(
            "spec.workspace",
            f"missing, and {'; '.join(needs)}: on a cluster Agents and commands run in a "
            "Workspace's sandbox. Name one (`workspace: {name: <workspace>}`) or describe "
            "one the Run owns (`workspace: {template: {repos: ...}}`)",
        )
    ]


def _continued_at_once(chart: model.Chart) -> list[DefinitionError]:
    """Two states that continue one Agent's conversation and can be active at once (in
    regions of one parallel state): a conversation takes one Turn at a time, so the
    second would be refused at run time; say so now, naming both."""
    continuing = [
        (state.path, state.invoke.agent.slot)
        for state in chart.agent_states()
        if state.invoke is not None and state.invoke.agent and state.invoke.agent.continue_
    ]
    problems = []
    for index, (second, slot) in enumerate(continuing):
        for first, other in continuing[:index]:
            if other != slot or model.machine_of(first) != model.machine_of(second):
                # Each Machine (the Run's, each fan-out child) has its own conversations.
                continue
            common = next(p for p in chart.ancestors(first) if chart.is_within(second, p))
            if common in (first, second) or chart.states[common].kind is not model.Kind.PARALLEL:
                continue
            problems.append(
                DefinitionError(
                    targets.state_where(second) + ".invoke.agent.continue",
                    f"the states {first!r} and {second!r} both continue the Agent "
                    f"{slot!r}'s conversation, and as regions of the parallel state "
                    f"{common!r} they are active at once: a conversation takes one Turn at "
                    "a time. Drop continue: true from one, or give it another agent slot",
                )
            )
    return problems


def _deliver_slots(chart: model.Chart, spec: api.RunSpec) -> list[DefinitionError]:
    """A delivery's slot must be a repo slot of the Workspace, where the manifest says which
    slots it has (a template); a Workspace named is checked when the delivery runs."""
    if spec.workspace is not None and spec.workspace.template is None:
        return []
    repos = spec.workspace.template.repos if spec.workspace and spec.workspace.template else {}
    problems = []
    for path, state in chart.states.items():
        deliver = state.invoke.deliver if state.invoke is not None else None
        if deliver is None or deliver.slot in repos:
            continue
        where = targets.state_where(path) + ".invoke.deliver.slot"
        if repos:
            listed = ", ".join(sorted(repos))
            why = f"no repo slot {deliver.slot!r} in the Workspace (its repos: {listed})"
        else:
            why = (
                f"no repo slot {deliver.slot!r}: the Run has no Workspace with repos to deliver; "
                "give it one (`workspace: {template: {repos: {<slot>: {url: ...}}}}`)"
            )
        problems.append(DefinitionError(where, why))
    return problems


def load_run_yaml(
    text: str, source: str = "<manifest>", *, workspace_required: bool = False
) -> LoadedRun:
    """``load_run`` of one YAML document; ``source`` (a file name) names it in YAML errors."""
    return load_run(parse_yaml(text, source), workspace_required=workspace_required)


def parse_yaml(text: str, source: str = "<manifest>") -> Any:
    """One YAML document; ``DefinitionErrors`` naming ``source`` and the place otherwise.

    PyYAML recurses a few frames per level: a document nested some hundreds of levels
    deep, far beyond what a Run may nest (``kubeturn.api.depth``), cannot be read.
    """
    return _parsed(lambda: yaml.safe_load(text), source)


def parse_yaml_documents(text: str, source: str = "<manifest>") -> list[Any]:
    """Every YAML document of ``text`` (split by ``---``; empty ones left out), as
    ``kubectl apply -f`` reads a file; ``DefinitionErrors`` as ``parse_yaml``."""
    documents = _parsed(lambda: list(yaml.safe_load_all(text)), source)
    return [document for document in documents if document is not None]


def _parsed(parse: Callable[[], Any], source: str) -> Any:
    try:
        return parse()
    except RecursionError as error:
        raise DefinitionErrors(
            [
                DefinitionError(
                    source,
                    "nested too deep to read: a Run's spec nests at most "
                    f"{MAX_SPEC_DEPTH} levels, its free JSON (input, context) "
                    f"{MAX_VALUE_DEPTH} and its states {MAX_STATE_DEPTH}",
                )
            ]
        ) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise DefinitionErrors(
            [DefinitionError(f"{source}{at}", f"not valid YAML: {problem}")]
        ) from error
