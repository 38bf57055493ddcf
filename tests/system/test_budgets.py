"""Limits (ADR 0117) through the Orchestrator core, its actor, the real Harness and the
scripted model, priced at 10 USD per million tokens (``PRICING``).

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
