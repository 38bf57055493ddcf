"""Caps on live Turns (ADR 0116): at most N Turns of a Workspace, or of a namespace, live
at once; the admissions beyond wait, in the order their Turns started.

A Turn takes a slot in each of its scopes before its first Submission is admitted, and
gives them back once it is recorded (its sweep came back), so a Turn counts while its
Agent may still run on the Harness. One whose state exits while it waits is withdrawn:
it is never admitted. Waiting Turns go in the order of their start (then their Run, then
their number), a fact each Run's snapshot keeps: the queue a restarted operator rebuilds
from its Runs' pending Turns is the queue as it was. A Turn waits only while a scope it
is in is full, so one that its Workspace's cap holds back holds back no Turn of another
Workspace (``admissible`` is the rule, pure).

One ``Caps`` is shared by the Runs of a process (the operator's hub holds it; a local
run has its own) and a ``RunSlots`` is one Run's view of it, the actor's ``SlotPort``.
Whoever made it may hear how many Turns wait, by reason, each time that changes (the
operator's ``kubeturn_turns_waiting`` gauge): a hook, so that no metrics library comes in
here. asyncio only; no IO, no clock.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from kubeturn.api.agentturn import PendingReason
from kubeturn.errors import Withdrawn
from kubeturn.orchestrator import ids
from kubeturn.orchestrator.ids import TurnId

WORKSPACE = "Workspace"
NAMESPACE = "namespace"
REASONS = {WORKSPACE: PendingReason.WORKSPACE_FULL, NAMESPACE: PendingReason.NAMESPACE_FULL}
"""The AgentTurn's reason for each kind of cap that holds a Turn back."""


@dataclass(frozen=True, order=True)
class Scope:
    """What a cap counts the live Turns of: a Workspace (``namespace/name``), a namespace."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass(frozen=True)
class Ticket:
    """One Turn's place: in the queue while it waits, among the holders once admitted."""

    run: str
    turn: TurnId
    started_at: float
    scopes: tuple[Scope, ...]

    @property
    def key(self) -> tuple[str, TurnId]:
        return (self.run, self.turn)

    @property
    def order(self) -> tuple[float, str, int]:
        """Earlier start first; a tie goes by Run, then by Turn number."""
        return (self.started_at, self.run, ids.turn_seq(self.turn))


@dataclass(frozen=True)
class Held:
    """Why a Turn waits: ``scope`` has ``live`` of its ``limit`` live Turns; no scope
    while the caps are held back (the process resumes its Runs' live Turns first)."""

    scope: Scope | None = None
    live: int = 0
    limit: int = 0

    @property
    def reason(self) -> PendingReason:
        """The AgentTurn's reason: its full scope's kind; Resuming while held back."""
        return PendingReason.RESUMING if self.scope is None else REASONS[self.scope.kind]


Limits = Callable[[Scope], "int | None"]
"""A scope's cap; None: no cap."""

Waiting = Callable[[Mapping[PendingReason, int]], None]
"""Hears the Turns that wait, counted by why each waits now (a reason none waits for is
absent), whenever those counts change."""


def admissible(waiting: Iterable[Ticket], live: Mapping[Scope, int], limit: Limits) -> list[Ticket]:
    """The waiting Tickets that may go now, in order: each whose every scope has room
    once the earlier ones that go are counted."""
    counts = collections.Counter(live)
    going = []
    for ticket in sorted(waiting, key=lambda t: t.order):
        if all(_room(counts[s], limit(s)) for s in ticket.scopes):
            going.append(ticket)
            counts.update(ticket.scopes)
    return going


def held(ticket: Ticket, live: Mapping[Scope, int], limit: Limits) -> Held | None:
    """The first of the Ticket's scopes that is full, as ``Held``; None if none is."""
    for scope in ticket.scopes:
        cap = limit(scope)
        if cap is not None and not _room(live.get(scope, 0), cap):
            return Held(scope, live.get(scope, 0), cap)
    return None


def _room(live: int, cap: int | None) -> bool:
    return cap is None or live < cap


class Caps:
    """The slots of one process's Turns: who holds one, who waits, and each scope's cap."""

    def __init__(
        self, defaults: Mapping[str, int | None] | None = None, waiting: Waiting | None = None
    ) -> None:
        self._defaults = dict(defaults or {})
        """A cap by scope kind, for a scope given none of its own."""
        self._heard = waiting
        self._told: dict[PendingReason, int] = {}
        self._limits: dict[Scope, int | None] = {}
        self._holding: dict[tuple[str, TurnId], Ticket] = {}
        self._waiting: dict[tuple[str, TurnId], tuple[Ticket, asyncio.Future[None]]] = {}
        self._open = True
        self._opened = asyncio.Event()
        self._opened.set()

    def limit(self, scope: Scope, cap: int | None) -> None:
        """Set a scope's cap (None: the default of its kind); a raised one lets more go."""
        if cap is None:
            self._limits.pop(scope, None)
        else:
            self._limits[scope] = cap
        self._grant()

    def limit_of(self, scope: Scope) -> int | None:
        return self._limits.get(scope, self._defaults.get(scope.kind))

    def hold_back(self) -> None:
        """Let no Turn go until ``open``: the Turns that were live before a restart are not
        all known yet."""
        self._open = False
        self._opened.clear()
        self._tell()

    def open(self) -> None:
        self._open = True
        self._opened.set()
        self._grant()

    def hold(self, ticket: Ticket) -> None:
        """The Turn holds a slot already (it was admitted before a restart)."""
        self._holding[ticket.key] = ticket
        self._tell()

    async def enter(
        self, ticket: Ticket, queued: Callable[[Held], Awaitable[None]] | None = None
    ) -> None:
        """Until the Turn holds a slot (at once if it holds one, or if there is room and no
        earlier Turn waits for it); ``queued`` hears why when it must wait, and again when
        the caps open after a restart if it still waits. A Turn withdrawn meanwhile raises
        ``Withdrawn``."""
        key = ticket.key
        if key in self._holding:
            return
        granted = asyncio.get_running_loop().create_future()
        self._waiting[key] = (ticket, granted)
        self._grant()
        try:
            if not granted.done() and queued is not None:
                await queued(self.why(ticket))
                if not self._open:
                    opening = asyncio.ensure_future(self._opened.wait())
                    try:
                        await asyncio.wait({granted, opening}, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        opening.cancel()
                    if not granted.done():
                        await queued(self.why(ticket))
            await granted
        except BaseException:  # cancelled (the actor closes), withdrawn, ``queued`` failed
            left = self._waiting.pop(key, None) is None
            if left and granted.done() and not granted.cancelled() and not granted.exception():
                self._holding.pop(key, None)  # granted, and never used
                self._grant()
            else:
                self._tell()
            raise

    def why(self, ticket: Ticket) -> Held:
        """Why a waiting Turn waits now."""
        if not self._open:
            return Held()
        return held(ticket, self.live(), self.limit_of) or Held()

    def withdraw(self, run: str, turn: TurnId) -> None:
        """The Turn no longer wants a slot (its state exited): if it waits, it never goes."""
        waiting = self._waiting.pop((run, turn), None)
        if waiting is not None and not waiting[1].done():
            waiting[1].set_exception(Withdrawn(f"Turn {turn} of {run} ended while it waited"))
            self._tell()

    def leave(self, run: str, turn: TurnId) -> None:
        """The Turn was recorded: its slot is free for the next in line."""
        if self._holding.pop((run, turn), None) is not None:
            self._grant()

    def forget(self, run: str) -> None:
        """The Run's actor closed: nothing of it holds or waits here any more (an actor that
        resumes it holds its live Turns again)."""
        for key in [k for k in self._waiting if k[0] == run]:
            self.withdraw(*key)
        for key in [k for k in self._holding if k[0] == run]:
            del self._holding[key]
        self._grant()

    def live(self) -> collections.Counter[Scope]:
        """Slots held, by scope."""
        counts: collections.Counter[Scope] = collections.Counter()
        for ticket in self._holding.values():
            counts.update(ticket.scopes)
        return counts

    def waiting(self) -> list[Ticket]:
        """The Turns that wait, in order. One whose wait was cancelled (its actor closes)
        waits no more, though its task has not yet run to drop it."""
        waiting = (t for t, granted in self._waiting.values() if not granted.done())
        return sorted(waiting, key=lambda t: t.order)

    def waiting_by_reason(self) -> dict[PendingReason, int]:
        """The Turns that wait, counted by why each waits now (``why``)."""
        live = self.live()
        why = [held(t, live, self.limit_of) if self._open else None for t in self.waiting()]
        return dict(collections.Counter((h or Held()).reason for h in why))

    def _grant(self) -> None:
        if self._open:
            for ticket in admissible(self.waiting(), self.live(), self.limit_of):
                _, granted = self._waiting.pop(ticket.key)
                self._holding[ticket.key] = ticket
                granted.set_result(None)
        self._tell()

    def _tell(self) -> None:
        """Tell the ``waiting`` hook the counts, if they changed since it last heard."""
        if self._heard is None:
            return
        counts = self.waiting_by_reason()
        if counts != self._told:
            self._told = counts
            self._heard(counts)


class RunSlots:
    """One Run's view of the ``Caps`` (the actor's ``SlotPort``): its Turns' tickets, in
    its scopes, each with the start its core recorded."""

    def __init__(
        self,
        caps: Caps,
        run: str,
        scopes: tuple[Scope, ...],
        started: Callable[[TurnId], float],
    ) -> None:
        self.caps = caps
        self.run = run
        self.scopes = scopes
        self._started = started

    def ticket(self, turn: TurnId) -> Ticket:
        return Ticket(self.run, turn, self._started(turn), self.scopes)

    async def enter(
        self, turn: TurnId, queued: Callable[[Held], Awaitable[None]] | None = None
    ) -> None:
        await self.caps.enter(self.ticket(turn), queued)

    def hold(self, turn: TurnId) -> None:
        self.caps.hold(self.ticket(turn))

    def withdraw(self, turn: TurnId) -> None:
        self.caps.withdraw(self.run, turn)

    def leave(self, turn: TurnId) -> None:
        self.caps.leave(self.run, turn)

    def close(self) -> None:
        self.caps.forget(self.run)


def describe(held_by: Held, *, where: Mapping[str, str]) -> str:
    """A waiting Turn's reason as a sentence; ``where`` names the setting of each scope
    kind's cap (``spec.maxLiveTurns``)."""
    if held_by.scope is None:
        return "waits while the Turns that were live before a restart are found again"
    setting = where.get(held_by.scope.kind)
    by = f" ({setting})" if setting else ""
    return (
        f"waits for a live Turn to end: {held_by.scope} has {held_by.live} live of at most "
        f"{held_by.limit}{by}; earlier Turns go first"
    )
