"""Declared retries (ADR 0115; ``kubeturn.orchestrator.retries``), as ``RunCore`` decides
them.

The fixture ``retries``: ``work`` retries a runaway or a stall once after 30 s; the
continued ``fix`` retries a runaway twice on a fresh conversation; the continued
``polish`` does not say ``freshConversation``. Cases: a runaway is swept and recorded
as it ended, and 30 s later a new Turn (the next number) asks the identical prompt on a
fresh conversation; when it runs away too the Machine hears the fault; a stall is
retried the same way; a reason the policy does not list is heard at once; an exit during
the backoff drops the retry; a restore mid-backoff keeps it; a continued Turn is retried
on the next epoch's conversation only when the policy says so.
"""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.effects import Admit, Finished, Sweep
from kubeturn_harness.wire import Outcome
from tests.unit.cores import kinds, only, restored, settle_sweep, started

RUNAWAY = "runaway: 4 identical calls of `read` in a row"


def test_a_runaway_is_retried_once_on_a_fresh_conversation_then_heard() -> None:
    core, admits = started("retries", coder="s1")
    first = admits["coder"]
    effects = core.settled("t1", "s1", Outcome.FAILED, 1.0, message=RUNAWAY, reason="runaway")
    assert effects.items == [Sweep("t1", "coder", first.instance_id, None, None)]
    assert core.phase is RunPhase.RUNNING
    assert core.next_fire() == 31.0
    record = settle_sweep(core, only(effects, Sweep), None, 2.0)
    assert (record.outcome, record.message) == (Outcome.FAILED, RUNAWAY)
    assert core.fire_due(30.0).items == []
    retry = only(core.fire_due(31.0), Admit)
    assert (retry.turn, retry.key, retry.prompt, retry.cwd) == ("t2", "t2.1", first.prompt, "/work")
    assert retry.prompt == "Do the task."
    assert retry.instance_id != first.instance_id
    assert retry.instance_id.startswith("default.retries/root/coder/t-")
    assert core.turns["t2"].retry == 1
    core.admitted("t2", "s2", 32.0)
    effects = core.settled("t2", "s2", Outcome.FAILED, 40.0, message=RUNAWAY, reason="runaway")
    assert kinds(effects) == ["Sweep", "Finished"]
    assert only(effects, Finished).output == "runaway"
    settle_sweep(core, only(effects, Sweep), None, 41.0)
    assert [(r.name, r.outcome) for r in core.history] == [
        ("t1", Outcome.FAILED),
        ("t2", Outcome.FAILED),
    ]


def test_a_stall_is_retried_after_its_sweep() -> None:
    core, _ = started("retries", coder="s1")
    effects = core.fire_due(60.5)
    assert [(s.turn, s.submission) for s in effects.of(Sweep) if isinstance(s, Sweep)] == [
        ("t1", "s1")
    ]
    assert core.phase is RunPhase.RUNNING
    record = settle_sweep(core, only(effects, Sweep), "s1", 61.0)
    assert record.outcome is Outcome.ABORTED
    assert record.message is not None
    assert record.message.startswith("stalled:")
    assert core.next_fire() == 90.5
    assert only(core.fire_due(90.5), Admit).turn == "t2"


def test_a_reason_the_policy_does_not_list_is_heard_at_once() -> None:
    core, _ = started("retries", coder="s1")
    effects = core.settled(
        "t1", "s1", Outcome.FAILED, 1.0, message="provider down", reason="submission_failed"
    )
    assert kinds(effects) == ["Sweep", "Finished"]
    assert only(effects, Finished).output == "submission_failed"
    assert core.retrying == {}


def test_an_exit_during_the_backoff_drops_the_retry() -> None:
    core, _ = started("retries", coder="s1")
    core.settled("t1", "s1", Outcome.FAILED, 1.0, message=RUNAWAY, reason="runaway")
    effects = core.signal("stop", None, 5.0)
    assert kinds(effects) == ["Finished"]
    assert core.retrying == {}
    assert core.next_fire() is None
    assert core.fire_due(31.0).items == []


def test_a_restore_mid_backoff_starts_the_retry_when_it_is_due() -> None:
    core, _ = started("retries", coder="s1")
    sweep = only(core.settled("t1", "s1", Outcome.FAILED, 1.0, reason="runaway"), Sweep)
    settle_sweep(core, sweep, None, 2.0)
    again = restored(core)
    assert again.resume(10.0).items == []
    assert again.next_fire() == 31.0
    retry = only(again.fire_due(31.0), Admit)
    assert (retry.turn, retry.instance_id) == ("t2", "default.retries/root/coder/t-r1")


def test_a_continued_turn_is_retried_on_the_next_epochs_conversation_when_told() -> None:
    core, admits = started("retries", coder="s1")
    core.pick(admits["coder"].instance_id, "submit", {}, 1.0)
    fix = core.turns["t2"]
    assert fix.instanceId == "default.retries/root/coder"
    core.admitted("t2", "s2", 2.0)
    effects = core.settled("t2", "s2", Outcome.FAILED, 3.0, message=RUNAWAY, reason="runaway")
    assert kinds(effects) == ["Sweep"]
    assert core.epochs == {"coder": 1}
    retry = only(core.fire_due(3.0), Admit)
    assert (retry.turn, retry.instance_id, retry.continue_, retry.prompt) == (
        "t3",
        "default.retries/root/coder/1",
        True,
        "Fix it.",
    )


def test_a_continued_turn_whose_policy_does_not_say_fresh_is_heard_at_once() -> None:
    core, admits = started("retries", coder="s1")
    core.pick(admits["coder"].instance_id, "submit", {}, 1.0)
    core.admitted("t2", "s2", 2.0)
    core.pick("default.retries/root/coder", "submit", {}, 3.0)
    assert core.turns["t3"].state == "polish"
    core.admitted("t3", "s3", 4.0)
    effects = core.settled("t3", "s3", Outcome.FAILED, 5.0, message=RUNAWAY, reason="runaway")
    assert kinds(effects) == ["Sweep", "Finished"]
    assert core.retrying == {}
