"""Projection of the record into a new prompt (``projection``; docs/turn-semantics.md §6).

Cases:
- an interrupted reply with each declared form: ``assistant-marked`` (the words and the
  cut marker, as the assistant), ``system-note`` (a system note quoting the words),
  ``omit`` (left out), and no declared form (``assistant-marked``); each with its
  decision, ``projectedAs`` and reason;
- a superseded reply is always left out, whatever form it declares, with
  ``projectedAs`` None;
- a cut reply that said nothing is left out under every form;
- complete messages make no decision; system messages of the record are never
  projected; order is kept;
- a reply whose stream failed is carried as the assistant's words with the failure's
  marker; a cut reply's calls are left out, and its decision says how many;
- ``to_openai``: a user message with its briefing concatenated after a blank line, and
  without one, and a note of the Harness's with no prompt; a tool message; an assistant
  message with tool calls and no text (content None); an assistant message with text;
  arguments that are not one JSON object (truncated, not JSON, JSON but no object, NaN,
  nested too deep) are sent as ``{}``, empty ones too, and the message keeps them as
  written; ``arguments_object`` says why, as a clause.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn_harness.projection import (
    CUT_MARKER,
    FAILED_MARKER,
    arguments_object,
    project,
    to_openai,
)
from kubeturn_harness.wire import (
    Message,
    MessageStatus,
    Projection,
    ProjectionDecision,
    Role,
    SubmissionId,
    ToolCall,
)

SID = SubmissionId("s-1")


def message(
    role: Role,
    content: str = "",
    *,
    id_: str = "s-1.1",
    **fields: Any,
) -> Message:
    return Message(id=id_, submissionId=SID, role=role, content=content, **fields)


def cut(
    content: str,
    status: MessageStatus = MessageStatus.INTERRUPTED,
    projection: Projection | None = None,
) -> Message:
    return message(Role.ASSISTANT, content, id_="s-1.2", status=status, projection=projection)


def decision(
    status: MessageStatus, form: Projection | None, reason: str, id_: str = "s-1.2"
) -> ProjectionDecision:
    return ProjectionDecision(messageId=id_, status=status, projectedAs=form, reason=reason)


class TestInterruptedReply:
    def test_assistant_marked(self) -> None:
        projected, decisions = project(
            [cut("I was saying", projection=Projection.ASSISTANT_MARKED)]
        )
        assert projected == [
            {"role": "assistant", "content": f"I was saying\n\n{CUT_MARKER}"},
        ]
        assert decisions == [
            decision(
                MessageStatus.INTERRUPTED,
                Projection.ASSISTANT_MARKED,
                "declared assistant-marked",
            )
        ]
        assert CUT_MARKER == "[This reply was cut off here: it was stopped before it finished.]"

    def test_no_declared_form_is_assistant_marked(self) -> None:
        projected, decisions = project([cut("I was saying")])
        assert projected == [{"role": "assistant", "content": f"I was saying\n\n{CUT_MARKER}"}]
        assert decisions == [
            decision(
                MessageStatus.INTERRUPTED,
                Projection.ASSISTANT_MARKED,
                "declared assistant-marked",
            )
        ]

    def test_system_note(self) -> None:
        projected, decisions = project([cut("I was saying", projection=Projection.SYSTEM_NOTE)])
        assert projected == [
            {
                "role": "system",
                "content": "An earlier reply of yours was cut off before it finished; "
                "it had said: I was saying",
            }
        ]
        assert decisions == [
            decision(MessageStatus.INTERRUPTED, Projection.SYSTEM_NOTE, "declared system-note")
        ]

    def test_omit(self) -> None:
        projected, decisions = project([cut("I was saying", projection=Projection.OMIT)])
        assert projected == []
        assert decisions == [decision(MessageStatus.INTERRUPTED, None, "declared omit")]

    @pytest.mark.parametrize(
        "form", [None, Projection.ASSISTANT_MARKED, Projection.SYSTEM_NOTE, Projection.OMIT]
    )
    def test_superseded_is_always_omitted(self, form: Projection | None) -> None:
        projected, decisions = project(
            [cut("I was saying", status=MessageStatus.SUPERSEDED, projection=form)]
        )
        assert projected == []
        assert decisions == [
            decision(
                MessageStatus.SUPERSEDED,
                None,
                "superseded: kept in the record, out of the prompt",
            )
        ]

    @pytest.mark.parametrize("form", [None, Projection.ASSISTANT_MARKED, Projection.SYSTEM_NOTE])
    def test_an_empty_cut_reply_is_omitted(self, form: Projection | None) -> None:
        projected, decisions = project([cut("", projection=form)])
        assert projected == []
        assert decisions == [
            decision(MessageStatus.INTERRUPTED, None, "cut before it said anything")
        ]


class TestHistory:
    def test_a_conversation_in_order_with_one_decision_per_cut_reply(self) -> None:
        call = ToolCall(id="c1", name="read", arguments='{"path": "a"}')
        history = [
            message(Role.SYSTEM, "recorded system text", id_="s-1.0"),
            message(Role.USER, "Review it.", id_="s-1.1", briefing="<turn>\n</turn>"),
            message(Role.ASSISTANT, "", id_="s-1.2", toolCalls=[call]),
            message(Role.TOOL, "contents", id_="s-1.3", toolCallId="c1"),
            message(
                Role.ASSISTANT,
                "Half a",
                id_="s-1.4",
                status=MessageStatus.INTERRUPTED,
                projection=Projection.SYSTEM_NOTE,
            ),
            message(Role.USER, "Go on.", id_="s-2.1"),
            message(Role.ASSISTANT, "Gone", id_="s-2.2", status=MessageStatus.SUPERSEDED),
            message(Role.USER, "Again.", id_="s-3.1"),
            message(Role.ASSISTANT, "Done.", id_="s-3.2"),
        ]
        projected, decisions = project(history)
        assert projected == [
            {"role": "user", "content": "Review it.\n\n<turn>\n</turn>"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path": "a"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "contents"},
            {
                "role": "system",
                "content": "An earlier reply of yours was cut off before it finished; "
                "it had said: Half a",
            },
            {"role": "user", "content": "Go on."},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": "Done."},
        ]
        assert decisions == [
            decision(
                MessageStatus.INTERRUPTED,
                Projection.SYSTEM_NOTE,
                "declared system-note",
                id_="s-1.4",
            ),
            decision(
                MessageStatus.SUPERSEDED,
                None,
                "superseded: kept in the record, out of the prompt",
                id_="s-2.2",
            ),
        ]

    def test_complete_messages_make_no_decision(self) -> None:
        _, decisions = project([message(Role.USER, "a"), message(Role.ASSISTANT, "b", id_="s-1.2")])
        assert decisions == []

    def test_an_empty_history(self) -> None:
        assert project([]) == ([], [])

    def test_a_failed_reply_is_carried_with_the_failures_marker(self) -> None:
        reply = cut("Half a", MessageStatus.FAILED, Projection.ASSISTANT_MARKED)
        assert project([reply]) == (
            [{"role": "assistant", "content": f"Half a\n\n{FAILED_MARKER}"}],
            [
                decision(
                    MessageStatus.FAILED,
                    Projection.ASSISTANT_MARKED,
                    "failed mid-stream: assistant-marked",
                )
            ],
        )

    def test_a_cut_replys_calls_are_left_out_and_counted(self) -> None:
        calls = [ToolCall(id="a", name="bash", arguments='{"comm')]
        failed = message(
            Role.ASSISTANT,
            "Running it.",
            id_="s-1.2",
            toolCalls=calls,
            status=MessageStatus.FAILED,
            projection=Projection.ASSISTANT_MARKED,
        )
        silent = message(
            Role.ASSISTANT,
            id_="s-1.3",
            toolCalls=calls * 2,
            status=MessageStatus.INTERRUPTED,
        )
        assert project([failed, silent]) == (
            [{"role": "assistant", "content": f"Running it.\n\n{FAILED_MARKER}"}],
            [
                decision(
                    MessageStatus.FAILED,
                    Projection.ASSISTANT_MARKED,
                    "failed mid-stream: assistant-marked; its 1 unfinished call left out",
                ),
                decision(
                    MessageStatus.INTERRUPTED,
                    None,
                    "cut before it said anything; its 2 unfinished calls left out",
                    id_="s-1.3",
                ),
            ],
        )


class TestToOpenAI:
    def test_a_user_message_carries_its_briefing_after_a_blank_line(self) -> None:
        briefing = "<turn>\nWorking directory: /work/a\n</turn>"
        entry = to_openai(message(Role.USER, "Review the change.", briefing=briefing))
        assert entry == {"role": "user", "content": f"Review the change.\n\n{briefing}"}

    def test_a_user_message_without_a_briefing(self) -> None:
        assert to_openai(message(Role.USER, "Hello.")) == {"role": "user", "content": "Hello."}

    def test_a_note_of_the_harness_has_no_prompt_before_it(self) -> None:
        entry = to_openai(message(Role.USER, briefing="Go on."))
        assert entry == {"role": "user", "content": "Go on."}

    def test_a_tool_message(self) -> None:
        entry = to_openai(message(Role.TOOL, "exit 0", toolCallId="call_7"))
        assert entry == {"role": "tool", "tool_call_id": "call_7", "content": "exit 0"}

    def test_an_assistant_message_with_text_and_calls(self) -> None:
        calls = [
            ToolCall(id="a", name="bash", arguments='{"command": "ls"}'),
            ToolCall(id="b", name="verdict", arguments="{}"),
        ]
        entry = to_openai(message(Role.ASSISTANT, "Checking.", toolCalls=calls))
        assert entry == {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                },
                {"id": "b", "type": "function", "function": {"name": "verdict", "arguments": "{}"}},
            ],
        }

    def test_an_assistant_message_with_text_only_has_no_tool_calls_key(self) -> None:
        assert to_openai(message(Role.ASSISTANT, "Done.")) == {
            "role": "assistant",
            "content": "Done.",
        }


BROKEN = [
    ('{"command": "ls', "the arguments object is not JSON: EOF while parsing a string"),
    ("not json", "the arguments object is not JSON: expected ident"),
    ("[1, 2]", "the arguments are JSON, but not an object"),
    ('"text"', "the arguments are JSON, but not an object"),
    ('{"a": NaN}', "a is not a finite number"),
    ('{"a":' * 70 + "1" + "}" * 70, "the arguments object nests deeper than 64 levels"),
]


class TestArgumentsSentBack:
    @pytest.mark.parametrize(("written", "why"), BROKEN)
    def test_arguments_that_are_no_object_are_sent_as_an_empty_one(
        self, written: str, why: str
    ) -> None:
        problem = arguments_object(written)
        assert isinstance(problem, str)
        assert problem.startswith(why), problem
        call = ToolCall(id="a", name="bash", arguments=written)
        reply = message(Role.ASSISTANT, toolCalls=[call])
        entry = to_openai(reply)
        assert entry["tool_calls"][0]["function"]["arguments"] == "{}"
        assert reply.toolCalls[0].arguments == written

    def test_empty_arguments_are_the_empty_object(self) -> None:
        assert arguments_object("") == {}
        call = ToolCall(id="a", name="finish", arguments="")
        entry = to_openai(message(Role.ASSISTANT, toolCalls=[call]))
        assert entry["tool_calls"][0]["function"]["arguments"] == "{}"

    def test_an_object_is_sent_as_written(self) -> None:
        written = '{ "b": 2,\n "a": [1] }'
        assert arguments_object(written) == {"b": 2, "a": [1]}
        call = ToolCall(id="a", name="bash", arguments=written)
        entry = to_openai(message(Role.ASSISTANT, toolCalls=[call]))
        assert entry["tool_calls"][0]["function"]["arguments"] == written
