"""Whole Runs through the Orchestrator core, its API, the real Harness and the scripted model.

Each scenario asserts exact outcomes and counts (seed 000's style):

- ``examples/task-with-review.yaml`` runs to Succeeded: coder → reviewer rejects →
  coder fixes on the same conversation → reviewer approves → the ``humanReview`` gate
  takes ``approve``; four Turns, each ``ended`` by its own pick, no model request after
  any Turn-ending pick;
- ``handoff`` (seed 000): the pick that ends a Turn settles it ``ended`` whichever end
  lands first (the sweep, or the Harness's own end), and the next ``continue`` Turn on
  the same conversation is not swept: one ``ended`` settlement while it runs;
- ``interrupted`` (seed 000): a gate's outside answer ends a Turn whose model request is
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

import json
from typing import Any

import pytest

from kubeturn.orchestrator.core import RunPhase
from kubeturn_harness.wire import Outcome
from tests.system.conftest import StartSystem
from tests.system.support import (
    EXAMPLES,
    MACHINES,
    model_requests_per_submission,
    steps_of,
)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def script(conversations: dict[str, list[dict[str, Any]]]) -> str:
    """A scripted model's script: first-user-message match → steps."""
    return json.dumps(
        {"conversations": [{"match": m, "steps": s} for m, s in conversations.items()]}
    )


def outcomes(settlements: list[dict[str, Any]]) -> list[str]:
    return [s["outcome"] for s in settlements]


# ----------------------------------------------------------------------------- task-with-review

CODER = "Add a --verbose flag"
FIRST_REVIEW = "The author says: first attempt"
SECOND_REVIEW = "The author says: added tests"
TASK_WITH_REVIEW = script(
    {
        CODER: [
            {"text": "Adding the flag.", "toolCalls": [call("write", path="cli.py", content="")]},
            {"toolCalls": [call("submit", summary="first attempt")]},
            {"text": "Adding tests.", "toolCalls": [call("write", path="test_cli.py", content="")]},
            {"toolCalls": [call("submit", summary="added tests")]},
        ],
        FIRST_REVIEW: [
            {"toolCalls": [call("read", path="cli.py")]},
            {"toolCalls": [call("review_verdict", verdict="reject", notes="add tests")]},
        ],
        SECOND_REVIEW: [{"toolCalls": [call("review_verdict", verdict="approve")]}],
    }
)


async def test_task_with_review_runs_to_succeeded(system: StartSystem) -> None:
    world = await system(TASK_WITH_REVIEW)
    await world.start_run(EXAMPLES / "task-with-review.yaml")
    await world.wait_state("humanReview")
    await world.wait_records(4)
    assert world.core is not None
    assert world.core.live_turns() == []
    assert len(await world.requests()) == 7

    await world.signal("approve")
    await world.wait_finished()

    core = world.core
    assert core.phase is RunPhase.SUCCEEDED
    assert core.config is not None
    assert core.config.output == {"rounds": 1, "summary": "added tests"}
    assert [(r.agent, r.state, r.outcome, r.cause, r.message) for r in world.history] == [
        ("coder", "implementing", Outcome.ENDED, "pick", None),
        ("reviewer", "reviewing", Outcome.ENDED, "pick", None),
        ("coder", "fixing", Outcome.ENDED, "pick", None),
        ("reviewer", "reviewing", Outcome.ENDED, "pick", None),
    ]
    for record in world.history:
        assert [s.outcome for s in record.submissions] == [Outcome.ENDED], record

    # The coder's two Turns: one structural Instance ID, one Harness conversation.
    coder_iid = "default.task-with-review/root/coder"
    implementing, first_review, fixing, second_review = world.history
    assert implementing.instanceId == fixing.instanceId == coder_iid
    assert first_review.instanceId != second_review.instanceId
    assert all(r.instanceId.startswith("default.task-with-review/root/reviewer/t-") for r in
               (first_review, second_review))
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
    assert steps_of(await world.requests(CODER)) == [0, 1, 2, 3]
    assert steps_of(await world.requests(FIRST_REVIEW)) == [0, 1]
    assert steps_of(await world.requests(SECOND_REVIEW)) == [0]
    assert len(await world.requests()) == 7

    worktree = world.worktree("target")
    assert sorted(p.name for p in worktree.iterdir()) == ["cli.py", "test_cli.py"]
