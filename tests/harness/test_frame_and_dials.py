"""The Frame, the Dials and the Agent's definition (rule 9), one named test each.

Cases:
- a relative ``cwd`` is refused 400 naming ``cwd`` (and the Frame), and nothing is admitted;
- an absent ``cwd`` is ``/work``: the Briefing says so;
- relative paths in the Working tools resolve against ``cwd``;
- ``workspace: read`` offers no tool that writes or runs (``write``, ``edit``, ``bash``);
  ``workspace: none`` offers no Working tool, only the Menu, and its Briefing names no
  working directory;
- a bad definition (``workspace: admin``) is refused 400 naming ``definition.workspace``;
- the Dials hold for one Submission and are never sticky: a later Submission without
  ``model`` and ``thinkingLevel`` uses the Harness's default model and no reasoning effort;
- an unknown provider, and no model with no default, are refused 400 naming ``model``;
- a ``traceparent`` that is not a W3C one is refused 400 naming it; one that is is kept
  with the Submission in its log (ADR 0107).
"""

from __future__ import annotations

from typing import Any

from tests.harness.support import AGENT, StartWorld, World, agent_url, menu_surface, script

IID = "iid-1"
PROMPT = "Review the change"
TEXT_ONLY = script(PROMPT, {"text": "All done."})


async def nothing_admitted(w: World, iid: str = IID) -> None:
    async with w.harness.session.get(
        agent_url(w.harness.url, AGENT, iid) + "?view=history", headers=w.harness.headers()
    ) as response:
        assert response.status == 404
    assert await w.model.requests() == []


def offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request["body"].get("tools", [])]


def user_message(history: dict[str, Any]) -> dict[str, Any]:
    (user,) = [m for m in history["messages"] if m["role"] == "user"]
    return user


class TestRule9Frame:
    async def test_a_relative_cwd_is_refused_naming_cwd_and_nothing_is_admitted(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, answer = await w.harness.admit_raw(IID, w.harness.body(PROMPT, cwd="src/app"))
        assert status == 400
        assert answer["field"] == "cwd"
        assert "Frame" in answer["message"]
        assert "'src/app'" in answer["message"]
        await nothing_admitted(w)

    async def test_an_absent_cwd_is_briefed_as_work(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT)
        del body["cwd"]
        status, answer = await w.harness.admit_raw(IID, body)
        assert status == 200, answer
        sid = answer["submissionId"]
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        history = await w.harness.history(IID)
        assert user_message(history)["briefing"] == (
            "<turn>\nWorking directory: /work (relative paths in your tools resolve here).\n</turn>"
        )
        assert [s["cwd"] for s in history["submissions"]] == ["/work"]

    async def test_relative_tool_paths_resolve_against_cwd(self, world: StartWorld) -> None:
        write = {"name": "write", "arguments": {"path": "notes.txt", "content": "hello"}}
        w = await world(script(PROMPT, {"toolCalls": [write]}, {"text": "Written."}))
        w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        notes = w.harness.workdir.resolve() / "notes.txt"
        assert notes.read_text() == "hello"
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == f"Wrote 5 bytes to {notes}."

    async def test_read_access_offers_no_tool_that_writes_or_runs(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        sid = await w.harness.admit(
            IID, PROMPT, definition={"instructions": "You read.", "workspace": "read"}
        )
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        (request,) = await w.model.requests()
        assert offered(request) == ["read", "grep", "glob"]

    async def test_no_access_offers_only_the_menu_and_names_no_directory(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY)
        w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
        sid = await w.harness.admit(
            IID, PROMPT, definition={"instructions": "You decide.", "workspace": "none"}
        )
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        (request,) = await w.model.requests()
        assert offered(request) == ["review_verdict"]
        briefing = user_message(await w.harness.history(IID))["briefing"]
        assert "Working directory" not in briefing
        assert str(w.harness.workdir) not in briefing
        assert "`review_verdict`" in briefing

    async def test_a_bad_definition_is_refused_naming_the_field(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT, definition={"instructions": "x", "workspace": "admin"})
        status, answer = await w.harness.admit_raw(IID, body)
        assert status == 400
        assert answer["field"] == "definition.workspace"
        assert answer["message"].startswith("definition.workspace: ")
        await nothing_admitted(w)


class TestRule9Dials:
    async def test_dials_hold_for_one_submission_and_are_never_sticky(
        self, world: StartWorld
    ) -> None:
        w = await world(
            script(PROMPT, {"text": "One."}, {"text": "Two."}),
            orchestrated=False,
            default_model="scripted/beta",
        )
        first = await w.harness.admit(IID, PROMPT, model="scripted/alpha", thinkingLevel="high")
        assert (await w.harness.settlement(IID, first))["outcome"] == "completed"
        body = w.harness.body("Look again", **{"continue": True})
        del body["model"]
        status, answer = await w.harness.admit_raw(IID, body)
        assert status == 200, answer
        second = answer["submissionId"]
        assert (await w.harness.settlement(IID, second))["outcome"] == "completed"
        one, two = (r["body"] for r in await w.model.requests())
        assert (one["model"], one["reasoning_effort"]) == ("alpha", "high")
        assert two["model"] == "beta"
        assert "reasoning_effort" not in two
        views = (await w.harness.history(IID))["submissions"]
        assert [v["model"] for v in views] == ["scripted/alpha", None]

    async def test_an_unknown_provider_is_refused_naming_model(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, answer = await w.harness.admit_raw(
            IID, w.harness.body(PROMPT, model="nowhere/model-x")
        )
        assert status == 400
        assert answer["field"] == "model"
        assert answer["message"].startswith("unknown model provider 'nowhere' (known: scripted)")
        await nothing_admitted(w)

    async def test_no_model_and_no_default_is_refused_naming_model(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT)
        del body["model"]
        status, answer = await w.harness.admit_raw(IID, body)
        assert status == 400
        assert answer["field"] == "model"
        assert answer["message"].startswith("no model")
        await nothing_admitted(w)


TRACEPARENT = "00-7bbcbf821bd0496881d2a1a4913b6f0a-f9c84d11700122ff-01"


class TestTraceContext:
    async def test_a_bad_traceparent_is_refused_naming_it(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT, traceparent="00-abc-def-01")
        status, answer = await w.harness.admit_raw(IID, body)
        assert (status, answer["field"]) == (400, "traceparent")
        await nothing_admitted(w)

    async def test_a_traceparent_is_kept_with_the_submission(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await w.harness.admit(IID, PROMPT, traceparent=TRACEPARENT)
        status, _, events = await w.harness.stream(IID, types="submission-admitted")
        assert status == 200
        (admitted,) = events
        assert admitted["data"]["request"]["traceparent"] == TRACEPARENT
