"""What real models answer, and what the Harness does with it (docs/turn-semantics.md §8).

Each scenario runs the real Harness against the scripted model (which, like llama.cpp's
server, refuses a history holding arguments that are not one JSON object) and the stub
Orchestrator, and asserts the requests the model received, the settlement and the record.

Cases:
- malformed arguments: a Working tool call with truncated JSON does not run; the model
  reads why; the next request, and a continued conversation's, carry ``{}`` in their
  place while the record keeps the text; every request is accepted. A pick with
  arguments that are JSON but no object is not sent; the next pick is the first pick;
- ``finish_reason: length``: an answer with no call is followed by a note and the run
  goes on; its last call never runs, a Working tool call whose arguments parse included,
  and a pick is not sent; four cut answers in a row settle ``failed``/``runaway``;
- twelve identical picks in one answer: the first ends the Turn, the other eleven are
  blocked and counted by no runaway: one request, one pick, ``ended``, one settlement.
  Twelve whose first keeps the Turn open: stale picks still count, a runaway at the fourth;
- a stream that fails midway, once the retry policy gave up (a provider of one attempt):
  the record keeps the text and the calls as far as they streamed, marked ``failed``; no
  call of it runs; the usage reported before the break is in the message and the
  settlement; a continued conversation carries the reply marked as cut by the failure,
  without its calls, and is accepted. Three attempts that all break off leave one
  partial in the record, the last attempt's.
"""

from __future__ import annotations

from typing import Any

from kubeturn_harness.projection import FAILED_MARKER
from kubeturn_harness.receipts import AFTER_TURN_END, CUT_AT_LIMIT_NOTE, stale_pick
from tests.harness.support import NoWaitClock, StartWorld, World, menu_surface, script

IID = "iid-1"
PROMPT = "Review the change"


def verdict(value: str = "approve") -> dict[str, Any]:
    return {"name": "review_verdict", "arguments": {"verdict": value}}


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


ONE_ATTEMPT = "retry: {attempts: 1}"
"""A provider the retry policy does not try again: what the loop sees once it gave up."""


async def start(
    world: StartWorld, *steps: dict[str, Any], repeat: bool = False, **options: Any
) -> World:
    w = await world(script(PROMPT, *steps, repeat=repeat), **options)
    w.orchestrator.surfaces[IID] = menu_surface(IID, "review_verdict")
    return w


def answer_picks(world: World, *, over: bool) -> None:
    """The stub answers every pick; ``over``: the Turn is over, swept first as the
    Orchestrator does (cause pick, naming the running Submission)."""

    async def on_pick(iid: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if over:
            history = await world.harness.history(iid)
            (running,) = [s for s in history["submissions"] if s["state"] == "running"]
            await world.harness.abort(
                iid, {"cause": "pick", "submissionId": running["submissionId"]}
            )
        receipt = {"delivered": True, "event": body["type"], "deliveryId": "d-1"}
        return 200, {**receipt, "turnComplete": over, "allowed": ["review_verdict"]}

    world.orchestrator.on_pick = on_pick


def calls_sent(request: dict[str, Any]) -> list[tuple[str, str]]:
    """Every earlier tool call a request carried: (name, arguments)."""
    return [
        (call["function"]["name"], call["function"]["arguments"])
        for message in request["body"]["messages"]
        for call in message.get("tool_calls") or ()
    ]


async def assistant_messages(world: World) -> list[dict[str, Any]]:
    return [m for m in (await world.harness.history(IID))["messages"] if m["role"] == "assistant"]


def all_answered(requests: list[dict[str, Any]]) -> bool:
    """Every request was answered from the script (a refusal matches no step)."""
    return all(r["step"] is not None for r in requests)


class TestMalformedArguments:
    async def test_a_truncated_call_does_not_run_and_is_sent_back_as_an_empty_object(
        self, world: StartWorld
    ) -> None:
        broken = '{"command": "touch ran.txt'
        w = await start(
            world,
            {"toolCalls": [{"name": "bash", "arguments": broken}]},
            {"text": "Done."},
            {"text": "Still here."},
        )
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        assert not (w.harness.workdir / "ran.txt").exists()
        (result,) = await w.harness.tool_results(IID)
        assert result["content"] == (
            "This call of `bash` did not run: the arguments object is not JSON: EOF while "
            "parsing a string at line 1 column 26. Your call is shown with {} as its "
            "arguments from now on. Call it again with complete JSON."
        )
        first = (await assistant_messages(w))[0]
        assert [c["arguments"] for c in first["toolCalls"]] == [broken]

        again = await w.harness.admit(IID, "Review the change once more", **{"continue": True})
        assert (await w.harness.settlement(IID, again))["outcome"] == "completed"
        requests = await w.model.requests()
        assert [r["step"] for r in requests] == [0, 1, 2]
        assert [calls_sent(r) for r in requests] == [[], [("bash", "{}")], [("bash", "{}")]]
        assert all_answered(requests)

    async def test_a_pick_whose_arguments_are_no_object_is_not_sent_nor_the_first_pick(
        self, world: StartWorld
    ) -> None:
        w = await start(
            world,
            {"toolCalls": [{"name": "review_verdict", "arguments": "[1]"}, verdict()]},
            {"text": "Done."},
        )
        answer_picks(w, over=False)
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        assert w.orchestrator.picks == [(IID, {"type": "review_verdict", "verdict": "approve"})]
        malformed, sent = await w.harness.tool_results(IID)
        assert malformed["content"] == (
            "Your pick `review_verdict` was not sent: the arguments are JSON, but not an "
            "object. Your call is shown with {} as its arguments from now on. Pick again "
            "with complete JSON. Your turn is not over."
        )
        assert sent["content"].startswith("Your pick `review_verdict` was delivered")
        requests = await w.model.requests()
        assert calls_sent(requests[1]) == [
            ("review_verdict", "{}"),
            ("review_verdict", '{"verdict": "approve"}'),
        ]
        assert all_answered(requests)


class TestOutputLimit:
    async def test_an_answer_with_no_call_cut_at_the_limit_is_asked_to_go_on(
        self, world: StartWorld
    ) -> None:
        w = await start(
            world, {"text": "The change looks", "finishReason": "length"}, {"text": "fine."}
        )
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        requests = await w.model.requests()
        assert len(requests) == 2
        assert requests[1]["body"]["messages"][-2:] == [
            {"role": "assistant", "content": "The change looks"},
            {"role": "user", "content": CUT_AT_LIMIT_NOTE},
        ]
        messages = (await w.harness.history(IID))["messages"]
        assert [(m["role"], m["content"], m["briefing"]) for m in messages[-3:]] == [
            ("assistant", "The change looks", None),
            ("user", "", CUT_AT_LIMIT_NOTE),
            ("assistant", "fine.", None),
        ]

    async def test_the_last_call_of_a_cut_answer_never_runs_even_when_it_parses(
        self, world: StartWorld
    ) -> None:
        w = await start(
            world,
            {
                "toolCalls": [bash("touch first.txt"), bash("touch ran.txt")],
                "finishReason": "length",
            },
            {"text": "Done."},
        )
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        assert (w.harness.workdir / "first.txt").exists()
        assert not (w.harness.workdir / "ran.txt").exists()
        _, cut = await w.harness.tool_results(IID)
        assert cut["content"] == (
            "This call of `bash` did not run: your answer was cut off at the output limit "
            "while you wrote it. Call it again, more briefly (a large file can be written "
            "in parts)."
        )
        assert len(await w.model.requests()) == 2

    async def test_a_cut_pick_is_not_sent(self, world: StartWorld) -> None:
        w = await start(
            world,
            {
                "toolCalls": [{"name": "review_verdict", "arguments": '{"verdict": "appr'}],
                "finishReason": "length",
            },
            {"toolCalls": [verdict()]},
        )
        answer_picks(w, over=True)
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "ended"
        assert w.orchestrator.picks == [(IID, {"type": "review_verdict", "verdict": "approve"})]
        cut, _ = await w.harness.tool_results(IID)
        assert cut["content"] == (
            "Your pick `review_verdict` was not sent: your answer was cut off at the output "
            "limit while you wrote it. Your call is shown with {} as its arguments from now "
            "on. Pick again, more briefly. Your turn is not over."
        )
        requests = await w.model.requests()
        assert calls_sent(requests[1]) == [("review_verdict", "{}")]
        assert all_answered(requests)

    async def test_four_cut_answers_in_a_row_are_a_runaway(self, world: StartWorld) -> None:
        w = await start(world, {"text": "Again and", "finishReason": "length"}, repeat=True)
        sid = await w.harness.admit(IID, PROMPT)
        settled = await w.harness.settlement(IID, sid)
        assert (settled["outcome"], settled["error"]) == (
            "failed",
            {
                "type": "runaway",
                "message": "runaway: 4 answers in a row were cut off at the output limit",
            },
        )
        assert len(await w.model.requests()) == 4


class TestIdenticalPicks:
    async def test_twelve_picks_after_the_one_that_ended_the_turn_are_no_runaway(
        self, world: StartWorld
    ) -> None:
        w = await start(world, {"toolCalls": [verdict()] * 12})
        answer_picks(w, over=True)
        sid = await w.harness.admit(IID, PROMPT)
        settled = await w.harness.settlement(IID, sid)
        assert (settled["outcome"], settled["error"], settled["message"]) == ("ended", None, None)
        history = await w.harness.history(IID)
        assert [s["submissionId"] for s in history["settlements"]] == [sid]
        assert len(w.orchestrator.picks) == 1
        assert len(await w.model.requests()) == 1
        results = [m["content"] for m in await w.harness.tool_results(IID)]
        assert results[1:] == [AFTER_TURN_END] * 11

    async def test_twelve_picks_whose_first_keeps_the_turn_open_are_a_runaway(
        self, world: StartWorld
    ) -> None:
        """A stale pick is still a step of the model's: the fourth identical one trips the
        watch, and the eight after it are answered without running."""
        w = await start(world, {"toolCalls": [verdict()] * 12}, {"text": "Waiting."})
        answer_picks(w, over=False)
        sid = await w.harness.admit(IID, PROMPT)
        settled = await w.harness.settlement(IID, sid)
        assert (settled["outcome"], settled["error"]["type"]) == ("failed", "runaway")
        assert len(w.orchestrator.picks) == 1
        results = [m["content"] for m in await w.harness.tool_results(IID)]
        assert results[1:3] == [stale_pick("review_verdict")] * 2
        assert len(results) == 12
        assert len(await w.model.requests()) == 1


class TestStreamFailedMidway:
    async def test_a_dropped_stream_keeps_its_words_and_a_continued_prompt_says_so(
        self, world: StartWorld
    ) -> None:
        w = await start(
            world,
            {"text": "The change looks fine", "cut": {"afterChunks": 3}},
            {"text": "Fine."},
            provider=ONE_ATTEMPT,
        )
        sid = await w.harness.admit(IID, PROMPT)
        settled = await w.harness.settlement(IID, sid)
        assert (settled["outcome"], settled["error"]["type"]) == ("failed", "submission_failed")
        (reply,) = await assistant_messages(w)
        assert (reply["content"], reply["status"], reply["toolCalls"]) == (
            "The change ",
            "failed",
            [],
        )

        again = await w.harness.admit(IID, "Review it again", **{"continue": True})
        assert (await w.harness.settlement(IID, again))["outcome"] == "completed"
        requests = await w.model.requests()
        assert [r["cut"] for r in requests] == [True, False]
        assert requests[1]["body"]["messages"][2] == {
            "role": "assistant",
            "content": f"The change \n\n{FAILED_MARKER}",
        }
        (projection,) = (await w.harness.history(IID))["projections"]
        assert projection["decisions"] == [
            {
                "messageId": reply["id"],
                "status": "failed",
                "projectedAs": "assistant-marked",
                "reason": "failed mid-stream: assistant-marked",
            }
        ]

    async def test_a_call_of_a_failed_stream_never_runs_and_stays_in_the_record(
        self, world: StartWorld
    ) -> None:
        w = await start(
            world,
            {
                "text": "Reading it.",
                "toolCalls": [verdict()],
                "cut": {"afterChunks": 5, "error": {"status": 500, "message": "it crashed"}},
            },
            provider=ONE_ATTEMPT,
        )
        answer_picks(w, over=True)
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "failed"
        assert w.orchestrator.picks == []
        assert await w.harness.tool_results(IID) == []
        (reply,) = await assistant_messages(w)
        assert (reply["content"], reply["status"]) == ("Reading it.", "failed")
        assert [(c["id"], c["name"], c["arguments"]) for c in reply["toolCalls"]] == [
            ("call_0_0", "review_verdict", '{"verdict": "app')
        ]
        assert len(await w.model.requests()) == 1

    async def test_the_usage_reported_before_the_break_is_kept(self, world: StartWorld) -> None:
        # role, "Done", the finish, the usage: then the connection drops before [DONE].
        w = await start(world, {"text": "Done", "cut": {"afterChunks": 4}}, provider=ONE_ATTEMPT)
        sid = await w.harness.admit(IID, PROMPT)
        settled = await w.harness.settlement(IID, sid)
        assert settled["outcome"] == "failed"
        (reply,) = await assistant_messages(w)
        assert reply["status"] == "failed"
        assert reply["usage"] is not None
        assert reply["usage"]["completionTokens"] == len("Done") // 4 + 1
        assert settled["usage"] == reply["usage"]

    async def test_only_the_last_attempts_partial_is_kept(self, world: StartWorld) -> None:
        # The scripted model answers a retry with the same step: every attempt breaks off.
        w = await start(
            world,
            {"text": "one two three four", "cut": {"afterChunks": 3}},
            model_clock=NoWaitClock(),
        )
        sid = await w.harness.admit(IID, PROMPT)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "failed"
        assert [r["cut"] for r in await w.model.requests()] == [True] * 3  # retry.attempts
        (reply,) = await assistant_messages(w)
        assert (reply["content"], reply["status"]) == ("one two ", "failed")
