"""The OpenAI-shaped prompt rewritten for the Messages API (``anthropic_prompt``).

Cases:
- system: the leading system messages become system blocks (the last one a cache
  breakpoint); a system note later in the conversation becomes user text where it stood;
- tool calls: ``tool_use`` blocks with the parsed arguments; arguments that are not a
  JSON object the Harness reads (invalid, truncated, an array, a string, empty, nested
  past 64 levels, holding NaN) become ``{}``; ids keep only ``[A-Za-z0-9_-]``, alike on
  the call and its result;
- tool results: consecutive results merge into one user message, and a user message
  right after them joins it, results first; a call without a result gets one saying so;
  a result whose call is not in the message before becomes text;
- empty text is left out; a message left empty is dropped; text given as parts is read;
- tools: ``{name, description, input_schema}``, an object schema when none is given;
- thinking: the blocks kept for an answer's first call open that answer, verbatim;
  ``thinking_for`` maps each level to its budget, gives none for off/None, and none when
  the prompt ends in a tool loop whose first answer does not open with thinking (later
  answers of a loop need none; a prompt after the results opens a new turn);
- cache breakpoints: the last tool, the last system block, the end of the previous
  request's prompt and the end of this one, at most four;
- every conversion of a generated conversation is one the strict stand-in accepts.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubeturn_harness.anthropic_prompt import (
    MISSING_RESULT,
    ORPHAN_RESULT,
    THINKING_BUDGETS,
    Prompt,
    convert,
    thinking_for,
    tool_input,
)
from kubeturn_harness.wire import ThinkingLevel
from tests.harness.messages_api import check

CACHE = {"type": "ephemeral"}
SYSTEM = {"role": "system", "content": "You review."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def calls(*pairs: tuple[str, str], text: str | None = None) -> dict[str, Any]:
    """An assistant message calling tools: (id, arguments) pairs, all named ``read``."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read", "arguments": a}}
            for i, a in pairs
        ],
    }


def result(call: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call, "content": text}


def plain(prompt: Prompt) -> list[dict[str, Any]]:
    """The messages without their cache breakpoints, to compare shapes."""
    return [
        {
            "role": m["role"],
            "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]],
        }
        for m in prompt.messages
    ]


class TestSystem:
    def test_leading_system_messages_are_the_system_blocks(self) -> None:
        prompt = convert([SYSTEM, {"role": "system", "content": "Be brief."}, user("Hi.")], [])
        assert prompt.system == [
            {"type": "text", "text": "You review."},
            {"type": "text", "text": "Be brief.", "cache_control": CACHE},
        ]
        assert plain(prompt) == [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}]

    def test_a_later_system_note_is_user_text_where_it_stood(self) -> None:
        note = {"role": "system", "content": "An earlier reply was cut off."}
        prompt = convert([SYSTEM, user("One."), note, user("Two.")], [])
        assert plain(prompt) == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "One."},
                    {"type": "text", "text": "An earlier reply was cut off."},
                    {"type": "text", "text": "Two."},
                ],
            }
        ]


class TestToolCalls:
    def test_calls_are_tool_use_blocks_after_the_text(self) -> None:
        prompt = convert(
            [user("Go."), calls(("c1", '{"path": "a"}'), text="Reading."), result("c1")], []
        )
        assert plain(prompt)[1] == {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"path": "a"}},
            ],
        }

    @pytest.mark.parametrize(
        "arguments",
        [
            '{"path": "a',
            "not json",
            "[1, 2]",
            '"a string"',
            "",
            "null",
            '{"a":' * 100 + "1" + "}" * 100,
            '{"n": NaN}',
        ],
        ids=["truncated", "invalid", "array", "string", "empty", "null", "nested", "NaN"],
    )
    def test_arguments_not_read_as_an_object_are_an_empty_input(self, arguments: str) -> None:
        assert tool_input(arguments) == {}
        prompt = convert([user("Go."), calls(("c1", arguments)), result("c1")], [])
        assert prompt.messages[1]["content"][0]["input"] == {}

    def test_ids_keep_only_what_the_api_allows_on_both_sides(self) -> None:
        prompt = convert([user("Go."), calls(("call:1/a.b", "{}")), result("call:1/a.b")], [])
        assert prompt.messages[1]["content"][0]["id"] == "call_1_a_b"
        assert prompt.messages[2]["content"][0]["tool_use_id"] == "call_1_a_b"


class TestToolResults:
    def test_results_and_the_next_prompt_are_one_user_message_results_first(self) -> None:
        history = [
            user("Go."),
            calls(("c1", "{}"), ("c2", "{}")),
            result("c1", "A"),
            result("c2", ""),
        ]
        prompt = convert([*history, user("Next.")], [])
        assert plain(prompt)[2] == {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "c2"},
                {"type": "text", "text": "Next."},
            ],
        }

    def test_a_call_without_its_result_is_said_to_have_none(self) -> None:
        prompt = convert(
            [user("Go."), calls(("c1", "{}"), ("c2", "{}")), result("c2"), user("Next.")], []
        )
        assert plain(prompt)[2]["content"][:2] == [
            {"type": "tool_result", "tool_use_id": "c1", "content": MISSING_RESULT},
            {"type": "tool_result", "tool_use_id": "c2", "content": "ok"},
        ]

    def test_a_result_without_its_call_is_text(self) -> None:
        prompt = convert(
            [user("Go."), {"role": "assistant", "content": "Hm."}, result("c9", "A")], []
        )
        assert plain(prompt)[2] == {
            "role": "user",
            "content": [{"type": "text", "text": f"{ORPHAN_RESULT} (c9): A"}],
        }


class TestEmpty:
    def test_empty_text_and_empty_messages_are_left_out(self) -> None:
        history = [user("Go."), {"role": "assistant", "content": ""}, user(""), user("Again.")]
        assert plain(convert(history, [])) == [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Go."}, {"type": "text", "text": "Again."}],
            }
        ]

    def test_text_in_parts_is_read(self) -> None:
        parts = {
            "role": "user",
            "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        }
        assert plain(convert([parts], []))[0]["content"] == [{"type": "text", "text": "AB"}]


class TestTools:
    def test_functions_become_tools_with_an_object_schema(self) -> None:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "read",
                    "description": "Read.",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
            {"type": "function", "function": {"name": "done"}},
        ]
        assert convert([user("Go.")], tools).tools == [
            {
                "name": "read",
                "description": "Read.",
                "input_schema": {"type": "object", "properties": {}},
            },
            {
                "name": "done",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": CACHE,
            },
        ]


THOUGHT = {"type": "thinking", "thinking": "First the diff.", "signature": "s1"}


class TestThinking:
    def test_kept_blocks_open_the_answer_that_made_the_call(self) -> None:
        kept = {"c1": [THOUGHT, {"type": "redacted_thinking", "data": "x"}]}
        prompt = convert([user("Go."), calls(("c1", "{}"), text="Hm."), result("c1")], [], kept.get)
        assert [b["type"] for b in prompt.messages[1]["content"]] == [
            "thinking",
            "redacted_thinking",
            "text",
            "tool_use",
        ]
        assert prompt.messages[1]["content"][0] == THOUGHT

    @pytest.mark.parametrize("level", list(THINKING_BUDGETS))
    def test_each_level_has_its_budget(self, level: ThinkingLevel) -> None:
        prompt = convert([user("Go.")], [])
        assert thinking_for(level, prompt) == {
            "type": "enabled",
            "budget_tokens": THINKING_BUDGETS[level],
        }

    def test_the_budgets_grow_with_the_level_from_the_apis_least(self) -> None:
        assert list(THINKING_BUDGETS.values()) == sorted(THINKING_BUDGETS.values())
        assert min(THINKING_BUDGETS.values()) == 1024
        assert set(THINKING_BUDGETS) == set(ThinkingLevel) - {ThinkingLevel.OFF}

    @pytest.mark.parametrize("level", [None, ThinkingLevel.OFF])
    def test_off_is_none(self, level: ThinkingLevel | None) -> None:
        assert thinking_for(level, convert([user("Go.")], [])) is None

    def test_a_tool_loop_opened_without_thinking_goes_on_without(self) -> None:
        history = [user("Go."), calls(("c1", "{}")), result("c1")]
        assert thinking_for(ThinkingLevel.HIGH, convert(history, [])) is None
        kept = convert(history, [], {"c1": [THOUGHT]}.get)
        assert thinking_for(ThinkingLevel.HIGH, kept) is not None

    def test_a_loop_opened_with_thinking_thinks_through_later_answers_without(self) -> None:
        history = [
            user("Go."),
            calls(("c1", "{}")),
            result("c1"),
            calls(("c2", "{}")),
            result("c2"),
        ]
        assert thinking_for(ThinkingLevel.HIGH, convert(history, [], {"c1": [THOUGHT]}.get))
        assert thinking_for(ThinkingLevel.HIGH, convert(history, [], {"c2": [THOUGHT]}.get)) is None

    def test_a_prompt_after_the_results_opens_a_new_turn(self) -> None:
        history = [user("Go."), calls(("c1", "{}")), result("c1"), user("Next Turn.")]
        assert thinking_for(ThinkingLevel.HIGH, convert(history, [])) is not None
        later = [user("Go."), {"role": "assistant", "content": "Done."}, user("More.")]
        assert thinking_for(ThinkingLevel.HIGH, convert(later, [])) is not None


class TestCache:
    def test_breakpoints_end_the_earlier_prompt_and_this_one(self) -> None:
        history = [SYSTEM, user("Go."), calls(("c1", "{}")), result("c1"), user("More.")]
        prompt = convert(history, [], {"c1": [THOUGHT]}.get)
        marked = [
            (index, block["type"])
            for index, message in enumerate(prompt.messages)
            for block in message["content"]
            if "cache_control" in block
        ]
        assert marked == [(0, "text"), (2, "text")]
        assert "cache_control" in prompt.system[-1]


ROLES = st.sampled_from(["user", "assistant", "tool", "system"])
ARGUMENTS = st.sampled_from(['{"path": "a"}', "{", "[]", ""])


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [SYSTEM, user("Go.")]
    for number in range(draw(st.integers(0, 12))):
        role = draw(ROLES)
        if role == "assistant":
            count = draw(st.integers(0, 3))
            pairs = [(f"c{number}.{i}", draw(ARGUMENTS)) for i in range(count)]
            text = draw(st.sampled_from([None, "", "Hm."]))
            messages.append(
                calls(*pairs, text=text) if pairs else {"role": "assistant", "content": text}
            )
        elif role == "tool":
            messages.append(
                result(draw(st.sampled_from([f"c{number - 1}.0", f"c{number - 1}.1", "x"])))
            )
        else:
            messages.append({"role": role, "content": draw(st.sampled_from(["", "Note."]))})
    return messages


@settings(deadline=None)  # a shared CI machine's pauses are not the converter's
@given(conversations(), st.sampled_from([None, *ThinkingLevel]))
def test_every_conversion_is_one_the_api_accepts(
    history: list[dict[str, Any]], level: ThinkingLevel | None
) -> None:
    prompt = convert(history, [{"type": "function", "function": {"name": "read"}}])
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 40000,
        "messages": prompt.messages,
        "system": prompt.system,
        "tools": prompt.tools,
    }
    thinking = thinking_for(level, prompt)
    if thinking is not None:
        body["thinking"] = thinking
    assert check(body) is None
