"""Input policy of a Submission admitted while another runs (rule 11; docs/turn-semantics.md §6).

Cases:
- ``queue`` (the default) waits: the running Submission is not cut, and the queued one
  runs after it has settled;
- ``interrupt`` ends the running Submission (``aborted``, its message naming the
  interrupting Submission); the partial reply it had streamed stays in the record marked
  ``interrupted``, and reaches the next prompt as the admission's ``projection``
  declares: ``assistant-marked`` (an assistant message ending with the cut marker),
  ``system-note`` (a system note) or ``omit`` (absent); the history's ``projections``
  record says what the prompt build did;
- ``supersede`` ends it the same way, keeps the partial in the record marked
  ``superseded``, and keeps it out of the next prompt (a decision with ``projectedAs``
  null).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness.support import StartWorld, World, script, scripts

IID = "iid-1"
PROMPT = "Review the change"
FOLLOW_UP = "Look at the tests instead"
PARTIAL = "Partial words of a reply"
CUT_MARKER = "[This reply was cut off here: it was stopped before it finished.]"

HELD = script(PROMPT, {"text": PARTIAL, "hold": True}, {"text": "A second reply", "hold": True})
"""Every step holds, so the interrupting Submission's request (step 0 or 1, depending on
what was projected) can be read while it is held."""


async def cut_by(w: World, policy: str, **extra: Any) -> tuple[str, str, dict[str, Any]]:
    """Run one Submission up to its held reply, then admit a continued one under
    ``policy``; answer both ids and the body of the second one's model request."""
    cut = await w.harness.admit(IID, PROMPT)
    await w.model.wait_requests(1, held=True)
    cutting = await w.harness.admit(IID, FOLLOW_UP, policy=policy, **{"continue": True}, **extra)
    await w.model.wait_requests(2, held=True)
    first, second = await w.model.requests()
    assert first["disconnected"]
    assert second["receivedAt"] >= first["closedAt"]
    await w.model.release()
    assert (await w.harness.settlement(IID, cutting))["outcome"] == "completed"
    return cut, cutting, second["body"]


def cut_reply(history: dict[str, Any], sid: str) -> dict[str, Any]:
    (reply,) = [
        m for m in history["messages"] if m["submissionId"] == sid and m["role"] == "assistant"
    ]
    return reply


class TestRule11InputPolicy:
    async def test_queue_waits_for_the_running_submission(self, world: StartWorld) -> None:
        w = await world(
            scripts({PROMPT: [{"text": PARTIAL, "hold": True}], FOLLOW_UP: [{"text": "Done."}]}),
            orchestrated=False,
        )
        running = await w.harness.admit(IID, PROMPT)
        await w.model.wait_requests(1, held=True)
        queued = await w.harness.admit(IID, FOLLOW_UP)
        assert await w.harness.state(IID, queued) == "queued"
        assert await w.harness.state(IID, running) == "running"
        (held,) = await w.model.requests()
        assert not held["disconnected"]
        await w.model.release()
        assert (await w.harness.settlement(IID, running))["outcome"] == "completed"
        assert (await w.harness.settlement(IID, queued))["outcome"] == "completed"
        first, second = await w.model.requests()
        assert not first["disconnected"]
        assert second["receivedAt"] >= first["closedAt"]
        history = await w.harness.history(IID)
        assert cut_reply(history, running)["status"] == "complete"
        assert [s["policy"] for s in history["submissions"]] == ["queue", "queue"]
        assert history["projections"] == []

    @pytest.mark.parametrize(
        ("projection", "projected"),
        [
            pytest.param(
                "assistant-marked",
                {"role": "assistant", "content": f"{PARTIAL}\n\n{CUT_MARKER}"},
                id="assistant-marked",
            ),
            pytest.param(
                "system-note",
                {
                    "role": "system",
                    "content": "An earlier reply of yours was cut off before it finished; "
                    f"it had said: {PARTIAL}",
                },
                id="system-note",
            ),
            pytest.param("omit", None, id="omit"),
        ],
    )
    async def test_interrupt_ends_the_running_one_and_projects_its_partial_as_declared(
        self, world: StartWorld, projection: str, projected: dict[str, str] | None
    ) -> None:
        w = await world(HELD, orchestrated=False)
        cut, cutting, body = await cut_by(w, "interrupt", projection=projection)
        settled = await w.harness.settlement(IID, cut)
        assert settled["outcome"] == "aborted"
        assert settled["message"] == f"interrupted by Submission {cutting}"
        history = await w.harness.history(IID)
        reply = cut_reply(history, cut)
        assert (reply["content"], reply["status"], reply["projection"]) == (
            PARTIAL,
            "interrupted",
            projection,
        )
        messages = body["messages"]
        assert messages[1]["content"].startswith(PROMPT)
        assert messages[-1]["content"].startswith(FOLLOW_UP)
        assert messages[2:-1] == ([projected] if projected else [])
        assert history["projections"] == [
            {
                "submissionId": cutting,
                "decisions": [
                    {
                        "messageId": reply["id"],
                        "status": "interrupted",
                        "projectedAs": None if projection == "omit" else projection,
                        "reason": f"declared {projection}",
                    }
                ],
            }
        ]

    async def test_supersede_keeps_the_partial_in_the_record_and_out_of_the_prompt(
        self, world: StartWorld
    ) -> None:
        w = await world(HELD, orchestrated=False)
        cut, cutting, body = await cut_by(w, "supersede")
        settled = await w.harness.settlement(IID, cut)
        assert settled["outcome"] == "aborted"
        assert settled["message"] == f"superseded by Submission {cutting}"
        history = await w.harness.history(IID)
        reply = cut_reply(history, cut)
        assert (reply["content"], reply["status"]) == (PARTIAL, "superseded")
        assert [m["role"] for m in body["messages"]] == ["system", "user", "user"]
        assert PARTIAL not in str(body["messages"])
        assert history["projections"] == [
            {
                "submissionId": cutting,
                "decisions": [
                    {
                        "messageId": reply["id"],
                        "status": "superseded",
                        "projectedAs": None,
                        "reason": "superseded: kept in the record, out of the prompt",
                    }
                ],
            }
        ]
