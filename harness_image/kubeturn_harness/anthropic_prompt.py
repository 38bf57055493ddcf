"""The OpenAI-shaped prompt as a Messages API request: pure functions, no IO.

The tool loop keeps its prompt in OpenAI's chat-completions shape (``ModelRequest``);
the Messages API differs in ways a provider refuses outright, so this module rewrites
the prompt into what the API accepts (ADR 0079):

- system messages: the leading ones become the ``system`` blocks; a system note later in
  the conversation (a cut reply projected as ``system-note``) becomes user text where it
  stood, since the API has no system role among its messages;
- an assistant's tool calls become ``tool_use`` blocks whose ``input`` is the parsed
  arguments; arguments that are not a JSON object become ``{}`` (the API refuses any other
  input), the record keeps what the model wrote;
- tool results become ``tool_result`` blocks in the user message that follows; roles
  must alternate, so consecutive tool results, and a user message or system note right
  after them, merge into ONE user message, tool results first;
- every ``tool_use`` gets its ``tool_result`` and every ``tool_result`` answers a
  ``tool_use`` of the message before it (the API refuses either gap); a missing result
  is said to be missing, an orphan result becomes text;
- tool ids keep only the characters the API allows (``[A-Za-z0-9_-]``), the same way on
  both sides, so a conversation begun on an OpenAI-compatible provider can go on here;
- empty text is left out (the API refuses empty text blocks);
- the thinking blocks an answer streamed are put back before its text and tool calls,
  verbatim, so a tool loop with thinking goes on (see ``thinking_for``);
- prompt caching: ``cache_control`` breakpoints on the last tool, the last system block,
  the end of the earlier conversation and the end of this prompt (four, the API's
  limit), so each step of a tool loop, and each Turn of a continued conversation, reads
  what came before from the cache.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubeturn_harness import bodies
from kubeturn_harness.errors import NotJson
from kubeturn_harness.wire import ThinkingLevel

Block = dict[str, Any]
MessageParam = dict[str, Any]
Thoughts = Callable[[str], Sequence[Block] | None]
"""The thinking blocks kept for the answer that made the tool call of this id, if any."""

CACHE: Block = {"type": "ephemeral"}
"""The one kind of cache breakpoint: five minutes, refreshed by every read."""

MISSING_RESULT = "No result was recorded for this call."
ORPHAN_RESULT = "A tool result whose call is not in the conversation"

THINKING_BUDGETS: dict[ThinkingLevel, int] = {
    ThinkingLevel.MINIMAL: 1024,
    ThinkingLevel.LOW: 2048,
    ThinkingLevel.MEDIUM: 8192,
    ThinkingLevel.HIGH: 16384,
}
"""``budget_tokens`` per level (ADR 0080). 1024 is the API's least; each step doubles or
quadruples it; 16384 leaves room under the 32k output cap of the smallest-capped model
that thinks, with the answer's own ``max_tokens`` on top."""

THINKING_BLOCKS = ("thinking", "redacted_thinking")

_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Prompt:
    """The parts of a Messages API request made from one ``ModelRequest``."""

    system: list[Block]
    messages: list[MessageParam]
    tools: list[Block]


def convert(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    thoughts: Thoughts = lambda _: None,
) -> Prompt:
    """The Messages API form of an OpenAI-shaped prompt and tool list."""
    system, rest = _split_system(messages)
    converted = _alternate(_blocks(rest, thoughts))
    converted = _pair_tool_results(converted)
    anthropic_tools = [tool_param(tool) for tool in tools]
    _mark_cache(system, converted, anthropic_tools)
    return Prompt(system=system, messages=converted, tools=anthropic_tools)


def tool_param(tool: dict[str, Any]) -> Block:
    """An OpenAI function tool as an Anthropic tool (``input_schema`` an object schema)."""
    function = tool.get("function", tool)
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    param: Block = {"name": function["name"], "input_schema": schema}
    if function.get("description"):
        param["description"] = function["description"]
    return param


def tool_input(arguments: str | None) -> dict[str, Any]:
    """A call's arguments as the ``input`` object the API takes: ``{}`` unless they are
    a JSON object the Harness reads (``bodies``: strict, finite, at most 64 deep)."""
    try:
        parsed = bodies.parse(arguments or "", what="the arguments object")
    except NotJson:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def tool_id(raw: str | None) -> str:
    """A tool call id the API accepts, made from any provider's id."""
    cleaned = _ID_UNSAFE.sub("_", raw or "")
    return cleaned or "call"


def thinking_for(level: ThinkingLevel | None, prompt: Prompt) -> Block | None:
    """The ``thinking`` parameter for this request, or None for none.

    A tool loop is one assistant turn to the API: it runs from the first answer after a
    user message that says something (not only tool results) to the prompt's end, and it
    keeps one thinking configuration, so with thinking on its first answer must start
    with its thinking blocks. When the prompt ends inside a loop whose first answer has
    none (made without thinking, or its blocks are no longer kept), this request goes
    without thinking rather than be refused (ADR 0080).
    """
    if level is None or level is ThinkingLevel.OFF:
        return None
    opening = _loop_opening(prompt.messages)
    if opening is not None and opening["content"][0]["type"] not in THINKING_BLOCKS:
        return None
    return {"type": "enabled", "budget_tokens": THINKING_BUDGETS[level]}


def _loop_opening(messages: list[MessageParam]) -> MessageParam | None:
    """The first answer of the tool loop the prompt ends in; None when it ends in none
    (its last message says something besides tool results)."""
    opening = None
    index = len(messages) - 1
    while index >= 1 and _only_results(messages[index]):
        opening = messages[index - 1]
        index -= 2
    return opening


def _only_results(message: MessageParam) -> bool:
    return message["role"] == "user" and all(
        block["type"] == "tool_result" for block in message["content"]
    )


def _split_system(messages: Sequence[dict[str, Any]]) -> tuple[list[Block], list[dict[str, Any]]]:
    system: list[Block] = []
    index = 0
    while index < len(messages) and messages[index].get("role") == "system":
        text = _text(messages[index].get("content"))
        if text:
            system.append({"type": "text", "text": text})
        index += 1
    return system, list(messages[index:])


def _text(content: Any) -> str:
    """The text of an OpenAI message's content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") for part in content if isinstance(part, dict) and "text" in part
    )


def _blocks(messages: Sequence[dict[str, Any]], thoughts: Thoughts) -> list[MessageParam]:
    """Each message as a role and its content blocks; roles may still repeat."""
    out: list[MessageParam] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            result: Block = {
                "type": "tool_result",
                "tool_use_id": tool_id(message.get("tool_call_id")),
            }
            text = _text(message.get("content"))
            if text:
                result["content"] = text
            out.append({"role": "user", "content": [result]})
        elif role == "assistant":
            out.append({"role": "assistant", "content": _assistant(message, thoughts)})
        else:  # user, or a system note inside the conversation
            text = _text(message.get("content"))
            out.append(
                {"role": "user", "content": [{"type": "text", "text": text}] if text else []}
            )
    return out


def _assistant(message: dict[str, Any], thoughts: Thoughts) -> list[Block]:
    calls = message.get("tool_calls") or []
    content: list[Block] = []
    if calls:
        content.extend(dict(block) for block in thoughts(calls[0].get("id") or "") or ())
    text = _text(message.get("content"))
    if text:
        content.append({"type": "text", "text": text})
    for call in calls:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": tool_id(call.get("id")),
                "name": function.get("name") or "",
                "input": tool_input(function.get("arguments")),
            }
        )
    return content


def _alternate(messages: list[MessageParam]) -> list[MessageParam]:
    """Merge consecutive messages of one role; drop those left empty. In a merged user
    message the tool results come first, as the API requires."""
    merged: list[MessageParam] = []
    for message in messages:
        if not message["content"]:
            continue
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1]["content"].extend(message["content"])
        else:
            merged.append({"role": message["role"], "content": list(message["content"])})
    for message in merged:
        if message["role"] == "user":
            message["content"].sort(key=lambda block: block["type"] != "tool_result")
    return merged


def _pair_tool_results(messages: list[MessageParam]) -> list[MessageParam]:
    """Every tool_use answered in the next message, every tool_result answering one of the
    message before it: a missing result is said to be missing, an orphan becomes text."""
    out: list[MessageParam] = []
    asked: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            if asked:
                out.append({"role": "user", "content": _missing(asked)})
            out.append(message)
            asked = [block["id"] for block in message["content"] if block["type"] == "tool_use"]
            continue
        content = [
            _orphan(block) if _is_orphan(block, asked) else block for block in message["content"]
        ]
        answered = {block.get("tool_use_id") for block in content}
        content[:0] = _missing([call for call in asked if call not in answered])
        content.sort(key=lambda block: block["type"] != "tool_result")
        out.append({"role": "user", "content": content})
        asked = []
    if asked:
        out.append({"role": "user", "content": _missing(asked)})
    return out


def _is_orphan(block: Block, asked: list[str]) -> bool:
    return block["type"] == "tool_result" and block["tool_use_id"] not in asked


def _orphan(block: Block) -> Block:
    said = block.get("content", "")
    return {"type": "text", "text": f"{ORPHAN_RESULT} ({block['tool_use_id']}): {said}"}


def _missing(calls: list[str]) -> list[Block]:
    return [
        {"type": "tool_result", "tool_use_id": call, "content": MISSING_RESULT} for call in calls
    ]


def _mark_cache(system: list[Block], messages: list[MessageParam], tools: list[Block]) -> None:
    if tools:
        tools[-1]["cache_control"] = dict(CACHE)
    if system:
        system[-1]["cache_control"] = dict(CACHE)
    for index in sorted({_earlier_end(messages), len(messages) - 1}):
        if index >= 0:
            _mark_last(messages[index])


def _earlier_end(messages: list[MessageParam]) -> int:
    """The index of the message that ended the previous request's prompt: the one before
    the last assistant answer; -1 when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "assistant":
            return index - 1
    return -1


def _mark_last(message: MessageParam) -> None:
    """A breakpoint on the message's last block: never a thinking block, which may not
    carry one, since an answer's thinking comes before its text and tool calls."""
    message["content"][-1]["cache_control"] = dict(CACHE)
