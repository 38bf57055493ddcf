"""Limits (ADR 0117) through the Orchestrator core, its actor, the real Harness and the
scripted model, priced at 10 USD per million tokens (``PRICING``).

- ``turn-budget``: a coder Turn may use 20 tokens. Its model streams a 60-word answer and
  then holds it open; the Harness reports every streamed piece (``model-streamed``). The
  Turn is swept mid-stream, with cause ``budget``, at the report of the 20th piece: the
  one model request is cut, none follows, the Turn is recorded once ``aborted`` saying
  which limit, and the cut answer counts the pieces it streamed.
- ``turn-budget`` across a restart, with a limit of 250 tokens: the Turn's first
  answer uses less, and the actor is restarted from its saved snapshot while the second
  is held. The restored follower reads the Submission's stream from its start, so the
  first answer counts again (once); the second answer reaches the limit when it ends,
  and the Turn is swept, saying it used both answers' tokens.
- ``run-budget``: the Run may cost 0.004 USD. The coder's Turn ends by its pick; the
  reviewer's Turn works, answer after answer, until the Run's cost is reached, and is swept
  with cause ``budget`` while its Submission runs. Every model request started before the
  sweep: at most one after the answer that reached the limit, and that one cut. The next
  Turn is refused before its admission, and the Run fails saying which limit.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kubeturn.api.status import RunPhase
from kubeturn_harness.wire import Outcome, Usage
from tests.system.conftest import StartSystem
from tests.system.scripts import call, script
from tests.system.support import MACHINES, model_requests_per_submission

PRICING = "{any: {input: 10, output: 10}}"
"""USD per million tokens: a token costs 0.00001 USD."""
IMPLEMENT = "Implement the change."
REVIEW = "Review the change."


def answers(events: list[dict[str, Any]]) -> list[Usage]:
    """The priced usage of each model answer on a conversation's stream, in order."""
    return [
        Usage.model_validate(e["data"]["message"]["usage"])
        for e in events
        if e["type"] == "message-appended" and e["data"]["message"].get("usage")
    ]


async def test_a_turn_is_swept_mid_stream_when_its_token_limit_is_reached(
    system: StartSystem,
) -> None:
    long = " ".join(f"word{n}" for n in range(60))
    world = await system(
        script({IMPLEMENT: [{"text": long, "hold": True, "toolCalls": [call("submit")]}]}),
        pricing=PRICING,
        stream_progress_tokens=1,
        stream_progress_s=0.0,
    )
    await world.start_run(MACHINES / "turn-budget.yaml")
    await world.wait_finished()
    await world.wait_records(1)

    reached = (
        "budget: spec.agents.coder.limits.perTurn.tokens reached: this Turn used 20 tokens of 20"
    )
    assert world.core.phase is RunPhase.FAILED
    assert world.output == reached
    (record,) = world.history
    assert world.recorded == world.history
    assert (record.outcome, record.cause, record.message) == (Outcome.ABORTED, "budget", reached)
    (submission,) = record.submissions
    assert [(s.cause, s.submission) for s in world.port.sweeps] == [("budget", submission.id)]
    # Swept while the answer streamed: the one request was cut, never released, and none
    # came after it.
    await world.wait_for(
        lambda: _all_closed(world.requests(IMPLEMENT)), "the held model request to be closed"
    )
    (request,) = await world.requests()
    assert (request["disconnected"], request["released"]) == (True, False)
    events = await world.events("coder", record.instanceId)
    assert model_requests_per_submission(events) == [1]
    streamed = [e["data"]["outputTokens"] for e in events if e["type"] == "model-streamed"]
    assert streamed[:20] == list(range(1, 21))
    # The cut answer is counted at the pieces it streamed (its provider reported no
    # usage before the cut), priced; so is the Turn.
    assert record.tokens is not None
    assert record.tokens.promptTokens == 0
    assert record.tokens.completionTokens == max(streamed)
    assert Decimal(record.tokens.cost or "") == Decimal(max(streamed)) / 100_000


async def test_a_restarted_follower_counts_what_the_turn_spent_before(
    system: StartSystem,
) -> None:
    working = [
        {"toolCalls": [call("write", path="notes.txt", content="started")]},
        {"hold": True, "toolCalls": [call("write", path="notes.txt", content="more")]},
        {"toolCalls": [call("submit")]},
    ]
    world = await system(script({IMPLEMENT: working}))
    manifest = (MACHINES / "turn-budget.yaml").read_text().replace("tokens: 20", "tokens: 250")
    await world.start_run(manifest)
    await world.wait_held(IMPLEMENT)
    await world.restart()
    await world.model.release(IMPLEMENT)
    await world.wait_finished()
    await world.wait_records(1)

    (record,) = world.history
    events = await world.events("coder", record.instanceId)
    first, second, *_ = answers(events)  # a third request may start before the sweep lands
    used = sum(u.promptTokens + u.completionTokens for u in (first, second))
    assert first.promptTokens + first.completionTokens < 250 <= used
    assert (record.outcome, record.cause, record.message) == (
        Outcome.ABORTED,
        "budget",
        f"budget: spec.agents.coder.limits.perTurn.tokens reached: this Turn used {used} "
        "tokens of 250",
    )
    # The restored actor was told of the first answer's spend again, read from the stream
    # (the prompt and the first request come before it), then of both answers' spend.
    assert world.ports[-1].spent[:6] == [None, None, first, first, first, first.plus(second)]
    assert len(await world.requests()) <= 3


async def _all_closed(records: Any) -> bool:
    return all(r["closedAt"] is not None for r in await records)


async def test_a_run_level_cost_limit_stops_a_multi_turn_run(system: StartSystem) -> None:
    reading = [
        {"toolCalls": [call("write", path=f"review-{n}.txt", content="looked")], "delayMs": 200}
        for n in range(20)
    ]
    world = await system(
        script({IMPLEMENT: [{"toolCalls": [call("submit")]}], REVIEW: reading}),
        pricing=PRICING,
    )
    await world.start_run(MACHINES / "run-budget.yaml")
    await world.wait_finished()
    await world.wait_records(3)

    assert world.core.phase is RunPhase.FAILED
    # The refused Turn is recorded at once; the swept one when its sweep comes back.
    coder, refused, reviewer = world.history
    assert world.recorded == world.history
    assert [
        (r.name, r.state, r.outcome, r.cause) for r in sorted(world.history, key=lambda r: r.name)
    ] == [
        ("t1", "implementing", Outcome.ENDED, "pick"),
        ("t2", "reviewing", Outcome.ABORTED, "budget"),
        ("t3", "summarizing", Outcome.FAILED, None),
    ]
    assert reviewer.message is not None
    assert reviewer.message.startswith("budget: spec.limits.cost reached: the Run cost ")
    assert reviewer.message.endswith(" USD of 0.004 USD")
    assert refused.message == f"refused before admission: {reviewer.message}"
    assert world.output == reviewer.message
    assert refused.submissions == []  # never admitted: no conversation, no request

    # The limit was reached by the reviewer's answers as they came: the sweep named the
    # running Submission; every request after the answer that reached it was cut.
    (submission,) = reviewer.submissions
    assert [(s.turn, s.cause, s.submission) for s in world.port.sweeps] == [
        (coder.name, "pick", coder.submissions[0].id),
        (reviewer.name, "budget", submission.id),
    ]
    assert coder.tokens is not None
    assert coder.tokens.cost is not None
    events = await world.events("reviewer", reviewer.instanceId)
    spent = Decimal(coder.tokens.cost)
    reached_at = None
    for index, usage in enumerate(answers(events)):
        assert usage.cost is not None
        spent += Decimal(usage.cost)
        if spent >= Decimal("0.004"):
            reached_at = index
            break
    assert reached_at is not None
    (requests,) = model_requests_per_submission(events)
    assert requests in (reached_at + 1, reached_at + 2)
    held = await world.requests(REVIEW)
    assert len(held) == requests
    if requests == reached_at + 2:
        assert held[-1]["disconnected"] is True
    assert len(await world.requests()) == 1 + requests
    # What the Run shows it spent is what its Turns recorded.
    usage = world.core.view().usage
    assert usage["reviewer"] == reviewer.tokens
    assert usage["coder"] == coder.tokens
