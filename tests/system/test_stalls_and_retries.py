"""Stalls and declared retries (ADR 0115) through the Orchestrator core, its actor, the
real Harness and the scripted model.

- ``stalled``: the coder's slot says ``stallAfter: 1s``; its model answers once (a
  Working tool call, progress), then holds its next answer. The stall sweeps the Turn,
  naming the running Submission; the held request is cut and no model request follows;
  the actor was told of each progress event of the Submission on the stream;
  the Turn is recorded once, ``aborted``, saying it stalled; ``agent.fault`` (reason
  ``stalled``) routes the Run to its failed final.
- ``rerolled``: a runaway (two identical calls in a row, with the Harness's limit at 2)
  is retried once, 100 ms later, as a new Turn (``t2``) with the identical prompt on a
  fresh conversation; the retry runs away too, and the Machine hears ``agent.fault``
  (reason ``runaway``). Both Turns are recorded ``failed``, each once. With a 5 s backoff
  and the Run's actor restarted from its snapshot during it, the retry still starts.
"""

from __future__ import annotations

from typing import Any

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator.harness_client import PROGRESS
from kubeturn_harness.wire import Outcome
from tests.system.conftest import StartSystem
from tests.system.scripts import call, script
from tests.system.support import MACHINES, model_requests_per_submission, steps_of

IMPLEMENT = "Implement the change."


async def _all_closed(records: Any) -> bool:
    return all(r["closedAt"] is not None for r in await records)


async def test_a_stalled_turn_is_swept_and_routed_with_no_model_request_after(
    system: StartSystem,
) -> None:
    world = await system(
        script(
            {
                IMPLEMENT: [
                    {"toolCalls": [call("write", path="notes.txt", content="started")]},
                    {"hold": True, "toolCalls": [call("submit")]},
                ]
            }
        )
    )
    await world.start_run(MACHINES / "stalled.yaml")
    await world.wait_finished()
    await world.wait_records(1)

    assert world.core.phase is RunPhase.FAILED
    assert world.output == "stalled"
    (record,) = world.history
    assert world.recorded == world.history
    assert (record.state, record.outcome, record.cause) == ("implementing", Outcome.ABORTED, None)
    assert record.message == (
        "stalled: no progress (no model request, output streamed, answer, tool call or pick) "
        "for 1s "
        "(spec.agents.coder.stallAfter)"
    )
    (submission,) = record.submissions
    assert [(s.cause, s.submission) for s in world.port.sweeps] == [(None, submission.id)]
    held = await world.conversation("coder", record.instanceId)
    assert [s["outcome"] for s in held["settlements"]] == ["aborted"]
    await world.wait_for(
        lambda: _all_closed(world.requests(IMPLEMENT)), "the held model request to be closed"
    )
    requests = await world.requests(IMPLEMENT)
    assert steps_of(requests) == [0, 1]
    assert (requests[1]["disconnected"], requests[1]["released"]) == (True, False)
    # Zero model requests after the stall's sweep: two in all, both before it.
    assert len(await world.requests()) == 2
    events = await world.events("coder", record.instanceId)
    assert model_requests_per_submission(events) == [2]
    # The actor was told of each progress on the stream before the settlement: the
    # prompt, two model requests, the answer with its call, the call's result (the cut
    # answer is recorded after the sweep settled the Submission, ADR 0002).
    settled = next(e["offset"] for e in events if e["type"] == "submission-settled")
    progress = [e for e in events if e["type"] in PROGRESS and e["offset"] < settled]
    assert len(progress) == 5
    assert world.port.progress == [submission.id] * len(progress)


async def test_a_runaway_is_retried_once_on_a_fresh_conversation_then_routed_as_a_fault(
    system: StartSystem,
) -> None:
    loop = [{"toolCalls": [call("read", path="notes.txt")]}] * 3
    world = await system(script({IMPLEMENT: loop}), max_identical_calls=2)
    await world.start_run(MACHINES / "rerolled.yaml")
    await world.wait_finished()
    await world.wait_records(2)

    assert world.core.phase is RunPhase.FAILED
    assert world.output == "runaway"
    first, retry = world.history
    assert world.recorded == world.history
    assert [(r.name, r.state, r.outcome) for r in world.history] == [
        ("t1", "implementing", Outcome.FAILED),
        ("t2", "implementing", Outcome.FAILED),
    ]
    for record in world.history:
        assert record.message == "runaway: 2 identical calls of `read` in a row"
        assert [s.outcome for s in record.submissions] == [Outcome.FAILED]
    # A fresh conversation each, the identical prompt in each.
    assert first.instanceId != retry.instanceId
    assert sorted(world.conversations()) == sorted(
        [("coder", first.instanceId), ("coder", retry.instanceId)]
    )
    requests = await world.requests(IMPLEMENT)
    assert steps_of(requests) == [0, 1, 0, 1]
    prompts = [
        next(m["content"] for m in r["body"]["messages"] if m["role"] == "user") for r in requests
    ]
    assert prompts[0] == prompts[2]
    assert IMPLEMENT in str(prompts[0])
    for record in world.history:
        held = await world.conversation("coder", record.instanceId)
        assert [s["outcome"] for s in held["settlements"]] == ["failed"]
        assert model_requests_per_submission(await world.events("coder", record.instanceId)) == [2]
    assert len(await world.requests()) == 4


async def test_a_retry_waiting_for_its_backoff_starts_after_a_restart(
    system: StartSystem,
) -> None:
    loop = [{"toolCalls": [call("read", path="notes.txt")]}] * 3
    world = await system(script({IMPLEMENT: loop}), max_identical_calls=2)
    manifest = (MACHINES / "rerolled.yaml").read_text().replace("backoff: 100ms", "backoff: 5s")
    await world.start_run(manifest)
    await world.wait_records(1)
    assert list(world.core.retrying) == ["implementing#1"]

    await world.restart()
    assert list(world.core.retrying) == ["implementing#1"]
    await world.wait_finished()
    await world.wait_records(2)

    assert world.core.phase is RunPhase.FAILED
    assert [(r.name, r.outcome) for r in world.history] == [
        ("t1", Outcome.FAILED),
        ("t2", Outcome.FAILED),
    ]
    first, retry = world.history
    assert first.instanceId != retry.instanceId
    assert steps_of(await world.requests(IMPLEMENT)) == [0, 1, 0, 1]
