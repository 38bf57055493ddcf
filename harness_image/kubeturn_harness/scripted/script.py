"""The script of the scripted model: which replies it gives, read from YAML.

A Script is a list of Conversations. A Conversation picks the requests it answers by a
substring of their first user message and answers them with its Steps in order. The
models refuse unknown keys, so a misspelt key fails loudly, naming its path, instead of
being silently ignored. This module reads a file at most; it does no network IO.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from kubeturn_harness.errors import ScriptError


class _Strict(BaseModel):
    """Script models: camelCase keys as in the YAML, unknown keys refused, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class ToolCall(_Strict):
    """A function call the model makes in a Step."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """A mapping is sent as its JSON text; a string is sent verbatim, to script bad JSON."""

    @field_validator("arguments", mode="before")
    @classmethod
    def _mapping_or_string(cls, value: object) -> object:
        if not isinstance(value, dict | str):
            raise ValueError("arguments must be a mapping or a string")
        return value

    def arguments_text(self) -> str:
        """The ``function.arguments`` text sent on the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


class ProviderError(_Strict):
    """An HTTP error the model answers instead of a completion, to script provider failures."""

    status: int = Field(ge=400, le=599)
    message: str


class Cut(_Strict):
    """Where a streamed answer breaks off, to script a stream that fails midway."""

    after_chunks: int = Field(ge=0)
    """How many chunks of the answer's stream are sent first (the role chunk is the first)."""
    error: ProviderError | None = None
    """Then send this as an error event and end the stream (as servers report a failure
    midway); without it, drop the connection."""


FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class Step(_Strict):
    """One reply of a Conversation."""

    text: str | None = None
    """Assistant text; streamed before any hold."""
    tool_calls: tuple[ToolCall, ...] = ()
    hold: bool = False
    """Hold the response open after the text until released or the client disconnects."""
    delay_ms: int = Field(default=0, ge=0)
    """Milliseconds to wait before answering at all."""
    error: ProviderError | None = None
    finish_reason: FinishReason | None = None
    """The ``finish_reason`` sent; default ``tool_calls`` when the step has calls, else
    ``stop``. ``length`` scripts an answer cut at the output limit."""
    cut: Cut | None = None

    @model_validator(mode="after")
    def _error_alone(self) -> Self:
        shaped = self.text is not None or self.tool_calls or self.hold
        if self.error is not None and (shaped or self.finish_reason or self.cut):
            raise ValueError(
                "a step with `error` answers only the error: drop text, toolCalls, hold, "
                "finishReason, cut"
            )
        return self


class Conversation(_Strict):
    """The Steps that answer every request whose first user message contains ``match``."""

    match: str
    repeat: bool = False
    """When the steps run out: repeat the last one (true) or say the script has ended."""
    steps: tuple[Step, ...]

    @field_validator("steps")
    @classmethod
    def _some_steps(cls, steps: tuple[Step, ...]) -> tuple[Step, ...]:
        # A validator rather than ``min_length``, which also fires when a step is invalid.
        if not steps:
            raise ValueError("a conversation needs at least one step")
        return steps


class Script(_Strict):
    """A whole script; the first Conversation that matches a request answers it."""

    conversations: tuple[Conversation, ...]


def parse_script(text: str, source: str = "<script>") -> Script:
    """Parse a script from YAML text; ``source`` names it in errors."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ScriptError(f"{source}: not valid YAML: {error}") from error
    try:
        return Script.model_validate(document)
    except ValidationError as error:
        problems = "\n".join(f"  {_describe(detail)}" for detail in error.errors())
        raise ScriptError(f"{source}: not a valid script:\n{problems}") from error


def load_script(path: Path) -> Script:
    """Read and parse the script file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScriptError(f"{path}: cannot read the script: {error}") from error
    return parse_script(text, source=str(path))


def _describe(detail: ErrorDetails) -> str:
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in detail["loc"])
    if detail["type"] == "extra_forbidden":
        message = "unknown key"
    else:
        message = detail["msg"].removeprefix("Value error, ")
    return f"{path.lstrip('.') or '(the document)'}: {message}"
