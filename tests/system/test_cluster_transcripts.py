"""A Run's transcripts as the operator serves them (``kubeturn.k8s.transcripts``): read
from the Run's status and, through a real ``HarnessClient``, from the real Harness that
runs its Turns (the system tier: the Orchestrator core and actor, the Harness and the
scripted model over HTTP on 127.0.0.1; the operator's hub is stood in for by what it
answers, the Workspace's client).

Cases, on the task-with-review example:
- a follower started with the Run is still following while the Run waits at
  humanReview, and ends by itself once ``approve`` ended the Run, having yielded every
  entry of the four Turns once, in Turn order, with the exact kinds;
- read again once the Run ended, without following, the same entries;
- a Harness that cannot be reached shows each Turn's header and settlement alone, and
  a follower of a finished Run then ends rather than wait for it;
- a target is a Turn, then an Agent slot; a Run that is gone is ``NotFound``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from kubeturn.errors import NotFound
from kubeturn.k8s.transcripts import ClusterTranscripts
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.transcripts.model import Entry
from kubeturn.transcripts.source import Query
from tests.system.conftest import StartSystem
from tests.system.scripts import TASK_WITH_REVIEW
from tests.system.support import EXAMPLES, WAIT_S, System

PICKED = ["tool-call", "pick", "receipt", "settlement"]
KINDS = [
    ("t1", ["turn", "prompt", "text", "tool-call", "tool-result", *PICKED]),
    ("t2", ["turn", "prompt", "tool-call", "tool-result", *PICKED]),
    ("t3", ["turn", "prompt", "text", "tool-call", "tool-result", *PICKED]),
    ("t4", ["turn", "prompt", *PICKED]),
]
NAMESPACE = "default"
WORKSPACE = "ws"


class _Workspace:
    """What the hub answers for the Run's Workspace: its Harness's client, or none."""

    def __init__(self, client: HarnessClient | None) -> None:
        self.client = client
        self.asked: list[tuple[str, str]] = []

    def harness_of(self, namespace: str, workspace: str) -> HarnessClient | None:
        self.asked.append((namespace, workspace))
        return self.client


def _source(world: System, workspace: _Workspace, *, gone: bool = False) -> ClusterTranscripts:
    async def read_run() -> Mapping[str, Any] | None:
        if gone:
            return None
        core = world.core
        status = statuses.run_status(core.view(), core.snapshot())
        return {
            "metadata": {"namespace": NAMESPACE, "name": "task-with-review"},
            "spec": {"workspace": {"name": WORKSPACE}, "agents": {"coder": {}, "reviewer": {}}},
            "status": status.model_dump(mode="json", by_alias=True, exclude_unset=True),
        }

    return ClusterTranscripts(workspace, NAMESPACE, "task-with-review", read_run)


def _kinds(entries: list[Entry]) -> list[tuple[str, list[str]]]:
    turns: list[tuple[str, list[str]]] = []
    for entry in entries:
        if entry.kind.value == "turn":
            turns.append((entry.turn, []))
        turns[-1][1].append(entry.kind.value)
    return turns


async def _all(source: ClusterTranscripts, query: Query) -> list[Entry]:
    return [entry async for entry in source.entries(query)]


async def test_a_follower_sees_every_turn_and_ends_with_the_run(system: StartSystem) -> None:
    world = await system(TASK_WITH_REVIEW)
    await world.start_run(EXAMPLES / "task-with-review.yaml")
    client = HarnessClient(world.harness_url, "system-harness-token")
    try:
        workspace = _Workspace(client)
        source = _source(world, workspace)
        following = asyncio.create_task(_all(source, Query(follow=True)))
        await world.wait_state("humanReview")
        await world.wait_records(4)
        assert not following.done()
        await world.signal("approve")
        await world.wait_finished()
        async with asyncio.timeout(WAIT_S):
            followed = await following
        assert _kinds(followed) == KINDS
        assert set(workspace.asked) == {(NAMESPACE, WORKSPACE)}
        assert await _all(source, Query()) == followed

        assert await source.query("t2") == Query(turn="t2")
        assert await source.query("reviewer", follow=True) == Query(agent="reviewer", follow=True)
        reviewed = await _all(source, await source.query("reviewer"))
        assert [turn for turn, _ in _kinds(reviewed)] == ["t2", "t4"]

        unreachable = _source(world, _Workspace(None))
        alone = await _all(unreachable, Query(follow=True))
        assert _kinds(alone) == [(turn, ["turn", "settlement"]) for turn, _ in KINDS]

        with pytest.raises(NotFound):
            await _all(_source(world, workspace, gone=True), Query())
        with pytest.raises(NotFound):
            await _source(world, workspace, gone=True).query(None)
    finally:
        await client.close()
