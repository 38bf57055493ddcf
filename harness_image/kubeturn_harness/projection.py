"""Projection: which recorded messages a new Submission's prompt carries, and as what.

A cut reply stays in the record; whether it reaches later prompts, and in which form,
was declared when it was cut (docs/turn-semantics.md §6): ``assistant-marked`` (the
model's own words, marked as cut off), ``system-note`` (context it did not commit to)
or ``omit``; a superseded reply is never projected. Every such choice is returned as a decision, so
the record says what each prompt did. Pure functions; no IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubeturn_harness.wire import (
    Message,
    MessageStatus,
    Projection,
    ProjectionDecision,
    Role,
)

CUT_MARKER = "[This reply was cut off here: it was stopped before it finished.]"

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
        content = message.content
        if message.briefing:
            content = f"{content}\n\n{message.briefing}"
        return {"role": "user", "content": content}
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.toolCallId, "content": message.content}
    entry: OpenAIMessage = {"role": message.role.value, "content": message.content or None}
    if message.toolCalls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
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
    form = message.projection or Projection.ASSISTANT_MARKED
    if form is Projection.OMIT:
        return None, decided(None, "declared omit")
    if not message.content:
        return None, decided(None, "cut before it said anything")
    if form is Projection.SYSTEM_NOTE:
        note = (
            "An earlier reply of yours was cut off before it finished; "
            f"it had said: {message.content}"
        )
        return {"role": "system", "content": note}, decided(form, "declared system-note")
    marked = f"{message.content}\n\n{CUT_MARKER}"
    return {"role": "assistant", "content": marked}, decided(form, "declared assistant-marked")
