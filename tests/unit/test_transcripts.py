"""A transcript's projection from Turn records and Harness logs, its text, and the loop
that follows it (``kubeturn.transcripts``), with no IO.

Cases:
- a scripted conversation (a continued one: the log also holds an earlier Turn's
  Submission) projects to exact entries: the prompt with its Briefing, the notice its
  admission carried, the model's words, a tool call and its trimmed result, a nudge, a
  pick and its receipt, and the aborted settlement with its cause and message;
- every start of the log projects to a start of the whole projection (what a follower
  relies on);
- a Submission that settled before it ran still shows its prompt;
- the text rendering: header, prompt with the Briefing folded, calls on one line,
  results indented, the settlement line with tokens;
- trimming keeps the start and the end and counts the cut; arguments parse when they
  fit;
- Turns from a status: records and live Turns, in number order, narrowed by a query;
- ``kubeturn logs RUN TARGET``: a Turn's name first, then an Agent slot; anything else
  is refused naming both;
- the follow loop: yields each entry once, Turn by Turn, as the status and the log grow,
  and ends once the Run is finished and every Turn is shown (one Turn followed by name:
  once it is);
- a recorded Run (its status and Harness logs as kubeturn wrote them) prints as
  ``kubeturn logs`` printed it then, as text and as JSON.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kubeturn import cli
from kubeturn.errors import UnknownTarget
from kubeturn.transcripts import project, stream, text
from kubeturn.transcripts.model import Entry, EntryKind
from kubeturn.transcripts.source import Query
from kubeturn_harness.wire import EventType, StreamEvent

IID = "default.demo/root/coder"
BRIEFING = (
    "<turn>\nWorking directory: /work/target/kubeturn-demo.\nPicks allowed now: `submit`.\n</turn>"
)
LONG = "x" * 3000


def _events(*specs: tuple[EventType, dict[str, Any]]) -> list[StreamEvent]:
    return [
        StreamEvent(offset=i, type=t, at=f"2026-12-02T10:00:{i:02d}.000Z", data=d)
        for i, (t, d) in enumerate(specs)
    ]


def _message(sid: str, n: int, role: str, content: str = "", **more: Any) -> dict[str, Any]:
    return {
        "message": {
            "id": f"{sid}.{n}",
            "submissionId": sid,
            "role": role,
            "content": content,
            **more,
        }
    }


def _admitted(sid: str, prompt: str, notices: list[dict[str, str]] | None = None) -> dict[str, Any]:
    request = {"prompt": prompt, "definition": {"instructions": "code"}, "notices": notices or []}
    return {"submissionId": sid, "request": request}


A = EventType.SUBMISSION_ADMITTED
M = EventType.MESSAGE_APPENDED
S = EventType.SUBMISSION_SETTLED

LOG = _events(
    (A, _admitted("s1", "the first turn")),  # 0: the earlier Turn's, passed by
    (M, _message("s1", 1, "user", "the first turn")),
    (S, {"submissionId": "s1", "outcome": "ended", "at": "x"}),
    (
        A,
        _admitted(
            "s2",
            "Fix the bug.\n",
            [{"kind": "pick-answer", "text": "Your pick `submit` was answered: ok"}],
        ),
    ),
    (EventType.SUBMISSION_STARTED, {"submissionId": "s2"}),
    (M, _message("s2", 1, "user", "Fix the bug.\n", briefing=BRIEFING)),
    (EventType.MODEL_REQUESTED, {"submissionId": "s2", "model": "scripted/scripted"}),
    (
        M,
        _message(
            "s2",
            2,
            "assistant",
            "Looking.",
            toolCalls=[{"id": "c1", "name": "bash", "arguments": '{"command": "ls"}'}],
        ),
    ),
    (M, _message("s2", 3, "tool", LONG, toolCallId="c1")),
    (M, _message("s2", 4, "assistant", "Done.")),
    (S, {"submissionId": "s2", "outcome": "completed", "at": "x"}),
    (A, _admitted("s3", "Your turn is not over.")),
    (M, _message("s3", 1, "user", "Your turn is not over.", briefing=BRIEFING)),
    (
        M,
        _message(
            "s3",
            2,
            "assistant",
            toolCalls=[{"id": "c2", "name": "submit", "arguments": '{"summary": "fixed"}'}],
        ),
    ),
    (
        EventType.PICK_SENT,
        {
            "submissionId": "s3",
            "event": "submit",
            "result": "delivered",
            "deliveryId": "d1",
            "turnComplete": False,
        },
    ),
    (
        M,
        _message(
            "s3",
            3,
            "tool",
            "Your pick `submit` was delivered. Your turn is not over.",
            toolCallId="c2",
        ),
    ),
    (EventType.RUN_ENDED, {"submissionId": "s3", "reason": "turn-over"}),
    (S, {"submissionId": "s3", "outcome": "aborted", "at": "x"}),
)
TOKENS = {"promptTokens": 120, "completionTokens": 8, "cacheReadTokens": 0, "cacheWriteTokens": 0}
RECORD = {
    "name": "t2",
    "agent": "coder",
    "state": "fixing",
    "instanceId": IID,
    "outcome": "aborted",
    "cause": "pick",
    "message": "no settlement came back from the sweep",
    "submissions": [{"id": "s2", "admittedAt": 100.0}, {"id": "s3", "admittedAt": 101.0}],
    "startedAt": 100.0,
    "settledAt": 102.5,
    "tokens": TOKENS,
}
LIVE = {**RECORD, "id": "t2", "phase": "live"}
SETTLED = project.turns_of({"turns": [RECORD]})[0]
LIVE_TURN = project.turns_of({"snapshot": {"turns": [LIVE]}})[0]


def _shape(entry: Entry) -> tuple[str, str | None, str, dict[str, Any]]:
    return entry.kind.value, entry.name, entry.text, entry.data


def test_a_scripted_conversation_projects_to_exact_entries() -> None:
    entries = project.project(SETTLED, LOG)
    assert {(e.turn, e.number, e.state, e.agent) for e in entries} == {("t2", 2, "fixing", "coder")}
    cut = 3000 - project.TRIM_CHARS
    assert [_shape(e) for e in entries] == [
        ("turn", None, "", {"instanceId": IID}),
        ("prompt", None, "Fix the bug.\n", {"briefing": BRIEFING, "submissionId": "s2"}),
        ("notice", "pick-answer", "Your pick `submit` was answered: ok", {}),
        ("text", None, "Looking.", {}),
        ("tool-call", "bash", "", {"id": "c1", "arguments": {"command": "ls"}}),
        (
            "tool-result",
            "bash",
            f"{'x' * 1500}\n[… {cut} characters cut …]\n{'x' * 500}",
            {"id": "c1", "trimmed": cut},
        ),
        ("text", None, "Done.", {}),
        ("nudge", None, "Your turn is not over.", {"briefing": BRIEFING, "submissionId": "s3"}),
        ("tool-call", "submit", "", {"id": "c2", "arguments": {"summary": "fixed"}}),
        ("pick", "submit", "", {"id": "c2", "payload": {"summary": "fixed"}}),
        (
            "receipt",
            "submit",
            "Your pick `submit` was delivered. Your turn is not over.",
            {"id": "c2", "result": "delivered", "deliveryId": "d1", "turnComplete": False},
        ),
        (
            "settlement",
            None,
            "aborted",
            {
                "outcome": "aborted",
                "cause": "pick",
                "message": "no settlement came back from the sweep",
                "usage": TOKENS,
            },
        ),
    ]
    assert [e.at for e in entries][:3] == [
        "1970-01-01T00:01:40.000Z",
        "2026-12-02T10:00:05.000Z",
        "2026-12-02T10:00:05.000Z",
    ]
    assert entries[-1].at == "1970-01-01T00:01:42.500Z"


def test_every_start_of_the_log_projects_to_a_start_of_the_whole() -> None:
    whole = project.project(LIVE_TURN, LOG)
    assert whole[-1].kind is EntryKind.RECEIPT  # live: no settlement yet
    for end in range(len(LOG) + 1):
        part = project.project(LIVE_TURN, LOG[:end])
        assert whole[: len(part)] == part, end


def test_a_submission_settled_before_it_ran_still_shows_its_prompt() -> None:
    log = _events(
        (A, _admitted("s2", "Fix the bug.", [{"kind": "conversation", "text": "started anew"}])),
        (S, {"submissionId": "s2", "outcome": "aborted", "at": "x"}),
    )
    turn = project.turns_of({"snapshot": {"turns": [{**LIVE, "submissions": [{"id": "s2"}]}]}})[0]
    assert [_shape(e) for e in project.project(turn, log)][1:] == [
        ("prompt", None, "Fix the bug.", {"submissionId": "s2"}),
        ("notice", "conversation", "started anew", {}),
    ]


def test_the_text_rendering_reads_in_a_terminal() -> None:
    shown = [line for entry in project.project(SETTLED, LOG) for line in text.lines(entry)]
    assert shown[:5] == [
        "── t2 · coder · fixing · 1970-01-01T00:01:40.000Z",
        "  prompt: Fix the bug.",
        "  briefing: 4 lines (use -o json)",
        "  notice (pick-answer): Your pick `submit` was answered: ok",
        "  Looking.",
    ]
    assert shown[5] == '  → bash {"command": "ls"}'
    assert shown[6] == "    " + "x" * 1500
    assert shown[7] == f"      [… {3000 - project.TRIM_CHARS} characters cut …]"
    assert shown[9:] == [
        "  Done.",
        "  nudge: Your turn is not over.",
        "  briefing: 4 lines (use -o json)",
        '  → submit {"summary": "fixed"}',
        "  ⚑ picked submit",
        "    ← delivered: Your pick `submit` was delivered. Your turn is not over.",
        "  ■ aborted (cause: pick) · tokens 120/8 · no settlement came back from the sweep",
    ]


def test_trimming_keeps_the_start_and_the_end() -> None:
    assert project.trimmed("short") == ("short", 0)
    shown, cut = project.trimmed("a" * 1500 + "b" * 1000 + "c" * 500)
    assert cut == 1000
    assert shown == "a" * 1500 + "\n[… 1000 characters cut …]\n" + "c" * 500
    assert project.arguments('{"a": 1}') == ({"a": 1}, 0)
    assert project.arguments("not json") == ("not json", 0)
    args, cut = project.arguments('{"content": "' + "z" * 2500 + '"}')
    assert cut == 2500 + 15 - project.TRIM_CHARS
    assert isinstance(args, str)


def test_turns_come_from_records_and_live_turns_in_number_order() -> None:
    status = {
        "turns": [{**RECORD, "name": "t10"}, RECORD],
        "snapshot": {"turns": [{**LIVE, "id": "t11", "agent": "reviewer"}, {"id": "junk"}]},
    }
    turns = project.turns_of(status)
    assert [(t.name, t.number, t.settled is not None) for t in turns] == [
        ("t2", 2, True),
        ("t10", 10, True),
        ("t11", 11, False),
    ]
    assert [t.name for t in project.chosen(turns, Query(agent="reviewer"))] == ["t11"]
    assert [t.name for t in project.chosen(turns, Query(since_turn=10))] == ["t10", "t11"]
    assert [t.name for t in project.chosen(turns, Query(turn="t2"))] == ["t2"]


def test_a_target_is_a_turn_first_then_an_agent() -> None:
    status = {"turns": [RECORD]}
    assert project.query_for("t2", status, ["coder", "t2"]) == Query(turn="t2")
    assert project.query_for("coder", status, ["coder"], follow=True) == Query(
        agent="coder", follow=True
    )
    assert project.query_for(None, status, [], since_turn=3) == Query(since_turn=3)
    with pytest.raises(UnknownTarget) as raised:
        project.query_for("t9", status, ["reviewer", "coder"])
    assert str(raised.value) == (
        "the run has no Turn and no Agent named 't9'; its Turns: t2; its Agents: coder, reviewer"
    )


class _Growing:
    """A ``stream.Reader`` whose Run goes on one step per wait: the log grows by one event
    a step, then the Turn's record arrives, then a second Turn starts and settles."""

    def __init__(self) -> None:
        self.steps = 0
        self.waits: list[tuple[stream.Conversation | None, int]] = []

    @property
    def _shown(self) -> int:
        return min(self.steps, len(LOG))

    async def status(self) -> Mapping[str, Any]:
        if self._shown < len(LOG):
            return {"phase": "Running", "snapshot": {"turns": [LIVE]}}
        second = {
            **RECORD,
            "name": "t3",
            "agent": "reviewer",
            "instanceId": "other",
            "submissions": [],
        }
        if self.steps == len(LOG):
            return {
                "phase": "Running",
                "turns": [RECORD],
                "snapshot": {"turns": [{**second, "id": "t3"}]},
            }
        return {"phase": "Succeeded", "turns": [RECORD, second]}

    async def read(
        self, agent: str, instance_id: str, offset: int
    ) -> tuple[list[StreamEvent], int]:
        if instance_id != IID:
            return [], offset
        shown = LOG[offset : min(self._shown, offset + 4)]  # pages of four
        return shown, offset + len(shown)

    async def wait(self, conversation: stream.Conversation | None, offset: int) -> None:
        self.waits.append((conversation, offset))
        self.steps += 1


async def _all(reader: stream.Reader, query: Query) -> list[Entry]:
    return [entry async for entry in stream.entries(reader, query)]


async def test_following_yields_each_entry_once_and_ends_with_the_run() -> None:
    reader = _Growing()
    entries = await _all(reader, Query(follow=True))
    assert entries[:-2] == project.project(SETTLED, LOG)
    assert [(e.turn, e.kind.value) for e in entries[-2:]] == [("t3", "turn"), ("t3", "settlement")]
    assert reader.waits[0] == (("coder", IID), 0)
    assert reader.waits[-1] == (("reviewer", "other"), 0)
    assert len(reader.waits) == len(LOG) + 1


async def test_without_follow_one_read_shows_what_there_is() -> None:
    reader = _Growing()
    reader.steps = 5
    entries = await _all(reader, Query())
    assert entries == project.project(LIVE_TURN, LOG[:5])
    assert reader.waits == []
    assert await _all(reader, Query(agent="reviewer")) == []


GOLDEN = Path(__file__).parent / "transcripts"
"""Recorded Runs: a status and the conversation logs of its Harness, as kubeturn wrote
them (``*.json``, never changed once written: the logs of earlier versions must keep
reading), and the text ``kubeturn logs`` prints of them (``*.txt``)."""


class _Recorded:
    """A ``stream.Reader`` over a recorded Run, read a page of three events at a time."""

    def __init__(self, recorded: Mapping[str, Any]) -> None:
        self.recorded = recorded
        self.logs = {
            (log["agent"], log["instanceId"]): [
                StreamEvent.model_validate(e) for e in log["events"]
            ]
            for log in recorded["logs"]
        }

    async def status(self) -> Mapping[str, Any]:
        return dict(self.recorded["status"])

    async def read(
        self, agent: str, instance_id: str, offset: int
    ) -> tuple[list[StreamEvent], int]:
        page = self.logs.get((agent, instance_id), [])[offset : offset + 3]
        return page, offset + len(page)

    async def wait(self, conversation: stream.Conversation | None, offset: int) -> None:
        raise AssertionError("a finished Run is never waited for")


class _Source:
    def __init__(self, reader: stream.Reader) -> None:
        self.reader = reader

    def entries(self, query: Query) -> AsyncIterator[Entry]:
        return stream.entries(self.reader, query)


@pytest.mark.parametrize("name", ["task-with-review"])
async def test_a_recorded_run_prints_as_recorded(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = json.loads((GOLDEN / f"{name}.json").read_text())
    source = _Source(_Recorded(recorded))
    assert await cli.print_transcript(source, Query(follow=True), "text") == 0
    assert capsys.readouterr().out == (GOLDEN / f"{name}.txt").read_text()
    assert await cli.print_transcript(source, Query(), "json") == 0
    printed = [Entry.model_validate_json(line) for line in capsys.readouterr().out.splitlines()]
    assert printed == await _all(_Recorded(recorded), Query())


async def test_following_one_turn_ends_once_it_is_done() -> None:
    reader = _Growing()
    entries = await _all(reader, Query(turn="t2", follow=True))
    assert entries == project.project(SETTLED, LOG)
    assert len(reader.waits) == len(LOG)
