"""OpenAI-shaped answers: a ``chat.completion`` body, or ``chat.completion.chunk`` events.

A Step is first resolved into a Reply (ids, text, calls, usage), then rendered either
whole or as the stream of chunks a provider sends. The stream is split in two, opening
(role and text) and closing (tool calls, finish, usage), so the server can hold a
response open between them. Pure: the creation time comes in as an argument; no IO.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubeturn_harness.scripted import script

CHARS_PER_TOKEN = 4
"""The usual rule of thumb for English text; token counts only need to be deterministic."""

ARGUMENTS_PIECE = 16
"""Characters per ``function.arguments`` delta: small enough that typical arguments span
several deltas, as providers stream them, so a client must prove it accumulates them."""

DONE = b"data: [DONE]\n\n"
"""The event that ends an OpenAI stream."""


@dataclass(frozen=True)
class Call:
    """One tool call as sent: its id, function name and arguments text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Reply:
    """Everything one answer says, before it is shaped as a body or as chunks."""

    id: str
    created: int
    model: str
    text: str | None
    calls: tuple[Call, ...]
    prompt_tokens: int
    completion_tokens: int
    finish: str | None = None
    """The ``finish_reason`` the step asks for; None: the one its content implies."""

    @property
    def finish_reason(self) -> str:
        if self.finish is not None:
            return self.finish
        return "tool_calls" if self.calls else "stop"

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def reply(
    step: script.Step, *, index: int, reply_id: str, model: str, messages: Any, created: int
) -> Reply:
    """Resolve ``step``, the answer at Step ``index`` to a request of ``messages`` (raw JSON).

    Call ids are ``call_<index>_<i>``, unique within a conversation even when a Step
    repeats. Usage is ``len(json.dumps(messages)) // 4`` prompt tokens and
    ``(len(text) + len(all arguments)) // 4 + 1`` completion tokens.
    """
    calls = tuple(
        Call(id=f"call_{index}_{i}", name=call.name, arguments=call.arguments_text())
        for i, call in enumerate(step.tool_calls)
    )
    said = len(step.text or "") + sum(len(call.arguments) for call in calls)
    return Reply(
        id=reply_id,
        created=created,
        model=model,
        text=step.text,
        calls=calls,
        prompt_tokens=len(json.dumps(messages)) // CHARS_PER_TOKEN,
        completion_tokens=said // CHARS_PER_TOKEN + 1,
        finish=step.finish_reason,
    )


def completion(answer: Reply) -> dict[str, Any]:
    """The whole ``chat.completion`` body, for a request with ``stream`` false."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text}
    if answer.calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in answer.calls
        ]
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": answer.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": answer.usage(),
    }


def opening_chunks(answer: Reply) -> list[dict[str, Any]]:
    """The chunks sent before any hold: the assistant role, then the text word by word."""
    pieces = text_pieces(answer.text or "")
    return [_chunk(answer, {"role": "assistant"})] + [
        _chunk(answer, {"content": piece}) for piece in pieces
    ]


def closing_chunks(answer: Reply, *, include_usage: bool) -> list[dict[str, Any]]:
    """The chunks sent after any hold: tool-call deltas, the finish, and usage if asked."""
    chunks: list[dict[str, Any]] = []
    for i, call in enumerate(answer.calls):
        opening = {"index": i, "id": call.id, "type": "function"}
        function = {"name": call.name, "arguments": ""}
        chunks.append(_chunk(answer, {"tool_calls": [opening | {"function": function}]}))
        chunks.extend(
            _chunk(answer, {"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in _slices(call.arguments, ARGUMENTS_PIECE)
        )
    chunks.append(_chunk(answer, {}, finish_reason=answer.finish_reason))
    if include_usage:
        chunks.append(_envelope(answer) | {"choices": [], "usage": answer.usage()})
    return chunks


def event(chunk: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``chunk``."""
    return f"data: {json.dumps(chunk)}\n\n".encode()


def text_pieces(text: str) -> list[str]:
    """``text`` split after each run of whitespace, so every piece is a word and its spaces."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


def _slices(text: str, size: int) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def _envelope(answer: Reply) -> dict[str, Any]:
    return {
        "id": answer.id,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
    }


def _chunk(
    answer: Reply, delta: dict[str, Any], *, finish_reason: str | None = None
) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    return _envelope(answer) | {"choices": [choice]}
