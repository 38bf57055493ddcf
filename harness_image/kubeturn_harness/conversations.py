"""Conversations: one FIFO queue of Submissions each, one run at a time, each settled once.

Only the first unsettled Submission of a conversation runs, and the next starts only
after the previous run's task has finished, so runs never overlap, not even while a
sweep cuts one. Settling is idempotent: the first settlement of a Submission is its
settlement. What ends a run and how it settles (docs/turn-semantics.md §2, §5, §6):

- a sweep settles the running Submission as its body says (``settlements``), and every
  Submission queued behind it ``aborted``, at once; it cuts the run, whose cut reply is
  recorded as the run stops, before the next Submission can start;
- an ``interrupt`` or ``supersede`` admission cuts the running run, which settles
  ``aborted``; its reply is marked so later prompts carry it as declared;
- a run that returns settles ``completed``; one that finds its Turn over waits up to
  ``sweep_wait_s`` for the sweep, then settles ``aborted`` saying none came; one that
  throws settles ``failed``;
- after a restart, a run that was under way settles ``failed``/``harness_restarted``,
  one that was waiting for its sweep ``aborted``, and queued ones run.

A closed conversation starts no run: ``close`` stops the one under way and leaves the
rest queued for the next process, even when its cancellation races a settlement.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from kubeturn_harness import history
from kubeturn_harness.errors import RunFailed
from kubeturn_harness.history import SubmissionRecord
from kubeturn_harness.settlements import QUEUED_OUTCOME, Sweep, running_outcome
from kubeturn_harness.store import ConversationLog
from kubeturn_harness.tool_loop import (
    Completed,
    NeverPrompted,
    RunEnv,
    Tally,
    TurnOver,
    run_submission,
)
from kubeturn_harness.wire import (
    AdmitRequest,
    ErrorType,
    EventType,
    History,
    InputPolicy,
    MessageStatus,
    Outcome,
    Projection,
    Settlement,
    SettlementError,
    SubmissionId,
    SubmissionState,
    Usage,
)

log = logging.getLogger(__name__)

SWEEP_WAIT_S = 90.0
"""How long a run that found its Turn over waits for the sweep (docs/turn-semantics.md
§2): as long as a pick waits for the Orchestrator (``orchestrator.PICK_RETRY_S``). With
the Orchestrator there, the sweep takes one round trip; with the operator restarting
after the pick's receipt, it comes from the next operator, and the Turn's own pick is
still what ended it (ADR 0047). Nothing else runs in the conversation meanwhile: the
next Submission comes from the Orchestrator too."""

NO_SWEEP = "the run found its Turn over, but no sweep came from the Orchestrator within {wait:g} s"
NO_SWEEP_RESTART = (
    "the run found its Turn over, but no sweep came from the Orchestrator before the "
    "Harness restarted"
)
NEVER_PROMPTED = "the surface read answered 404: the Turn was over before it started"
QUEUED_SWEPT = "queued behind a swept Submission; it never ran"
RESTARTED = "the Harness restarted while this Submission ran"


@dataclass
class _Stop:
    """An order to end the running Submission, given before its run is cut."""

    outcome: Outcome
    message: str | None
    status: MessageStatus
    projection: Projection


@dataclass
class _Live:
    record: SubmissionRecord
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    stop: _Stop | None = None
    tally: Tally = field(default_factory=Tally)


class Conversation:
    def __init__(self, log_: ConversationLog, env: RunEnv, *, sweep_wait_s: float) -> None:
        self.log = log_
        self._env = env
        self._sweep_wait_s = sweep_wait_s
        self._live = {
            sid: _Live(record) for sid, record in history.submissions(log_.events).items()
        }
        self._queue: deque[SubmissionId] = deque()
        self._running: _Live | None = None
        self._task: asyncio.Task[object] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self.touched = env.clock.monotonic()
        """When it was last asked for or last finished a run (monotonic seconds): how long
        it has been idle, for eviction."""

    # ------------------------------------------------------------------ commands

    def recover(self) -> None:
        """Settle what a previous process left open; queue what never started."""
        for live in self._live.values():
            record = live.record
            if record.state is SubmissionState.WAITING_FOR_SWEEP:
                self._settle(live, Outcome.ABORTED, message=NO_SWEEP_RESTART)
            elif record.state is SubmissionState.RUNNING:
                self._settle(
                    live,
                    Outcome.FAILED,
                    error=SettlementError(type=ErrorType.HARNESS_RESTARTED, message=RESTARTED),
                )
            elif record.state is SubmissionState.QUEUED:
                self._queue.append(record.id)
        self._wake()

    def admitted_as(self, key: str) -> tuple[SubmissionId, int] | None:
        """The Submission an earlier admission with this idempotency key made, if any."""
        for event in self.log.events:
            if (
                event.type is EventType.SUBMISSION_ADMITTED
                and event.data["request"].get("key") == key
            ):
                return SubmissionId(event.data["submissionId"]), event.offset
        return None

    def admit(self, sid: SubmissionId, request: AdmitRequest) -> int:
        """Queue one Submission; answer the offset of its admission event."""
        event = self.log.append(
            EventType.SUBMISSION_ADMITTED,
            {"submissionId": sid, "request": request.model_dump(mode="json", by_alias=True)},
        )
        self._live[sid] = _Live(SubmissionRecord(sid, request, event.at))
        self._queue.append(sid)
        self._env.metrics.admitted.labels(policy=request.policy.value).inc()
        if request.policy is not InputPolicy.QUEUE:
            self._cut_for(sid, request)
        self._wake()
        return event.offset

    async def sweep(self, sweep: Sweep) -> bool:
        """Apply the Orchestrator's sweep; True when it settled anything."""
        started = self._env.clock.monotonic()
        swept = False
        running = self._running
        for sid in self._queue:
            live = self._live[sid]
            if live is not running and live.record.settlement is None:
                swept |= self._settle(live, QUEUED_OUTCOME, message=QUEUED_SWEPT)
        if running is not None and running.record.settlement is None:
            outcome = running_outcome(sweep, running.record.id)
            # The sweep's word settles it; a reply an earlier stop (an ``interrupt`` or
            # ``supersede`` admission) already cut stays marked as that stop declared.
            cut = running.stop or _Stop(
                outcome, None, MessageStatus.INTERRUPTED, Projection.ASSISTANT_MARKED
            )
            running.stop = _Stop(outcome, None, cut.status, cut.projection)
            swept = True
            if self._task is not None:
                self._task.cancel()
            self._settle_stopped(running)
        self._env.metrics.sweeps.labels(settled=str(swept).lower()).inc()
        if swept:
            self._env.metrics.sweep_seconds.observe(self._env.clock.monotonic() - started)
        return swept

    async def close(self) -> None:
        """Stop without settling: a restarted Harness settles what this leaves open.

        No run starts once it is called, so the worker ends with the run under way even
        if its cancellation is lost on the way (it must not start the next one)."""
        self._closed = True
        for task in (self._worker, self._task):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._worker, self._task) if t is not None), return_exceptions=True
        )
        self.log.close()

    # ------------------------------------------------------------------ queries

    def history(self) -> History:
        return history.history(self.log.id, self.log.name, self.log.instance_id, self.log.events)

    @property
    def idle(self) -> bool:
        return self._worker is None

    @property
    def busy(self) -> bool:
        """Something waits on it, so it must stay in memory: a Submission unsettled
        (a previous process's, before ``recover``, too), a run still finishing (a cut
        one records its reply, and any pick it has outstanding, after its settlement),
        or a reader parked on its stream."""
        return (
            self._worker is not None
            or self.log.readers > 0
            or any(live.record.settlement is None for live in self._live.values())
        )

    def unsettled(self) -> SubmissionId | None:
        """A Submission not settled yet (queued, running, or waiting for its sweep)."""
        return next(
            (sid for sid, live in self._live.items() if live.record.settlement is None), None
        )

    async def stopped(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for its worker to end (a run a sweep cut still records
        its reply, and waits for its pick's receipt); True once no run is under way."""
        if self._worker is not None:
            await asyncio.wait({self._worker}, timeout=seconds)
        return self._worker is None

    def touch(self) -> None:
        """Mark it used now (a request reached it, or its run ended)."""
        self.touched = self._env.clock.monotonic()

    # ------------------------------------------------------------------ the worker

    def _wake(self) -> None:
        if self._worker is None and self._queue and not self._closed:
            self._worker = asyncio.create_task(self._work(), name=f"conversation {self.log.id}")

    async def _work(self) -> None:
        try:
            while self._queue and not self._closed:
                live = self._live[self._queue[0]]
                if live.record.settlement is None:
                    await self._run(live)
                self._queue.popleft()
        finally:
            self._worker = None
            self.touch()

    async def _run(self, live: _Live) -> None:
        record = live.record
        earlier = history.messages(self.log.events)
        self.log.append(EventType.SUBMISSION_STARTED, {"submissionId": record.id})
        record.started = True
        self._running = live
        self._env.metrics.running.inc()
        task = asyncio.create_task(
            run_submission(
                record, earlier, self.log, self._env, lambda: self._cut_mark(live), live.tally
            ),
            name=f"run {record.id}",
        )
        self._task = task
        try:
            await asyncio.wait({task})
            await self._conclude(live, task)
        finally:
            self._task = None
            self._running = None
            self._env.metrics.running.dec()

    async def _conclude(self, live: _Live, task: asyncio.Task[object]) -> None:
        if live.stop is not None or task.cancelled():
            if not task.cancelled():
                # How a stopped run ended (a request refused after its end) is the stop's.
                task.exception()
            if live.stop is not None:
                self._settle_stopped(live)
            return
        error = task.exception()
        if isinstance(error, RunFailed):
            failure = SettlementError(type=error.error_type, message=error.message)
            self._settle(live, Outcome.FAILED, error=failure)
        elif error is not None:
            log.error("run %s broke", live.record.id, exc_info=error)
            failure = SettlementError(
                type=ErrorType.SUBMISSION_FAILED, message=f"the Harness failed: {error!r}"
            )
            self._settle(live, Outcome.FAILED, error=failure)
        elif isinstance(task.result(), NeverPrompted):
            self._settle(live, Outcome.ABORTED, message=NEVER_PROMPTED)
        elif isinstance(task.result(), Completed):
            self._settle(live, Outcome.COMPLETED)
        else:
            assert isinstance(task.result(), TurnOver)
            await self._await_sweep(live)

    async def _await_sweep(self, live: _Live) -> None:
        self.log.append(
            EventType.RUN_ENDED, {"submissionId": live.record.id, "reason": "turn-over"}
        )
        live.record.run_ended = True
        # Not ``asyncio.wait_for``: on Python 3.11 it returns the wait's result when a
        # cancellation (a ``close``) lands in the loop iteration the sweep's settlement
        # wakes it, losing the cancellation. ``asyncio.timeout`` never drops one.
        try:
            async with asyncio.timeout(self._sweep_wait_s):
                await live.settled.wait()
        except TimeoutError:
            self._settle(live, Outcome.ABORTED, message=NO_SWEEP.format(wait=self._sweep_wait_s))

    def _cut_for(self, sid: SubmissionId, request: AdmitRequest) -> None:
        """An ``interrupt``/``supersede`` admission ends a run still under way."""
        running = self._running
        if running is None or running.stop is not None or running.record.run_ended:
            return
        supersede = request.policy is InputPolicy.SUPERSEDE
        running.stop = _Stop(
            Outcome.ABORTED,
            f"{'superseded' if supersede else 'interrupted'} by Submission {sid}",
            MessageStatus.SUPERSEDED if supersede else MessageStatus.INTERRUPTED,
            Projection.OMIT if supersede else request.projection,
        )
        if self._task is not None:
            self._task.cancel()

    def _cut_mark(self, live: _Live) -> tuple[MessageStatus, Projection]:
        if live.stop is None:
            return MessageStatus.INTERRUPTED, Projection.ASSISTANT_MARKED
        return live.stop.status, live.stop.projection

    # ------------------------------------------------------------------ settling

    def _settle_stopped(self, live: _Live) -> bool:
        assert live.stop is not None
        return self._settle(live, live.stop.outcome, message=live.stop.message)

    def _settle(
        self,
        live: _Live,
        outcome: Outcome,
        *,
        error: SettlementError | None = None,
        message: str | None = None,
    ) -> bool:
        """Record a settlement once; False when the Submission had already settled."""
        if live.record.settlement is not None:
            return False
        usage: Usage | None = live.tally.total
        settlement = Settlement(
            submissionId=live.record.id,
            outcome=outcome,
            error=error,
            message=message,
            usage=usage,
            at=self._env.clock.now(),
        )
        self.log.append(
            EventType.SUBMISSION_SETTLED, settlement.model_dump(mode="json"), durable=True
        )
        live.record.settlement = settlement
        live.settled.set()
        self._env.metrics.settled.labels(
            outcome=outcome.value, error=error.type.value if error else ""
        ).inc()
        return True
