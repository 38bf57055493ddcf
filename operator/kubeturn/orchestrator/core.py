"""The Run core: one Run's Machine, its Turns, their sweeps and the answers to picks.

Every entry point takes an event (a start, a signal, a pick, a timer, an exec result, a
settlement), advances the Machine, and returns the effects the shell must apply: admit
a Submission, sweep a Turn with its cause, start or stop an exec, answer a pick. The
state it keeps is one JSON snapshot; the shell persists it before it acknowledges any
effect, so a restored core continues exactly. No IO, no clock: ``now`` is an argument.

The rules (docs/turn-semantics.md):

- a Turn starts when its state is entered and is swept when its state exits; the sweep
  says ``cause: "pick"`` exactly when the macrostep that exited it carried this Turn's
  own pick (through work or timers the pick's route started, too);
- a pick is refused while another is outstanding or the Agent's state is not at Rest;
  a pick that repeats an idempotency key of its Turn is answered as the first was (or
  with the answer that came since), never delivered again, while the Turn is held;
  one whose work runs below the Agent's state is answered at Rest, or when an exit ends
  its Turn (``stopped`` when that exit stopped the work);
- a Submission that settles ``completed`` while picks are allowed is nudged (budget 2),
  then the Machine gets the Agent's fault; a fault burns a continued conversation;
- every Turn gets exactly one history record.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from kubeturn.api.status import DeliveryRecord, RunPhase, bounded
from kubeturn.errors import ExpressionError, SnapshotUnreadable
from kubeturn.machine import interpreter
from kubeturn.machine.interpreter import (
    DONE_INVOKE,
    ERROR_INVOKE,
    Config,
    Event,
    InvokeEntry,
    InvokeKind,
    Scope,
    Status,
    Step,
)
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator import frames, ids, signals, turns
from kubeturn.orchestrator.effects import (
    Admit,
    Answer,
    Effects,
    Finished,
    Recorded,
    StartDeliver,
    StartExec,
    StopExec,
    Sweep,
)
from kubeturn.orchestrator.snapshots import HISTORY_KEY, VERSION, VERSION_KEY
from kubeturn.orchestrator.turns import (
    PICK,
    Delivery,
    Exit,
    SubmissionEntry,
    Turn,
    TurnPhase,
    TurnRecord,
    total_usage,
)
from kubeturn_harness.wire import MenuItem, Notice, Outcome, Receipt, Refusal, Surface, Usage

NUDGE_BUDGET = 2
"""Nudges per Turn before the Agent's fault: a model that stops twice more without
picking, after being told what the workflow waits for, will not pick on a third."""

HISTORY_LIMIT = 200
"""Turn records kept in the history (``Run.status.turns``) at most: enough to read a Run's
recent work with kubectl; every record is also handed to the shell as it is written
(``Recorded``), which posts it as an Event."""
HISTORY_BYTES = 128 * 1024
"""The history's budget, in bytes of its records' JSON: the oldest records go first once
it is spent (the newest is always kept). 200 records of Turns that simply ended take
about 100 KiB; failed Turns carry their messages (up to 2 KiB each,
``kubeturn.api.status.MESSAGE_LIMIT``), and this keeps tens of them. With it the whole
Run stays far below etcd's 1.5 MiB per object: the spec (at most 128 KiB,
``kubeturn.k8s.runs.MAX_SPEC_BYTES``), kubectl's copy of it in an annotation, the
history, and the snapshot of what is live."""
DELIVERIES_KEPT = 20
"""Delivery records kept (``Run.status.deliveries``), newest last: a Run delivers a few
times; each record is at most a few KiB (its error is bounded)."""
DELIVERED_KEY = "delivered"
"""The core's snapshot's key of the delivery records; a Run's status holds them as
``deliveries``."""
MAX_TIMERS_AT_ONCE = 1000
"""Timers fired in one call; a zero-delay timer that re-arms itself cannot spin forever."""


PHASE_OF = {
    Status.DONE: RunPhase.SUCCEEDED,
    Status.FAILED: RunPhase.FAILED,
    Status.CANCELLED: RunPhase.CANCELLED,
}


@dataclass(frozen=True)
class Gone:
    """No live Turn at that Instance ID (404)."""


@dataclass(frozen=True)
class Invalid:
    """The pick's payload does not fit its schema (422)."""

    message: str


PickAnswer = Receipt | Refusal | Gone | Invalid


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    output: str
    timed_out: bool = False
    error: str | None = None
    """Set when the command could not run at all."""


@dataclass(frozen=True)
class DeliverResult:
    """How a delivery ended: its branch and commit, pushed or why not."""

    branch: str | None = None
    commit: str | None = None
    changed: bool = False
    pushed: bool = False
    remote: str | None = None
    error: str | None = None
    """Set when it failed: nothing to deliver, the push refused, ..."""


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
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
        self.config: Config | None = None
        self.phase = RunPhase.PENDING
        self.message: str | None = None
        self.turns: dict[str, Turn] = {}
        self._held: Counter[str] = Counter()
        """Instance ID → how many of ``turns`` hold it."""
        self.on_instance: Callable[[str, bool], None] | None = None
        """Told ``(instance_id, True)`` when a Turn of this Run first holds an Instance ID,
        and ``(instance_id, False)`` when none holds it any more: the Orchestrator API keeps
        its index of owners with it, so that finding a Turn's Run is not a walk."""
        self._live: dict[str, Turn] = {}
        """The Turns whose state is active (pending or live), kept apart: Runs are long."""
        self.deliveries: dict[str, Delivery] = {}
        self.epochs: dict[str, int] = {}
        self.notices: dict[str, list[Notice]] = {}
        self.history: list[TurnRecord] = []
        """The most recent records, oldest first, within ``HISTORY_LIMIT`` and
        ``HISTORY_BYTES``."""
        self._history_bytes: list[int] = []
        """Each record's size in the history's budget, in its order."""
        self.recorded = 0
        """Turns recorded over the Run's life (the history keeps the last ones)."""
        self.execs: dict[str, StartExec] = {}
        """Commands started and not yet answered, as rendered: a restore starts them again."""
        self.delivering: dict[str, StartDeliver] = {}
        """Deliveries started and not yet ended, as rendered: a restore starts them again,
        whether or not their state is still active (a delivery is never stopped)."""
        self.delivered: list[DeliveryRecord] = []
        """The most recent deliveries' records, oldest first, at most ``DELIVERIES_KEPT``."""
        self.signals: list[str] = []
        """Ids of the outside signals already sent: each is sent exactly once."""
        self.ignored: dict[str, str] = {}
        """Of those, the ones the Machine did not take, and why (ADR 0067)."""
        self.cancelled = False
        self.turn_seq = 0
        """Turns started over the Run's life: the n-th is ``t<n>`` (``ids.turn``)."""
        self.delivery_seq = 0
        """Picks delivered over the Run's life: the n-th delivery id starts ``d<n>-``."""
        if snapshot is not None:
            try:
                self._restore(snapshot)
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                raise SnapshotUnreadable(_unreadable(error)) from error

    # ------------------------------------------------------------------ events in

    def start(self, now: float) -> Effects:
        effects = Effects()
        if self.config is not None:
            return effects
        self.phase = RunPhase.RUNNING
        self._apply(interpreter.start(self.run.chart, self._scope, now), now, effects)
        self._drain(now, effects)
        return effects

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
        effects = Effects()
        if self.config is None:
            return effects
        payload = dict(data or {})
        found = [
            {"event": item.event, "state": item.state, "schema": item.schema}
            for item in self.accepted()
        ]
        why = signals.refusal(found, event, payload)
        if why is None:
            step = self._step(Event(event, payload), now, effects)
            if not step.taken:
                why = f"no transition of {event} has a guard that holds now"
        if why is not None and signal_id is not None:
            self.ignored[signal_id] = bounded(why)
        return effects

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
        return self._send(Event(interpreter.CANCEL), now)

    def fire_due(self, now: float) -> Effects:
        effects = Effects()
        for _ in range(MAX_TIMERS_AT_ONCE):
            due = interpreter.due(self.config, now) if self.config is not None else []
            if not due:
                break
            self._step(interpreter.timer_event(due[0]), now, effects)
        return effects

    def next_fire(self) -> float | None:
        return interpreter.next_fire(self.config) if self.config is not None else None

    def exec_done(self, invocation: str, result: ExecResult, now: float) -> Effects:
        self.execs.pop(invocation, None)
        entry = self._invocation(invocation)
        if entry is None:
            return Effects()
        fields = {
            "exitCode": result.exit_code,
            "output": result.output,
            "timedOut": result.timed_out,
        }
        if result.error is not None or result.timed_out:
            why = bounded(result.error or f"timed out; its output so far: {result.output[-2000:]}")
            event = Event(
                ERROR_INVOKE, {"reason": "exec", "message": why, **fields}, entry.cause, invocation
            )
        else:
            event = Event(DONE_INVOKE, {"output": fields}, entry.cause, invocation)
        return self._send(event, now)

    def deliver_done(self, invocation: str, result: DeliverResult, now: float) -> Effects:
        """A delivery ended: it is recorded, and its state (if still active) gets its done
        or error event. One already recorded (a repeat after a restore) is ignored."""
        start = self.delivering.pop(invocation, None)
        if start is None:
            return Effects()
        record = DeliveryRecord(
            state=start.state,
            slot=start.slot,
            branch=result.branch,
            commit=result.commit,
            changed=result.changed,
            pushed=result.pushed,
            remote=result.remote,
            error=result.error,
            time=now,
        )
        self.delivered = [*self.delivered, record][-DELIVERIES_KEPT:]
        entry = self._invocation(invocation)
        if entry is None:
            return Effects()
        if result.error is not None:
            fields = {"reason": "deliver", "message": bounded(result.error)}
            event = Event(ERROR_INVOKE, fields, entry.cause, invocation)
        else:
            output = {
                "commit": result.commit,
                "branch": result.branch,
                "changed": result.changed,
                "pushed": result.pushed,
                "remote": result.remote,
            }
            event = Event(DONE_INVOKE, {"output": output}, entry.cause, invocation)
        return self._send(event, now)

    def pick(
        self,
        instance_id: str,
        event: str,
        payload: Mapping[str, Any],
        now: float,
        *,
        key: str | None = None,
    ) -> tuple[PickAnswer, Effects]:
        effects = Effects()
        if key is not None and (first := self._repeat(instance_id, key)) is not None:
            return first, effects
        turn = self._live_turn(instance_id)
        if turn is None or self.config is None:
            return Gone(), effects
        if turn.outstanding is not None or not self._at_rest(turn):
            held = self.deliveries.get(turn.outstanding or "")
            refusal = Refusal(
                refused="outstanding", outstanding=held.event if held else None, allowed=[]
            )
            return refusal, effects
        allowed = self.allowed(turn)
        if event not in allowed:
            listed = ", ".join(allowed) or "none"
            message = f"`{event}` is not a pick the workflow takes now (allowed: {listed})"
            return Refusal(refused="not-allowed", allowed=allowed, message=message), effects
        problem = jsonschema.exceptions.best_match(
            self._validator(turn, event).iter_errors(dict(payload))
        )
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "the payload"
            return Invalid(f"{where}: {problem.message}"), effects
        self.delivery_seq += 1
        delivery = Delivery(
            id=f"d{self.delivery_seq}-{self._new_id()}", turn=turn.id, event=event, key=key
        )
        self.deliveries[delivery.id] = delivery
        cause = frozenset({turn.id, *self._enclosing_outstanding(turn)})
        leaf_before = self.config.leaf
        step = self._step(Event(event, dict(payload), cause), now, effects)
        receipt = self._receipt_after_pick(turn, delivery, step, leaf_before)
        return receipt, effects

    def admitted(self, turn_id: str, submission: str, now: float) -> Effects:
        effects = Effects()
        turn = self.turns.get(turn_id)
        if turn is None:
            return effects
        turn.admitting = False
        if all(s.id != submission for s in turn.submissions):
            turn.submissions.append(SubmissionEntry(id=submission, admittedAt=now))
        if turn.phase is TurnPhase.PENDING:
            turn.phase = TurnPhase.LIVE
        return effects

    def admit_failed(self, turn_id: str, message: str, now: float) -> Effects:
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return Effects()
        turn.admitting = False
        turn.phase = TurnPhase.LIVE
        return self._fault(turn, "admission-failed", message, now)

    def settled(
        self,
        turn_id: str,
        submission: str,
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
            effects = Effects()
            self._wake(turn, now, effects)
            self._drain(now, effects)
            return effects
        why = reason or ("failed" if outcome is Outcome.FAILED else outcome.value)
        detail = message or f"its Submission settled {outcome.value} while its state was active"
        return self._fault(turn, why, detail, now)

    def deleted(self, turn_id: str, now: float) -> Effects:
        """A person deleted the Turn's AgentTurn: the Agent's fault, reason ``deleted``."""
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return Effects()
        running = turn.running
        if running is not None:
            running.outcome, running.settledAt = Outcome.ABORTED, now
        turn.admitting = False
        return self._fault(turn, "deleted", f"the AgentTurn of Turn {turn.id} was deleted", now)

    def swept(
        self,
        turn_id: str,
        settlements: turns.Caused,
        now: float,
    ) -> Effects:
        """The sweep of a Turn came back with the settlements it caused; record the Turn."""
        turn = self.turns.get(turn_id)
        if turn is None or turn.phase is not TurnPhase.SWEEPING:
            return Effects()
        effects = Effects()
        turns.settle(turn.submissions, settlements, now)
        self._record(turn, now, effects)
        return effects

    def verdict(self, turn_id: str, settlements: turns.Caused) -> tuple[Outcome, str | None] | None:
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

    def surface(self, instance_id: str) -> Surface | None:
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

    def delivery(self, delivery_id: str) -> Receipt | Gone | None:
        """A delivery's answer; None while it is still being worked on."""
        delivery = self.deliveries.get(delivery_id)
        if delivery is None:
            return Gone()
        return delivery.receipt

    def allowed(self, turn: Turn) -> list[str]:
        """The picks this Turn may make now: none while a pick is out or work runs."""
        if self.config is None or turn.outstanding is not None or not self._at_rest(turn):
            return []
        menu = {m.name for m in self.run.menu(StatePath(turn.state))}
        handled = interpreter.handled_below(self.run.chart, self.config, StatePath(turn.state))
        return [name for name in handled if name in menu]

    def admission(self, turn: Turn) -> Admit:
        """The admission a live Turn's Submissions were made with (to follow them again)."""
        return self._admit_effect(turn, nudge=False)

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

    def instance_ids(self) -> Iterable[str]:
        """The Instance IDs the Run's Turns hold (live, or still being swept)."""
        return self._held.keys()

    def _hold(self, instance_id: str, held: bool) -> None:
        self._held[instance_id] += 1 if held else -1
        first, last = held and self._held[instance_id] == 1, self._held[instance_id] == 0
        if last:
            del self._held[instance_id]
        if (first or last) and self.on_instance is not None:
            self.on_instance(instance_id, held)

    @property
    def state(self) -> str | None:
        """The state to show for the Run: its active leaf, or, once it ended, the leaf it
        ended in (an ended Machine has exited every state); None before it starts."""
        if self.config is None:
            return None
        return self.config.ended_in or self.config.leaf or None

    def resume(self) -> Effects:
        """After a restore: what was under way must be under way again."""
        effects = Effects()
        for turn in self.turns.values():
            if turn.phase is TurnPhase.SWEEPING and turn.exit is not None:
                effects.add(self._sweep_effect(turn, turn.exit.cause, turn.exit.submission))
            elif turn.admitting:
                effects.add(self._admit_effect(turn, nudge=bool(turn.nudges)))
        running = {entry.id for entry in self.config.invokes} if self.config else set()
        for invocation, start in self.execs.items():
            if invocation in running:
                effects.add(start)
        for delivery in self.delivering.values():
            effects.add(delivery)
        return effects

    # ------------------------------------------------------------------ the machine

    def _send(self, event: Event, now: float) -> Effects:
        effects = Effects()
        if self.config is None:
            return effects
        self._step(event, now, effects)
        return effects

    def _step(self, event: Event, now: float, effects: Effects) -> Step:
        assert self.config is not None
        step = interpreter.step(self.run.chart, self.config, event, self._scope, now)
        self._apply(step, now, effects)
        self._drain(now, effects)
        return step

    def _drain(self, now: float, effects: Effects) -> None:
        while self._queue and self.config is not None:
            event = self._queue.pop(0)
            step = interpreter.step(self.run.chart, self.config, event, self._scope, now)
            self._apply(step, now, effects)
        self._answer_at_rest(effects)
        for turn in self.live_turns():
            self._wake(turn, now, effects)

    def _apply(self, step: Step, now: float, effects: Effects) -> None:
        self.config = step.config
        self._note_reply(step)
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
                effects.add(StopExec(stopped.invoke.id))
                continue
            if stopped.invoke.kind is InvokeKind.DELIVER:
                continue  # it runs to its end and is recorded; its result goes nowhere
            turn = self._turn_of(stopped.invoke.id)
            if turn is not None:
                cause = PICK if turn.id in stopped.cause else None
                self._exit_turn(turn, cause, step, now, effects)
        for started in step.started:
            if started in passed:
                continue
            if started.kind is InvokeKind.AGENT:
                self._start_turn(started, step.event, now, effects)
            elif started.kind is InvokeKind.DELIVER:
                self._start_deliver(started, step.event, effects)
            else:
                self._start_exec(started, step.event, now, effects)
        if step.config.status is not Status.RUNNING and self.phase is RunPhase.RUNNING:
            self.phase = PHASE_OF[step.config.status]
            self.message = step.config.message
            effects.add(Finished(self.phase.value, step.config.output, step.config.message))

    # ------------------------------------------------------------------ turns

    def _start_turn(self, entry: InvokeEntry, event: Event, now: float, effects: Effects) -> None:
        assert self.config is not None
        state = self.run.chart.states[entry.state]
        assert state.invoke is not None
        assert state.invoke.agent is not None
        call = state.invoke.agent
        slot = self.run.agents[call.slot]
        where = _invoke_path(entry.state) + ".agent"
        activation = interpreter.activation(self.config, event, self._scope)
        self.turn_seq += 1
        turn_id = ids.turn(self.turn_seq)
        epoch = self.epochs.get(call.slot, 0)
        if call.continue_:
            iid = ids.structural(self.run.namespace, self.run.name, call.slot, epoch)
        else:
            iid = ids.fresh(self.run.namespace, self.run.name, call.slot, self._new_id())
        try:
            frame = frames.agent_frame(call, activation, self.workspace, where)
            if any(t.instanceId == iid for t in self.live_turns()):
                raise frames.FrameRefused(
                    f"{where}: the conversation {iid!r} already has a live Turn; two states "
                    "cannot continue one Agent's conversation at once"
                )
        except frames.FrameRefused as refused:
            frame = frames.Frame(prompt="", cwd="")
            self._queue.append(
                Event(ERROR_INVOKE, {"reason": "refused", "message": str(refused)}, origin=entry.id)
            )
            turn = self._new_turn(turn_id, call.slot, entry, iid, call.continue_, epoch, frame, now)
            self._leave(turn)
            turn.exit = Exit(cause=None, submission=None, at=now)
            self._record(
                turn,
                now,
                effects,
                outcome=Outcome.FAILED,
                message=f"refused before admission: {refused}",
            )
            return
        turn = self._new_turn(turn_id, call.slot, entry, iid, call.continue_, epoch, frame, now)
        turn.model = call.model or slot.model
        turn.thinkingLevel = call.thinking_level or (
            str(slot.thinkingLevel) if slot.thinkingLevel else None
        )
        if call.continue_:
            turn.notices = self.notices.pop(call.slot, [])
        turn.admitting = True
        effects.add(self._admit_effect(turn, nudge=False))

    def _new_turn(
        self,
        turn_id: str,
        slot: str,
        entry: InvokeEntry,
        iid: str,
        continue_: bool,
        epoch: int,
        frame: frames.Frame,
        now: float,
    ) -> Turn:
        turn = Turn.model_validate(
            {
                "id": turn_id,
                "agent": slot,
                "state": entry.state,
                "invocation": entry.id,
                "instanceId": iid,
                "continue": continue_,
                "epoch": epoch,
                "prompt": frame.prompt,
                "cwd": frame.cwd,
                "startedAt": now,
            }
        )
        self.turns[turn_id] = turn
        self._live[turn_id] = turn
        self._hold(turn.instanceId, True)
        return turn

    def _leave(self, turn: Turn) -> None:
        """The Turn's state exited: it is swept now."""
        turn.phase = TurnPhase.SWEEPING
        self._live.pop(turn.id, None)

    def _admit_effect(self, turn: Turn, *, nudge: bool) -> Admit:
        slot = self.run.agents[turn.agent]
        prompt = turn.prompt if not nudge else self._nudge_prompt(turn)
        return Admit(
            turn=turn.id,
            agent=turn.agent,
            state=turn.state,
            instance_id=turn.instanceId,
            prompt=prompt,
            cwd=turn.cwd,
            continue_=turn.continue_ or nudge,
            model=turn.model,
            thinking_level=turn.thinkingLevel,
            instructions=slot.instructions,
            workspace=str(slot.workspace.value),
            notices=tuple(turn.notices) if not nudge else (),
            nudge=nudge,
        )

    def _nudge_prompt(self, turn: Turn) -> str:
        picks = ", ".join(f"`{name}`" for name in self.allowed(turn))
        return (
            "Your turn is not over: the workflow is waiting for one of your picks "
            f"({picks}). Finish what the task needs, then call one of them, once."
        )

    def _wake(self, turn: Turn, now: float, effects: Effects) -> None:
        """Nudge a live Turn whose model stopped while picks are allowed."""
        if not turn.idle or not turn.submissions or turn.faulted:
            return
        if turn.submissions[-1].outcome is not Outcome.COMPLETED or not self.allowed(turn):
            return
        if turn.nudges >= self._nudge_budget:
            effects.items.extend(
                self._fault(
                    turn,
                    "no-pick",
                    f"the Agent stopped {turn.nudges + 1} times without a pick while "
                    f"{', '.join(self.allowed(turn))} were allowed",
                    now,
                ).items
            )
            return
        turn.nudges += 1
        turn.admitting = True
        effects.add(self._admit_effect(turn, nudge=True))

    def _fault(self, turn: Turn, reason: str, message: str, now: float) -> Effects:
        """The Agent's Turn failed: its conversation is burnt, the Machine is told once."""
        turn.faulted = True
        if turn.continue_:
            self.epochs[turn.agent] = max(self.epochs.get(turn.agent, 0), turn.epoch) + 1
        fields = {
            "reason": reason,
            "message": bounded(message),
            "agent": turn.agent,
            "turn": turn.id,
        }
        return self._send(Event(ERROR_INVOKE, fields, origin=turn.invocation), now)

    def _exit_turn(
        self, turn: Turn, cause: str | None, step: Step, now: float, effects: Effects
    ) -> None:
        if turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            return
        running = turn.running
        self._leave(turn)
        turn.exit = Exit(
            cause=cause,
            submission=running.id if running else None,
            admitting=turn.admitting,
            at=now,
        )
        if turn.outstanding is not None:
            delivery = self.deliveries[turn.outstanding]
            work_stopped = any(
                s.invoke.state != turn.state
                and self.run.chart.is_within(s.invoke.state, StatePath(turn.state))
                for s in step.stopped
            )
            self._answer(delivery, turn, effects, turn_complete=True, stopped=work_stopped)
        effects.add(self._sweep_effect(turn, cause, turn.exit.submission))

    def _sweep_effect(self, turn: Turn, cause: str | None, submission: str | None) -> Sweep:
        return Sweep(turn.id, turn.agent, turn.instanceId, cause, submission)

    def _record(
        self,
        turn: Turn,
        now: float,
        effects: Effects,
        *,
        outcome: Outcome | None = None,
        message: str | None = None,
    ) -> None:
        """Write the Turn's one history record, and forget the Turn: the record is it now."""
        if turn.phase is TurnPhase.SETTLED:
            return
        exit_ = turn.exit
        if outcome is None:
            outcome, message = (
                turns.outcome(exit_, turn.submissions) if exit_ else (Outcome.ABORTED, None)
            )
        for entry in turn.submissions:
            if entry.outcome is None:
                entry.outcome, entry.settledAt = Outcome.ABORTED, now
        turn.phase = TurnPhase.SETTLED
        record = TurnRecord(
            name=turn.id,
            agent=turn.agent,
            state=turn.state,
            instanceId=turn.instanceId,
            outcome=outcome,
            cause=exit_.cause if exit_ else None,
            message=message,
            submissions=list(turn.submissions),
            startedAt=turn.startedAt,
            settledAt=now,
            tokens=total_usage(turn.submissions),
        )
        self.recorded += 1
        self._keep(record)
        del self.turns[turn.id]
        self._hold(turn.instanceId, False)
        self.deliveries = {k: d for k, d in self.deliveries.items() if d.turn != turn.id}
        effects.add(Recorded(record))

    def _keep(self, record: TurnRecord) -> None:
        """Add ``record`` to the history, dropping the oldest records past its bounds."""
        history = [*self.history, record]
        sizes = [*self._history_bytes, _size(record)]
        total = sum(sizes)
        dropped = 0
        while len(history) - dropped > 1 and (
            len(history) - dropped > HISTORY_LIMIT or total > HISTORY_BYTES
        ):
            total -= sizes[dropped]
            dropped += 1
        self.history, self._history_bytes = history[dropped:], sizes[dropped:]

    # ------------------------------------------------------------------ picks

    def _receipt_after_pick(
        self, turn: Turn, delivery: Delivery, step: Step, leaf_before: str
    ) -> Receipt:
        assert self.config is not None
        if turn.phase not in (TurnPhase.PENDING, TurnPhase.LIVE):
            if delivery.receipt is None:
                delivery.outstanding = False
                delivery.receipt = Receipt(
                    delivered=True, event=delivery.event, turnComplete=True, deliveryId=delivery.id
                )
                self._notice_answer(turn, delivery.receipt)
            return delivery.receipt
        if self._at_rest(turn):
            straight_back = (
                self.config.leaf == leaf_before and bool(step.entered) and not delivery.replied
            )
            delivery.outstanding = False
            delivery.receipt = Receipt(
                delivered=True,
                event=delivery.event,
                deliveryId=delivery.id,
                allowed=self.allowed(turn),
                straightBack=straight_back,
                answer=delivery.reply,
            )
            return delivery.receipt
        turn.outstanding = delivery.id
        return Receipt(
            delivered=True, event=delivery.event, deliveryId=delivery.id, outstanding=True
        )

    def _answer_at_rest(self, effects: Effects) -> None:
        for turn in self.live_turns():
            if turn.outstanding is not None and self._at_rest(turn):
                self._answer(
                    self.deliveries[turn.outstanding],
                    turn,
                    effects,
                    turn_complete=False,
                    stopped=False,
                )

    def _answer(
        self,
        delivery: Delivery,
        turn: Turn,
        effects: Effects,
        *,
        turn_complete: bool,
        stopped: bool,
    ) -> None:
        delivery.outstanding = False
        turn.outstanding = None
        delivery.receipt = Receipt(
            delivered=True,
            event=delivery.event,
            deliveryId=delivery.id,
            turnComplete=turn_complete,
            answer=delivery.reply,
            allowed=None if turn_complete else self.allowed(turn),
            stopped=stopped,
        )
        effects.add(Answer(delivery.id, delivery.receipt))
        if turn_complete:
            self._notice_answer(turn, delivery.receipt)

    def _notice_answer(self, turn: Turn, receipt: Receipt) -> None:
        """A continued conversation hears how its last pick went in its next Turn."""
        if not turn.continue_:
            return
        if receipt.stopped:
            text = (
                f"Your pick `{receipt.event}` did not finish: the workflow left the state that "
                "asked for your last turn while it ran, and that stopped it."
            )
        elif receipt.answer is not None:
            text = f"Your pick `{receipt.event}` was answered: {_render(receipt.answer)}"
        else:
            return
        self.notices.setdefault(turn.agent, []).append(Notice(kind="pick-answer", text=text))

    def _note_reply(self, step: Step) -> None:
        """Keep the last reply from the work below an Agent's state while its pick is out."""
        event = step.event
        for turn in self.live_turns():
            if turn.outstanding is None:
                continue
            delivery = self.deliveries[turn.outstanding]
            source = (event.origin or "").partition("#")[0]
            below = (
                source
                and source != turn.state
                and self.run.chart.is_within(StatePath(source), StatePath(turn.state))
            )
            if event.type == DONE_INVOKE and below:
                delivery.reply, delivery.replied = event.fields.get("output"), True
            elif any(
                other != turn.id
                and other in self.turns
                and self.turns[other].state != turn.state
                and self.run.chart.is_within(
                    StatePath(self.turns[other].state), StatePath(turn.state)
                )
                for other in event.cause
            ) and not event.type.startswith(("after:", "done.", "error.")):
                delivery.reply, delivery.replied = {"event": event.type, **event.fields}, True

    def _enclosing_outstanding(self, turn: Turn) -> set[str]:
        """Turns whose outstanding pick's work this Turn is: their states enclose it."""
        return {
            other.id
            for other in self.live_turns()
            if other.id != turn.id
            and other.outstanding is not None
            and self.run.chart.is_within(StatePath(turn.state), StatePath(other.state))
        }

    # ------------------------------------------------------------------ helpers

    def _start_exec(
        self, entry: InvokeEntry, event: Event | None, now: float, effects: Effects
    ) -> None:
        assert self.config is not None
        state = self.run.chart.states[entry.state]
        assert state.invoke is not None
        assert state.invoke.exec is not None
        activation = interpreter.activation(self.config, event, self._scope)
        try:
            frame = frames.exec_frame(
                state.invoke.exec, activation, self.workspace, _invoke_path(entry.state) + ".exec"
            )
        except frames.FrameRefused as refused:
            self._queue.append(
                Event(
                    ERROR_INVOKE,
                    {"reason": "refused", "message": str(refused)},
                    entry.cause,
                    entry.id,
                )
            )
            return
        start = StartExec(entry.id, frame.prompt, frame.cwd, state.invoke.exec.timeout_s)
        self.execs[entry.id] = start
        effects.add(start)

    def _start_deliver(self, entry: InvokeEntry, event: Event | None, effects: Effects) -> None:
        assert self.config is not None
        state = self.run.chart.states[entry.state]
        assert state.invoke is not None
        call = state.invoke.deliver
        assert call is not None
        where = _invoke_path(entry.state) + ".deliver"
        activation = interpreter.activation(self.config, event, self._scope)
        refused: str | None = None
        message = ""
        try:
            message = call.message.render(activation)
        except ExpressionError as error:
            refused = f"{where}.message: {error}"
        if self.workspace is not None and call.slot not in self.workspace.repos:
            listed = ", ".join(sorted(self.workspace.repos)) or "none"
            refused = (
                f"{where}.slot: no repo slot {call.slot!r} in the Workspace (its repos: {listed})"
            )
        elif self.workspace is None:
            refused = f"{where}: the Run has no Workspace whose work it could deliver"
        if refused is not None:
            self._queue.append(
                Event(
                    ERROR_INVOKE, {"reason": "refused", "message": refused}, entry.cause, entry.id
                )
            )
            return
        start = StartDeliver(
            invocation=entry.id,
            state=entry.state,
            slot=call.slot,
            message=message,
            push=call.push,
            author_name=call.author_name,
            author_email=call.author_email,
        )
        self.delivering[entry.id] = start
        effects.add(start)

    def _at_rest(self, turn: Turn) -> bool:
        assert self.config is not None
        return interpreter.at_rest(self.run.chart, self.config, StatePath(turn.state))

    def _repeat(self, instance_id: str, key: str) -> Receipt | None:
        """The answer to a pick that repeats ``key`` on this Instance ID's Turn: its
        receipt, or, while its work runs, that it is outstanding; None for a new key.
        Its Turn's deliveries are kept until the Turn is recorded (its sweep came back),
        and so is the key: by then the Harness that sent it was swept."""
        for delivery in self.deliveries.values():
            if delivery.key != key:
                continue
            turn = self.turns.get(delivery.turn)
            if turn is None or turn.instanceId != instance_id:
                continue
            if delivery.receipt is not None:
                return delivery.receipt
            return Receipt(
                delivered=True, event=delivery.event, deliveryId=delivery.id, outstanding=True
            )
        return None

    def _live_turn(self, instance_id: str) -> Turn | None:
        return next((t for t in self.live_turns() if t.instanceId == instance_id), None)

    def _turn_of(self, invocation: str) -> Turn | None:
        return next((t for t in self.turns.values() if t.invocation == invocation), None)

    def _invocation(self, invocation: str) -> InvokeEntry | None:
        if self.config is None:
            return None
        return next((i for i in self.config.invokes if i.id == invocation), None)

    def _validator(self, turn: Turn, event: str) -> jsonschema.protocols.Validator:
        """The payload validator of a Menu event, built once (the loader checked its schema)."""
        key = (turn.state, event)
        validator = self._validators.get(key)
        if validator is None:
            schema = next(
                (m.schema for m in self.run.menu(StatePath(turn.state)) if m.name == event),
                {"type": "object"},
            )
            validator = jsonschema.validators.validator_for(schema)(schema)
            self._validators[key] = validator
        return validator

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The core's state as JSON, in the current version (``snapshots``); the core built
        from it continues exactly as this one."""
        return {
            VERSION_KEY: VERSION,
            "phase": self.phase.value,
            "message": self.message,
            "machine": interpreter.snapshot(self.config) if self.config else None,
            "turns": [t.model_dump(mode="json", by_alias=True) for t in self.turns.values()],
            "deliveries": [d.model_dump(mode="json") for d in self.deliveries.values()],
            "epochs": dict(self.epochs),
            "notices": {k: [n.model_dump(mode="json") for n in v] for k, v in self.notices.items()},
            HISTORY_KEY: [r.model_dump(mode="json") for r in self.history],
            "recorded": self.recorded,
            "signals": list(self.signals),
            "ignoredSignals": dict(self.ignored),
            "execs": [
                {
                    "invocation": e.invocation,
                    "command": e.command,
                    "cwd": e.cwd,
                    "timeout": e.timeout_s,
                }
                for e in self.execs.values()
            ],
            "delivering": [
                {
                    "invocation": d.invocation,
                    "state": d.state,
                    "slot": d.slot,
                    "message": d.message,
                    "push": d.push,
                    "author": {"name": d.author_name, "email": d.author_email},
                }
                for d in self.delivering.values()
            ],
            DELIVERED_KEY: [r.model_dump(mode="json", exclude_none=True) for r in self.delivered],
            "cancelled": self.cancelled,
            "turnSeq": self.turn_seq,
            "deliverySeq": self.delivery_seq,
        }

    def _restore(self, data: Mapping[str, Any]) -> None:
        """From a snapshot of the current version (``snapshots.migrate`` makes one of any
        older); a missing or wrong field raises."""
        if data.get(VERSION_KEY) != VERSION:
            raise ValueError(f"version {data.get(VERSION_KEY)!r} where {VERSION} was expected")
        self.phase = RunPhase(data["phase"])
        self.message = data.get("message")
        machine = data.get("machine")  # null, so absent once stored, until the Run starts
        if machine is None and self.phase is not RunPhase.PENDING:
            raise KeyError("machine")
        self.config = interpreter.restore(machine) if machine is not None else None
        self.turns = {t["id"]: Turn.model_validate(t) for t in data["turns"]}
        self._held = Counter(t.instanceId for t in self.turns.values())
        self._live = {
            k: t for k, t in self.turns.items() if t.phase in (TurnPhase.PENDING, TurnPhase.LIVE)
        }
        self.deliveries = {d["id"]: Delivery.model_validate(d) for d in data["deliveries"]}
        self.epochs = {str(key): int(epoch) for key, epoch in data["epochs"].items()}
        self.notices = {
            k: [Notice.model_validate(n) for n in v] for k, v in data["notices"].items()
        }
        self.history = [TurnRecord.model_validate(r) for r in data[HISTORY_KEY]]
        self._history_bytes = [_size(record) for record in self.history]
        self.recorded = int(data["recorded"])
        self.signals = list(data["signals"])
        # Absent from a snapshot written before signals could be ignored: none was.
        self.ignored = {str(k): str(v) for k, v in dict(data.get("ignoredSignals") or {}).items()}
        self.execs = {
            e["invocation"]: StartExec(e["invocation"], e["command"], e["cwd"], float(e["timeout"]))
            for e in data["execs"]
        }
        self.delivering = {
            d["invocation"]: StartDeliver(
                d["invocation"],
                d["state"],
                d["slot"],
                d["message"],
                bool(d["push"]),
                d["author"]["name"],
                d["author"]["email"],
            )
            for d in data["delivering"]
        }
        self.delivered = [DeliveryRecord.model_validate(r) for r in data[DELIVERED_KEY]]
        self.cancelled = bool(data["cancelled"])
        self.turn_seq = int(data["turnSeq"])
        self.delivery_seq = int(data["deliverySeq"])


def _unreadable(error: Exception) -> str:
    """What is wrong with a snapshot the core could not restore, in one line."""
    if isinstance(error, KeyError):
        return f"it lacks the field {error.args[0]!r}"
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"a field is wrong: {first}"


def _size(record: TurnRecord) -> int:
    """A record's size in the history's budget: the bytes of its JSON."""
    return len(record.model_dump_json().encode())


def _submission(turn: Turn | None, submission: str | None) -> SubmissionEntry | None:
    if turn is None:
        return None
    return next((s for s in turn.submissions if s.id == submission), None)


def _invoke_path(state: str) -> str:
    return "spec.machine.states." + ".states.".join(state.split(".")) + ".invoke"


def _render(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)
