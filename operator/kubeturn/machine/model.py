"""The compiled Machine: frozen dataclasses the interpreter walks.

A ``Chart`` is what a Run's ``spec.machine`` becomes once loaded and checked: states by
path, transitions in document order, expressions compiled. It holds no run state; the
interpreter's ``Config`` does. State paths join state names with ``.``; the synthetic
root is ``ROOT`` (the empty path), the parent of the top-level states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
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
class AgentCall:
    slot: str
    prompt: Template
    cwd: Template | None = None
    continue_: bool = False
    model: str | None = None
    thinking_level: str | None = None


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
class Invoke:
    """A state's one invocation; it runs while the state is active."""

    agent: AgentCall | None = None
    exec: ExecCall | None = None
    deliver: DeliverCall | None = None
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
    """For a compound state: taken when one of its final children is reached."""
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

    def ancestors(self, path: StatePath) -> list[StatePath]:
        """``path`` and every ancestor up to the root, innermost first."""
        chain = []
        current: StatePath | None = path
        while current is not None:
            chain.append(current)
            current = self.states[current].parent
        return chain

    def is_within(self, path: StatePath, ancestor: StatePath) -> bool:
        """True when ``path`` is ``ancestor`` or one of its descendants."""
        return ancestor == ROOT or path == ancestor or path.startswith(ancestor + ".")

    def agent_states(self) -> list[State]:
        return [s for s in self.states.values() if s.invoke is not None and s.invoke.agent]
