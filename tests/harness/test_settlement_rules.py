"""Settlement rules of the Harness, one named test each (docs/turn-semantics.md).

Cases:
- rule 1: one FIFO queue per conversation; runs never overlap, not even during a sweep;
- rule 2: the sweep's body decides: ``ended`` only for cause pick naming the running
  Submission, ``aborted`` for every other body; queued Submissions ``aborted`` whatever
  the body; sweep-first and Harness-end-first give the same outcome; settling is
  idempotent;
- rule 3: a run that returns with the Turn open settles ``completed``; a provider
  failure after retries and an unreadable Menu settle ``failed``/``submission_failed``;
- rule 4: a surface 404 settles ``aborted`` with no prompt and nothing written; 503s are
  retried; a surface that stays unreachable fails the Submission;
- rule 5: only the first pick of a model answer runs; calls after a Turn-ending pick do
  not run; no model request follows; without a sweep the Submission settles ``aborted``
  saying no sweep came;
- rule 7: a sweep cuts the in-flight model request; the partial reply stays in the record;
- rule 8: four identical calls in a row, or the step budget, settle ``failed``/``runaway``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from tests.harness.support import AGENT, StartWorld, World, agent_url, menu_surface

HELD = """
conversations:
  - match: "{match}"
    steps:
      - text: "Partial words of a reply"
        hold: true
"""

TEXT_ONLY = """
conversations:
  - match: "{match}"
    steps:
      - text: "All done."
"""


def verdict(verdict: str = "approve", **extra: Any) -> dict[str, Any]:
    return {"name": "review_verdict", "arguments": {"verdict": verdict, **extra}}


def script(match: str, *steps: dict[str, Any], repeat: bool = False) -> str:
    return json.dumps({"conversations": [{"match": match, "repeat": repeat, "steps": list(steps)}]})


def scripts(**conversations: list[dict[str, Any]]) -> str:
    """One conversation per keyword: its match, and its steps."""
    return json.dumps(
        {"conversations": [{"match": m, "steps": s} for m, s in conversations.items()]}
    )


async def ending_pick(world: World, *, sweep: bool) -> None:
    """The stub answers every pick ``turnComplete``; with ``sweep`` it sweeps first."""

    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if sweep:
            running = await running_submission(world, iid)
            await world.harness.abort(iid, {"cause": "pick", "submissionId": running})
        return 200, {
            "delivered": True,
            "event": body["type"],
            "turnComplete": True,
            "deliveryId": f"d-{len(world.orchestrator.picks)}",
        }

    world.orchestrator.on_pick = on_pick


async def running_submission(world: World, iid: str) -> str:
    history = await world.harness.history(iid)
    running = [s for s in history["submissions"] if s["state"] == "running"]
    assert len(running) == 1, history["submissions"]
    return str(running[0]["submissionId"])


class TestRule1Queue:
    async def test_runs_in_admission_order_and_never_overlap(self, world: StartWorld) -> None:
        w = await world(
            scripts(
                first=[{"text": "one", "hold": True}],
                second=[{"text": "two"}],
                third=[{"text": "three"}],
            ),
            orchestrated=False,
        )
        a = await w.harness.admit("iid-1", "first")
        b = await w.harness.admit("iid-1", "second")
        c = await w.harness.admit("iid-1", "third")
        await w.model.wait_requests(1, held=True)
        assert len(await w.model.requests()) == 1
        assert await w.harness.state("iid-1", b) == "queued"
        await w.model.release()
        for sid in (a, b, c):
            assert (await w.harness.settlement("iid-1", sid))["outcome"] == "completed"
        requests = await w.model.requests()
        assert [r["conversation"] for r in requests] == ["first", "second", "third"]
        for before, after in itertools.pairwise(requests):
            assert after["receivedAt"] >= before["closedAt"]

    async def test_a_sweep_lets_no_run_overlap_the_cut_one(self, world: StartWorld) -> None:
        w = await world(
            scripts(cut=[{"text": "words", "hold": True}], next=[{"text": "done"}]),
            orchestrated=False,
        )
        a = await w.harness.admit("iid-1", "cut")
        await w.model.wait_requests(1, held=True)
        await w.harness.abort("iid-1")
        b = await w.harness.admit("iid-1", "next")
        assert (await w.harness.settlement("iid-1", b))["outcome"] == "completed"
        first, second = await w.model.requests()
        assert first["disconnected"]
        assert second["receivedAt"] >= first["closedAt"]
        events = [e["type"] for e in await stream(w, "iid-1")]
        settled_a = events.index("submission-settled")
        assert (
            events.index("submission-started", events.index("submission-admitted", 1)) > settled_a
        )
        assert (await w.harness.settlement("iid-1", a))["outcome"] == "aborted"


async def stream(w: World, iid: str) -> list[dict[str, Any]]:

    async with w.harness.session.get(
        agent_url(w.harness.url, AGENT, iid) + "?offset=0", headers=w.harness.headers()
    ) as response:
        return list(await response.json())


class TestRule2SweepBody:
    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            pytest.param("pick-running", "ended", id="cause-pick-names-running"),
            pytest.param(None, "aborted", id="no-body"),
            pytest.param(b"{not json", "aborted", id="unparsable"),
            pytest.param(
                {"cause": "timer", "submissionId": "RUNNING"}, "aborted", id="unknown-cause"
            ),
            pytest.param(
                {"cause": "pick", "submissionId": "sub-other"}, "aborted", id="another-id"
            ),
            pytest.param({"cause": "pick"}, "aborted", id="no-id"),
            pytest.param([1, 2], "aborted", id="not-an-object"),
        ],
    )
    async def test_running_submission_settles_as_the_body_says(
        self, world: StartWorld, body: Any, expected: str
    ) -> None:
        w = await world(HELD.format(match="review"), orchestrated=False)
        sid = await w.harness.admit("iid-1", "review")
        await w.model.wait_requests(1, held=True)
        if body == "pick-running":
            answer = await w.harness.abort("iid-1", {"cause": "pick", "submissionId": sid})
        elif isinstance(body, bytes):
            answer = await w.harness.abort("iid-1", raw=body)
        elif isinstance(body, dict):
            answer = await w.harness.abort(
                "iid-1", {k: v.replace("RUNNING", sid) for k, v in body.items()}
            )
        else:
            answer = await w.harness.abort("iid-1", body)
        assert answer == {"aborted": True}
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == expected
        assert settled.get("error") is None
        assert settled.get("message") is None

    async def test_queued_submissions_settle_aborted_whatever_the_body(
        self, world: StartWorld
    ) -> None:
        w = await world(HELD.format(match="review"), orchestrated=False)
        running = await w.harness.admit("iid-1", "review")
        queued = [await w.harness.admit("iid-1", "review again") for _ in range(2)]
        await w.model.wait_requests(1, held=True)
        await w.harness.abort("iid-1", {"cause": "pick", "submissionId": running})
        assert (await w.harness.settlement("iid-1", running))["outcome"] == "ended"
        for sid in queued:
            settled = await w.harness.settlement("iid-1", sid)
            assert settled["outcome"] == "aborted"
            assert "never ran" in settled["message"]
        assert len(await w.model.requests()) == 1

    @pytest.mark.parametrize("sweep_first", [True, False], ids=["sweep-first", "harness-end-first"])
    async def test_order_of_sweep_and_harness_end_changes_nothing(
        self, world: StartWorld, sweep_first: bool
    ) -> None:
        w = await world(script("review", {"toolCalls": [verdict()]}))
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        await ending_pick(w, sweep=sweep_first)
        sid = await w.harness.admit("iid-1", "review")
        if not sweep_first:
            await w.harness.wait_state("iid-1", sid, "waiting-for-sweep")
            await w.harness.abort("iid-1", {"cause": "pick", "submissionId": sid})
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "ended"
        assert len(w.orchestrator.picks) == 1
        assert len(await w.model.requests()) == 1

    async def test_settling_is_idempotent(self, world: StartWorld) -> None:
        w = await world(HELD.format(match="review"), orchestrated=False)
        sid = await w.harness.admit("iid-1", "review")
        await w.model.wait_requests(1, held=True)
        assert await w.harness.abort("iid-1", {"cause": "pick", "submissionId": sid}) == {
            "aborted": True
        }
        assert await w.harness.abort("iid-1") == {"aborted": False}
        history = await w.harness.history("iid-1")
        assert [s["outcome"] for s in history["settlements"]] == ["ended"]


class TestRule3RunEnds:
    async def test_run_that_returns_with_turn_open_settles_completed(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY.format(match="review"))
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "completed"
        assert settled["usage"]["completionTokens"] > 0

    async def test_provider_failure_after_retries_settles_failed(self, world: StartWorld) -> None:
        w = await world(script("review", {"error": {"status": 500, "message": "boom"}}))
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "failed"
        assert settled["error"]["type"] == "submission_failed"
        assert "HTTP 500" in settled["error"]["message"]
        assert len(await w.model.requests()) == 3  # the default retry.attempts

    async def test_unreadable_menu_settles_failed(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY.format(match="review"))
        w.orchestrator.surfaces["iid-1"] = {"instanceId": "iid-1", "menu": [{"name": "x"}]}
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "failed"
        assert settled["error"]["type"] == "submission_failed"
        assert "Menu" in settled["error"]["message"]
        assert await w.model.requests() == []


class TestRule4Surface:
    async def test_surface_404_settles_aborted_and_never_prompts(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY.format(match="review"))
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "aborted"
        assert "404" in settled["message"]
        assert await w.model.requests() == []
        assert (await w.harness.history("iid-1"))["messages"] == []

    async def test_surface_is_read_fresh_per_submission_and_503_is_retried(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY.format(match="review"))
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        w.orchestrator.surface_failures["iid-1"] = 2
        first = await w.harness.admit("iid-1", "review")
        assert (await w.harness.settlement("iid-1", first))["outcome"] == "completed"
        second = await w.harness.admit("iid-1", "review", **{"continue": True})
        assert (await w.harness.settlement("iid-1", second))["outcome"] == "completed"
        assert w.orchestrator.surface_reads == ["iid-1"] * 4
        assert w.orchestrator.auth[-1] == "Bearer orchestrator-test-token"

    async def test_surface_that_stays_unreachable_fails_the_submission(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY.format(match="review"), surface_retry_s=0.5)
        w.orchestrator.surfaces["iid-1"] = 503
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "failed"
        assert "could not be read" in settled["error"]["message"]
        assert await w.model.requests() == []


class TestRule5FirstPick:
    async def test_only_the_first_pick_of_an_answer_runs(self, world: StartWorld) -> None:
        w = await world(
            script("review", {"toolCalls": [verdict("approve"), verdict("reject")]}, {"text": "ok"})
        )
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")

        async def keep_open(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            return 200, {
                "delivered": True,
                "event": body["type"],
                "turnComplete": False,
                "deliveryId": "d-1",
                "allowed": ["review_verdict"],
            }

        w.orchestrator.on_pick = keep_open
        sid = await w.harness.admit("iid-1", "review")
        assert (await w.harness.settlement("iid-1", sid))["outcome"] == "completed"
        assert [body["verdict"] for _, body in w.orchestrator.picks] == ["approve"]
        tool_results = [
            m["content"]
            for m in (await w.harness.history("iid-1"))["messages"]
            if m["role"] == "tool"
        ]
        assert tool_results[0].endswith("Your turn is not over.")
        assert tool_results[1] == (
            "This pick did not run: you sent it before you read the answer to `review_verdict`."
        )

    async def test_calls_after_a_turn_ending_pick_do_not_run(self, world: StartWorld) -> None:
        marker = "after-pick.txt"
        w = await world(
            script(
                "review",
                {
                    "toolCalls": [
                        verdict(),
                        {"name": "bash", "arguments": {"command": f"touch {marker}"}},
                    ]
                },
                {"text": "never asked"},
            )
        )
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        await ending_pick(w, sweep=True)
        sid = await w.harness.admit("iid-1", "review")
        assert (await w.harness.settlement("iid-1", sid))["outcome"] == "ended"
        assert not (w.harness.workdir / marker).exists()
        tool_results = [
            m["content"]
            for m in (await w.harness.history("iid-1"))["messages"]
            if m["role"] == "tool"
        ]
        assert tool_results[1] == (
            "This call did not run: a pick before it in your answer ended your turn."
        )
        assert len(await w.model.requests()) == 1

    async def test_a_pick_answered_404_ends_the_run(self, world: StartWorld) -> None:
        w = await world(
            script("review", {"toolCalls": [verdict()]}, {"text": "never asked"}), sweep_wait_s=0.3
        )
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "aborted"
        assert "no sweep came" in settled["message"]
        assert len(await w.model.requests()) == 1

    async def test_the_41_call_reviewer_is_stopped_after_its_first_pick(
        self, world: StartWorld
    ) -> None:
        w = await world(
            script(
                "Review the change", {"toolCalls": [verdict("approve", notes="LGTM")]}, repeat=True
            )
        )
        w.orchestrator.surfaces["iid-1"] = menu_surface("iid-1", "review_verdict")
        await ending_pick(w, sweep=True)
        sid = await w.harness.admit("iid-1", "Review the change")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "ended"
        assert len(w.orchestrator.picks) == 1
        assert len(await w.model.requests()) == 1


class TestRule7SweepCutsTheModel:
    async def test_sweep_closes_the_held_request_and_keeps_the_partial_reply(
        self, world: StartWorld
    ) -> None:
        w = await world(HELD.format(match="review"), orchestrated=False)
        sid = await w.harness.admit("iid-1", "review")
        await w.model.wait_requests(1, held=True)
        await w.harness.abort("iid-1")
        assert (await w.harness.settlement("iid-1", sid))["outcome"] == "aborted"
        (request,) = await w.model.requests()
        assert request["disconnected"]
        assert request["closedAt"] is not None
        assistant = [
            m for m in (await w.harness.history("iid-1"))["messages"] if m["role"] == "assistant"
        ]
        assert [(m["content"], m["status"]) for m in assistant] == [
            ("Partial words of a reply", "interrupted")
        ]


class TestRule8Runaway:
    async def test_four_identical_calls_in_a_row_settle_failed_runaway(
        self, world: StartWorld
    ) -> None:
        w = await world(
            script(
                "review",
                {"toolCalls": [{"name": "bash", "arguments": {"command": "echo again"}}]},
                repeat=True,
            ),
            orchestrated=False,
        )
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "failed"
        assert settled["error"]["type"] == "runaway"
        assert len(await w.model.requests()) == 4

    async def test_more_steps_than_the_budget_settle_failed_runaway(
        self, world: StartWorld
    ) -> None:
        steps = [
            {"toolCalls": [{"name": "bash", "arguments": {"command": f"echo {n}"}}]}
            for n in range(12)
        ]
        w = await world(script("review", *steps), orchestrated=False, max_steps=8)
        sid = await w.harness.admit("iid-1", "review")
        settled = await w.harness.settlement("iid-1", sid)
        assert settled["outcome"] == "failed"
        assert settled["error"]["type"] == "runaway"
        assert "more than 8" in settled["error"]["message"]
        assert len(await w.model.requests()) == 8
