"""Budgets: the tokens, cost and time a Turn, an Agent slot's Turns or the whole Run may
spend (``spec.limits``, ``spec.agents.<slot>.limits``; ADR 0117).

What a Turn has spent is what its Submissions used: a settled one's usage, and for a
running one what its conversation's stream has shown so far (each model answer's priced
usage, and how far the answer being streamed has come), which the shell that follows the
Submission reports. A slot's and the Run's spend add every Turn of theirs, recorded and not,
retries included. A limit is reached once the spend is at it: the Turn is swept, since
its next model request could only go past it. A cost limit is also reached by any usage
with no price: a spend the Harness cannot price is one that cannot be kept under the limit,
so a budget fails closed. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from kubeturn.api.durations import parse_duration
from kubeturn.api.run import TurnLimits
from kubeturn.api.status import LimitUse
from kubeturn.machine.load import LoadedRun
from kubeturn.orchestrator import usages
from kubeturn.orchestrator.turns import Turn, TurnPhase
from kubeturn_harness.wire import Usage, total_usage

REASON = "budget"
"""The fault reason (``agent.fault``'s ``event.reason``) and the sweep's cause of a Turn
a limit stopped."""


@dataclass(frozen=True)
class Reached:
    """A limit reached: where the manifest sets it, and what the Turn's record and its
    state's fault say of it."""

    path: str
    message: str


def spent(turn: Turn) -> Usage | None:
    """What the Turn has used so far; None before any usage was reported."""
    return total_usage(
        entry.usage if entry.outcome is not None else entry.spent for entry in turn.submissions
    )


def per_agent(recorded: Mapping[str, Usage], turns: Iterable[Turn]) -> dict[str, Usage]:
    """Each slot's spend: its recorded Turns' (``recorded``) and what ``turns``, not
    recorded yet, have used so far."""
    sums = dict(recorded)
    for turn in turns:
        sums = usages.add(sums, turn.agent, spent(turn))
    return sums


def over(
    run: LoadedRun,
    turn: Turn,
    agents: Mapping[str, Usage],
    *,
    now: float,
    started: float | None,
) -> Reached | None:
    """The first limit reached of those ``turn`` answers to: its own (the slot's
    ``perTurn``), its slot's, the Run's; None while it may go on. ``agents``: every slot's
    spend (``per_agent``); ``started``: when the Run started."""
    slot = run.agents[turn.agent].limits
    base = f"spec.agents.{turn.agent}.limits"
    if slot is not None and slot.perTurn is not None:
        reached = _reached(
            slot.perTurn,
            f"{base}.perTurn",
            "this Turn",
            spent(turn),
            now - turn.startedAt,
        )
        if reached is not None:
            return reached
    return refusal(run, turn.agent, agents, now=now, started=started)


def refusal(
    run: LoadedRun,
    agent: str,
    agents: Mapping[str, Usage],
    *,
    now: float,
    started: float | None,
) -> Reached | None:
    """The limit of the slot's or of the Run's that is reached, so a Turn of ``agent``
    may not start; None when it may."""
    slot = run.agents[agent].limits
    if slot is not None:
        limits = TurnLimits(tokens=slot.tokens, cost=slot.cost)
        where = f"spec.agents.{agent}.limits"
        reached = _reached(limits, where, f"the {agent} Turns", agents.get(agent), None)
        if reached is not None:
            return reached
    if run.spec.limits is None:
        return None
    total = total_usage(agents.values())
    elapsed = now - started if started is not None else None
    return _reached(run.spec.limits, "spec.limits", "the Run", total, elapsed)


def limited(run: LoadedRun) -> bool:
    """Whether the manifest sets any limit."""
    return run.spec.limits is not None or any(
        slot.limits is not None for slot in run.agents.values()
    )


def metered(run: LoadedRun, turn: Turn) -> bool:
    """Whether a limit counts the Turn's tokens or cost, so that its stream's usage is
    worth reporting as it comes."""
    slot = run.agents[turn.agent].limits
    kept = [run.spec.limits, slot, slot.perTurn if slot is not None else None]
    return any(
        limits is not None and (limits.tokens is not None or limits.cost is not None)
        for limits in kept
    )


def next_at(run: LoadedRun, turns: Iterable[Turn], started: float | None) -> float | None:
    """When the next wall-time limit of a live Turn is reached (its own, or the Run's);
    None when none of them has one."""
    live = [t for t in turns if t.phase in (TurnPhase.PENDING, TurnPhase.LIVE)]
    times: list[float] = []
    run_limit = run.spec.limits.wallTime if run.spec.limits is not None else None
    if live and run_limit is not None and started is not None:
        times.append(started + parse_duration(run_limit))
    for turn in live:
        slot = run.agents[turn.agent].limits
        if slot is not None and slot.perTurn is not None and slot.perTurn.wallTime is not None:
            times.append(turn.startedAt + parse_duration(slot.perTurn.wallTime))
    return min(times, default=None)


def standing(run: LoadedRun, agents: Mapping[str, Usage]) -> list[LimitUse]:
    """How much of each token and cost limit of the Run and of its slots is spent, for
    the Run's status: those of a Turn or of time are the Turn's and the clock's to show."""
    found: list[LimitUse] = []
    total = total_usage(agents.values())
    if run.spec.limits is not None:
        found += _standing(run.spec.limits.tokens, run.spec.limits.cost, "spec.limits", total)
    for agent, slot in sorted(run.agents.items()):
        if slot.limits is not None:
            where = f"spec.agents.{agent}.limits"
            found += _standing(slot.limits.tokens, slot.limits.cost, where, agents.get(agent))
    return found


def _standing(
    tokens: int | None, cost: str | None, where: str, used: Usage | None
) -> list[LimitUse]:
    """How much of a token and a cost limit (each None when not set) ``used`` spends."""
    found: list[LimitUse] = []
    spent = 0 if used is None else used.promptTokens + used.completionTokens
    if tokens is not None:
        found.append(
            LimitUse(
                limit=f"{where}.tokens", used=str(spent), of=str(tokens), reached=spent >= tokens
            )
        )
    if cost is not None:
        priced = "0" if used is None or used.cost is None else used.cost
        unpriced = spent > 0 and used is not None and used.cost is None
        found.append(
            LimitUse(
                limit=f"{where}.cost",
                used="unpriced" if unpriced else priced,
                of=cost,
                reached=unpriced or Decimal(priced) >= Decimal(cost),
            )
        )
    return found


def _reached(
    limits: TurnLimits, where: str, whose: str, used: Usage | None, elapsed: float | None
) -> Reached | None:
    for use in _standing(limits.tokens, limits.cost, where, used):
        if not use.reached:
            continue
        if use.used == "unpriced":
            said = (
                f"cannot be kept: {whose} used a model with no price in the Harness's "
                "providers file (give it a pricing entry)"
            )
        elif use.limit.endswith(".cost"):
            said = f"reached: {whose} cost {use.used} USD of {use.of} USD"
        else:
            said = f"reached: {whose} used {use.used} tokens of {use.of}"
        return Reached(use.limit, f"budget: {use.limit} {said}")
    wall_time = limits.wallTime
    if wall_time is not None and elapsed is not None and elapsed >= parse_duration(wall_time):
        return Reached(
            f"{where}.wallTime",
            f"budget: {where}.wallTime reached: {whose} ran {wall_time} or more",
        )
    return None
