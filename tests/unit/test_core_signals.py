"""Outside signals are handled when they arrive or not at all (ADR 0067), as ``RunCore``
decides and ``Run.status`` shows it.

Cases:
- a signal an active state accepts moves the Machine and is ``handled``;
- one that arrives before its state is entered (an early approval) changes nothing and
  is ``ignored`` naming the events the Run accepts; it is not kept: the state entered
  later does not fire on it;
- data that misfits the accepting transition's schema is ignored, naming the field;
- an accepted event no guard lets through is ignored, saying so;
- a repeated id is processed once; the Machine's own events are never accepted;
- ``acceptedEvents`` and ``waitingFor`` say what the Run waits for, with description and
  schema; the ignored ones survive a snapshot and restore; a status of an earlier
  kubeturn (ids only) reads as handled signals.
"""

from __future__ import annotations

import itertools

from kubeturn.api.status import RunPhase, RunStatus
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from tests.snapshots import loaded


def gate() -> RunCore:
    counter = itertools.count(1)
    core = RunCore(loaded("gate"), workspace=None, new_id=lambda: f"n{next(counter)}")
    core.start(0.0)
    return core


def shown(core: RunCore) -> RunStatus:
    return statuses.run_status(core.view(), core.snapshot())


def results(core: RunCore) -> list[tuple[str, str, str | None]]:
    return [(s.id, s.result.value, s.message) for s in shown(core).processedSignals]


def test_an_accepted_signal_moves_the_machine_and_is_handled() -> None:
    core = gate()
    core.signal("finish", {}, 1.0, signal_id="f1")
    assert core.state == "waiting"
    assert results(core) == [("f1", "handled", None)]


def test_an_early_approval_is_ignored_and_not_kept_for_later() -> None:
    core = gate()
    core.signal("approve", {"reason": "looks good"}, 1.0, signal_id="early")
    assert core.state == "working"
    assert results(core) == [
        (
            "early",
            "ignored",
            "no active state accepts approve; the Run accepts now: finish (working), "
            "ticket (working)",
        )
    ]
    core.signal("finish", {}, 2.0, signal_id="f1")
    assert (core.state, core.phase) == ("waiting", RunPhase.RUNNING)


def test_data_that_misfits_the_schema_is_ignored_naming_the_field() -> None:
    core = gate()
    core.signal("finish", {}, 1.0)
    core.signal("approve", {"reason": "ok"}, 2.0, signal_id="a1")
    assert core.state == "waiting"
    assert results(core) == [
        ("a1", "ignored", "the data of approve does not fit its schema: reason: 'ok' is too short")
    ]
    core.signal("approve", {"reason": "fine work"}, 3.0, signal_id="a2")
    assert core.phase is RunPhase.SUCCEEDED
    assert results(core)[-1] == ("a2", "handled", None)


def test_an_accepted_event_no_guard_lets_through_is_ignored() -> None:
    core = gate()
    core.signal("ticket", {"urgent": False}, 1.0, signal_id="t1")
    assert core.state == "working"
    assert results(core) == [
        ("t1", "ignored", "no transition of ticket has a guard that holds now")
    ]


def test_a_repeated_id_is_processed_once_and_machine_events_are_never_accepted() -> None:
    core = gate()
    core.signal("finish", {}, 1.0, signal_id="f1")
    core.signal("reject", {}, 2.0, signal_id="f1")
    core.signal("CANCEL", {}, 3.0, signal_id="c1")
    core.signal("agent.fault", {}, 4.0, signal_id="x1")
    assert (core.state, core.phase) == ("waiting", RunPhase.RUNNING)
    assert [r[:2] for r in results(core)] == [
        ("f1", "handled"),
        ("c1", "ignored"),
        ("x1", "ignored"),
    ]


def test_the_status_says_what_the_run_waits_for() -> None:
    core = gate()
    core.signal("finish", {}, 1.0)
    status = shown(core).model_dump(mode="json", by_alias=True, exclude_none=True)
    assert status["waitingFor"] == "approve,reject"
    assert status["acceptedEvents"] == [
        {
            "event": "approve",
            "state": "waiting",
            "description": "The work is good; ship it.",
            "schema": {
                "type": "object",
                "properties": {"reason": {"type": "string", "minLength": 3}},
                "required": ["reason"],
            },
        },
        {"event": "reject", "state": "waiting"},
    ]
    core.signal("approve", {"reason": "fine work"}, 2.0)
    ended = shown(core)
    assert (ended.acceptedEvents, ended.waitingFor) == ([], "-")


def test_ignored_signals_survive_a_restore_and_old_statuses_read_as_handled() -> None:
    core = gate()
    core.signal("approve", {"reason": "early!"}, 1.0, signal_id="early")
    status = shown(core).model_dump(mode="json", by_alias=True)
    again = RunCore(
        loaded("gate"),
        workspace=None,
        new_id=lambda: "r",
        snapshot=statuses.resume_point(status),
    )
    assert results(again) == results(core)
    old = RunStatus.model_validate({"processedSignals": ["approve-1"]})
    assert [(s.id, s.result.value) for s in old.processedSignals] == [("approve-1", "handled")]
