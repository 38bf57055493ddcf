"""Picks: which an Agent may make, which are refused, and the answers they are given.

- A pick is refused while another is outstanding or the Agent's state is not at Rest,
  and when it is not one the workflow takes now or its payload does not fit its schema.
- A pick that repeats an idempotency key of its Turn is answered as the first was (or
  with the answer that came since), never delivered again, while the Turn is held.
- One whose work runs below the Agent's state is outstanding: it is answered at Rest,
  with the last reply of that work, or when an exit ends its Turn (``stopped`` when that
  exit stopped the work).

These functions read the Machine's configuration and the Turn ledger; those that answer
write the answer on the ledger's ``Delivery`` and ``Turn``. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from kubeturn.machine import interpreter
from kubeturn.machine.interpreter import DONE_INVOKE, Config, Step
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import Chart, StatePath, within
from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn.orchestrator.turns import Delivery, Turn
from kubeturn_harness.wire import DeliveryId, Receipt, Refusal


@dataclass(frozen=True)
class Gone:
    """No live Turn at that Instance ID (404)."""


@dataclass(frozen=True)
class Invalid:
    """The pick's payload does not fit its schema (422)."""

    message: str


PickAnswer = Receipt | Refusal | Gone | Invalid


def at_rest(chart: Chart, config: Config, turn: Turn) -> bool:
    """No work runs below the Turn's state: its Agent may pick."""
    return interpreter.at_rest(chart, config, StatePath(turn.state))


def allowed(run: LoadedRun, config: Config | None, turn: Turn) -> list[str]:
    """The picks this Turn may make now: none while a pick is out or work runs."""
    if config is None or turn.outstanding is not None or not at_rest(run.chart, config, turn):
        return []
    menu = {m.name for m in run.menu(StatePath(turn.state))}
    handled = interpreter.handled_below(run.chart, config, StatePath(turn.state))
    return [name for name in handled if name in menu]


class Validators:
    """The payload validators of a Run's Menu events, each built once, when first used
    (the loader checked their schemas)."""

    def __init__(self, run: LoadedRun) -> None:
        self._run = run
        self._built: dict[tuple[str, str], jsonschema.protocols.Validator] = {}

    def problem(self, turn: Turn, event: str, payload: Mapping[str, Any]) -> Invalid | None:
        """Why ``payload`` does not fit ``event``'s schema in the Turn's Menu, if it does not."""
        key = (turn.state, event)
        validator = self._built.get(key)
        if validator is None:
            schema = next(
                (m.schema for m in self._run.menu(StatePath(turn.state)) if m.name == event),
                {"type": "object"},
            )
            validator = jsonschema.validators.validator_for(schema)(schema)
            self._built[key] = validator
        problem = jsonschema.exceptions.best_match(validator.iter_errors(dict(payload)))
        if problem is None:
            return None
        where = "/".join(str(p) for p in problem.absolute_path) or "the payload"
        return Invalid(f"{where}: {problem.message}")


def refusal(
    chart: Chart,
    config: Config,
    deliveries: Mapping[DeliveryId, Delivery],
    turn: Turn,
    event: str,
    allowed_now: Sequence[str],
) -> Refusal | None:
    """Why the Turn's pick of ``event`` is refused now (``allowed_now``: its ``allowed``);
    None when it may be delivered."""
    if turn.outstanding is not None or not at_rest(chart, config, turn):
        held = deliveries.get(turn.outstanding) if turn.outstanding is not None else None
        return Refusal(refused="outstanding", outstanding=held.event if held else None, allowed=[])
    if event not in allowed_now:
        listed = ", ".join(allowed_now) or "none"
        message = f"`{event}` is not a pick the workflow takes now (allowed: {listed})"
        return Refusal(refused="not-allowed", allowed=list(allowed_now), message=message)
    return None


def repeat(
    deliveries: Iterable[Delivery],
    turns: Mapping[TurnId, Turn],
    instance_id: InstanceId,
    key: str,
) -> Receipt | None:
    """The answer to a pick that repeats ``key`` on this Instance ID's Turn: its
    receipt, or, while its work runs, that it is outstanding; None for a new key.
    Its Turn's deliveries are kept until the Turn is recorded (its sweep came back),
    and so is the key: by then the Harness that sent it was swept."""
    for delivery in deliveries:
        if delivery.key != key:
            continue
        turn = turns.get(delivery.turn)
        if turn is None or turn.instanceId != instance_id:
            continue
        if delivery.receipt is not None:
            return delivery.receipt
        return outstanding(delivery)
    return None


def outstanding(delivery: Delivery) -> Receipt:
    """The receipt of a pick whose work runs below the Agent's state."""
    return Receipt(delivered=True, event=delivery.event, deliveryId=delivery.id, outstanding=True)


def answer(
    run: LoadedRun,
    config: Config,
    delivery: Delivery,
    turn: Turn,
    *,
    turn_complete: bool,
    stopped: bool,
) -> Receipt:
    """Answer the Turn's outstanding pick: its receipt, with the last reply of its work,
    and, while the Turn goes on, the picks it may make now."""
    delivery.outstanding = False
    turn.outstanding = None
    delivery.receipt = Receipt(
        delivered=True,
        event=delivery.event,
        deliveryId=delivery.id,
        turnComplete=turn_complete,
        answer=delivery.reply,
        allowed=None if turn_complete else allowed(run, config, turn),
        stopped=stopped,
    )
    return delivery.receipt


def at_rest_answer(
    run: LoadedRun,
    config: Config,
    delivery: Delivery,
    turn: Turn,
    step: Step,
    before: Sequence[StatePath],
) -> Receipt:
    """The receipt of a pick whose step left its Agent at Rest: straight back when the
    step went back to the leaves below the Turn's state it left (``before``: the active
    leaves then) and no work below it replied."""
    state = StatePath(turn.state)
    inside = [leaf for leaf in config.active if within(leaf, state)]
    straight_back = (
        inside == [leaf for leaf in before if within(leaf, state)]
        and bool(step.entered)
        and not delivery.replied
    )
    delivery.outstanding = False
    delivery.receipt = Receipt(
        delivered=True,
        event=delivery.event,
        deliveryId=delivery.id,
        allowed=allowed(run, config, turn),
        straightBack=straight_back,
        answer=delivery.reply,
    )
    return delivery.receipt


def ended_answer(delivery: Delivery) -> Receipt:
    """The receipt of a pick whose step ended its Turn (its state exited)."""
    delivery.outstanding = False
    delivery.receipt = Receipt(
        delivered=True, event=delivery.event, turnComplete=True, deliveryId=delivery.id
    )
    return delivery.receipt


def note_reply(
    chart: Chart,
    step: Step,
    live: Iterable[Turn],
    turns: Mapping[TurnId, Turn],
    deliveries: Mapping[DeliveryId, Delivery],
) -> None:
    """Keep the last reply from the work below an Agent's state while its pick is out."""
    event = step.event
    for turn in live:
        if turn.outstanding is None:
            continue
        delivery = deliveries[turn.outstanding]
        source = (event.origin or "").partition("#")[0]
        below = (
            source
            and source != turn.state
            and chart.is_within(StatePath(source), StatePath(turn.state))
        )
        if event.type == DONE_INVOKE and below:
            delivery.reply, delivery.replied = event.fields.get("output"), True
        elif any(
            other is not None
            and other.id != turn.id
            and other.state != turn.state
            and chart.is_within(StatePath(other.state), StatePath(turn.state))
            for other in (turns.get(TurnId(cause)) for cause in event.cause)
        ) and not event.type.startswith(("after:", "done.", "error.")):
            delivery.reply, delivery.replied = {"event": event.type, **event.fields}, True


def enclosing_outstanding(chart: Chart, turn: Turn, live: Iterable[Turn]) -> set[TurnId]:
    """Turns whose outstanding pick's work this Turn is: their states enclose it."""
    return {
        other.id
        for other in live
        if other.id != turn.id
        and other.outstanding is not None
        and chart.is_within(StatePath(turn.state), StatePath(other.state))
    }
