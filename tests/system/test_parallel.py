"""Parallel states and fan-outs through the Orchestrator core, its API, the real Harness and
the scripted model.

Each scenario asserts exact outcomes and counts (docs/turn-semantics.md):

- two reviewers in parallel (``two-reviewers``), both asked at once: the first one's
  ``reject`` leaves the parallel state, so its Turn ends ``ended`` (cause pick) and the
  other's ``aborted`` (its held model request cut), one record each, and neither Agent
  asks the model again;
- both approve: the parallel state's done event carries both regions' outputs;
- a fan-out over five items, two at a time (``fan-out``): never more than two child Turns
  live (in every snapshot saved), a child that ends makes room for the next pending one
  in item order; CANCEL sweeps every live child Turn (each recorded ``aborted`` once),
  the pending children never start, and no model request follows;
- every child succeeds: the fan-out's done event lists their outputs in item order,
  whatever order they ended in;
- an Orchestrator restart mid fan-out (two children live, three pending): the live Turns
  are followed again, not admitted twice, the pending children start in order, and each
  Turn is recorded once; also one as a child ends (its sweep sent, not answered) and the
  next child is admitted in its place.
"""

from __future__ import annotations

from typing import Any

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.turns import TurnPhase
from kubeturn_harness.wire import Outcome
from tests.system.conftest import StartSystem
from tests.system.scripts import call, script
from tests.system.support import MACHINES, System, model_requests_per_submission, steps_of

SECURITY = "Review the change for security."
STYLE = "Review the change for style."
PACKAGES = ["pkg-a", "pkg-b", "pkg-c", "pkg-d", "pkg-e"]


def fix(package: str) -> str:
    """The first words of a fan-out child's prompt (``fan-out.yaml``)."""
    return f"Fix the package {package}."


def reviewers(security: str, style: str, *, hold: bool) -> str:
    return script(
        {
            SECURITY: [{"hold": hold, "toolCalls": [call(security)]}],
            STYLE: [{"hold": hold, "toolCalls": [call(style)]}],
        }
    )


def fixers(*, hold: bool) -> str:
    return script({fix(p): [{"hold": hold, "toolCalls": [call("fixed")]}] for p in PACKAGES})


async def closed(world: System, match: str) -> bool:
    return all(r["closedAt"] is not None for r in await world.requests(match))


def live_states(world: System) -> list[str]:
    return sorted(t.state for t in world.core.live_turns())


def most_live_in_any_snapshot(world: System) -> int:
    """The most Turns whose state was active in any snapshot the Run saved."""
    live = (TurnPhase.PENDING.value, TurnPhase.LIVE.value)
    return max(
        len([t for t in saved["turns"] if t["phase"] in live]) for saved in world.store.snapshots
    )


# ----------------------------------------------------------------------------- two reviewers


async def test_the_first_rejection_ends_both_reviewers_turns(system: StartSystem) -> None:
    world = await system(reviewers("reject", "approve", hold=True))
    await world.start_run(MACHINES / "two-reviewers.yaml", slots=("target",))
    await world.wait_held(SECURITY)
    await world.wait_held(STYLE)
    assert world.state == "review.security.reading, review.style.reading"
    assert len(world.core.live_turns()) == 2

    assert await world.model.release(SECURITY) == 1
    await world.wait_finished()
    await world.wait_records(2)

    assert world.core.phase is RunPhase.FAILED
    assert world.core.state == "rejected"
    by_agent = {r.agent: r for r in world.history}
    # Swept at once, the two are recorded in the order their sweeps came back.
    assert sorted((r.agent, r.state, r.outcome, r.cause, r.message) for r in world.history) == [
        ("security", "review.security.reading", Outcome.ENDED, "pick", None),
        ("style", "review.style.reading", Outcome.ABORTED, None, None),
    ]
    assert world.recorded == world.history
    assert sorted((s.agent, s.cause) for s in world.port.sweeps) == [
        ("security", "pick"),
        ("style", None),
    ]
    for agent, outcome in (("security", "ended"), ("style", "aborted")):
        record = by_agent[agent]
        held = await world.conversation(agent, record.instanceId)
        assert [s["outcome"] for s in held["settlements"]] == [outcome]
        events = await world.events(agent, record.instanceId)
        assert model_requests_per_submission(events) == [1]
    # No model request after the pick: the style reviewer's held one was cut, and
    # neither asked again.
    await world.wait_for(lambda: closed(world, STYLE), "the style reviewer's request cut")
    (style,) = await world.requests(STYLE)
    assert (style["disconnected"], style["released"]) == (True, False)
    assert steps_of(await world.requests(SECURITY)) == [0]
    assert len(await world.requests()) == 2


async def test_both_approvals_carry_both_outputs(system: StartSystem) -> None:
    world = await system(reviewers("approve", "approve", hold=False))
    await world.start_run(MACHINES / "two-reviewers.yaml")
    await world.wait_finished()
    await world.wait_records(2)

    assert world.core.phase is RunPhase.SUCCEEDED
    assert world.output == {"security": "secure", "style": "tidy"}
    assert sorted((r.agent, r.outcome, r.cause) for r in world.history) == [
        ("security", Outcome.ENDED, "pick"),
        ("style", Outcome.ENDED, "pick"),
    ]
    assert world.recorded == world.history
    assert len(await world.requests()) == 2


# ----------------------------------------------------------------------------- fan-out


async def test_a_cancel_mid_fan_out_sweeps_every_live_child_turn(system: StartSystem) -> None:
    world = await system(fixers(hold=True))
    await world.start_run(MACHINES / "fan-out.yaml")
    await world.wait_held(fix("pkg-a"))
    await world.wait_held(fix("pkg-b"))
    assert live_states(world) == ["fix[pkg-a].work", "fix[pkg-b].work"]

    # pkg-a ends: pkg-c, the first pending child, takes its place.
    assert await world.model.release(fix("pkg-a")) == 1
    await world.wait_held(fix("pkg-c"))
    await world.wait_records(1)
    assert live_states(world) == ["fix[pkg-b].work", "fix[pkg-c].work"]
    assert world.core.config is not None
    assert [(c.key, c.status.value) for c in world.core.config.children] == [
        ("pkg-a", "succeeded"),
        ("pkg-b", "running"),
        ("pkg-c", "running"),
        ("pkg-d", "pending"),
        ("pkg-e", "pending"),
    ]

    await world.actor.cancel()
    await world.wait_finished()
    await world.wait_records(3)

    assert world.core.phase is RunPhase.CANCELLED
    assert sorted((r.state, r.outcome, r.cause) for r in world.history) == [
        ("fix[pkg-a].work", Outcome.ENDED, "pick"),
        ("fix[pkg-b].work", Outcome.ABORTED, None),
        ("fix[pkg-c].work", Outcome.ABORTED, None),
    ]
    assert world.recorded == world.history
    assert len({r.name for r in world.history}) == 3
    assert most_live_in_any_snapshot(world) == 2
    # The pending children never started: no conversation, no model request of theirs.
    assert sorted(iid for _, iid in world.conversations()) == sorted(
        r.instanceId for r in world.history
    )
    for package in ("pkg-b", "pkg-c"):
        await world.wait_for(lambda p=package: closed(world, fix(p)), f"{package}'s request cut")
        (request,) = await world.requests(fix(package))
        assert (request["disconnected"], request["released"]) == (True, False)
    assert await world.requests(fix("pkg-d")) == await world.requests(fix("pkg-e")) == []
    assert len(await world.requests()) == 3


async def test_a_fan_out_collects_every_output_in_item_order(system: StartSystem) -> None:
    world = await system(fixers(hold=True))
    await world.start_run(MACHINES / "fan-out.yaml")
    # The children end in another order than their items': b, a, then c, e, d.
    for ending, next_held in (("pkg-b", "pkg-c"), ("pkg-a", "pkg-d"), ("pkg-c", "pkg-e")):
        await world.wait_held(fix(ending))
        assert await world.model.release(fix(ending)) == 1
        await world.wait_held(fix(next_held))
    assert await world.model.release(fix("pkg-e")) == 1
    assert await world.model.release(fix("pkg-d")) == 1
    await world.wait_finished()
    await world.wait_records(5)

    assert world.core.phase is RunPhase.SUCCEEDED
    assert world.output == [f"{p} fixed" for p in PACKAGES]
    assert [r.state for r in world.history] == [
        f"fix[{p}].work" for p in ("pkg-b", "pkg-a", "pkg-c", "pkg-e", "pkg-d")
    ]
    assert {(r.outcome, r.cause) for r in world.history} == {(Outcome.ENDED, "pick")}
    assert most_live_in_any_snapshot(world) == 2
    assert len(await world.requests()) == 5


async def test_a_restart_mid_fan_out_restores_every_child(system: StartSystem) -> None:
    world = await system(fixers(hold=True))
    await world.start_run(MACHINES / "fan-out.yaml")
    await world.wait_held(fix("pkg-a"))
    await world.wait_held(fix("pkg-b"))
    await world.wait_for(
        lambda: [t.phase for t in world.core.live_turns()] == [TurnPhase.LIVE] * 2,
        "both children's Turns admitted",
    )
    await world.restart()
    assert live_states(world) == ["fix[pkg-a].work", "fix[pkg-b].work"]

    assert await world.model.release() == 2
    for package in PACKAGES[2:]:
        await world.wait_held(fix(package))
        assert await world.model.release(fix(package)) == 1
    await world.wait_finished()
    await world.wait_records(5)

    assert world.core.phase is RunPhase.SUCCEEDED
    assert world.output == [f"{p} fixed" for p in PACKAGES]
    records: list[Any] = world.history
    assert sorted(r.state for r in records) == [f"fix[{p}].work" for p in PACKAGES]
    assert {(r.outcome, r.cause) for r in records} == {(Outcome.ENDED, "pick")}
    assert len({r.name for r in records}) == 5
    # One admission per Turn: the restored actor followed the live ones again.
    admitted = [key for port in world.ports for key in port.admissions]
    assert sorted(set(admitted)) == sorted(f"{r.name}.1" for r in records)
    for record in records:
        held = await world.conversation("fixer", record.instanceId)
        assert [s["submissionId"] for s in held["submissions"]] == [record.submissions[0].id]
    # The pending children started in item order after the restart.
    started = [r for r in records if r.state not in ("fix[pkg-a].work", "fix[pkg-b].work")]
    assert [r.state for r in sorted(started, key=lambda r: r.startedAt)] == [
        f"fix[{p}].work" for p in PACKAGES[2:]
    ]
    assert len(await world.requests()) == 5


async def test_a_restart_as_one_child_ends_and_the_next_starts(system: StartSystem) -> None:
    world = await system(fixers(hold=True))
    await world.start_run(MACHINES / "fan-out.yaml", hang_after=frozenset({"sweep"}))
    hung = world.port
    await world.wait_held(fix("pkg-a"))
    await world.wait_held(fix("pkg-b"))
    # pkg-a's pick ends its Turn: its sweep reaches the Harness and is never answered,
    # while pkg-c is admitted in its place.
    assert await world.model.release(fix("pkg-a")) == 1
    await world.wait_for(hung.hung.is_set, "pkg-a's sweep to reach the Harness")
    await world.wait_held(fix("pkg-c"))
    assert world.history == []

    await world.restart()
    await world.wait_records(1)
    assert await world.model.release() == 2
    for package in PACKAGES[3:]:
        await world.wait_held(fix(package))
        assert await world.model.release(fix(package)) == 1
    await world.wait_finished()
    await world.wait_records(5)

    assert world.core.phase is RunPhase.SUCCEEDED
    assert world.output == [f"{p} fixed" for p in PACKAGES]
    assert sorted((r.state, r.outcome, r.cause) for r in world.history) == [
        (f"fix[{p}].work", Outcome.ENDED, "pick") for p in PACKAGES
    ]
    assert world.recorded == world.history
    assert len({r.name for r in world.history}) == 5
    for record in world.history:
        held = await world.conversation("fixer", record.instanceId)
        assert [s["submissionId"] for s in held["submissions"]] == [record.submissions[0].id]
        assert [s["outcome"] for s in held["settlements"]] == ["ended"]
    assert len(await world.requests()) == 5
