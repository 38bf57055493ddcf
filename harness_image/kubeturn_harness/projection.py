"""Projection: which recorded messages a new Submission's prompt carries, and as what.

A cut reply stays in the record; whether it reaches later prompts, and in which form,
was declared when it was cut (docs/turn-semantics.md §6): ``assistant-marked`` (the
model's own words, marked as cut off), ``system-note`` (context it did not commit to)
or ``omit``; a superseded reply is never projected; a reply whose stream failed is carried
as the model's own words, marked as cut by the failure. A cut reply's calls never ran, so
they are left out. Every such choice is returned as a decision, so the record says what
each prompt did.

What is sent back to a provider is always what providers accept (docs/turn-semantics.md
§8): a call whose arguments are not one JSON object (invalid JSON, arguments truncated at
the output limit) is sent with ``ARGUMENTS_PLACEHOLDER`` in their place, in every later
prompt; the record keeps the text the model wrote, and the call's result tells the model
so. Pure functions; no IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubeturn_harness import bodies
from kubeturn_harness.errors import NotJson
from kubeturn_harness.wire import (
    Message,
    MessageStatus,
    Projection,
    ProjectionDecision,
    Role,
)

CUT_MARKER = "[This reply was cut off here: it was stopped before it finished.]"
FAILED_MARKER = "[This reply was cut off here: the model's answer failed before it finished.]"
ARGUMENTS_PLACEHOLDER = "{}"
"""What a prompt carries for arguments that are not one JSON object. llama.cpp's server
(and LiteLLM in front of it) refuse a whole request whose history holds such a call, and
Anthropic's Messages API takes only an object as a call's input; the empty object is what
every provider accepts, and it claims nothing the model did not say."""

OpenAIMessage = dict[str, Any]


def project(history: Sequence[Message]) -> tuple[list[OpenAIMessage], list[ProjectionDecision]]:
    """The earlier conversation as chat messages, and a decision for each cut reply."""
    projected: list[OpenAIMessage] = []
    decisions: list[ProjectionDecision] = []
    for message in history:
        if message.role is Role.SYSTEM:
            continue
        if message.role is Role.ASSISTANT and message.status is not MessageStatus.COMPLETE:
            entry, decision = _cut_reply(message)
            decisions.append(decision)
            if entry is not None:
                projected.append(entry)
            continue
        projected.append(to_openai(message))
    return projected, decisions


def to_openai(message: Message) -> OpenAIMessage:
    """One complete record message as a chat-completions message."""
    if message.role is Role.USER:
        parts = [part for part in (message.content, message.briefing) if part]
        return {"role": "user", "content": "\n\n".join(parts)}
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.toolCallId, "content": message.content}
    entry: OpenAIMessage = {"role": message.role.value, "content": message.content or None}
    if message.toolCalls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": sendable(call.arguments)},
            }
            for call in message.toolCalls
        ]
    return entry


def _cut_reply(message: Message) -> tuple[OpenAIMessage | None, ProjectionDecision]:
    def decided(form: Projection | None, reason: str) -> ProjectionDecision:
        return ProjectionDecision(
            messageId=message.id, status=message.status, projectedAs=form, reason=reason
        )

    if message.status is MessageStatus.SUPERSEDED:
        return None, decided(None, "superseded: kept in the record, out of the prompt")
    calls = len(message.toolCalls)
    unrun = f"; its {calls} unfinished call{'s' if calls != 1 else ''} left out" if calls else ""
    form = message.projection or Projection.ASSISTANT_MARKED
    if form is Projection.OMIT:
        return None, decided(None, f"declared omit{unrun}")
    if not message.content:
        return None, decided(None, f"cut before it said anything{unrun}")
    if form is Projection.SYSTEM_NOTE:
        note = (
            "An earlier reply of yours was cut off before it finished; "
            f"it had said: {message.content}"
        )
        return {"role": "system", "content": note}, decided(form, f"declared system-note{unrun}")
    if message.status is MessageStatus.FAILED:
        marker, reason = FAILED_MARKER, f"failed mid-stream: assistant-marked{unrun}"
    else:
        marker, reason = CUT_MARKER, f"declared assistant-marked{unrun}"
    marked = f"{message.content}\n\n{marker}"
    return {"role": "assistant", "content": marked}, decided(form, reason)


def arguments_object(arguments: str) -> dict[str, Any] | str:
    """A call's arguments as one JSON object, or why they are not one (a clause).

    Empty arguments are the empty object: providers send ``""`` for a call of a tool that
    takes no arguments.
    """
    if not arguments:
        return {}
    try:
        value = bodies.parse(arguments, what="the arguments object")
    except NotJson as error:
        return error.message
    if not isinstance(value, dict):
        return "the arguments are JSON, but not an object"
    return value


def sendable(arguments: str) -> str:
    """A call's arguments as a prompt carries them: as written, or the placeholder."""
    if arguments and isinstance(arguments_object(arguments), dict):
        return arguments
    return ARGUMENTS_PLACEHOLDER
