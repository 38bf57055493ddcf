"""An Orchestrator restart: a new core and actor resume the Run from its last snapshot.

The Harness runs on; only the Orchestrator stops (``actor.close()``) and is rebuilt
from what it saved. Each case finishes the Run and counts, at the Harness, exactly one
admission per Turn, and exactly one history record per Turn:

- stopped mid-Turn (its model request held): the new actor follows the running
  Submission again;
- stopped after an admission reached the Harness but before its answer was recorded:
  the re-sent admission (same idempotency key) admits nothing;
- stopped after a sweep reached the Harness but before its answer was recorded (the
  Submission's own settlement saved, which a settlement that decided nothing waits for,
  ADR 0093, or not yet): the re-sent sweep settles nothing again, and the Turn is
  recorded once, ``ended``.
"""

from __future__ import annotations

import json

import pytest

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.turns import TurnPhase
from kubeturn_harness.wire import Outcome
from tests.system.conftest import StartSystem
from tests.system.support import MACHINES, System, steps_of

MANIFEST = MACHINES / "release-notes.yaml"
DRAFT = "Draft the release notes."
IID = "default.release-notes/root/writer"


def script(*, hold_first: bool) -> str:
    steps = [
        {"hold": hold_first, "toolCalls": [{"name": "drafted"}]},
        {"toolCalls": [{"name": "polished"}]},
    ]
    return json.dumps({"conversations": [{"match": DRAFT, "steps": steps}]})


async def finished_with_one_admission_and_record_per_turn(world: System) -> None:
    await world.wait_finished()
    await world.wait_records(2)
    assert world.core.phase is RunPhase.SUCCEEDED
    assert [(r.state, r.outcome, r.cause) for r in world.history] == [
        ("drafting", Outcome.ENDED, "pick"),
        ("polishing", Outcome.ENDED, "pick"),
    ]
    assert world.recorded == world.history
    conversation = await world.conversation("writer", IID)
    admitted = [s["submissionId"] for s in conversation["submissions"]]
    assert admitted == [r.submissions[0].id for r in world.history]
    assert [len(r.submissions) for r in world.history] == [1, 1]
    assert [s["outcome"] for s in conversation["settlements"]] == ["ended", "ended"]
    assert steps_of(await world.requests(DRAFT)) == [0, 1]


async def test_a_restart_mid_turn_follows_the_running_submission_again(
    system: StartSystem,
) -> None:
    world = await system(script(hold_first=True))
    first = await world.start_run(MANIFEST)
    await world.wait_held(DRAFT)
    (before,) = world.core.live_turns()
    assert before.running is not None

    second = await world.restart()
    assert second is not first
    (after,) = world.core.live_turns()
    assert (after.id, after.phase, after.running) == (before.id, TurnPhase.LIVE, before.running)

    assert await world.model.release(DRAFT) == 1
    await finished_with_one_admission_and_record_per_turn(world)


async def test_an_admission_resent_after_a_restart_admits_nothing(system: StartSystem) -> None:
    world = await system(script(hold_first=True))
    await world.start_run(MANIFEST, hang_after=frozenset({"admit"}))
    hung = world.port
    await world.wait_for(hung.hung.is_set, "the admission to reach the Harness")
    await world.wait_held(DRAFT)
    (pending,) = world.core.live_turns()
    assert (pending.phase, pending.admitting, pending.submissions) == (
        TurnPhase.PENDING,
        True,
        [],
    )
    (sent,) = (await world.conversation("writer", IID))["submissions"]

    await world.restart()
    resumed = world.port
    assert resumed is not hung
    await world.wait_for(
        lambda: any(t.running is not None for t in world.core.live_turns()),
        "the re-sent admission's answer",
    )
    (live,) = world.core.live_turns()
    assert live.running is not None
    assert live.running.id == sent["submissionId"]
    assert resumed.admissions == hung.admissions

    assert await world.model.release(DRAFT) == 1
    await finished_with_one_admission_and_record_per_turn(world)


@pytest.mark.parametrize("saved", [True, False], ids=["after-its-save", "before-its-save"])
async def test_a_sweep_resent_after_a_restart_records_the_turn_once(
    system: StartSystem, saved: bool
) -> None:
    world = await system(script(hold_first=False))
    await world.start_run(
        MANIFEST, hang_after=frozenset({"sweep"}), save_later_s=0.0 if saved else 600.0
    )
    hung = world.port
    await world.wait_for(hung.hung.is_set, "the sweep to reach the Harness")
    assert world.history == []
    (drafting,) = [t for t in world.core.turns.values() if t.state == "drafting"]
    assert drafting.phase is TurnPhase.SWEEPING
    # The Harness settled it; the actor heard so (its follower), but not the sweep's answer.
    await world.wait_for(
        lambda: drafting.submissions[0].outcome is Outcome.ENDED,
        "the drafting Submission's settlement",
    )
    if saved:
        await world.wait_for(
            lambda: world.store.last == json.loads(json.dumps(world.core.snapshot())),
            "the settlement saved",
        )
    else:
        (kept,) = world.store.last["turns"][0]["submissions"]
        assert kept.get("outcome") is None, "a settlement that decided nothing waits for a save"

    await world.restart()
    resumed = world.port
    assert resumed is not hung
    await finished_with_one_admission_and_record_per_turn(world)
    swept = world.history[0].submissions[0].id
    assert [(s.cause, s.submission) for s in hung.sweeps] == [("pick", swept)]
    assert [(s.cause, s.submission) for s in resumed.sweeps] == [
        ("pick", swept),
        ("pick", world.history[1].submissions[0].id),
    ]
