"""Limits (ADR 0117) under any order of what the shell reports: hypothesis drives the
``budgets`` fixture's core as a shell would, in any order (admissions, spend reports,
settlements, picks, sweeps coming back, time passing), and after every step checks:

- no live Turn has reached a limit it answers to: each one that did was swept in the call
  that reported it, and a Turn a spent slot or Run would start never went live;
- every sweep for a limit says cause ``budget`` and names the Submission then running,
  and a Turn swept by its state's exit had reached no limit (the limits' sweeps come
  before any fault is heard, so no route hides why a Turn ended);
- every Turn is recorded once, and one swept for a limit is recorded ``aborted`` with
  cause ``budget``;
- the spend the Run shows never goes down.
"""

from __future__ import annotations

from decimal import Decimal

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kubeturn.orchestrator import budgets
from kubeturn.orchestrator.effects import Effects, Sweep
from kubeturn.orchestrator.turns import TurnPhase
from kubeturn_harness.wire import Outcome, Usage
from tests.unit.cores import new_core


def tokens_of(usages: dict[str, Usage]) -> int:
    return sum(u.promptTokens + u.completionTokens for u in usages.values())


class Spending(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.core = new_core("budgets")
        self.now = 0.0
        self.submissions = 0
        self.sweeps: dict[str, Sweep] = {}
        self.shown = 0
        self.take(self.core.start(self.now))

    def take(self, effects: Effects) -> None:
        for sweep in effects.of(Sweep):
            assert isinstance(sweep, Sweep)
            assert sweep.turn not in self.sweeps, "a Turn swept twice"
            turn = self.core.turns[sweep.turn]
            if sweep.cause == budgets.REASON:
                running = [s.id for s in turn.submissions if s.outcome is None]
                assert sweep.submission == (running[-1] if running else None)
            else:
                # Swept by its state's exit: then it had reached no limit, or the exit
                # would hide why it ended.
                reached = budgets.over(
                    self.core.run,
                    turn,
                    self.core.spending(),
                    now=self.now,
                    started=self.core.started_at,
                )
                assert reached is None, (sweep, reached)
            self.sweeps[sweep.turn] = sweep

    def live(self) -> list[str]:
        return sorted(t.id for t in self.core.live_turns() if t.phase is TurnPhase.LIVE)

    def admitting(self) -> list[str]:
        return sorted(t.id for t in self.core.turns.values() if t.admitting)

    def running(self) -> list[str]:
        return [t for t in self.live() if self.core.turns[t].running is not None]

    @precondition(lambda self: self.admitting())
    @rule(data=st.data())
    def admit(self, data: st.DataObject) -> None:
        turn = data.draw(st.sampled_from(self.admitting()))
        self.submissions += 1
        self.take(self.core.admitted(turn, f"s{self.submissions}", self.now))

    @precondition(lambda self: self.running())
    @rule(
        data=st.data(),
        tokens=st.integers(1, 300),
        cents=st.none() | st.integers(0, 40),
    )
    def report(self, data: st.DataObject, tokens: int, cents: int | None) -> None:
        turn = self.core.turns[data.draw(st.sampled_from(self.running()))]
        running = turn.running
        assert running is not None
        earlier = running.spent or Usage(cost="0")
        cost = None if cents is None or earlier.cost is None else Decimal(cents) / 100
        more = Usage(
            promptTokens=tokens,
            cost=None if cost is None else str(cost),
        )
        self.take(self.core.progressed(turn.id, running.id, self.now, spent=earlier.plus(more)))

    @precondition(lambda self: self.running())
    @rule(data=st.data())
    def settle_completed(self, data: st.DataObject) -> None:
        turn = self.core.turns[data.draw(st.sampled_from(self.running()))]
        running = turn.running
        assert running is not None
        self.take(
            self.core.settled(turn.id, running.id, Outcome.COMPLETED, self.now, usage=running.spent)
        )

    @precondition(lambda self: any(self.core.turns[t].agent == "coder" for t in self.live()))
    @rule(data=st.data())
    def pick(self, data: st.DataObject) -> None:
        coders = [t for t in self.live() if self.core.turns[t].agent == "coder"]
        turn = self.core.turns[data.draw(st.sampled_from(coders))]
        _, effects = self.core.pick(turn.instanceId, "submit", {}, self.now)
        self.take(effects)

    @precondition(
        lambda self: any(
            t.phase is TurnPhase.SWEEPING and t.id in self.sweeps for t in self.core.turns.values()
        )
    )
    @rule(data=st.data())
    def sweep_comes_back(self, data: st.DataObject) -> None:
        swept = sorted(
            t.id
            for t in self.core.turns.values()
            if t.phase is TurnPhase.SWEEPING and t.id in self.sweeps
        )
        turn = self.core.turns[data.draw(st.sampled_from(swept))]
        caused = {
            s.id: (Outcome.ABORTED, s.spent, None) for s in turn.submissions if s.outcome is None
        }
        self.take(self.core.swept(turn.id, caused, self.now))
        (record,) = [r for r in self.core.history if r.name == turn.id]
        if self.sweeps[turn.id].cause == budgets.REASON:
            assert (record.outcome, record.cause) == (Outcome.ABORTED, budgets.REASON)
            assert record.message is not None
            assert record.message.startswith("budget: ")

    @rule(seconds=st.sampled_from([1.0, 60.0, 300.0, 700.0, 3600.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.take(self.core.fire_due(self.now))

    @invariant()
    def no_live_turn_is_over_a_limit(self) -> None:
        agents = self.core.spending()
        for turn in self.core.live_turns():
            if turn.faulted:
                continue
            reached = budgets.over(
                self.core.run, turn, agents, now=self.now, started=self.core.started_at
            )
            assert reached is None, (turn.id, reached)

    @invariant()
    def every_turn_is_recorded_once(self) -> None:
        names = [r.name for r in self.core.history]
        assert len(names) == len(set(names)) == self.core.recorded

    @invariant()
    def the_shown_spend_never_goes_down(self) -> None:
        shown = tokens_of(dict(self.core.view().usage))
        assert shown >= self.shown
        self.shown = shown


Spending.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestSpending = Spending.TestCase
