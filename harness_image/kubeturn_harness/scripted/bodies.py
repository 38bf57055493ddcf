"""The request bodies the scripted model reads, and the error body it answers.

Only the part of an OpenAI chat-completions request that picks and shapes a reply is
modelled; every other field (``tools``, ``temperature``...) is allowed and kept in the
record untouched, so any client's request is accepted. Nothing here does IO.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


class _Open(BaseModel):
    """A part of an OpenAI body: unmodelled fields are allowed, as providers allow them."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ContentPart(_Open):
    """One part of a list-of-parts message content; only ``text`` parts carry text."""

    type: str
    text: str | None = None


class Function(_Open):
    name: str = ""
    arguments: str = ""


class CallOfHistory(_Open):
    """A tool call of an earlier assistant message, as a client sends it back."""

    function: Function


class Message(_Open):
    """One chat message."""

    role: str
    content: str | list[ContentPart] | None = None
    tool_calls: list[CallOfHistory] | None = None

    def text(self) -> str:
        """The message's text: the string content, or its text parts joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        if self.content is None:
            return ""
        return "\n".join(part.text for part in self.content if part.text is not None)


class StreamOptions(_Open):
    include_usage: bool = False


class ChatRequest(_Open):
    """A ``POST /v1/chat/completions`` body; any model name is accepted."""

    model: str
    messages: list[Message]
    stream: bool = False
    stream_options: StreamOptions | None = None


class ReleaseRequest(BaseModel):
    """A ``POST /_release`` body: release the held requests of one conversation, or all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match: str | None = None
    """The ``match`` string of the conversation to release; absent releases every one."""


def unsendable_arguments(messages: list[Message]) -> str | None:
    """The first earlier tool call whose arguments are not one JSON object, named by its
    path, as real servers refuse the whole request for it; None when there is none."""
    for m, message in enumerate(messages):
        for c, call in enumerate(message.tool_calls or ()):
            try:
                value = json.loads(call.function.arguments)
            except ValueError as error:
                problem = f"not JSON ({error})"
            else:
                if isinstance(value, dict):
                    continue
                problem = "not a JSON object"
            where = f"messages.{m}.tool_calls.{c}.function.arguments"
            return f"{where}: {problem}; a server cannot render this conversation"
    return None


def error_body(message: str, status: int) -> dict[str, Any]:
    """An OpenAI-shaped error body, which the SDK turns into its typed status errors."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def describe(error: ValidationError) -> str:
    """One line naming every field a body got wrong, for a 400 answer."""
    return "; ".join(
        f"{'.'.join(str(part) for part in detail['loc']) or 'body'}: {detail['msg']}"
        for detail in error.errors()
    )
