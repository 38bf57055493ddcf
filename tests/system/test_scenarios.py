"""Whole Runs through the Orchestrator core, its API, the real Harness and the scripted model.

Each scenario asserts exact outcomes and counts (docs/turn-semantics.md):

- ``examples/task-with-review.yaml`` runs to Succeeded: coder → reviewer rejects →
  coder fixes on the same conversation → reviewer approves → the ``humanReview`` gate
  takes ``approve``; four Turns, each ``ended`` by its own pick, no model request after
  any Turn-ending pick;
- ``handoff``: the pick that ends a Turn settles it ``ended`` whichever end
  lands first (the sweep, or the Harness's own end), and the next ``continue`` Turn on
  the same conversation is not swept: one ``ended`` settlement while it runs;
- ``interrupted``: a gate's outside answer ends a Turn whose model request is
  held: ``aborted`` through the sweep, no message, the held request cut;
- a Turn timeout (``after``) ends a Turn mid-work: ``aborted``, no cause;
- a pick routed to a ``failed`` final: ``ended``, the Run Failed;
- CANCEL with two live Turns (one Agent's state inside the other's): both ``aborted``,
  the Run Cancelled;
- an ``exec`` pick: answered at Rest with the command's output, and a second pick while
  the command runs is refused ``409 outstanding``;
- a Workspace of two repo slots and an agent invoke without ``cwd``: the Turn is refused
  before admission, naming both slots and the line to add.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.api.status import RunPhase
from kubeturn_harness.wire import Outcome
from tests.system.conftest import StartSystem
from tests.system.scripts import CODER, FIRST_REVIEW, SECOND_REVIEW, TASK_WITH_REVIEW, call, script
from tests.system.support import (
    EXAMPLES,
    MACHINES,
    model_requests_per_submission,
    steps_of,
)


def outcomes(settlements: list[dict[str, Any]]) -> list[str]:
    return [s["outcome"] for s in settlements]


# ----------------------------------------------------------------------------- task-with-review


async def test_task_with_review_runs_to_succeeded(system: StartSystem) -> None:
    world = await system(TASK_WITH_REVIEW)
    await world.start_run(EXAMPLES / "task-with-review.yaml")
    await world.wait_state("humanReview")
    await world.wait_records(4)
    assert world.core.live_turns() == []
    assert len(await world.requests()) == 7

    await world.signal("approve")
    await world.wait_finished()

    assert world.core.phase is RunPhase.SUCCEEDED
    assert world.output == {"rounds": 1, "summary": "added tests"}
    assert [(r.agent, r.state, r.outcome, r.cause, r.message) for r in world.history] == [
        ("coder", "implementing", Outcome.ENDED, "pick", None),
        ("reviewer", "reviewing", Outcome.ENDED, "pick", None),
        ("coder", "fixing", Outcome.ENDED, "pick", None),
        ("reviewer", "reviewing", Outcome.ENDED, "pick", None),
    ]
    for record in world.history:
        assert [s.outcome for s in record.submissions] == [Outcome.ENDED], record
    # Each sweep said the Turn's own pick ended it, naming the running Submission.
    assert [(s.cause, s.submission) for s in world.port.sweeps] == [
        ("pick", r.submissions[0].id) for r in world.history
    ]

    # The coder's two Turns: one structural Instance ID, one Harness conversation.
    coder_iid = "default.task-with-review/root/coder"
    implementing, first_review, fixing, second_review = world.history
    assert implementing.instanceId == fixing.instanceId == coder_iid
    assert first_review.instanceId != second_review.instanceId
    assert all(
        r.instanceId.startswith("default.task-with-review/root/reviewer/t-")
        for r in (first_review, second_review)
    )
    assert sorted(world.conversations()) == sorted(
        [
            ("coder", coder_iid),
            ("reviewer", first_review.instanceId),
            ("reviewer", second_review.instanceId),
        ]
    )
    coder = await world.conversation("coder", coder_iid)
    assert [s["submissionId"] for s in coder["settlements"]] == [
        implementing.submissions[0].id,
        fixing.submissions[0].id,
    ]
    assert outcomes(coder["settlements"]) == ["ended", "ended"]
    for review in (first_review, second_review):
        held = await world.conversation("reviewer", review.instanceId)
        assert outcomes(held["settlements"]) == ["ended"]

    # Model requests, exactly what the script needs: none after a Turn-ending pick.
    # A request after a pick would have asked for the next step, so the steps asked
    # for are each asked once, in order.
    assert model_requests_per_submission(await world.events("coder", coder_iid)) == [2, 2]
    coder_requests = await world.requests(CODER)
    assert steps_of(coder_requests) == [0, 1, 2, 3]
    # The fixing Turn continued the conversation with the reviewer's notes as its prompt.
    fixing_prompt = [m for m in coder_requests[2]["body"]["messages"] if m["role"] == "user"][-1]
    assert "The reviewer asked for changes:\n\nadd tests" in str(fixing_prompt["content"])
    assert steps_of(await world.requests(FIRST_REVIEW)) == [0, 1]
    assert steps_of(await world.requests(SECOND_REVIEW)) == [0]
    assert len(await world.requests()) == 7

    assert world.recorded == world.history
    worktree = world.worktree("target")
    assert sorted(p.name for p in worktree.iterdir()) == ["cli.py", "test_cli.py"]


# ----------------------------------------------------------------------------- handoff

BUILD = "Build the feature."
HANDOFF = script(
    {
        BUILD: [
            {"toolCalls": [call("built")]},
            {"text": "Shipping it.", "hold": True, "toolCalls": [call("shipped")]},
        ]
    }
)
HANDOFF_IID = "default.handoff/root/builder"


@pytest.mark.parametrize(
    ("first", "pick_answer_delay_s", "sweep_delay_s"),
    [("sweep", 0.5, 0.0), ("harness", 0.0, 0.5)],
    ids=["sweep-lands-first", "harness-ends-first"],
)
async def test_handoff_ends_the_picking_turn_and_never_sweeps_the_next(
    system: StartSystem, first: str, pick_answer_delay_s: float, sweep_delay_s: float
) -> None:
    world = await system(HANDOFF, pick_answer_delay_s=pick_answer_delay_s)
    await world.start_run(MACHINES / "handoff.yaml", sweep_delay_s=sweep_delay_s)
    await world.wait_held(BUILD)

    # `shipping` is active and its Turn runs on the same conversation.
    assert world.state == "shipping"
    assert [(r.agent, r.state, r.outcome, r.cause) for r in world.history] == [
        ("builder", "building", Outcome.ENDED, "pick")
    ]
    held = await world.conversation("builder", HANDOFF_IID)
    assert outcomes(held["settlements"]) == ["ended"]
    assert [s["state"] for s in held["submissions"]] == ["settled", "running"]
    building, shipping = (s["submissionId"] for s in held["submissions"])
    events = await world.events("builder", HANDOFF_IID)
    kinds = [(e["type"], e["data"].get("submissionId")) for e in events]
    # Which end landed first: the Harness's own end records that the run ended.
    assert (("run-ended", building) in kinds) is (first == "harness")
    # The sweep was applied before the next admission on the conversation.
    assert kinds.index(("submission-settled", building)) < kinds.index(
        ("submission-admitted", shipping)
    )
    assert [(s.cause, s.submission) for s in world.port.sweeps] == [("pick", building)]

    assert await world.model.release(BUILD) == 1
    await world.wait_finished()
    await world.wait_records(2)
    assert world.core.phase is RunPhase.SUCCEEDED
    assert [(r.state, r.outcome, r.cause) for r in world.history] == [
        ("building", Outcome.ENDED, "pick"),
        ("shipping", Outcome.ENDED, "pick"),
    ]
    done = await world.conversation("builder", HANDOFF_IID)
    assert outcomes(done["settlements"]) == ["ended", "ended"]
    assert model_requests_per_submission(await world.events("builder", HANDOFF_IID)) == [1, 1]
    assert steps_of(await world.requests(BUILD)) == [0, 1]
    assert world.recorded == world.history


# ----------------------------------------------------------------------------- interrupted

REVIEW = "Review the change."
INTERRUPTED = script(
    {
        REVIEW: [
            {
                "text": "Reading the diff.",
                "hold": True,
                "toolCalls": [call("review_verdict", verdict="approve")],
            }
        ]
    }
)


async def test_interrupted_a_gates_answer_aborts_the_turn_and_cuts_the_model(
    system: StartSystem,
) -> None:
    world = await system(INTERRUPTED)
    await world.start_run(MACHINES / "interrupted.yaml")
    await world.wait_held(REVIEW)
    (turn,) = world.core.live_turns()

    await world.signal("approve")
    await world.wait_finished()
    await world.wait_records(1)

    assert world.core.phase is RunPhase.SUCCEEDED
    (record,) = world.history
    assert (record.agent, record.state, record.outcome, record.cause, record.message) == (
        "reviewer",
        "awaitingApproval.reviewing",
        Outcome.ABORTED,
        None,
        None,
    )
    assert world.recorded == world.history
    assert [(s.cause, s.submission) for s in world.port.sweeps] == [
        (None, record.submissions[0].id)
    ]
    held = await world.conversation("reviewer", turn.instanceId)
    (settlement,) = held["settlements"]
    assert (settlement["outcome"], settlement["message"], settlement["error"]) == (
        "aborted",
        None,
        None,
    )
    await world.wait_for(
        lambda: _all_closed(world.requests(REVIEW)), "the held model request to be closed"
    )
    (request,) = await world.requests(REVIEW)
    assert (request["disconnected"], request["released"]) == (True, False)


async def _all_closed(records: Any) -> bool:
    return all(r["closedAt"] is not None for r in await records)


# ----------------------------------------------------------------------------- turn timeout

IMPLEMENT = "Implement the change."


async def test_a_turn_timeout_aborts_the_turn_with_no_cause(system: StartSystem) -> None:
    world = await system(script({IMPLEMENT: [{"hold": True, "toolCalls": [call("submit")]}]}))
    await world.start_run(MACHINES / "turn-timeout.yaml")
    await world.wait_held(IMPLEMENT)
    await world.wait_finished()
    await world.wait_records(1)

    assert world.core.phase is RunPhase.FAILED
    assert world.core.message == "reached the failed final 'tooSlow'"
    (record,) = world.history
    assert (record.state, record.outcome, record.cause, record.message) == (
        "implementing",
        Outcome.ABORTED,
        None,
        None,
    )
    assert world.recorded == world.history
    assert record.settledAt - record.startedAt >= 1.0
    held = await world.conversation("coder", record.instanceId)
    assert outcomes(held["settlements"]) == ["aborted"]
    await world.wait_for(
        lambda: _all_closed(world.requests(IMPLEMENT)), "the held model request to be closed"
    )
    (request,) = await world.requests(IMPLEMENT)
    assert (request["disconnected"], request["released"]) == (True, False)


# ----------------------------------------------------------------------------- pick → failed


async def test_a_pick_routed_to_a_failed_final_ends_its_turn_and_fails_the_run(
    system: StartSystem,
) -> None:
    world = await system(
        script({IMPLEMENT: [{"toolCalls": [call("give_up", reason="the API is gone")]}]})
    )
    await world.start_run(MACHINES / "pick-fails.yaml")
    await world.wait_finished()
    await world.wait_records(1)

    assert world.core.phase is RunPhase.FAILED
    assert world.core.message == "reached the failed final 'failed'"
    assert world.output == {"reason": "the API is gone"}
    (record,) = world.history
    assert (record.state, record.outcome, record.cause) == ("implementing", Outcome.ENDED, "pick")
    held = await world.conversation("coder", record.instanceId)
    assert outcomes(held["settlements"]) == ["ended"]
    assert steps_of(await world.requests(IMPLEMENT)) == [0]
    assert world.recorded == world.history


# ----------------------------------------------------------------------------- CANCEL

PAIR_CODER = "Write the change while the reviewer watches."
PAIR_REVIEWER = "Watch the coder write the change."


async def test_cancel_aborts_every_live_turn_and_cancels_the_run(system: StartSystem) -> None:
    world = await system(
        script(
            {
                PAIR_CODER: [{"hold": True, "toolCalls": [call("submit")]}],
                PAIR_REVIEWER: [{"hold": True, "toolCalls": [call("looks_good")]}],
            }
        )
    )
    await world.start_run(MACHINES / "pair.yaml")
    await world.wait_held(PAIR_CODER)
    await world.wait_held(PAIR_REVIEWER)
    assert sorted(t.agent for t in world.core.live_turns()) == ["coder", "reviewer"]

    await world.actor.cancel()
    await world.wait_finished()
    await world.wait_records(2)

    assert world.core.phase is RunPhase.CANCELLED
    assert world.core.live_turns() == []
    assert sorted((r.agent, r.state, r.outcome, r.cause) for r in world.history) == [
        ("coder", "pairing", Outcome.ABORTED, None),
        ("reviewer", "pairing.watching", Outcome.ABORTED, None),
    ]
    assert world.recorded == world.history
    for record in world.history:
        held = await world.conversation(record.agent, record.instanceId)
        assert outcomes(held["settlements"]) == ["aborted"]
    for match in (PAIR_CODER, PAIR_REVIEWER):
        await world.wait_for(
            lambda m=match: _all_closed(world.requests(m)), f"{match!r} to be closed"
        )
        (request,) = await world.requests(match)
        assert (request["disconnected"], request["released"]) == (True, False)


# ----------------------------------------------------------------------------- exec pick

TESTS = "Make the tests pass."


async def test_an_exec_pick_is_answered_at_rest_and_refuses_other_picks_meanwhile(
    system: StartSystem,
) -> None:
    world = await system(
        script(
            {
                TESTS: [
                    {"toolCalls": [call("run_tests")]},
                    {"text": "They pass.", "toolCalls": [call("finish")]},
                ]
            }
        )
    )
    await world.start_run(MACHINES / "exec-pick.yaml")
    await world.wait_state("coding.testing")
    (turn,) = world.core.live_turns()
    assert turn.outstanding is not None

    status, refusal = await world.pick(turn.instanceId, "finish")
    assert (status, refusal) == (
        409,
        {"refused": "outstanding", "outstanding": "run_tests", "allowed": []},
    )
    assert world.state == "coding.testing", "the refused pick moved the Machine"

    await world.wait_finished()
    await world.wait_records(1)
    assert world.core.phase is RunPhase.SUCCEEDED
    (record,) = world.history
    assert (record.state, record.outcome, record.cause) == ("coding", Outcome.ENDED, "pick")
    assert world.recorded == world.history
    picks = [
        (e["data"]["event"], e["data"]["result"])
        for e in await world.events("coder", turn.instanceId)
        if e["type"] == "pick-sent"
    ]
    assert picks == [("run_tests", "delivered"), ("finish", "turn-complete")]

    first, second = await world.requests(TESTS)
    assert (first["step"], second["step"]) == (0, 1)
    (answer,) = [m["content"] for m in second["body"]["messages"] if m["role"] == "tool"]
    assert answer.startswith("Your pick `run_tests` was delivered"), answer
    assert '"exitCode": 0, "output": "3 passed"' in answer, answer
    assert answer.endswith("Your turn is not over."), answer
    # The pick was answered when the command had run (it sleeps 1 s), not before.
    assert second["receivedAt"] - first["closedAt"] >= 1.0


# ----------------------------------------------------------------------------- two slots


async def test_no_cwd_with_two_repo_slots_is_refused_before_admission(
    system: StartSystem,
) -> None:
    world = await system(script({"": [{"toolCalls": [call("submit")]}]}))
    await world.start_run(MACHINES / "two-slots.yaml", slots=("app", "docs"))
    await world.wait_finished()

    assert world.core.phase is RunPhase.FAILED
    line = 'add cwd: "{{ workspace.repos.app }}"'
    (record,) = world.history
    assert (record.state, record.outcome, record.cause, record.submissions) == (
        "implementing",
        Outcome.FAILED,
        None,
        [],
    )
    for message in (record.message, world.core.message):
        assert message is not None
        assert "2 repo slots ('app', 'docs')" in message, message
        assert line in message, message
    assert world.recorded == world.history
    assert world.port.admissions == []
    assert world.conversations() == []
    assert await world.requests() == []
