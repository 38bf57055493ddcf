"""The Run core: one Run's Machine, its Turns, their sweeps and the answers to picks.

Every entry point takes an event (a start, a signal, a pick, a timer, an exec result, a
settlement, a Submission's progress and spend, a fan-out child's worktrees made),
advances the Machine, and returns the
effects the shell must apply: admit a Submission, sweep a Turn with its cause, start or
stop an exec, make a child's worktrees, answer a pick. The state it keeps is one JSON
snapshot; the shell persists it before it acknowledges any effect, so a restored core
continues exactly. No IO, no clock: ``now`` is an argument.

``RunCore`` coordinates; what each concept decides lives beside it: ``admissions`` (a
Turn's start and what its Submissions are admitted with), ``picks`` (which picks are
refused, and their answers), ``invokes`` (exec and deliver invokes), ``history`` (a
Turn's one record), ``prompts`` (the words the model reads), ``turns`` (the Turn ledger
and a Turn's outcome), ``snapshots`` (the snapshot's format and versions), ``worktrees``
(which fan-out children work in worktrees of their own, and their branches), ``stalls``,
``retries`` and ``budgets`` (when a live Turn is swept as the Agent's fault, and when a
faulted one is tried again). Its helpers return the effects they decide; none extends a
list it is given.

The rules (docs/turn-semantics.md):

- a Turn starts when its state is entered and is swept when its state exits; the sweep
  says ``cause: "pick"`` exactly when the macrostep that exited it carried this Turn's
  own pick (through work or timers the pick's route started, too);
- picks are answered as ``picks`` says;
- a Submission that settles ``completed`` while picks are allowed is nudged (budget 2),
  then the Machine gets the Agent's fault; a fault burns a continued conversation;
- a live Turn that stalls or reaches a limit is swept while its state is active, then
  routed as the Agent's fault; no Turn starts past a reached limit;
- every Turn gets exactly one history record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kubeturn.api.status import DeliveryRecord, LimitUse, RunPhase, TrailEntry, bounded
from kubeturn.errors import SnapshotUnreadable
from kubeturn.machine import interpreter
from kubeturn.machine.interpreter import (
    ERROR_INVOKE,
    ChildStatus,
    Config,
    Event,
    InvokeEntry,
    InvokeKind,
    Scope,
    Status,
    Step,
)
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import ROOT, StatePath, machine_of, parent_of
from kubeturn.orchestrator import (
    admissions,
    budgets,
    frames,
    history,
    ids,
    invokes,
    picks,
    prompts,
    retries,
    signals,
    snapshots,
    stalls,
    trail,
    turns,
    usages,
    worktrees,
)
from kubeturn.orchestrator.effects import (
    Admit,
    Answer,
    Effect,
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
from kubeturn.orchestrator.turns import (
    PICK,
    Delivery,
    Exit,
    SubmissionEntry,
    Turn,
    TurnPhase,
    TurnRecord,
)
from kubeturn_harness.wire import (
    DeliveryId,
    MenuItem,
    Notice,
    Outcome,
    Receipt,
    SubmissionId,
    Surface,
    Usage,
)

NUDGE_BUDGET = 2
"""Nudges per Turn before the Agent's fault: a model that stops twice more without
picking, after being told what the workflow waits for, will not pick on a third."""
MAX_TIMERS_AT_ONCE = 1000
"""Timers fired in one call; a zero-delay timer that re-arms itself cannot spin forever."""


PHASE_OF = {
    Status.DONE: RunPhase.SUCCEEDED,
    Status.FAILED: RunPhase.FAILED,
    Status.CANCELLED: RunPhase.CANCELLED,
}


@dataclass(frozen=True)
class RunView:
    """What a Run's status shows of its core, taken at one moment (``RunCore.view``): the
    shells read this, not the core's fields, so the core may keep its state as it likes."""

    phase: RunPhase
    """The phase to show (``RunCore.shown_phase``), not the Machine's own."""
    state: str | None
    """The active leaf, or the leaf the Machine ended in; None before it starts."""
    message: str | None
    output: Any
    """The Machine's output once it ended (None before)."""
    recorded: int
    """Turns recorded over the Run's life; ``history`` keeps the last ones."""
    history: tuple[TurnRecord, ...]
    delivered: tuple[DeliveryRecord, ...]
    signals: tuple[str, ...]
    """Ids of the outside signals already sent, in the order they were."""
    ignored: Mapping[str, str]
    """Of those, the ones the Machine did not take, and why (ADR 0067)."""
    cancelled: bool
    accepted: tuple[interpreter.Accepted, ...]
    """The events the active states accept now."""
    trail: tuple[TrailEntry, ...] = ()
    """The most recent transitions that moved the Machine (``trail.TRAIL_LIMIT``)."""
    moves: int = 0
    """Transitions that moved it over the Run's life; ``trail`` keeps the last ones."""
    children: tuple[interpreter.Child, ...] = ()
    """The children of the running fan-outs (``Config.children``)."""
    active: tuple[StatePath, ...] = ()
    """The active leaves, every running child's among them (``Config.active``)."""
    usage: Mapping[str, Usage] = field(default_factory=dict)
    """Each Agent slot's tokens and cost over the Run so far (ADR 0114): its recorded
    Turns', and what its live ones have used up to now (``RunCore.spending``)."""
    limits: tuple[LimitUse, ...] = ()
    """How much of each token and cost limit of the Run and its slots is spent (ADR 0117)."""


class RunCore:
    def __init__(
        self,
        run: LoadedRun,
        *,
        workspace: frames.WorkspaceView | None,
        new_id: ids.IdSource,
        nudge_budget: int = NUDGE_BUDGET,
        snapshot: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.workspace = workspace
        self._new_id = new_id
        self._nudge_budget = nudge_budget
        self._scope = Scope(
            input=run.spec.input, workspace=workspace.activation() if workspace else {}
        )
        self._queue: list[Event] = []
        self._validators = picks.Validators(run)
        self.config: Config | None = None
        self.phase = RunPhase.PENDING
        self.message: str | None = None
        self.turns: dict[TurnId, Turn] = {}
        self._held: Counter[InstanceId] = Counter()
        """Instance ID → how many of ``turns`` hold it."""
        self.on_instance: Callable[[InstanceId, bool], None] | None = None
        """Told ``(instance_id, True)`` when a Turn of this Run first holds an Instance ID,
        and ``(instance_id, False)`` when none holds it any more: the Orchestrator API keeps
        its index of owners with it, so that finding a Turn's Run is not a walk."""
        self._live: dict[TurnId, Turn] = {}
        """The Turns whose state is active (pending or live), kept apart: Runs are long."""
        self.deliveries: dict[DeliveryId, Delivery] = {}
        self.epochs: dict[str, int] = {}
        self.notices: dict[str, list[Notice]] = {}
        self.history: list[TurnRecord] = []
        """The most recent records, oldest first, within ``history.HISTORY_LIMIT`` and
        ``history.HISTORY_BYTES``."""
        self._history_bytes: list[int] = []
        """Each record's size in the history's budget, in its order."""
        self.recorded = 0
        """Turns recorded over the Run's life (the history keeps the last ones)."""
        self.usage: dict[str, Usage] = {}
        """Each Agent slot's usage over the Turns recorded (``usages.add``): the history
        drops old records, this sum keeps them."""
        self.execs: dict[str, StartExec] = {}
        """Commands started and not yet answered, as rendered: a restore starts them again."""
        self.delivering: dict[str, StartDeliver] = {}
        """Deliveries started and not yet ended, as rendered: a restore starts them again,
        whether or not their state is still active (a delivery is never stopped)."""
        self.delivered: list[DeliveryRecord] = []
        """The most recent deliveries' records, oldest first, at most
        ``invokes.DELIVERIES_KEPT``."""
        self.signals: list[str] = []
        """Ids of the outside signals already sent: each is sent exactly once."""
        self.ignored: dict[str, str] = {}
        """Of those, the ones the Machine did not take, and why (ADR 0067)."""
        self.cancelled = False
        self.trail: list[TrailEntry] = []
        """The most recent transitions that moved the Machine, oldest first."""
        self.moves = 0
        """Transitions that moved it over the Run's life."""
        self.turn_seq = 0
        """Turns started over the Run's life: the n-th is ``t<n>`` (``ids.turn``)."""
        self.delivery_seq = 0
        """Picks delivered over the Run's life: the n-th delivery id starts ``d<n>-``."""
        self.child_worktrees: dict[StatePath, worktrees.ChildWorktrees] = {}
        """The worktrees of the fan-out children that asked for their own (ADR 0113), by
        the child's root, while the child is among the Machine's children."""
        self.retrying: dict[str, retries.Retry] = {}
        """The retries decided and not started yet, by the invocation they retry (ADR
        0115), while its state is active."""
        self.started_at: float | None = None
        """When the Run started: its wall-time limit counts from then (ADR 0117)."""
        self._budgeted = budgets.limited(run)
        """Whether the manifest sets a limit at all: a Run without one spends nothing on
        them."""
        if snapshot is not None:
            try:
                self._restore(snapshot)
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise SnapshotUnreadable(_unreadable(error)) from error

    # ------------------------------------------------------------------ events in

    def start(self, now: float) -> Effects:
        if self.config is not None:
            return Effects()
        self.phase = RunPhase.RUNNING
        self.started_at = now
        effects = self._apply(interpreter.start(self.run.chart, self._scope, now), now)
        return Effects([*effects, *self._drain(now)])

    def signal(
        self,
        event: str,
        data: Mapping[str, Any] | None,
        now: float,
        *,
        signal_id: str | None = None,
    ) -> Effects:
        """An outside event; one with an id is sent once, however often it is repeated.

        It is handled now or never (ADR 0067): one that no active state accepts, whose data
        does not fit its schema, or that no guard lets through changes nothing, and one
        with an id is recorded in ``ignored`` with why."""
        if signal_id is not None:
            if signal_id in self.signals:
                return Effects()
            self.signals.append(signal_id)
        if self.config is None:
            return Effects()
        payload = dict(data or {})
        found = [
            {"event": item.event, "state": item.state, "schema": item.schema}
            for item in self.accepted()
        ]
        why = signals.refusal(found, event, payload)
        effects: list[Effect] = []
        if why is None:
            step, effects = self._step(Event(event, payload), now)
            if not step.taken:
                why = f"no transition of {event} has a guard that holds now"
        if why is not None and signal_id is not None:
            self.ignored[signal_id] = bounded(why)
        return Effects(effects)

    def accepted(self) -> list[interpreter.Accepted]:
        """The events the active states accept now (``interpreter.accepted``)."""
        if self.config is None:
            return []
        return interpreter.accepted(self.run.chart, self.config)

    def cancel(self, now: float) -> Effects:
        """CANCEL, sent once."""
        if self.cancelled:
            return Effects()
        self.cancelled = True
        return Effects(self._send(Event(interpreter.CANCEL), now))

    def fire_due(self, now: float) -> Effects:
        effects: list[Effect] = []
        for _ in range(MAX_TIMERS_AT_ONCE):
            due = interpreter.due(self.config, now) if self.config is not None else []
            if not due:
                break
            effects += self._step(interpreter.timer_event(due[0]), now)[1]
        for turn in stalls.due(self.run, self.live_turns(), now):
            if turn.phase is TurnPhase.LIVE:  # not ended by an earlier one's route
                effects += self._stall(turn, now)
        effects += self._enforce(now)
        for invocation, retry in sorted(self.retrying.items(), key=lambda item: item[1].at):
            if retry.at <= now and invocation in self.retrying:
                effects += self._retry(invocation, now)
        return Effects(effects)

    def next_fire(self) -> float | None:
        """When ``fire_due`` has something to do next: a Machine timer, a stall (ADR
        0115), a retry's backoff ending, a wall-time limit (ADR 0117)."""
        times = [
            interpreter.next_fire(self.config) if self.config is not None else None,
            stalls.next_at(self.run, self.live_turns()),
            budgets.next_at(self.run, self.live_turns(), self.started_at),
            *(retry.at for retry in self.retrying.values()),
        ]
        return min((at for at in times if at is not None), default=None)

    def progressed(
        self,
        turn_id: TurnId,
        submission: SubmissionId,
        now: float,
        *,
        spent: Usage | None = None,
    ) -> Effects:
        """The Turn's running Submission made progress (``stalls``): its stall clock
        starts again. ``spent``: what its stream shows the Submission used so far; a Turn
        that reached a limit with it is swept (``budgets``)."""
        turn = self.turns.get(turn_id)
        running = turn.running if turn is not None else None
        if turn is None or turn.phase is not TurnPhase.LIVE:
            return Effects()
        if running is None or running.id != submission:
            return Effects()
        turn.progressAt = now
        if spent is None or spent == running.spent:
            return Effects()
        running.spent = spent
        return Effects([*self._enforce(now), *self._drain(now)])

    def watches_progress(self, turn_id: TurnId) -> bool:
        """Whether the Turn's slot has a stall clock, or a limit counts its tokens or
        cost, so that its progress is worth reporting."""
        turn = self.turns.get(turn_id)
        return turn is not None and (
            stalls.after(self.run, turn) is not None or budgets.metered(self.run, turn)
        )

    def exec_done(self, invocation: str, result: invokes.ExecResult, now: float) -> Effects:
        self.execs.pop(invocation, None)
        entry = self._invocation(invocation)
        if entry is None:
            return Effects()
        return Effects(self._send(invokes.exec_event(entry, result), now))

    def worktrees_made(self, child: str, made: worktrees.Made, now: float) -> Effects:
        """A child's worktrees were made (or could not be): the invokes that waited for
        them start in them, or each gets ``error.invoke`` (reason ``worktree``). One
        reported again, or of a child gone, is ignored."""
        entry = self.child_worktrees.get(StatePath(child))
        if entry is None or not entry.pending or self.config is None:
            return Effects()
        if made.repos is not None:
            entry.repos = dict(made.repos)
            self._scope = self._scope_with_children()
        else:
            entry.error = bounded(made.error or "the worktrees were not made")
        effects = self._ask_worktrees(self.config)
        running = {i.id: i for i in self.config.invokes}
        for done in self.child_worktrees.values():
            if done.pending:
                continue
            waiting, done.waiting = done.waiting, []
            for waited in waiting:
                invoke = running.get(waited.invocation)
                if invoke is not None:
                    event = Event(waited.event, waited.fields)
                    effects += self._start_now(invoke, event, now)
        return Effects([*effects, *self._drain(now)])

    def deliver_done(self, invocation: str, result: invokes.DeliverResult, now: float) -> Effects:
        """A delivery ended: it is recorded, and its state (if still active) gets its done
        or error event. One already recorded (a repeat after a restore) is ignored."""
        start = self.delivering.pop(invocation, None)
        if start is None:
            return Effects()
        self.delivered = invokes.recorded(self.delivered, start, result, now)
        entry = self._invocation(invocation)
        if entry is None:
            return Effects()
        return Effects(self._send(invokes.deliver_event(entry, result), now))

    def pick(
        self,
        instance_id: InstanceId,
        event: str,
        payload: Mapping[str, Any],
        now: float,
        *,
        key: str | None = None,
    ) -> tuple[picks.PickAnswer, Effects]:
        if key is not None:
            first = picks.repeat(self.deliveries.values(), self.turns, instance_id, key)
            if first is not None:
                return first, Effects()
        turn = self._live_turn(instance_id)
        if turn is None or self.config is None:
            return picks.Gone(), Effects()
        refusal = picks.refusal(
            self.run.chart, self.config, self.deliveries, turn, event, self.allowed(turn)
        )
        if refusal is not None:
            return refusal, Effects()
        invalid = self._validators.problem(turn, event, payload)
        if invalid is not None:
            return invalid, Effects()
        self.delivery_seq += 1
        delivery = Delivery(
            id=DeliveryId(f"d{self.delivery_seq}-{self._new_id()}"),
            turn=turn.id,
            event=event,
            key=key,
        )
        self.deliveries[delivery.id] = delivery
        cause = frozenset(
            {turn.id, *picks.enclosing_outstanding(self.run.chart, turn, self.live_turns())}
        )
        before = self.config.active
        step, effects = self._step(
            Event(event, dict(payload), cause, scope=StatePath(turn.state)), now
        )
        return self._receipt_after_pick(turn, delivery, step, before), Effects(effects)

    def admitted(self, turn_id: TurnId, submission: SubmissionId, now: float) -> Effects:
        turn = self.turns.get(turn_id)
        if turn is None:
            return Effects()
        turn.admitting = False
        if all(s.id != submission for s in turn.submissions):
            turn.submissions.append(SubmissionEntry(id=submission, admittedAt=now))
            turn.progressAt = now
        if turn.phase is TurnPhase.PENDING:
            turn.phase = TurnPhase.LIVE
        return Effects()

    def admit_failed(self, turn_id: TurnId, message: str, now: float) -> Effects:
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return Effects()
        turn.admitting = False
        turn.phase = TurnPhase.LIVE
        return Effects(self._fault(turn, "admission-failed", message, now))

    def settled(
        self,
        turn_id: TurnId,
        submission: SubmissionId,
        outcome: Outcome,
        now: float,
        *,
        usage: Usage | None = None,
        message: str | None = None,
        reason: str | None = None,
    ) -> Effects:
        """A Submission settled (reported by the shell's follower; idempotent)."""
        turn = self.turns.get(turn_id)
        entry = _submission(turn, submission) if turn else None
        if turn is None or entry is None or entry.outcome is not None:
            return Effects()
        entry.outcome, entry.settledAt, entry.usage = outcome, now, usage
        entry.message = bounded(message) if message is not None else None
        if turn.phase is not TurnPhase.LIVE:
            return Effects()
        if outcome is Outcome.COMPLETED:
            return Effects([*self._enforce(now), *self._wake(turn, now), *self._drain(now)])
        why = reason or ("failed" if outcome is Outcome.FAILED else outcome.value)
        detail = message or f"its Submission settled {outcome.value} while its state was active"
        return Effects([*self._fault(turn, why, detail, now), *self._enforce(now)])

    def deleted(self, turn_id: TurnId, now: float) -> Effects:
        """A person deleted the Turn's AgentTurn: the Agent's fault, reason ``deleted``."""
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return Effects()
        running = turn.running
        if running is not None:
            running.outcome, running.settledAt = Outcome.ABORTED, now
        turn.admitting = False
        message = f"the AgentTurn of Turn {turn.id} was deleted"
        return Effects(self._fault(turn, "deleted", message, now))

    def swept(
        self,
        turn_id: TurnId,
        settlements: turns.Caused,
        now: float,
    ) -> Effects:
        """The sweep of a Turn came back with the settlements it caused; record the Turn."""
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase is not TurnPhase.SWEEPING:
            return Effects()
        turns.settle(turn.submissions, settlements, now)
        return Effects([*self._record(turn, now), *self._enforce(now)])

    def verdict(
        self, turn_id: TurnId, settlements: turns.Caused
    ) -> tuple[Outcome, str | None] | None:
        """How the Turn is recorded: as ``swept`` will record it once its sweep reports
        ``settlements``, or as it was recorded; None when this core holds no such Turn
        whose state exited. Changes nothing."""
        turn = self.turns.get(turn_id)
        if turn is not None and turn.phase is TurnPhase.SWEEPING and turn.exit is not None:
            submissions = [entry.model_copy() for entry in turn.submissions]
            turns.settle(submissions, settlements, turn.exit.at)
            return turns.outcome(turn.exit, submissions)
        record = next((r for r in reversed(self.history) if r.name == turn_id), None)
        return (record.outcome, record.message) if record is not None else None

    # ------------------------------------------------------------------ reads

    def surface(self, instance_id: InstanceId) -> Surface | None:
        turn = self._live_turn(instance_id)
        if turn is None:
            return None
        menu = [
            MenuItem(name=m.name, description=m.description, input=dict(m.schema))
            for m in self.run.menu(StatePath(turn.state))
        ]
        return Surface(
            instanceId=turn.instanceId,
            runId=f"{self.run.namespace}.{self.run.name}",
            menu=menu,
            allowed=self.allowed(turn),
            cwd=turn.cwd,
            notices=turn.notices,
        )

    def delivery(self, delivery_id: DeliveryId) -> Receipt | picks.Gone | None:
        """A delivery's answer; None while it is still being worked on."""
        delivery = self.deliveries.get(delivery_id)
        if delivery is None:
            return picks.Gone()
        return delivery.receipt

    def allowed(self, turn: Turn) -> list[str]:
        """The picks this Turn may make now (``picks.allowed``)."""
        return picks.allowed(self.run, self.config, turn)

    def admission(self, turn: Turn) -> Admit:
        """The admission a live Turn's running Submission was made with (to follow it
        again)."""
        running = turn.running
        number = turn.submissions.index(running) + 1 if running else len(turn.submissions) + 1
        return self._admit_effect(turn, nudge=False, number=number)

    def view(self) -> RunView:
        """What a Run's status shows of this core now."""
        return RunView(
            phase=self.shown_phase,
            state=self.state,
            message=self.message,
            output=self.config.output if self.config else None,
            recorded=self.recorded,
            history=tuple(self.history),
            delivered=tuple(self.delivered),
            signals=tuple(self.signals),
            ignored=dict(self.ignored),
            cancelled=self.cancelled,
            accepted=tuple(self.accepted()),
            trail=tuple(self.trail),
            moves=self.moves,
            children=self.config.children if self.config else (),
            active=self.config.active if self.config else (),
            usage=(spending := self.spending()),
            limits=tuple(budgets.standing(self.run, spending)) if self._budgeted else (),
        )

    @property
    def shown_phase(self) -> RunPhase:
        """The phase to show for the Run: a final phase only once every Turn is recorded,
        so whoever sees it (``kubectl wait --for=jsonpath='{.status.phase}'=Succeeded``)
        finds the Turns it depends on in the same version; ``Running`` while a Turn's
        sweep is still coming back. ``phase`` is the Machine's, and the snapshot's."""
        if self.phase in (RunPhase.PENDING, RunPhase.RUNNING) or not self.turns:
            return self.phase
        return RunPhase.RUNNING

    def live_turns(self) -> list[Turn]:
        return list(self._live.values())

    def instance_ids(self) -> Iterable[InstanceId]:
        """The Instance IDs the Run's Turns hold (live, or still being swept)."""
        return self._held.keys()

    def _hold(self, instance_id: InstanceId, held: bool) -> None:
        self._held[instance_id] += 1 if held else -1
        first, last = held and self._held[instance_id] == 1, self._held[instance_id] == 0
        if last:
            del self._held[instance_id]
        if (first or last) and self.on_instance is not None:
            self.on_instance(instance_id, held)

    @property
    def state(self) -> str | None:
        """The state to show for the Run: its active leaves (a fan-out child's are shown
        with the child), or, once it ended, the leaves it ended in (an ended Machine has
        exited every state), joined by ``, ``; None before it starts."""
        if self.config is None:
            return None
        return ", ".join(self.config.ended_in or self.config.leaves) or None

    def resume(self, now: float | None = None) -> Effects:
        """After a restore: what was under way must be under way again; at ``now``, every
        live Turn's stall clock starts again (the operator's downtime was no Agent's)."""
        if now is not None:
            stalls.restart(self.live_turns(), now)
            if self.started_at is None and self.phase is RunPhase.RUNNING:
                self.started_at = now  # restored from before limits: its wall time from now
        effects: list[Effect] = []
        for turn in self.turns.values():
            if turn.phase is TurnPhase.SWEEPING and turn.exit is not None:
                effects.append(self._sweep_effect(turn, turn.exit.cause, turn.exit.submission))
            elif turn.admitting:
                effects.append(self._admit_effect(turn, nudge=bool(turn.nudges)))
        running = {entry.id for entry in self.config.invokes} if self.config else set()
        effects += [start for invocation, start in self.execs.items() if invocation in running]
        effects += self.delivering.values()
        effects += [
            self._make_effect(child, made)
            for child, made in self.child_worktrees.items()
            if made.pending and made.asked
        ]
        return Effects(effects)

    # ------------------------------------------------------------------ the machine

    def _send(self, event: Event, now: float) -> list[Effect]:
        if self.config is None:
            return []
        return self._step(event, now)[1]

    def _step(self, event: Event, now: float) -> tuple[Step, list[Effect]]:
        assert self.config is not None
        step = interpreter.step(self.run.chart, self.config, event, self._scope, now)
        return step, [*self._apply(step, now), *self._drain(now)]

    def _drain(self, now: float) -> list[Effect]:
        effects: list[Effect] = []
        while self._queue and self.config is not None:
            event = self._queue.pop(0)
            step = interpreter.step(self.run.chart, self.config, event, self._scope, now)
            effects += self._apply(step, now)
        effects += self._answer_at_rest(now)
        for turn in self.live_turns():
            effects += self._wake(turn, now)
        return effects

    def _apply(self, step: Step, now: float) -> list[Effect]:
        self.config = step.config
        if step.moves:
            self.trail = trail.extend(self.trail, step.moves, now)
            self.moves += len(step.moves)
        picks.note_reply(self.run.chart, step, self.live_turns(), self.turns, self.deliveries)
        effects: list[Effect] = self._ask_worktrees(step.config)
        # An invoke whose state was entered and left within this macrostep (an `always`
        # straight back, a fault) never runs: it is neither started nor stopped (SCXML
        # starts invokes at the end of the macrostep, for states still active).
        running = set(step.config.invokes)
        passed = {entry for entry in step.started if entry not in running}
        for stopped in step.stopped:
            if stopped.invoke in passed:
                continue
            if stopped.invoke.kind is InvokeKind.EXEC:
                self.execs.pop(stopped.invoke.id, None)
                effects.append(StopExec(stopped.invoke.id))
                continue
            if stopped.invoke.kind in (InvokeKind.DELIVER, InvokeKind.FAN_OUT):
                # A delivery runs to its end and is recorded, its result going nowhere; a
                # fan-out's children were exited with it, their invokes among these.
                continue
            self.retrying.pop(stopped.invoke.id, None)  # a retry never outlives its state
            turn = self._turn_of(stopped.invoke.id)
            if turn is not None:
                cause = PICK if turn.id in stopped.cause else None
                effects += self._exit_turn(turn, cause, step, now)
        for started in step.started:
            if started in passed or started.kind is InvokeKind.FAN_OUT:
                continue  # a fan-out's children are the Machine's own
            effects += self._start_when_made(started, step.event, now)
        if step.config.status is not Status.RUNNING and self.phase is RunPhase.RUNNING:
            self.phase = PHASE_OF[step.config.status]
            self.message = step.config.message
            effects.append(Finished(self.phase.value, step.config.output, step.config.message))
        return effects

    # ------------------------------------------------------------------ worktrees

    def _ask_worktrees(self, config: Config) -> list[Effect]:
        """Note each child that started and wants worktrees of its own, and ask for those
        whose base is made (a child fanned out of a child waits for that child's); forget
        those of children the Machine no longer holds (their worktrees stay until the Run
        is deleted)."""
        held = {child.scope for child in config.children}
        gone = [scope for scope in self.child_worktrees if scope not in held]
        for scope in gone:
            del self.child_worktrees[scope]
        if gone:
            self._scope = self._scope_with_children()
        if self.workspace is None or not self.workspace.repos:
            return []  # nothing to make: every child works where the Run does
        for child in config.children:
            if child.status is not ChildStatus.RUNNING or child.scope in self.child_worktrees:
                continue
            if worktrees.per_child(self.run.chart, child.scope):
                self.child_worktrees[child.scope] = worktrees.ChildWorktrees(
                    branch=worktrees.child_branch(self._branch_of(ROOT), child.scope),
                    base=self._branch_of(self._base_of(child.scope)),
                )
        effects: list[Effect] = []
        for scope, made in self.child_worktrees.items():
            under = self.child_worktrees.get(self._base_of(scope))
            if not made.pending or made.asked or (under is not None and under.pending):
                continue
            if under is not None and under.error is not None:
                made.error = f"the worktrees of {self._base_of(scope)} were not made"
                continue
            made.asked = True
            effects.append(self._make_effect(scope, made))
        return effects

    def _base_of(self, child: StatePath) -> StatePath:
        """The Machine whose worktrees a child's are made from."""
        fan_out = parent_of(child)
        assert fan_out is not None
        return worktrees.owner(self.run.chart, fan_out)

    def _make_effect(self, child: StatePath, made: worktrees.ChildWorktrees) -> MakeWorktrees:
        assert self.workspace is not None
        return MakeWorktrees(child, made.branch, made.base, tuple(sorted(self.workspace.repos)))

    def _branch_of(self, machine: StatePath) -> str:
        """The branch of the worktrees the Machine rooted at ``machine`` works in."""
        made = self.child_worktrees.get(machine)
        if made is not None:
            return made.branch
        assert self.workspace is not None
        return self.workspace.branch or f"kubeturn/{self.run.name}"

    def _view_at(self, state: StatePath) -> frames.WorkspaceView | None:
        """The worktrees the state works in: its child's own, or the Run's."""
        made = self.child_worktrees.get(worktrees.owner(self.run.chart, state))
        return made.view() if made is not None else self.workspace

    def _scope_with_children(self) -> Scope:
        return replace(
            self._scope,
            workspaces={
                scope: view.activation()
                for scope, made in self.child_worktrees.items()
                if (view := made.view()) is not None
            },
        )

    def _start_when_made(self, entry: InvokeEntry, event: Event, now: float) -> list[Effect]:
        """Start the invoke, or, in a child whose worktrees are being made, keep it
        waiting for them."""
        made = self.child_worktrees.get(worktrees.owner(self.run.chart, entry.state))
        if made is not None and made.pending:
            made.waiting.append(worktrees.Waiting.of(entry, event))
            return []
        return self._start_now(entry, event, now)

    def _start_now(self, entry: InvokeEntry, event: Event, now: float) -> list[Effect]:
        made = self.child_worktrees.get(worktrees.owner(self.run.chart, entry.state))
        if made is not None and made.error is not None:
            fields = {"reason": "worktree", "message": made.error}
            self._queue.append(Event(ERROR_INVOKE, fields, entry.cause, entry.id))
            return []
        if made is not None and entry.kind is InvokeKind.DELIVER:
            # A delivery commits and pushes the Run's branch; a child's is its own.
            message = (
                f"{invokes.path(entry.state)}.deliver: a fan-out child with worktrees of its "
                "own cannot deliver; deliver from the Run once it has merged its children's "
                "branches"
            )
            fields = {"reason": "refused", "message": message}
            self._queue.append(Event(ERROR_INVOKE, fields, entry.cause, entry.id))
            return []
        if entry.kind is InvokeKind.AGENT:
            return self._start_turn(entry, event, now)
        return self._start_invoke(entry, event)

    def _start_invoke(self, entry: InvokeEntry, event: Event | None) -> list[Effect]:
        """Start an exec or a delivery, or queue the event that refuses it."""
        assert self.config is not None
        start = invokes.start(
            self.run.chart, self.config, self._scope, self._view_at(entry.state), entry, event
        )
        match start:
            case Event():
                self._queue.append(start)
                return []
            case StartExec():
                self.execs[entry.id] = start
            case StartDeliver():
                self.delivering[entry.id] = start
        return [start]

    # ------------------------------------------------------------------ turns

    def _start_turn(self, entry: InvokeEntry, event: Event, now: float) -> list[Effect]:
        assert self.config is not None
        self.turn_seq += 1
        turn, refused = admissions.start(
            self.run,
            entry,
            interpreter.activation(self.config, event, self._scope, entry.state),
            self._view_at(entry.state),
            turn_id=ids.turn(self.turn_seq),
            epochs=self.epochs,
            new_id=self._new_id,
            live=self.live_turns(),
            now=now,
        )
        self.turns[turn.id] = turn
        self._live[turn.id] = turn
        self._hold(turn.instanceId, True)
        reason = "refused"
        if refused is None and (reached := self._over_budget(turn.agent, now)) is not None:
            reason, refused = budgets.REASON, reached.message
        if refused is not None:
            return self._refuse(turn, reason, refused, now)
        if turn.continue_:
            turn.notices = self.notices.pop(_conversation(turn), [])
        turn.admitting = True
        return [self._admit_effect(turn, nudge=False)]

    def _refuse(self, turn: Turn, reason: str, refused: str, now: float) -> list[Effect]:
        """The Turn is refused before its admission: recorded ``failed``, and its state
        hears ``error.invoke`` with ``reason``."""
        fields = {"reason": reason, "message": bounded(refused)}
        self._queue.append(Event(ERROR_INVOKE, fields, origin=turn.invocation))
        self._leave(turn)
        turn.exit = Exit(cause=None, submission=None, at=now)
        message = f"refused before admission: {refused}"
        return self._record(turn, now, outcome=Outcome.FAILED, message=message)

    def _leave(self, turn: Turn) -> None:
        """The Turn's state exited: it is swept now."""
        turn.phase = TurnPhase.SWEEPING
        self._live.pop(turn.id, None)

    def _leave_at(
        self, turn: Turn, now: float, *, cause: str | None = None, why: str | None = None
    ) -> Exit:
        """The Turn ends now (its state exited, it stalled or reached a limit, or it is to
        be retried): it leaves the live Turns, and its exit names the Submission the sweep
        cuts."""
        running = turn.running
        self._leave(turn)
        turn.exit = Exit(
            cause=cause,
            submission=running.id if running else None,
            admitting=turn.admitting,
            at=now,
            why=why,
        )
        return turn.exit

    def _admit_effect(self, turn: Turn, *, nudge: bool, number: int | None = None) -> Admit:
        allowed = self.allowed(turn) if nudge else []
        return admissions.admission(self.run, turn, nudge=nudge, allowed=allowed, number=number)

    def _wake(self, turn: Turn, now: float) -> list[Effect]:
        """Nudge a live Turn whose model stopped while picks are allowed."""
        if not turn.idle or not turn.submissions or turn.faulted:
            return []
        if turn.submissions[-1].outcome is not Outcome.COMPLETED or not self.allowed(turn):
            return []
        if turn.nudges >= self._nudge_budget:
            return self._fault(
                turn,
                "no-pick",
                f"the Agent stopped {turn.nudges + 1} times without a pick while "
                f"{', '.join(self.allowed(turn))} were allowed",
                now,
            )
        turn.nudges += 1
        turn.admitting = True
        return [self._admit_effect(turn, nudge=True)]

    def _fault(self, turn: Turn, reason: str, message: str, now: float) -> list[Effect]:
        """The Agent's Turn failed: its conversation is burnt, the Machine is told once."""
        turn.faulted = True
        if turn.continue_:
            key = _conversation(turn)
            self.epochs[key] = max(self.epochs.get(key, 0), turn.epoch) + 1
        retry = retries.decide(self.run, turn, reason, now)
        if retry is not None:
            self.retrying[turn.invocation] = retry
            return self._end_for_retry(turn, now)
        fields = {
            "reason": reason,
            "message": bounded(message),
            "agent": turn.agent,
            "turn": turn.id,
        }
        return self._send(Event(ERROR_INVOKE, fields, origin=turn.invocation), now)

    def _stall(self, turn: Turn, now: float) -> list[Effect]:
        """Sweep a Turn that made no progress for its ``stallAfter``, then route it as
        the Agent's fault, reason ``stalled`` (ADR 0115)."""
        why = stalls.message(self.run, turn)
        exit_ = self._leave_at(turn, now, why=bounded(why))
        sweep = self._sweep_effect(turn, None, exit_.submission)
        return [sweep, *self._fault(turn, stalls.REASON, why, now)]

    def _enforce(self, now: float) -> list[Effect]:
        """Sweep every live Turn that reached a limit (ADR 0117), then route each as the
        Agent's fault, reason ``budget``. All are swept before any fault is heard: one
        Turn's spend can reach its slot's or the Run's limit and so stop the others, and
        each of them is to be recorded for the limit, not for its state's exit."""
        if not self._budgeted:
            return []
        agents = self.spending()
        reached = [
            (turn, found)
            for turn in sorted(self.live_turns(), key=lambda t: t.startedAt)
            if not turn.faulted
            and (found := budgets.over(self.run, turn, agents, now=now, started=self.started_at))
        ]
        effects: list[Effect] = []
        for turn, found in reached:
            exit_ = self._leave_at(turn, now, cause=budgets.REASON, why=bounded(found.message))
            effects.append(self._sweep_effect(turn, budgets.REASON, exit_.submission))
        for turn, found in reached:
            effects += self._fault(turn, budgets.REASON, found.message, now)
        return effects

    def spending(self) -> dict[str, Usage]:
        """Each Agent slot's spend over the Run so far: its recorded Turns', and what the
        others have used up to now (``budgets.per_agent``)."""
        return budgets.per_agent(self.usage, self.turns.values())

    def _over_budget(self, agent: str, now: float) -> budgets.Reached | None:
        """The slot's or the Run's limit reached, which refuses a new Turn of ``agent``."""
        if not self._budgeted:
            return None
        return budgets.refusal(self.run, agent, self.spending(), now=now, started=self.started_at)

    def _end_for_retry(self, turn: Turn, now: float) -> list[Effect]:
        """A faulted Turn to be retried ends now, its state still active: swept, and
        recorded as it ended once its sweep comes back."""
        if turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return []  # already swept (a stall)
        exit_ = self._leave_at(turn, now)
        return [self._sweep_effect(turn, None, exit_.submission)]

    def _retry(self, invocation: str, now: float) -> list[Effect]:
        """Start the retry decided for ``invocation``, whose backoff ended: a new Turn."""
        retry = self.retrying.pop(invocation)
        if self._invocation(invocation) is None:
            return []
        self.turn_seq += 1
        turn = retries.again(
            self.run,
            retry,
            turn_id=ids.turn(self.turn_seq),
            epochs=self.epochs,
            new_id=self._new_id,
            now=now,
        )
        self.turns[turn.id] = turn
        self._live[turn.id] = turn
        self._hold(turn.instanceId, True)
        reached = self._over_budget(turn.agent, now)
        if reached is not None:
            return [*self._refuse(turn, budgets.REASON, reached.message, now), *self._drain(now)]
        turn.admitting = True
        return [self._admit_effect(turn, nudge=False)]

    def _exit_turn(self, turn: Turn, cause: str | None, step: Step, now: float) -> list[Effect]:
        if turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return []
        exit_ = self._leave_at(turn, now, cause=cause)
        effects: list[Effect] = []
        if turn.outstanding is not None:
            delivery = self.deliveries[turn.outstanding]
            work_stopped = any(
                s.invoke.state != turn.state
                and self.run.chart.is_within(s.invoke.state, StatePath(turn.state))
                for s in step.stopped
            )
            effects.append(self._answer(delivery, turn, turn_complete=True, stopped=work_stopped))
        effects.append(self._sweep_effect(turn, cause, exit_.submission))
        return effects

    def _sweep_effect(
        self, turn: Turn, cause: str | None, submission: SubmissionId | None
    ) -> Sweep:
        return Sweep(turn.id, turn.agent, turn.instanceId, cause, submission)

    def _record(
        self,
        turn: Turn,
        now: float,
        *,
        outcome: Outcome | None = None,
        message: str | None = None,
    ) -> list[Effect]:
        """Write the Turn's one history record, and forget the Turn: the record is it now."""
        if turn.phase is TurnPhase.SETTLED:
            return []
        record = history.settle(turn, now, outcome=outcome, message=message)
        self.recorded += 1
        self.usage = usages.add(self.usage, record.agent, record.tokens)
        self.history, self._history_bytes = history.keep(self.history, self._history_bytes, record)
        del self.turns[turn.id]
        self._hold(turn.instanceId, False)
        self.deliveries = {k: d for k, d in self.deliveries.items() if d.turn != turn.id}
        return [Recorded(record, turn.exit)]

    # ------------------------------------------------------------------ picks

    def _receipt_after_pick(
        self, turn: Turn, delivery: Delivery, step: Step, before: Sequence[StatePath]
    ) -> Receipt:
        assert self.config is not None
        if turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            if delivery.receipt is None:
                self._notice(turn, picks.ended_answer(delivery))
            assert delivery.receipt is not None
            return delivery.receipt
        if picks.at_rest(self.run.chart, self.config, turn):
            return picks.at_rest_answer(self.run, self.config, delivery, turn, step, before)
        turn.outstanding = delivery.id
        return picks.outstanding(delivery)

    def _answer_at_rest(self, now: float) -> list[Effect]:
        if self.config is None:
            return []
        config = self.config
        effects: list[Effect] = []
        for turn in self.live_turns():
            if turn.outstanding is not None and picks.at_rest(self.run.chart, config, turn):
                delivery = self.deliveries[turn.outstanding]
                effects.append(self._answer(delivery, turn, turn_complete=False, stopped=False))
                turn.progressAt = now  # the pick's answer: the stall clock starts again
        return effects

    def _answer(
        self, delivery: Delivery, turn: Turn, *, turn_complete: bool, stopped: bool
    ) -> Answer:
        assert self.config is not None
        receipt = picks.answer(
            self.run, self.config, delivery, turn, turn_complete=turn_complete, stopped=stopped
        )
        if turn_complete:
            self._notice(turn, receipt)
        return Answer(delivery.id, receipt)

    def _notice(self, turn: Turn, receipt: Receipt) -> None:
        """A continued conversation hears how its last pick went in its next Turn."""
        notice = prompts.pick_answer(receipt) if turn.continue_ else None
        if notice is not None:
            self.notices.setdefault(_conversation(turn), []).append(notice)

    # ------------------------------------------------------------------ lookups

    def _live_turn(self, instance_id: InstanceId) -> Turn | None:
        return next((t for t in self.live_turns() if t.instanceId == instance_id), None)

    def _turn_of(self, invocation: str) -> Turn | None:
        """The live Turn of ``invocation`` (a retried one's earlier Turn may still be
        being swept beside it)."""
        return next((t for t in self.live_turns() if t.invocation == invocation), None)

    def _invocation(self, invocation: str) -> InvokeEntry | None:
        if self.config is None:
            return None
        return next((i for i in self.config.invokes if i.id == invocation), None)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The core's state as JSON, in the current version (``snapshots``); the core built
        from it continues exactly as this one."""
        return snapshots.write(
            snapshots.Saved(
                phase=self.phase.value,
                message=self.message,
                machine=self.config,
                turns=list(self.turns.values()),
                deliveries=list(self.deliveries.values()),
                epochs=self.epochs,
                notices=self.notices,
                history=self.history,
                recorded=self.recorded,
                signals=self.signals,
                ignored=self.ignored,
                execs=list(self.execs.values()),
                delivering=list(self.delivering.values()),
                delivered=self.delivered,
                cancelled=self.cancelled,
                trail=self.trail,
                moves=self.moves,
                turn_seq=self.turn_seq,
                delivery_seq=self.delivery_seq,
                worktrees=self.child_worktrees,
                usage=self.usage,
                retries=list(self.retrying.values()),
                started=self.started_at,
            )
        )

    def _restore(self, data: Mapping[str, Any]) -> None:
        """From a snapshot of the current version (``snapshots.read``)."""
        saved = snapshots.read(data)
        self.phase = RunPhase(saved.phase)
        if saved.machine is None and self.phase is not RunPhase.PENDING:
            raise KeyError("machine")
        self.config = saved.machine
        self.message = saved.message
        self.turns = {t.id: t for t in saved.turns}
        self._held = Counter(t.instanceId for t in self.turns.values())
        self._live = {
            k: t for k, t in self.turns.items() if t.phase in (TurnPhase.PENDING, TurnPhase.LIVE)
        }
        self.deliveries = {d.id: d for d in saved.deliveries}
        self.epochs = dict(saved.epochs)
        self.notices = {k: list(v) for k, v in saved.notices.items()}
        self.history = list(saved.history)
        self._history_bytes = [history.size(record) for record in self.history]
        self.recorded = saved.recorded
        self.signals = list(saved.signals)
        self.ignored = dict(saved.ignored)
        self.execs = {e.invocation: e for e in saved.execs}
        self.delivering = {d.invocation: d for d in saved.delivering}
        self.delivered = list(saved.delivered)
        self.cancelled = saved.cancelled
        self.trail = list(saved.trail)
        self.moves = saved.moves
        self.turn_seq = saved.turn_seq
        self.delivery_seq = saved.delivery_seq
        self.child_worktrees = dict(saved.worktrees)
        self.usage = dict(saved.usage)
        self.retrying = {retry.earlier.invocation: retry for retry in saved.retries}
        self.started_at = saved.started
        self._scope = self._scope_with_children()


def _unreadable(error: Exception) -> str:
    """What is wrong with a snapshot the core could not restore, in one line."""
    if isinstance(error, KeyError):
        return f"it lacks the field {error.args[0]!r}"
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"a field is wrong: {first}"


def _submission(turn: Turn | None, submission: SubmissionId | None) -> SubmissionEntry | None:
    if turn is None:
        return None
    return next((s for s in turn.submissions if s.id == submission), None)


def _conversation(turn: Turn) -> str:
    """What the Turn's continued conversation's epoch and notices are kept by."""
    return ids.conversation(machine_of(StatePath(turn.state)), turn.agent)
