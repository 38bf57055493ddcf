"""The model port: what the tool loop asks of a model, and what every adapter returns.

The tool loop sees only ``ModelPort``: one streamed completion per step. An adapter
(``openai_models``, one per provider type) makes one attempt per call and fills the
``Partial`` as the answer streams, so a run cut mid-answer (a sweep cancels its task, which
closes the HTTP stream) or a stream that fails midway still has what the model had said
and the tokens it was reported to use. An adapter translates every error of its SDK to
``ProviderFailure``, classified (status, whether a retry may help, the server's
``Retry-After``); ``ProviderModels`` routes each request to its provider type's adapter,
under kubeturn's retry policy (``kubeturn_harness.retries``), the same for every adapter.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from kubeturn_harness import retries
from kubeturn_harness.clock import Clock, SystemClock
from kubeturn_harness.providers import ModelName, ProviderType
from kubeturn_harness.wire import ThinkingLevel, ToolCall, Usage

MODEL_CALLS = 256
"""Model requests in flight at once to one provider; a further one waits for one to end.
Each holds a socket, and a Harness in a container has 1024 file descriptors (the default
soft RLIMIT_NOFILE): a thousand live conversations, each calling its model, must fit
with the Harness's own API, the Orchestrator's and the toolbox's (ADR 0054). A provider
that serves more at once for one sandbox is rare; its rate limits bind first."""


class Finish(StrEnum):
    """Why the model stopped answering, in the provider-neutral words of the loop."""

    STOP = "stop"
    """It said all it meant to (OpenAI ``stop``, Anthropic ``end_turn``)."""
    TOOL_CALLS = "tool_calls"
    """It stopped to have its tool calls run."""
    LENGTH = "length"
    """It hit the output token limit: the last text or tool call is truncated."""
    OTHER = "other"
    """Anything else a provider says (a content filter, a refusal), or nothing."""


@dataclass(frozen=True)
class ModelRequest:
    model: ModelName
    messages: list[dict[str, Any]]
    """The prompt in OpenAI chat-completions shape; other adapters translate it."""
    tools: list[dict[str, Any]]
    """Tool definitions in OpenAI's ``{"type": "function", "function": …}`` shape."""
    thinking: ThinkingLevel | None


@dataclass
class Partial:
    """What a model answer has said so far, kept by the caller across a cut or a failure."""

    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, ToolCall] = field(default_factory=dict)
    """Calls streamed so far by their index; a call's arguments may still be incomplete."""
    usage: Usage | None = None
    """The usage the provider reported so far (most report it only at the end)."""
    output_tokens: int = 0
    """Output pieces streamed so far (text, reasoning, tool-call arguments), each about
    one token: what the answer has cost before the provider says (``delta``)."""
    on_delta: Callable[[int], None] | None = field(default=None, repr=False, compare=False)
    """Told ``output_tokens`` after each piece; the caller's, so an adapter stays free of
    what is done with the count. Called per piece: it must be cheap."""

    @property
    def content(self) -> str:
        return "".join(self.text)

    @property
    def used(self) -> Usage | None:
        """What the answer has used so far, as far as it is known: what its provider
        reported (Anthropic reports the prompt's tokens as the stream starts; most others
        nothing before its end), its output at least the pieces it streamed."""
        if self.usage is None:
            return Usage(completionTokens=self.output_tokens) if self.output_tokens else None
        if self.usage.completionTokens >= self.output_tokens:
            return self.usage
        return self.usage.model_copy(update={"completionTokens": self.output_tokens})

    def delta(self) -> None:
        """Count one output piece as it streams; an adapter calls it for every piece of
        text, reasoning or a tool call's arguments, whether or not it keeps the piece."""
        self.output_tokens += 1
        if self.on_delta is not None:
            self.on_delta(self.output_tokens)

    def clear(self) -> None:
        """Forget what an attempt said, before the next attempt of the same request."""
        self.text.clear()
        self.tool_calls.clear()
        self.usage = None
        self.output_tokens = 0


@dataclass(frozen=True)
class ModelAnswer:
    text: str
    tool_calls: list[ToolCall]
    usage: Usage | None
    finish: Finish = Finish.STOP


class ModelPort(Protocol):
    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer: ...


class ClosablePort(ModelPort, Protocol):
    async def close(self) -> None: ...


class ProviderModels:
    """The Harness's model port: each request goes to its provider type's adapter, and
    is tried again as its provider's retry policy says (``retries.call``). Before a
    further attempt the caller's ``Partial`` is emptied: it holds what the attempt in
    flight has said, so a cut keeps that answer, never two answers run together."""

    def __init__(
        self,
        adapters: Mapping[ProviderType, ClosablePort],
        *,
        clock: Clock | None = None,
        jitter: Callable[[], float] = random.random,
        calls: int = MODEL_CALLS,
    ) -> None:
        self._adapters = dict(adapters)
        self._clock: Clock = clock or SystemClock()
        self._jitter = jitter
        self._calls = calls
        self._slots: dict[str, asyncio.Semaphore] = {}
        """Per provider: its requests in flight, at most ``calls``; a back-off holds none."""

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        provider = request.model.provider
        adapter = self._adapters[provider.spec.type]
        slots = self._slots.setdefault(provider.name, asyncio.Semaphore(self._calls))
        attempts = 0

        async def attempt() -> ModelAnswer:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                partial.clear()
            async with slots:
                return await adapter.complete(request, partial)

        return await retries.call(attempt, request.model, self._clock, self._jitter)

    async def close(self) -> None:
        for adapter in self._adapters.values():
            await adapter.close()
