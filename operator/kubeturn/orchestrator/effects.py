"""What the core asks its shell to do. Decisions only; the shell performs them, in order.

``Effect`` is a closed union: a shell applies it with ``match`` ending in
``typing.assert_never``, so mypy fails on a shell that does not handle a new effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn.orchestrator.turns import Exit, TurnRecord
from kubeturn_harness.wire import DeliveryId, Notice, Receipt, SubmissionId


@dataclass(frozen=True)
class Admit:
    """Admit one Submission of a Turn to its Workspace's Harness."""

    turn: TurnId
    agent: str
    state: str
    """The state that asked for the Turn."""
    instance_id: InstanceId
    prompt: str
    cwd: str
    continue_: bool
    model: str | None
    thinking_level: str | None
    instructions: str
    workspace: str
    key: str
    """The admission's idempotency key, ``<turn>.<n>`` for the Turn's n-th Submission: an
    admission sent again (after a restart, or a lost answer) admits that Submission once."""
    notices: tuple[Notice, ...] = ()
    nudge: bool = False
    traceparent: str | None = None
    """The W3C trace context the Harness's spans join (ADR 0107): never decided by the
    core; the actor sets it, when the Run is traced, as it applies the admission."""


@dataclass(frozen=True)
class Sweep:
    """Abort a Turn's Submissions; ordered before any later admission on its Instance ID."""

    turn: TurnId
    agent: str
    instance_id: InstanceId
    cause: str | None
    submission: SubmissionId | None


@dataclass(frozen=True)
class StartExec:
    invocation: str
    command: str
    cwd: str
    timeout_s: float


@dataclass(frozen=True)
class StopExec:
    invocation: str


@dataclass(frozen=True)
class StartDeliver:
    """Commit a repo slot's worktree on the Run's branch and, with ``push``, push it. Never
    stopped: a delivery runs to its end even when its state exits (ADR 0063)."""

    invocation: str
    state: str
    """The state that asked for it."""
    slot: str
    message: str
    push: bool
    author_name: str
    author_email: str


@dataclass(frozen=True)
class MakeWorktrees:
    """Make (or find) a fan-out child's worktrees (ADR 0113): one per repo slot on
    ``branch``, made from ``base``'s current commit; idempotent, so a restore asks again.
    The shell answers ``RunCore.worktrees_made``."""

    child: str
    """The child's root (``fix[pkg-a]``)."""
    branch: str
    base: str
    """The branch it starts from: the Run's, or an enclosing child's."""
    slots: tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """The answer of an outstanding pick, for whoever long-polls its delivery."""

    delivery: DeliveryId
    receipt: Receipt


@dataclass(frozen=True)
class Finished:
    """The Run reached its end."""

    phase: str
    output: Any = None
    message: str | None = None


@dataclass(frozen=True)
class Recorded:
    """A Turn's one history record was written (for Events, logs, a local summary)."""

    record: TurnRecord
    exit: Exit | None = None
    """How the Turn's state exited (the sweep's cause and time), for its trace span."""


Effect = (
    Admit
    | Sweep
    | StartExec
    | StopExec
    | StartDeliver
    | MakeWorktrees
    | Answer
    | Finished
    | Recorded
)
"""Every effect there is; a new one is added here and to every shell's ``match``."""
E = TypeVar("E", bound=Effect)


@dataclass
class Effects:
    """What one input to the core decided, in the order the shell applies it."""

    items: list[Effect] = field(default_factory=list)

    def of(self, kind: type[E]) -> list[E]:
        """The effects of one kind, in order."""
        return [item for item in self.items if isinstance(item, kind)]
