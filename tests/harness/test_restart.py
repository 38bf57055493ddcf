"""Conversations: ``continue``, and what survives a Harness restart (rule 10).

Cases:
- ``continue: true`` lands on the same conversation: the next request carries the
  earlier prompt and reply;
- ``continue: false`` on an existing conversation sends none of its earlier messages
  (the record keeps them);
- a Harness process killed (SIGKILL) mid-Turn and restarted on the same data dir
  settles the in-flight Submission ``failed``/``harness_restarted``, runs the
  Submission queued behind it (``completed``), and keeps the record from before the kill;
- a Submission that was waiting for its sweep at the kill settles ``aborted``, saying
  no sweep came, and nothing is asked or picked again.

The restart cases run the Harness as ``python -m kubeturn_harness serve``, a process of
its own, against this test's scripted model and stub Orchestrator.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.support import (
    ORCHESTRATOR_TOKEN,
    TOKEN,
    HarnessClient,
    HarnessProcess,
    StartWorld,
    World,
    menu_surface,
    script,
    scripts,
    spawn_harness,
)

IID = "default.review-1/review/reviewer"
PROMPT = "Review the change"
FOLLOW_UP = "Look at the tests"


@dataclass
class Spawned:
    process: HarnessProcess
    client: HarnessClient


Spawn = Callable[..., Awaitable[Spawned]]


@pytest.fixture
async def spawn(tmp_path: Path) -> AsyncIterator[Spawn]:
    """Start a Harness process for a World on one data dir; each is killed after the test."""
    processes: list[HarnessProcess] = []

    async def start(w: World, *extra: str, orchestrated: bool = False) -> Spawned:
        env = {
            "KUBETURN_HARNESS_TOKEN_SHA256": hashlib.sha256(TOKEN.encode()).hexdigest(),
            "KUBETURN_PROVIDERS": str(tmp_path / "providers.yaml"),
        }
        if orchestrated:
            env["KUBETURN_ORCHESTRATOR_URL"] = w.orchestrator.url
            env["KUBETURN_ORCHESTRATOR_TOKEN"] = ORCHESTRATOR_TOKEN
        data_dir = tmp_path / "process-data"
        process = await spawn_harness(data_dir, env, tmp_path / "harness.log", *extra)
        processes.append(process)
        client = HarnessClient(process.url, w.harness.session, None, data_dir, w.harness.workdir)
        return Spawned(process, client)

    yield start
    for process in processes:
        await process.kill()


class TestRule10Continue:
    async def test_continue_lands_on_the_same_conversation(self, world: StartWorld) -> None:
        w = await world(
            script(PROMPT, {"text": "First reply."}, {"text": "Second reply."}),
            orchestrated=False,
        )
        first = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, first))["outcome"] == "completed"
        second = await w.harness.admit(IID, FOLLOW_UP, **{"continue": True})
        assert (await w.harness.settlement(IID, second))["outcome"] == "completed"
        _, request = await w.model.requests()
        messages = request["body"]["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[1]["content"].startswith(f"{PROMPT}\n\n<turn>")
        assert messages[2] == {"role": "assistant", "content": "First reply."}
        assert messages[3]["content"].startswith(f"{FOLLOW_UP}\n\n<turn>")
        assert request["step"] == 1

    async def test_continue_false_sends_no_earlier_messages(self, world: StartWorld) -> None:
        w = await world(
            scripts({PROMPT: [{"text": "First reply."}], FOLLOW_UP: [{"text": "Fresh reply."}]}),
            orchestrated=False,
        )
        first = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, first))["outcome"] == "completed"
        second = await w.harness.admit(IID, FOLLOW_UP, **{"continue": False})
        assert (await w.harness.settlement(IID, second))["outcome"] == "completed"
        _, request = await w.model.requests()
        messages = request["body"]["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[1]["content"].startswith(f"{FOLLOW_UP}\n\n<turn>")
        assert PROMPT not in str(messages)
        assert "First reply." not in str(messages)
        recorded = (await w.harness.history(IID))["messages"]
        assert [(m["submissionId"], m["role"]) for m in recorded] == [
            (first, "user"),
            (first, "assistant"),
            (second, "user"),
            (second, "assistant"),
        ]


class TestRule10Restart:
    async def test_a_restart_fails_the_cut_run_runs_the_queued_one_and_keeps_the_record(
        self, world: StartWorld, spawn: Spawn
    ) -> None:
        w = await world(
            scripts(
                {
                    PROMPT: [{"text": "Words before the kill", "hold": True}],
                    FOLLOW_UP: [{"text": "Done after the restart."}],
                }
            ),
            orchestrated=False,
        )
        first = await spawn(w)
        cut = await first.client.admit(IID, PROMPT)
        queued = await first.client.admit(IID, FOLLOW_UP)
        await w.model.wait_requests(1, held=True)
        _, _, before = await first.client.stream(IID)
        await first.process.kill()

        second = await spawn(w)
        harness = second.client
        settled = await harness.settlement(IID, cut)
        assert settled["outcome"] == "failed"
        assert settled["error"] == {
            "type": "harness_restarted",
            "message": "the Harness restarted while this Submission ran",
        }
        assert (await harness.settlement(IID, queued))["outcome"] == "completed"
        _, _, after = await harness.stream(IID)
        assert after[: len(before)] == before
        assert sorted(e["type"] for e in before) == [
            "message-appended",
            "model-requested",
            "submission-admitted",
            "submission-admitted",
            "submission-started",
        ]
        history = await harness.history(IID)
        assert [(m["submissionId"], m["role"]) for m in history["messages"]] == [
            (cut, "user"),
            (queued, "user"),
            (queued, "assistant"),
        ]
        assert [s["submissionId"] for s in history["settlements"]] == [cut, queued]
        killed, ran = await w.model.requests()
        assert killed["disconnected"]
        assert ran["conversation"] == FOLLOW_UP

    async def test_a_run_waiting_for_its_sweep_at_a_restart_settles_aborted(
        self, world: StartWorld, spawn: Spawn
    ) -> None:
        w = await world(
            script(
                PROMPT,
                {"toolCalls": [{"name": "review_verdict", "arguments": {"verdict": "approve"}}]},
                {"text": "never asked"},
            )
        )
        w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")

        async def turn_over(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            return 200, {"delivered": True, "event": body["type"], "turnComplete": True}

        w.orchestrator.on_pick = turn_over
        first = await spawn(w, "--sweep-wait", "600", orchestrated=True)
        sid = await first.client.admit(IID, PROMPT)
        await first.client.wait_state(IID, sid, "waiting-for-sweep")
        await first.process.kill()

        second = await spawn(w, "--sweep-wait", "600", orchestrated=True)
        settled = await second.client.settlement(IID, sid)
        assert settled["outcome"] == "aborted"
        assert "no sweep came from the Orchestrator" in settled["message"]
        assert settled.get("error") is None
        assert len(w.orchestrator.picks) == 1
        assert len(await w.model.requests()) == 1
        assert w.orchestrator.surface_reads == [IID]
