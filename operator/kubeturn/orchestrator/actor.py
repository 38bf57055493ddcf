"""The Run actor: one Run's core, driven by one lock, its effects applied through ports.

Every input (start, signal, cancel, pick, timer, exec result, admission, settlement)
goes through the lock, so the core sees one event at a time. After each, the snapshot
is saved before any effect is applied: a restart resumes from what was decided, never
from half of it. Effects run as tasks; work on one Instance ID is chained, so a sweep
is always applied before the next admission on the same conversation.

A Submission's settlement is an answer the actor asked for and would be given again after
a restart (the Harness keeps it; a resumed Run follows or sweeps the Submission again). One
that decides no effect (that of a Turn being swept, whose sweep's answer follows) is saved
with the next save, or ``SAVE_LATER_S`` after it at the latest, not on its own: a restart
before then resumes from the save before it, as one just before its save would (ADR 0093).
An admission's answer is saved at once: a pick that a resumed Run heard before it was
answered again would find the Turn still being admitted.

Under caps on live Turns (ADR 0116) the actor tells its ``SlotPort`` when a Turn's state
exits (a Turn still waiting for a slot is withdrawn there and then, not after the
admission its sweep is chained behind) and when a Turn is recorded (its slot is free).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, assert_never

from kubeturn.errors import ActorClosed, AdmitFailed
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import (
    Admit,
    Answer,
    Effects,
    Finished,
    MakeWorktrees,
    Recorded,
    StartDeliver,
    StartExec,
    StopExec,
    Sweep,
)
from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn.orchestrator.invokes import DeliverResult, ExecResult
from kubeturn.orchestrator.picks import Gone, PickAnswer
from kubeturn.orchestrator.turns import Exit, TurnPhase, TurnRecord
from kubeturn.orchestrator.worktrees import Made
from kubeturn_harness.wire import DeliveryId, Outcome, Receipt, SubmissionId, Usage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settled:
    submission: SubmissionId
    outcome: Outcome
    usage: Usage | None = None
    message: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Signal:
    """An outside event sent to the Run; one with an id is sent once (its id is kept in
    the snapshot)."""

    event: str
    data: dict[str, Any]
    id: str | None = None


Progress = Callable[[Usage | None], Awaitable[None]]
"""Told each time a followed Submission makes progress (``kubeturn.orchestrator.stalls``),
with what its stream shows it used so far (``kubeturn.orchestrator.budgets``)."""


class TurnPort(Protocol):
    """Where Turns run: a Workspace's Harness, reached over its wire."""

    async def admit(self, effect: Admit) -> SubmissionId:
        """Admit one Submission; one repeating ``effect.key`` returns the same id."""
        ...

    async def settlement(
        self, effect: Admit, submission: SubmissionId, *, progress: Progress | None = None
    ) -> Settled:
        """Wait until the Submission settles; ``progress``, if given, is awaited at each
        step it makes on the way."""
        ...

    async def sweep(self, effect: Sweep) -> list[Settled]:
        """Send the sweep; answer the settlements it caused."""
        ...


class ExecPort(Protocol):
    async def run(self, effect: StartExec) -> ExecResult: ...


class DeliverPort(Protocol):
    """Commits a slot's worktree on the Run's branch and, with ``push``, pushes it; how it
    ended, never raising (ADR 0063)."""

    async def deliver(self, effect: StartDeliver) -> DeliverResult: ...


class NoDeliveries:
    """The port of a shell that cannot deliver: every delivery fails, saying so."""

    async def deliver(self, effect: StartDeliver) -> DeliverResult:
        return DeliverResult(error="this Run's shell cannot deliver work")


class WorktreePort(Protocol):
    """Makes (or finds) a fan-out child's worktrees (ADR 0113); how it ended, never
    raising. Safe to ask again: a made worktree is found, not made twice."""

    async def make(self, effect: MakeWorktrees) -> Made: ...


class NoWorktrees:
    """The port of a shell without a Workspace: no child can have worktrees of its own."""

    async def make(self, effect: MakeWorktrees) -> Made:
        return Made(error="this Run's shell cannot make worktrees")


class TracePort(Protocol):
    """Where a traced Run's spans go (ADR 0107); never raises, never waits."""

    def traceparent(self, turn: TurnId) -> str | None:
        """The trace context a Turn's Harness spans join."""
        ...

    def turn(self, record: TurnRecord, exit_: Exit | None) -> None:
        """A Turn was recorded: its span, with its real start."""
        ...

    def finished(self, phase: str, message: str | None, at: float) -> None:
        """The Run reached its end: its span."""
        ...


class SlotPort(Protocol):
    """A Run's slots under the caps on live Turns (ADR 0116; ``orchestrator.caps.RunSlots``).
    The shell's ``TurnPort`` waits for a slot before a Turn's first admission; the actor
    says which Turns hold one on a resume, which no longer want one (their state exited:
    one still waiting is never admitted) and which are done with theirs (recorded)."""

    def hold(self, turn: TurnId) -> None: ...

    def withdraw(self, turn: TurnId) -> None: ...

    def leave(self, turn: TurnId) -> None: ...

    def close(self) -> None: ...


class SnapshotStore(Protocol):
    async def save(self, snapshot: dict[str, Any]) -> None: ...


SAVE_LATER_S = 5.0
"""The longest a settlement that decided nothing waits for the next save to carry it: what
``kubectl`` shows of the Run does not change with one, only its ``status.snapshot``."""

Clock = Callable[[], float]
"""Wall-clock seconds since the epoch: timers fire at absolute times across restarts."""


class RunActor:
    def __init__(
        self,
        core: RunCore,
        *,
        turns: TurnPort,
        execs: ExecPort,
        store: SnapshotStore,
        clock: Clock,
        on_change: Callable[[RunActor], None] | None = None,
        on_record: Callable[[TurnRecord], None] | None = None,
        deliveries: DeliverPort | None = None,
        save_later_s: float = SAVE_LATER_S,
        traces: TracePort | None = None,
        worktrees: WorktreePort | None = None,
        slots: SlotPort | None = None,
    ) -> None:
        self.core = core
        self._turns = turns
        self._execs = execs
        self._deliveries: DeliverPort = deliveries or NoDeliveries()
        self._worktrees: WorktreePort = worktrees or NoWorktrees()
        self._store = store
        self._clock = clock
        self._on_change = on_change
        self._on_record = on_record
        self._traces = traces
        self._slots = slots
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._chains: dict[InstanceId, asyncio.Task[Any]] = {}
        self._execs_running: dict[str, asyncio.Task[Any]] = {}
        self._answers: dict[DeliveryId, asyncio.Event] = {}
        self._timer: asyncio.Task[None] | None = None
        self._unsaved = False
        """A decision is not saved yet: the next save, or a task in ``save_later_s``,
        carries it."""
        self._save_later_s = save_later_s
        self.finished = asyncio.Event()
        self.closed = False
        """Set by ``close``: every input from then on raises ``ActorClosed``."""

    # ------------------------------------------------------------------ inputs

    async def start(self) -> None:
        """Start a new Run, or resume a restored one."""
        resuming = self.core.config is not None
        if resuming and self._slots is not None:
            # Before any admission is applied: a Turn admitted before the restart holds
            # its slot until it is recorded, as it did.
            for turn in self.core.turns.values():
                if turn.phase is TurnPhase.LIVE or turn.submissions:
                    self._slots.hold(turn.id)
        await self._do(lambda now: self.core.resume(now) if resuming else self.core.start(now))
        if resuming:
            for turn in self.core.live_turns():
                running = turn.running
                if running is not None:
                    self._follow(self.core.admission(turn), running.id)
        if self.core.phase.finished:
            self.finished.set()

    async def signal(
        self, event: str, data: dict[str, Any] | None, *, signal_id: str | None = None
    ) -> None:
        await self._do(lambda now: self.core.signal(event, data, now, signal_id=signal_id))

    async def send(self, signals: Sequence[Signal], *, cancel: bool = False) -> None:
        """``signals`` in order, then CANCEL if ``cancel``: decided together and saved
        once, before any of their effects is applied (one status write, not one each)."""

        def decide(now: float) -> Effects:
            effects = Effects()
            for signal in signals:
                decided = self.core.signal(signal.event, signal.data, now, signal_id=signal.id)
                effects.items.extend(decided.items)
            if cancel:
                effects.items.extend(self.core.cancel(now).items)
            return effects

        await self._do(decide)

    async def turn_deleted(self, turn: TurnId) -> None:
        """A person deleted a live Turn's AgentTurn."""
        await self._do(lambda now: self.core.deleted(turn, now))

    async def cancel(self) -> None:
        await self._do(self.core.cancel)

    async def pick(
        self,
        instance_id: InstanceId,
        event: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
    ) -> PickAnswer:
        """Deliver a pick; one repeating ``key`` is answered as the first was."""
        answer: list[PickAnswer] = []

        def decide(now: float) -> Effects:
            result, effects = self.core.pick(instance_id, event, payload, now, key=key)
            answer.append(result)
            return effects

        await self._do(decide)
        return answer[0]

    async def delivery(self, delivery_id: DeliveryId, wait_s: float) -> Receipt | Gone | None:
        """A delivery's answer, waiting up to ``wait_s`` while it is outstanding."""
        if self.closed:
            raise ActorClosed(f"the actor of Run {self.core.run.name} is closed")
        answer = self.core.delivery(delivery_id)
        if answer is not None:
            return answer
        ready = self._answers.setdefault(delivery_id, asyncio.Event())
        try:
            # Not ``wait_for``: on Python 3.11 it drops a cancellation that lands once the
            # wait is done, and a request the operator cuts must end here.
            async with asyncio.timeout(wait_s):
                await ready.wait()
        except TimeoutError:
            return None
        if self.closed:
            raise ActorClosed(f"the actor of Run {self.core.run.name} is closed")
        return self.core.delivery(delivery_id)

    async def close(self) -> None:
        """Stop taking inputs and applying effects; what is under way resumes from the
        snapshot."""
        self.closed = True
        for parked in self._answers.values():
            parked.set()  # a parked delivery poll is answered 503 at once
        tasks = [*self._tasks, *([self._timer] if self._timer else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._slots is not None:
            self._slots.close()

    # ------------------------------------------------------------------ applying

    async def _do(self, decide: Callable[[float], Effects], *, answer: bool = False) -> None:
        """Decide, save, apply; an ``answer`` (a settlement) that decided no effect is
        saved later."""
        async with self._lock:
            if self.closed:
                raise ActorClosed(f"the actor of Run {self.core.run.name} is closed")
            effects = decide(self._clock())
            if answer and not effects.items:
                if not self._unsaved:
                    self._unsaved = True
                    self._spawn(self._save_later())
            else:
                await self._save()
                self._apply(effects)
        if self._on_change is not None:
            self._on_change(self)
        self._arm_timer()

    async def _save(self) -> None:
        self._unsaved = False
        await self._store.save(self.core.snapshot())

    async def _save_later(self) -> None:
        await asyncio.sleep(self._save_later_s)
        async with self._lock:
            if self._unsaved and not self.closed:
                await self._save()

    def _apply(self, effects: Effects) -> None:
        for effect in effects.items:
            match effect:
                case Admit():
                    self._chain(effect.instance_id, self._admit(effect))
                case Sweep():
                    if self._slots is not None:
                        self._slots.withdraw(effect.turn)  # now: its admission may wait
                    self._chain(effect.instance_id, self._sweep(effect))
                case StartExec():
                    self._execs_running[effect.invocation] = self._spawn(self._exec(effect))
                case StartDeliver():
                    self._spawn(self._deliver(effect))
                case MakeWorktrees():
                    self._spawn(self._make_worktrees(effect))
                case StopExec():
                    task = self._execs_running.pop(effect.invocation, None)
                    if task is not None:
                        task.cancel()
                case Answer():
                    self._answers.setdefault(effect.delivery, asyncio.Event()).set()
                case Finished():
                    self.finished.set()
                    if self._traces is not None:
                        self._traces.finished(effect.phase, effect.message, self._clock())
                case Recorded():
                    if self._slots is not None:
                        self._slots.leave(effect.record.name)
                    if self._on_record is not None:
                        self._on_record(effect.record)
                    if self._traces is not None:
                        self._traces.turn(effect.record, effect.exit)
                case _:
                    assert_never(effect)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("run %s: an effect failed", self.core.run.name, exc_info=task.exception())

    def _chain(self, instance_id: InstanceId, work: Coroutine[Any, Any, None]) -> None:
        previous = self._chains.get(instance_id)

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await work

        chained = self._spawn(after_previous())
        # Cancelled (``close``) before ``work`` began, while it waited for the previous
        # effect or before the task first ran: ``work`` is closed, never started (once it
        # ran, closing it does nothing).
        chained.add_done_callback(lambda _: work.close())
        self._chains[instance_id] = chained

    async def _admit(self, effect: Admit) -> None:
        if self._traces is not None:
            effect = dataclasses.replace(effect, traceparent=self._traces.traceparent(effect.turn))
        try:
            submission = await self._turns.admit(effect)
        except AdmitFailed as failed:
            why = str(failed)
            await self._do(lambda now: self.core.admit_failed(effect.turn, why, now))
            return
        await self._do(lambda now: self.core.admitted(effect.turn, submission, now))
        self._follow(effect, submission)

    def _follow(self, effect: Admit, submission: SubmissionId) -> None:
        async def progressed(spent: Usage | None) -> None:
            if spent is None:
                # Neither saved nor shown: a restore starts every stall clock again, and
                # the timer armed for the earlier deadline finds nothing due.
                async with self._lock:
                    if not self.closed:
                        self.core.progressed(effect.turn, submission, self._clock())
                return
            # A spend may reach a limit: decided, and saved later as a settlement is (a
            # restore's follower reads the stream, and so the spend, from its start).
            if not self.closed:
                await self._do(
                    lambda now: self.core.progressed(effect.turn, submission, now, spent=spent),
                    answer=True,
                )

        async def follow() -> None:
            if self.core.watches_progress(effect.turn):
                settled = await self._turns.settlement(effect, submission, progress=progressed)
            else:
                settled = await self._turns.settlement(effect, submission)
            await self._do(
                lambda now: self.core.settled(
                    effect.turn,
                    settled.submission,
                    settled.outcome,
                    now,
                    usage=settled.usage,
                    message=settled.message,
                    reason=settled.reason,
                ),
                answer=True,
            )

        self._spawn(follow())

    async def _sweep(self, effect: Sweep) -> None:
        settlements = await self._turns.sweep(effect)
        caused = {s.submission: (s.outcome, s.usage, s.message) for s in settlements}
        await self._do(lambda now: self.core.swept(effect.turn, caused, now))

    async def _exec(self, effect: StartExec) -> None:
        result = await self._execs.run(effect)
        self._execs_running.pop(effect.invocation, None)
        await self._do(lambda now: self.core.exec_done(effect.invocation, result, now))

    async def _deliver(self, effect: StartDeliver) -> None:
        result = await self._deliveries.deliver(effect)
        await self._do(lambda now: self.core.deliver_done(effect.invocation, result, now))

    async def _make_worktrees(self, effect: MakeWorktrees) -> None:
        made = await self._worktrees.make(effect)
        await self._do(lambda now: self.core.worktrees_made(effect.child, made, now))

    def _arm_timer(self) -> None:
        current = asyncio.current_task()
        if self._timer is not None and self._timer is not current and not self._timer.done():
            self._timer.cancel()
        fire_at = self.core.next_fire()
        if fire_at is None:
            self._timer = None
            return

        async def fire() -> None:
            await asyncio.sleep(max(0.0, fire_at - self._clock()))
            await self._do(self.core.fire_due)

        self._timer = asyncio.create_task(fire())
