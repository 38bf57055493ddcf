"""Ids of one kind are never taken for another, and mypy proves it.

mypy checks this module (``[tool.mypy] files`` in pyproject.toml), strictly: each
``type: ignore[arg-type]`` below must be needed, since an unused one fails the check. So
the lines that pass one kind of id where another is meant must stay type errors. pytest
runs it too, for the ids' values.

Cases:
- the id makers give typed ids, and the values ``ids`` documents;
- a Submission id, a Delivery id or an Instance ID is refused where a Turn id is meant,
  and a Turn id where a Submission id or an Instance ID is meant, in an effect and in
  the core's inputs.
"""

from __future__ import annotations

from typing import assert_type

from kubeturn.orchestrator import ids
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Sweep
from kubeturn_harness.wire import DeliveryId, Outcome, SubmissionId

TURN = ids.turn(1)
IID = ids.structural("dev", "r1", "coder", 0)
SUBMISSION = SubmissionId("sub-1")
DELIVERY = DeliveryId("d1-x")


def test_ids_are_made_typed() -> None:
    assert assert_type(ids.turn(3), ids.TurnId) == "t3"
    assert assert_type(ids.structural("dev", "r1", "coder", 2), ids.InstanceId) == (
        "dev.r1/root/coder/2"
    )
    assert assert_type(ids.fresh("dev", "r1", "coder", "x"), ids.InstanceId) == (
        "dev.r1/root/coder/t-x"
    )


def test_an_effect_takes_each_id_in_its_place_only() -> None:
    sweep = Sweep(TURN, "coder", IID, None, SUBMISSION)
    assert (sweep.turn, sweep.instance_id, sweep.submission) == ("t1", IID, "sub-1")
    Sweep(SUBMISSION, "coder", IID, None, None)  # type: ignore[arg-type]
    Sweep(TURN, "coder", IID, None, TURN)  # type: ignore[arg-type]
    Sweep(TURN, "coder", DELIVERY, None, None)  # type: ignore[arg-type]


def inputs(core: RunCore) -> None:
    """The core's inputs, typed: never called, only checked."""
    core.settled(TURN, SUBMISSION, Outcome.COMPLETED, 0.0)
    core.settled(SUBMISSION, TURN, Outcome.COMPLETED, 0.0)  # type: ignore[arg-type]
    core.admitted(TURN, SUBMISSION, 0.0)
    core.admitted(TURN, DELIVERY, 0.0)  # type: ignore[arg-type]
    core.delivery(DELIVERY)
    core.delivery(SUBMISSION)  # type: ignore[arg-type]
    core.surface(IID)
    core.surface(TURN)  # type: ignore[arg-type]
    core.deleted(TURN, 0.0)
    core.deleted(IID, 0.0)  # type: ignore[arg-type]
