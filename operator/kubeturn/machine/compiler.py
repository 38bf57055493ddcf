"""``spec.machine`` compiled into a ``model.Chart``, with every problem found on the way.

The compiler never stops at the first problem: it records it at its manifest path,
puts a stand-in where the broken part was (no guard, an empty template, no target) and
goes on, so one load reports everything. A Chart compiled with problems is for the
remaining checks only and is never run. No IO.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from kubeturn import api
from kubeturn.errors import DefinitionError, manifest_path, shown
from kubeturn.machine import model, targets
from kubeturn.machine.expressions import CelExpression, CelTemplate

ASSIGN_KEY = re.compile(r"^context(\.[A-Za-z_][A-Za-z0-9_]*)+$")
"""``context.<name>[.<name>...]``: names CEL can read back as ``context.a.b``."""

_BROKEN_TEMPLATE = CelTemplate("")
"""Stands in for a template that did not compile, so the rest can still be checked."""
_NOTHING = CelExpression("[]")
"""Stands in for a fan-out's items that did not compile."""

_FINAL_HAS = {
    "states": "has no child states",
    "initial": "has no child states",
    "on": "takes no transitions",
    "after": "takes no transitions",
    "always": "takes no transitions",
    "onDone": "takes no transitions",
    "invoke": "invokes nothing",
}


@dataclass(frozen=True)
class Compiled:
    chart: model.Chart
    problems: tuple[DefinitionError, ...]
    explained: frozenset[model.StatePath]
    """States a reported problem probably kept from being entered (what a misspelt target
    meant, the children of a compound state with no valid initial): reachability
    assumes them entered, so the problem is not reported again as unreachable states."""


def compile_machine(machine: api.MachineSpec, agents: Mapping[str, api.AgentSlot]) -> Compiled:
    """The Chart of ``machine`` and every problem found compiling it."""
    compiler = _Compiler(agents)
    compiler.gather(model.ROOT, machine.states, "spec.machine.states")
    states = {model.ROOT: compiler.root(model.ROOT, machine, "spec.machine")}
    for path, spec in compiler.specs.items():
        if isinstance(spec, api.MachineSpec):
            where = targets.state_where(path)
            states[path] = compiler.root(path, spec, where)
        else:
            states[path] = compiler.state(path, spec)
    return Compiled(
        chart=model.Chart(states=states, context=dict(machine.context)),
        problems=tuple(compiler.problems),
        explained=frozenset(compiler.explained),
    )


@dataclass
class _Compiler:
    agents: Mapping[str, api.AgentSlot]
    specs: dict[model.StatePath, api.StateSpec | api.MachineSpec] = field(default_factory=dict)
    """Every well-named state, in document order (a parent before its children); a
    fan-out's child Machine is the state ``<fan-out state>[]``, right after it."""
    children: dict[model.StatePath, list[model.StatePath]] = field(default_factory=dict)
    problems: list[DefinitionError] = field(default_factory=list)
    explained: set[model.StatePath] = field(default_factory=set)

    def problem(self, where: str, message: str) -> None:
        self.problems.append(DefinitionError(where, message))

    # ----------------------------------------------------------------------- states

    def gather(
        self, parent: model.StatePath, states: Mapping[str, api.StateSpec], where: str
    ) -> None:
        self.children[parent] = []
        for name, spec in states.items():
            if not targets.STATE_NAME.match(name):
                self.problem(
                    manifest_path(where, name),
                    f"state name {shown(name)!r} must start with a letter, digit or '_' and "
                    "hold only letters, digits, '_' and '-' (at most 63 characters): state "
                    "paths join names with '.'",
                )
                continue
            path = targets.child(parent, name)
            self.specs[path] = spec
            self.children[parent].append(path)
            self.gather(path, spec.states or {}, manifest_path(where, name, "states"))
            fan_out = spec.invoke.forEach if spec.invoke is not None else None
            if fan_out is not None:
                root = targets.child_root(path)
                self.specs[root] = fan_out.machine
                machine_where = manifest_path(where, name, "invoke", "forEach", "machine")
                self.gather(root, fan_out.machine.states, manifest_path(machine_where, "states"))

    def root(self, path: model.StatePath, machine: api.MachineSpec, where: str) -> model.State:
        """The root of the Run's Machine (``ROOT``), or of a fan-out's child Machine."""
        children = tuple(self.children[path])
        initial = targets.child(path, machine.initial)
        if initial not in children:
            names = [targets.name_of(child) for child in children]
            self.problem(
                manifest_path(where, "initial"),
                f"no top-level state {machine.initial!r}{_close(machine.initial, names)}",
            )
            self.explained.update(children)
        return model.State(
            path=path,
            name=targets.name_of(path),
            kind=model.Kind.COMPOUND,
            parent=None if path == model.ROOT else targets.parent(path),
            children=children,
            initial=initial if initial in children else None,
            on=self.on(path, machine.on, where),
        )

    def state(self, path: model.StatePath, spec: api.StateSpec) -> model.State:
        where = targets.state_where(path)
        children = tuple(self.children[path])
        if spec.type == "final":
            kind = model.Kind.FINAL
        elif spec.type == "parallel":
            kind = model.Kind.PARALLEL
        else:
            kind = model.Kind.COMPOUND if spec.states else model.Kind.ATOMIC
        self.check_kind(path, spec, kind, where)
        return model.State(
            path=path,
            name=targets.name_of(path),
            kind=kind,
            parent=targets.parent(path),
            children=children,
            initial=(
                self.initial(path, spec, children, where)
                if kind is model.Kind.COMPOUND and children
                else None
            ),
            on=self.on(path, spec.on, where),
            always=self.transitions(spec.always, path, None, manifest_path(where, "always")),
            after=tuple(
                self.timer(path, delay, transitions, manifest_path(where, "after", delay))
                for delay, transitions in spec.after.items()
            ),
            invoke=self.invoke(path, spec.invoke, where) if spec.invoke is not None else None,
            on_done=self.transitions(
                spec.onDone, path, model.DONE_STATE, manifest_path(where, "onDone")
            ),
            output=self.expression(spec.output, manifest_path(where, "output")),
            failed=spec.outcome is api.Outcome.FAILED,
        )

    def check_kind(
        self, path: model.StatePath, spec: api.StateSpec, kind: model.Kind, where: str
    ) -> None:
        """What a state of its kind may not have: transitions on a final state,
        ``onDone`` without children, ``output`` or ``outcome`` on a non-final state."""
        if kind is model.Kind.FINAL:
            written = {
                "states": bool(spec.states),
                "initial": spec.initial is not None,
                "on": bool(spec.on),
                "after": bool(spec.after),
                "always": spec.always is not None,
                "invoke": spec.invoke is not None,
                "onDone": spec.onDone is not None,
            }
            for name in (name for name, present in written.items() if present):
                self.problem(
                    manifest_path(where, name),
                    f"a final state {_FINAL_HAS[name]}: reaching it ends its parent (or the "
                    f"Run); remove {name}, or drop type: final",
                )
            return
        if kind is model.Kind.PARALLEL:
            self.check_parallel(path, spec, where)
        if kind is model.Kind.ATOMIC and spec.initial is not None:
            self.problem(
                manifest_path(where, "initial"),
                f"initial names the child entered first, but {path!r} has no states; "
                "remove initial",
            )
        if kind is model.Kind.ATOMIC and spec.onDone is not None and spec.type is None:
            self.problem(
                manifest_path(where, "onDone"),
                "only a compound state has onDone (taken when one of its final children is "
                "reached); a command's result is handled by invoke.onDone",
            )
        for name, value in (("output", spec.output), ("outcome", spec.outcome)):
            if value is not None:
                self.problem(
                    manifest_path(where, name),
                    f"only a final state has {name}; add type: final, or remove {name}",
                )

    def check_parallel(self, path: model.StatePath, spec: api.StateSpec, where: str) -> None:
        """A parallel state's regions are its child states, all entered at once: it needs
        some, names no initial, and no region is itself final (SCXML's rule)."""
        if not spec.states:
            self.problem(
                where,
                "a parallel state runs its child states (regions) at once, and has none: "
                "add states, or drop type: parallel",
            )
        if spec.initial is not None:
            self.problem(
                manifest_path(where, "initial"),
                "a parallel state enters every child state at once; remove initial",
            )
        for name, child in (spec.states or {}).items():
            if child.type == "final":
                self.problem(
                    manifest_path(where, "states", name, "type"),
                    "a region of a parallel state cannot be final: give the region states "
                    "and a final child, and the parallel state's onDone is taken once every "
                    "region reaches its final",
                )
        if spec.invoke is not None:
            self.problem(
                manifest_path(where, "invoke"),
                "a parallel state invokes nothing itself: invoke in its regions' states",
            )

    def initial(
        self,
        path: model.StatePath,
        spec: api.StateSpec,
        children: Sequence[model.StatePath],
        where: str,
    ) -> model.StatePath | None:
        names = [targets.name_of(child) for child in children]
        if spec.initial is None:
            self.problem(
                where,
                "a compound state needs initial: the child entered first, one of "
                + ", ".join(repr(name) for name in names),
            )
        elif (initial := targets.child(path, spec.initial)) in children:
            return initial
        else:
            self.problem(
                manifest_path(where, "initial"),
                f"{spec.initial!r} is not a child of {path!r}{_close(spec.initial, names)}",
            )
        self.explained.update(children)
        return None

    # ------------------------------------------------------------------ transitions

    def on(
        self, source: model.StatePath, on: Mapping[str, Any], where: str
    ) -> dict[str, tuple[model.Transition, ...]]:
        handled = {}
        for event, written in on.items():
            event_where = manifest_path(where, "on", event)
            if not event:
                self.problem(event_where, "an event needs a name")
            elif event.startswith(model.RESERVED_EVENT_PREFIXES) and (
                event != model.ERROR_EXPRESSION
            ):
                self.problem(
                    event_where,
                    f"{event!r} is reserved: the machine names its own events done.…, error.… "
                    "and after:…; handle an invoke's end with invoke.onDone or invoke.onError, "
                    "a timer with after, a compound state's end with onDone, and a failed "
                    "expression with error.expression",
                )
            handled[event] = self.transitions(written, source, event, event_where)
        return handled

    def transitions(
        self, written: Any, source: model.StatePath, event: str | None, where: str
    ) -> tuple[model.Transition, ...]:
        """A written ``TransitionSpec`` (a target, one transition, or a list of either)
        as transitions in document order; each keeps the path it was written at."""
        if written is None:
            return ()
        if isinstance(written, list):
            items = [(manifest_path(where, index), item) for index, item in enumerate(written)]
        else:
            items = [(where, written)]
        return tuple(self.transition(item, source, event, at) for at, item in items)

    def transition(
        self,
        written: str | api.Transition,
        source: model.StatePath,
        event: str | None,
        where: str,
    ) -> model.Transition:
        if isinstance(written, str):
            spec, target_where = api.Transition(target=written), where
        else:
            spec, target_where = written, manifest_path(where, "target")
        if spec.schema_ is not None:
            self.check_schema(spec.schema_, manifest_path(where, "schema"))
        return model.Transition(
            source=source,
            event=event,
            target=self.target(source, spec.target, target_where),
            guard=self.expression(spec.guard, manifest_path(where, "guard")),
            assign=self.assign(spec.assign, manifest_path(where, "assign")),
            description=spec.description,
            schema=spec.schema_,
            where=where,
        )

    def target(
        self, source: model.StatePath, text: str | None, where: str
    ) -> model.StatePath | None:
        if text is None:
            return None
        if not targets.is_target(text):
            self.problem(
                where,
                f"{text!r} is not a state's name or path: names joined by '.', with a leading "
                "'.' for a child of this state",
            )
            return None
        found = targets.resolve(self.specs, source, text)
        outside = targets.outside_child(self.specs, source, text) if found is None else None
        if outside is not None:
            machine = targets.child_machine(source)
            self.problem(
                where,
                f"no state {text!r} in the child Machine of {targets.parent(machine)!r}: a "
                f"child Machine's transitions stay inside it, and {outside!r} is outside; "
                "leave through that state's invoke.onDone or invoke.onError",
            )
            self.explained.add(outside)
        elif found is None:
            suggestion = targets.suggest(list(self.specs), text)
            self.problem(where, f"no state {text!r}{targets.did_you_mean(suggestion)}")
            self.explained.update(
                path for path in self.specs if suggestion in (path, targets.name_of(path))
            )
        return found

    def assign(
        self, assign: Mapping[str, str], where: str
    ) -> tuple[tuple[str, model.Expression], ...]:
        """``(key, value)`` pairs, each key as written (``context.a.b``)."""
        pairs: list[tuple[str, model.Expression]] = []
        for key, source in assign.items():
            key_where = manifest_path(where, key)
            if not ASSIGN_KEY.match(key):
                self.problem(
                    key_where,
                    "an assign key is a path into the context such as context.rounds or "
                    f"context.review.notes; got {key!r}",
                )
                continue
            value = self.expression(source, key_where)
            if value is not None:
                pairs.append((key, value))
        for outer, inner in itertools.permutations(assign, 2):
            if inner.startswith(outer + "."):
                self.problem(
                    where,
                    f"assign sets both {outer!r} and {inner!r}, one inside the other; "
                    f"set {outer!r} to the whole value",
                )
        return tuple(pairs)

    def check_schema(self, schema: dict[str, Any], where: str) -> None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as error:
            at = "" if error.json_path == "$" else f" at {error.json_path}"
            self.problem(where, f"not a JSON Schema{at}: {error.message}")
            return
        if schema.get("type") != "object":
            self.problem(
                where,
                "a payload's schema describes an object: give it type: object and its properties",
            )

    # -------------------------------------------------------------- timers, invokes

    def timer(self, path: model.StatePath, delay: str, written: Any, where: str) -> model.Timer:
        try:
            seconds = api.parse_duration(delay)
        except ValueError as error:
            self.problem(where, str(error))
            seconds = 0.0
        timer_id = model.timer_id(path, delay)
        return model.Timer(
            id=timer_id,
            delay_s=seconds,
            transitions=self.transitions(written, path, timer_id, where),
        )

    def invoke(self, path: model.StatePath, spec: api.InvokeSpec, where: str) -> model.Invoke:
        where = manifest_path(where, "invoke")
        given = [k for k in ("agent", "exec", "deliver", "forEach") if getattr(spec, k) is not None]
        if len(given) > 1:
            self.problem(
                where,
                "an invoke runs one thing: agent, exec, deliver or forEach, not "
                + " and ".join(given),
            )
        if not given:
            self.problem(
                where,
                "an invoke runs one thing: add agent (an Agent's Turn), exec (a command), "
                "deliver (commit and push a repo slot's work) or forEach (a child Machine "
                "per item)",
            )
        if spec.agent is not None and spec.onDone is not None:
            self.problem(
                manifest_path(where, "onDone"),
                "an Agent's Turn has no done: it ends by the Agent's picks or by its state's "
                "exit; handle the picks in on",
            )
        return model.Invoke(
            agent=self.agent_call(spec.agent, manifest_path(where, "agent")),
            exec=self.exec_call(spec.exec, manifest_path(where, "exec")),
            deliver=self.deliver_call(spec.deliver, manifest_path(where, "deliver")),
            fan_out=self.fan_out(path, spec.forEach, manifest_path(where, "forEach")),
            on_done=self.transitions(
                spec.onDone, path, model.DONE_INVOKE, manifest_path(where, "onDone")
            ),
            on_error=self.transitions(
                spec.onError, path, model.ERROR_INVOKE, manifest_path(where, "onError")
            ),
        )

    def agent_call(self, spec: api.AgentInvoke | None, where: str) -> model.AgentCall | None:
        if spec is None:
            return None
        if spec.slot not in self.agents:
            self.problem(
                manifest_path(where, "slot"),
                f"no agent slot {spec.slot!r} in spec.agents{_close(spec.slot, self.agents)}",
            )
        return model.AgentCall(
            slot=spec.slot,
            prompt=self.template(spec.prompt, manifest_path(where, "prompt")),
            cwd=self.template(spec.cwd, manifest_path(where, "cwd")) if spec.cwd else None,
            continue_=spec.continue_,
            model=spec.model,
            thinking_level=spec.thinkingLevel.value if spec.thinkingLevel else None,
            retry=_retry_policy(spec.retry),
        )

    def exec_call(self, spec: api.ExecInvoke | None, where: str) -> model.ExecCall | None:
        if spec is None:
            return None
        try:
            timeout = api.parse_duration(spec.timeout)
        except ValueError as error:
            self.problem(manifest_path(where, "timeout"), str(error))
            timeout = 0.0
        return model.ExecCall(
            command=self.template(spec.command, manifest_path(where, "command")),
            cwd=self.template(spec.cwd, manifest_path(where, "cwd")) if spec.cwd else None,
            timeout_s=timeout,
        )

    def fan_out(
        self, path: model.StatePath, spec: api.ForEachInvoke | None, where: str
    ) -> model.FanOut | None:
        if spec is None:
            return None
        return model.FanOut(
            items=self.expression(spec.items, manifest_path(where, "items")) or _NOTHING,
            root=targets.child_root(path),
            context=dict(spec.machine.context),
            key=self.expression(spec.key, manifest_path(where, "key")),
            concurrency=spec.concurrency,
            per_child_worktree=spec.worktree == "per-child",
            fail_fast=spec.failFast,
        )

    def deliver_call(self, spec: api.DeliverInvoke | None, where: str) -> model.DeliverCall | None:
        if spec is None:
            return None
        author = spec.author
        return model.DeliverCall(
            slot=spec.slot,
            message=self.template(spec.message, manifest_path(where, "message")),
            push=spec.push,
            author_name=author.name if author else api.DEFAULT_AUTHOR_NAME,
            author_email=author.email if author else api.DEFAULT_AUTHOR_EMAIL,
        )

    # ------------------------------------------------------------------ expressions

    def expression(self, source: str | None, where: str) -> CelExpression | None:
        if source is None:
            return None
        try:
            return CelExpression(source, where=where)
        except DefinitionError as error:
            self.problems.append(error)
            return None

    def template(self, source: str, where: str) -> CelTemplate:
        try:
            return CelTemplate(source, where=where)
        except DefinitionError as error:
            self.problems.append(error)
            return _BROKEN_TEMPLATE


def _close(name: str, names: Mapping[str, Any] | Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``names``, or nothing."""
    close = difflib.get_close_matches(name, list(names), n=1)
    return targets.did_you_mean(close[0] if close else None)


def _retry_policy(spec: api.AgentRetry | None) -> model.RetryPolicy | None:
    if spec is None:
        return None
    return model.RetryPolicy(
        limit=spec.limit,
        when=frozenset(reason.value for reason in spec.when),
        backoff_s=api.parse_duration(spec.backoff),
        fresh_conversation=spec.freshConversation,
    )
