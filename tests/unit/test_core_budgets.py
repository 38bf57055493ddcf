"""Limits (ADR 0117; ``kubeturn.orchestrator.budgets``), as ``RunCore`` decides them.

The fixture ``budgets``: a coder Turn may use 400 tokens and the coder's Turns 600
together; the Run may cost 1 USD and run 1h; a reviewer Turn may run 10m. Cases: a Turn's
spend reported mid-Submission that reaches its own limit sweeps it (cause ``budget``,
naming its running Submission) and routes the Agent's fault, reason ``budget``, recorded
once ``aborted`` saying which limit; a spend under every limit changes nothing and shows in
the Run's usage at once; the slot's limit counts its recorded Turns; the Run's cost sweeps
every live Turn and refuses the next Turn before its admission; a model with no price
cannot keep a cost limit; wall time sweeps by timer; a Turn over its limit when its
Submission completes is not nudged; a restore keeps the spend and the Run's start.
"""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Finished, Sweep
from kubeturn_harness.wire import Outcome, Usage
from tests.unit.cores import kinds, new_core, only, restored, settle_sweep, started

CODER = "default.budgets/root/coder/t-n1"


def used(tokens: int, cost: str | None = "0.01") -> Usage:
    return Usage(promptTokens=tokens - 10, completionTokens=10, cost=cost)


def to_reviewers() -> RunCore:
    """The core with both coder Turns ended by their picks (250 tokens each, recorded),
    and the two reviewers live in ``both``."""
    core, _ = started("budgets", coder="s1")
    core.progressed("t1", "s1", 1.0, spent=used(250, "0.10"))
    core.pick(CODER, "submit", {}, 2.0)
    core.swept("t1", {"s1": (Outcome.ENDED, used(250, "0.10"), None)}, 3.0)
    core.admitted("t2", "s2", 3.5)
    core.progressed("t2", "s2", 4.0, spent=used(250, "0.10"))
    core.pick(core.turns["t2"].instanceId, "submit", {}, 5.0)
    core.swept("t2", {"s2": (Outcome.ENDED, used(250, "0.10"), None)}, 6.0)
    core.admitted("t3", "s3", 6.5)
    core.admitted("t4", "s4", 6.5)
    return core


def test_a_turn_that_reaches_its_own_limit_mid_submission_is_swept_and_routed() -> None:
    core, _ = started("budgets", coder="s1")
    assert core.watches_progress("t1") is True
    assert core.progressed("t1", "s1", 1.0, spent=used(399)).items == []
    effects = core.progressed("t1", "s1", 2.0, spent=used(400))
    assert kinds(effects) == ["Sweep", "Finished"]
    assert only(effects, Sweep) == Sweep("t1", "coder", CODER, "budget", "s1")
    why = (
        "budget: spec.agents.coder.limits.perTurn.tokens reached: this Turn used 400 tokens of 400"
    )
    assert only(effects, Finished) == Finished(
        "Failed", {"reason": "budget", "why": why}, "reached the failed final 'broke'"
    )
    record = settle_sweep(core, only(effects, Sweep), "s1", 3.0)
    assert (record.outcome, record.cause, record.message) == (Outcome.ABORTED, "budget", why)
    assert [r.name for r in core.history] == ["t1"]


def test_a_spend_under_every_limit_changes_nothing_and_shows_at_once() -> None:
    core, _ = started("budgets", coder="s1")
    assert core.view().usage == {}
    assert core.progressed("t1", "s1", 1.0, spent=used(100)).items == []
    assert core.progressed("t1", "s1", 1.5, spent=used(100)).items == []
    assert core.view().usage == {"coder": used(100)}
    assert core.turns["t1"].phase.value == "live"


def test_the_slots_limit_counts_its_recorded_turns() -> None:
    core, _ = started("budgets", coder="s1")
    core.progressed("t1", "s1", 1.0, spent=used(350))
    core.pick(CODER, "submit", {}, 2.0)
    core.swept("t1", {"s1": (Outcome.ENDED, used(350), None)}, 3.0)
    core.admitted("t2", "s2", 3.5)
    effects = core.progressed("t2", "s2", 4.0, spent=used(250))
    sweep = only(effects, Sweep)
    assert (sweep.turn, sweep.cause) == ("t2", "budget")
    assert core.config is not None
    assert core.config.context["why"] == (
        "budget: spec.agents.coder.limits.tokens reached: the coder Turns used 600 tokens of 600"
    )


def test_the_runs_cost_sweeps_every_live_turn_and_refuses_the_next() -> None:
    core = to_reviewers()
    left, right = core.turns["t3"], core.turns["t4"]
    effects = core.progressed("t3", "s3", 7.0, spent=used(100, "0.80"))
    sweeps = effects.of(Sweep)
    assert [(s.turn, s.cause) for s in sweeps if isinstance(s, Sweep)] == [
        ("t3", "budget"),
        ("t4", "budget"),
    ]
    # The fault of the first routes to `after`, whose Turn the spent Run refuses; its
    # fault is routed to `broke`. No Turn is admitted.
    assert effects.of(Admit) == []
    assert core.phase is RunPhase.FAILED
    refused = core.history[-1]
    assert (refused.name, refused.outcome) == ("t5", Outcome.FAILED)
    why = "budget: spec.limits.cost reached: the Run cost 1 USD of 1.00 USD"
    assert refused.message == f"refused before admission: {why}"
    assert core.config is not None
    assert core.config.context == {"reason": "budget", "why": why}
    for turn, submission in ((left, "s3"), (right, "s4")):
        sweep = next(s for s in sweeps if isinstance(s, Sweep) and s.turn == turn.id)
        record = settle_sweep(core, sweep, submission, 8.0)
        assert (record.outcome, record.cause, record.message) == (
            Outcome.ABORTED,
            "budget",
            why,
        )


def test_a_model_with_no_price_cannot_keep_a_cost_limit() -> None:
    core, _ = started("budgets", coder="s1")
    assert core.progressed("t1", "s1", 1.0, spent=used(0, None)).items == []
    effects = core.progressed("t1", "s1", 2.0, spent=used(100, None))
    assert only(effects, Sweep).cause == "budget"
    assert core.config is not None
    assert core.config.context["why"] == (
        "budget: spec.limits.cost cannot be kept: the Run used a model with no price in the "
        "Harness's providers file (give it a pricing entry)"
    )


def test_wall_time_sweeps_by_timer() -> None:
    core = to_reviewers()
    assert core.next_fire() == 5.0 + 600  # the reviewers started at the pick
    assert core.fire_due(604.0).items == []
    effects = core.fire_due(605.0)
    assert [s.turn for s in effects.of(Sweep) if isinstance(s, Sweep)] == ["t3", "t4"]
    assert core.config is not None
    assert core.config.context["why"] == (
        "budget: spec.agents.reviewer.limits.perTurn.wallTime reached: this Turn ran 10m or more"
    )


def test_the_runs_wall_time_counts_from_its_start() -> None:
    core, _ = started("budgets", coder="s1")
    assert core.next_fire() == 3600.0
    effects = core.fire_due(3600.0)
    assert only(effects, Sweep).turn == "t1"
    assert core.config is not None
    assert core.config.context["why"] == (
        "budget: spec.limits.wallTime reached: the Run ran 1h or more"
    )


def test_a_turn_over_its_limit_when_its_submission_completes_is_not_nudged() -> None:
    core, _ = started("budgets", coder="s1")
    effects = core.settled("t1", "s1", Outcome.COMPLETED, 5.0, usage=used(450))
    assert effects.of(Admit) == []
    assert only(effects, Sweep) == Sweep("t1", "coder", CODER, "budget", None)
    assert core.phase is RunPhase.FAILED


def test_a_restore_keeps_the_spend_and_the_runs_start() -> None:
    core, _ = started("budgets", coder="s1")
    core.progressed("t1", "s1", 1.0, spent=used(300))
    again = restored(core)
    assert again.view().usage == {"coder": used(300)}
    assert again.next_fire() == 3600.0
    assert again.progressed("t1", "s1", 2.0, spent=used(300)).items == []
    assert only(again.progressed("t1", "s1", 3.0, spent=used(400)), Sweep).cause == "budget"


def test_a_run_without_limits_reports_no_spend_to_follow() -> None:
    core = new_core("handoff")
    core.start(0.0)
    (turn,) = core.turns
    assert core.watches_progress(turn) is False


def test_a_retry_counts_against_the_slots_limit_with_the_turn_it_retries() -> None:
    core, _ = started("budget_retries", coder="s1")
    runaway = "runaway: 4 identical calls of `read` in a row"
    core.settled(
        "t1", "s1", Outcome.FAILED, 1.0, usage=used(200), reason="runaway", message=runaway
    )
    core.swept("t1", {}, 2.0)
    assert kinds(core.fire_due(31.0)) == ["Admit"]
    core.admitted("t2", "s2", 31.5)
    effects = core.progressed("t2", "s2", 32.0, spent=used(100))
    assert only(effects, Sweep).cause == "budget"
    assert core.config is not None
    assert core.config.context == {
        "reason": "budget",
        "why": "budget: spec.agents.coder.limits.tokens reached: the coder Turns used 300 "
        "tokens of 300",
    }


def test_a_retry_a_spent_slot_would_start_is_refused_before_its_admission() -> None:
    core, _ = started("budget_retries", coder="s1")
    runaway = "runaway: 4 identical calls of `read` in a row"
    core.settled(
        "t1", "s1", Outcome.FAILED, 1.0, usage=used(300), reason="runaway", message=runaway
    )
    core.swept("t1", {}, 2.0)
    effects = core.fire_due(31.0)
    assert effects.of(Admit) == []
    refused = core.history[-1]
    why = "budget: spec.agents.coder.limits.tokens reached: the coder Turns used 300 tokens of 300"
    assert (refused.name, refused.outcome, refused.message) == (
        "t2",
        Outcome.FAILED,
        f"refused before admission: {why}",
    )
    assert core.phase is RunPhase.FAILED
    assert core.config is not None
    assert core.config.context == {"reason": "budget", "why": why}
