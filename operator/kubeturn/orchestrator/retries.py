"""Declared retries: a Turn whose fault reason its invoke's ``retry.when`` lists is tried
again as a new Turn, instead of its state hearing the fault (ADR 0115).

The retry is the identical Turn input (prompt, cwd, Dials, notices) on a fresh
conversation: a Turn that does not continue gets a new random Instance ID; one that
continues is retried only when the policy says ``freshConversation``, on the next
epoch's conversation, since its fault burnt the one it was on (seed 001: a continued
Turn's prompt means nothing fresh, so the reroll is opt-in for it). The retry starts
``backoff`` after the fault while the invoke's state is still active; an exit first
drops it. When the retries run out the state hears the fault as it would have. Pure: no
IO, no clock.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import RetryPolicy, StatePath, machine_of
from kubeturn.orchestrator import ids
from kubeturn.orchestrator.turns import Turn


class Retry(BaseModel):
    """A retry decided and not started yet; kept in the snapshot, so a restore mid-backoff
    starts it when it is due."""

    model_config = ConfigDict(extra="forbid")

    earlier: Turn
    """The Turn that faulted, as it was when it did: the retry's input is its."""
    at: float
    """When the retry starts."""


def policy(run: LoadedRun, turn: Turn) -> RetryPolicy | None:
    """The retry policy of the invoke that started ``turn``; None when it has none."""
    state = run.chart.state(StatePath(turn.state))
    if state.invoke is None or state.invoke.agent is None:
        return None
    return state.invoke.agent.retry


def decide(run: LoadedRun, turn: Turn, reason: str, now: float) -> Retry | None:
    """The retry of ``turn``, faulted for ``reason`` at ``now``; None when its state
    hears the fault: no policy, a reason it does not list, no retry left, or a continued
    conversation the policy does not retry fresh."""
    found = policy(run, turn)
    if found is None or reason not in found.when or (turn.retry or 0) >= found.limit:
        return None
    if turn.continue_ and not found.fresh_conversation:
        return None
    return Retry(earlier=turn.model_copy(deep=True), at=now + found.backoff_s)


def again(
    run: LoadedRun,
    retry: Retry,
    *,
    turn_id: ids.TurnId,
    epochs: dict[str, int],
    new_id: ids.IdSource,
    now: float,
) -> Turn:
    """The new Turn of ``retry``, started at ``now``: the earlier one's input on a fresh
    conversation, one retry more."""
    earlier = retry.earlier
    machine = machine_of(StatePath(earlier.state))
    epoch = epochs.get(ids.conversation(machine, earlier.agent), 0)
    if earlier.continue_:
        iid = ids.structural(run.namespace, run.name, earlier.agent, epoch, machine)
    else:
        iid = ids.fresh(run.namespace, run.name, earlier.agent, new_id(), machine)
    return Turn.model_validate(
        {
            "id": turn_id,
            "agent": earlier.agent,
            "state": earlier.state,
            "invocation": earlier.invocation,
            "instanceId": iid,
            "continue": earlier.continue_,
            "epoch": epoch,
            "prompt": earlier.prompt,
            "cwd": earlier.cwd,
            "model": earlier.model,
            "thinkingLevel": earlier.thinkingLevel,
            "startedAt": now,
            "notices": [notice.model_dump() for notice in earlier.notices],
            "retry": (earlier.retry or 0) + 1,
        }
    )
