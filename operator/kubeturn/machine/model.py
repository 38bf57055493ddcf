"""The compiled Machine: frozen dataclasses the interpreter walks.

A ``Chart`` is what a Run's ``spec.machine`` becomes once loaded and checked: states by
path, transitions in document order, expressions compiled. It holds no run state; the
interpreter's ``Config`` does. State paths join state names with ``.``; the synthetic
root is ``ROOT`` (the empty path), the parent of the top-level states.

A fan-out state's child Machine is compiled into the same Chart, under the child's root
``<fan-out state>[]`` (``fix[].review``): a *template*. At run time each child is an
instance whose paths hold its item's key (``fix[pkg-a].review``); ``template`` gives a
path's template, ``machine_of`` the root of the Machine instance it belongs to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property, lru_cache
from typing import Any, NewType, Protocol

StatePath = NewType("StatePath", str)
ROOT = StatePath("")

DONE_INVOKE = "done.invoke"
"""The event of an invoke finishing; the state's ``invoke.onDone`` handles it."""
ERROR_INVOKE = "error.invoke"
"""The event of an invoke failing; the state's ``invoke.onError`` handles it."""
DONE_STATE = "done.state"
"""The event of a compound state's final child being reached; its ``onDone`` handles it."""
ERROR_EXPRESSION = "error.expression"
"""The event of a CEL expression failing at run time (ADR 0068): ``on`` may handle it."""
RESERVED_EVENT_PREFIXES = ("done.", "error.", "after:")
"""Events the machine names itself; a manifest may not handle them in ``on``, but for
``ERROR_EXPRESSION``."""


PATHS_REMEMBERED = 4096
"""Paths whose template, Machine and parent are remembered: the states of the Runs an
operator drives at once, bounded so that an operator's life of fan-out keys is not."""

_KEYS = re.compile(r"\[[^\]]*\]")


@lru_cache(maxsize=PATHS_REMEMBERED)
def template(path: StatePath) -> StatePath:
    """The Chart's path of a state instance: every item key cut (``fix[a].x`` → ``fix[].x``)."""
    return StatePath(_KEYS.sub("[]", path)) if "[" in path else path


@lru_cache(maxsize=PATHS_REMEMBERED)
def machine_of(path: StatePath) -> StatePath:
    """The root of the Machine instance ``path`` belongs to: ``ROOT`` for the Run's own
    Machine, ``fix[a]`` for the states of the fan-out child ``a`` of ``fix``."""
    return StatePath(path[: path.rindex("]") + 1]) if "]" in path else ROOT


@lru_cache(maxsize=PATHS_REMEMBERED)
def parent_of(path: StatePath) -> StatePath | None:
    """The parent of a state instance (a child Machine's root's is its fan-out state)."""
    if path == ROOT:
        return None
    if path.endswith("]"):
        return StatePath(path[: path.rindex("[")])
    dot = path.rfind(".")
    return StatePath(path[:dot]) if dot > path.rfind("]") else machine_of(path)


def within(path: StatePath, ancestor: StatePath) -> bool:
    """True when ``path`` is ``ancestor`` or inside it (a fan-out's children included)."""
    return ancestor == ROOT or path == ancestor or path.startswith((ancestor + ".", ancestor + "["))


def instance(machine: StatePath, path: StatePath) -> StatePath:
    """The instance in Machine ``machine`` of the template ``path`` (which belongs to that
    Machine's template)."""
    if machine == ROOT:
        return path
    return StatePath(machine + path[len(template(machine)) :])


def timer_id(state: StatePath, delay: str) -> str:
    """The id (and event) of the ``after`` timer of ``state`` written as ``delay``."""
    return f"after:{state}:{delay}"


class Expression(Protocol):
    """A compiled guard or assignment value (CEL)."""

    source: str

    def evaluate(self, activation: Mapping[str, Any]) -> Any: ...


class Template(Protocol):
    """A compiled string with ``{{ <CEL> }}`` holes (prompt, cwd, command)."""

    source: str

    def render(self, activation: Mapping[str, Any]) -> str: ...


class Kind(StrEnum):
    ATOMIC = "atomic"
    COMPOUND = "compound"
    PARALLEL = "parallel"
    FINAL = "final"


@dataclass(frozen=True)
class Transition:
    """One transition, in document order among those of its event on its state."""

    source: StatePath
    event: str | None
    """The event it handles; None for ``always``, the timer id for ``after``."""
    target: StatePath | None
    """None: a targetless transition (it runs ``assign`` and moves nothing)."""
    guard: Expression | None = None
    assign: tuple[tuple[str, Expression], ...] = ()
    """``(context path, value)`` pairs; all are evaluated before any is applied."""
    description: str | None = None
    schema: Mapping[str, Any] | None = None
    where: str = ""
    """The manifest path it was written at, for messages."""


@dataclass(frozen=True)
class RetryPolicy:
    """How a faulted Turn of an ``agent`` invoke is tried again (ADR 0115)."""

    limit: int
    when: frozenset[str]
    """The fault reasons retried."""
    backoff_s: float
    fresh_conversation: bool = False
    """A continued Turn is retried (on the next epoch's conversation) only with this."""


@dataclass(frozen=True)
class AgentCall:
    slot: str
    prompt: Template
    cwd: Template | None = None
    continue_: bool = False
    model: str | None = None
    thinking_level: str | None = None
    retry: RetryPolicy | None = None


@dataclass(frozen=True)
class ExecCall:
    command: Template
    cwd: Template | None = None
    timeout_s: float = 600.0


@dataclass(frozen=True)
class DeliverCall:
    slot: str
    """The repo slot whose worktree is committed (and pushed)."""
    message: Template
    push: bool
    author_name: str
    author_email: str


@dataclass(frozen=True)
class FanOut:
    """A child Machine for each item of a list, run ``concurrency`` at a time."""

    items: Expression
    """The list (CEL), evaluated when the state is entered."""
    root: StatePath
    """The child Machine's root in the Chart (``<state>[]``)."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """Each child's initial context."""
    key: Expression | None = None
    """Each child's key (CEL over ``input``, the item); None: the item itself when it is
    a valid key, else its index."""
    concurrency: int = 4
    per_child_worktree: bool = False
    fail_fast: bool = True
    """The first child that fails fails the invoke (its other children are swept); else
    every child runs, and the done event says which failed."""


@dataclass(frozen=True)
class Invoke:
    """A state's one invocation; it runs while the state is active."""

    agent: AgentCall | None = None
    exec: ExecCall | None = None
    deliver: DeliverCall | None = None
    fan_out: FanOut | None = None
    on_done: tuple[Transition, ...] = ()
    on_error: tuple[Transition, ...] = ()


@dataclass(frozen=True)
class Timer:
    """An ``after`` entry of a state: armed on entry, cancelled on exit."""

    id: str
    delay_s: float
    transitions: tuple[Transition, ...]


@dataclass(frozen=True)
class State:
    path: StatePath
    name: str
    kind: Kind
    parent: StatePath | None
    children: tuple[StatePath, ...] = ()
    initial: StatePath | None = None
    on: Mapping[str, tuple[Transition, ...]] = field(default_factory=dict)
    always: tuple[Transition, ...] = ()
    after: tuple[Timer, ...] = ()
    invoke: Invoke | None = None
    on_done: tuple[Transition, ...] = ()
    """For a compound state: taken when one of its final children is reached; for a
    parallel state, when every region has reached a final child."""
    output: Expression | None = None
    """For a final state: the value the Run (or the parent's done event) carries."""
    failed: bool = False
    """For a final state: reaching it fails the Run."""

    @property
    def depth(self) -> int:
        return 0 if self.path == ROOT else self.path.count(".") + 1


@dataclass(frozen=True)
class Chart:
    states: Mapping[StatePath, State]
    context: Mapping[str, Any] = field(default_factory=dict)
    """The initial context."""

    @property
    def root(self) -> State:
        return self.states[ROOT]

    def state(self, path: StatePath) -> State:
        """The state of an instance path (its template's)."""
        return self.states[template(path)]

    @cached_property
    def order(self) -> Mapping[StatePath, int]:
        """Each state's place in document order (a parent before its children)."""
        return {path: index for index, path in enumerate(self.states)}

    def ancestors(self, path: StatePath) -> list[StatePath]:
        """``path`` and every ancestor up to the root, innermost first (through the fan-out
        states of a child Machine's instance)."""
        chain = []
        current: StatePath | None = path
        while current is not None:
            chain.append(current)
            current = parent_of(current)
        return chain

    def chain(self, path: StatePath) -> tuple[StatePath, ...]:
        """``path`` and its ancestors up to the root of its own Machine, innermost first:
        the states an event reaching ``path`` is offered to."""
        found = self._chains.get(path)
        if found is None:
            machine = machine_of(path)
            chain = []
            current: StatePath | None = path
            while current is not None:
                chain.append(current)
                if current == machine:
                    break
                current = parent_of(current)
            found = self._chains[path] = tuple(chain)
        return found

    @cached_property
    def _chains(self) -> dict[StatePath, tuple[StatePath, ...]]:
        """``chain``'s answers so far: a Run asks for the same few paths all its life."""
        return {}

    def is_within(self, path: StatePath, ancestor: StatePath) -> bool:
        """True when ``path`` is ``ancestor`` or one of its descendants."""
        return within(path, ancestor)

    def agent_states(self) -> list[State]:
        return [s for s in self.states.values() if s.invoke is not None and s.invoke.agent]

    def regions(self, path: StatePath) -> list[StatePath]:
        """The child instances of the instance ``path`` (a parallel state's regions; the
        root's, the top-level states)."""
        return [
            StatePath(f"{path}.{self.states[c].name}" if path != ROOT else self.states[c].name)
            for c in self.state(path).children
        ]
