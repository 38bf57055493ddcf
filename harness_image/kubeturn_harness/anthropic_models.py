"""The adapter for Anthropic's Messages API (the official ``anthropic`` SDK).

One attempt per call (the SDK's own retries are off: kubeturn's retry policy,
``retries``, wraps every adapter in one place; the timeouts are the provider's),
streamed, filling the ``Partial`` as the events arrive. The prompt is rewritten by
``anthropic_prompt``; this module does the IO and keeps, for each tool call an answer
made, the thinking blocks that came before it, so the tool loop can send them back as
the API requires (ADR 0080). Every error of the SDK, and of the HTTP stream
under it, is translated to ``ProviderFailure`` here and nowhere else.

The SDK is imported at the first request to an Anthropic provider, not with this module:
it takes longer to import than the ``openai`` SDK (about twice as long, measured), and a
Harness whose providers are all OpenAI-compatible should not start slower for it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import httpx2

from kubeturn_harness import anthropic_prompt, retries
from kubeturn_harness.anthropic_prompt import Block
from kubeturn_harness.clients import Clients
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.providers import ModelName, Provider
from kubeturn_harness.wire import ToolCall, Usage

if TYPE_CHECKING:
    import anthropic

MAX_TOKENS = 8192
"""The answer's own ``max_tokens`` (the API requires one) unless the provider sets
``maxTokens``: every current Claude model can write that much, and a coding Agent's
single answer (a file written through a tool) rarely needs more. Thinking's budget is
added on top."""

THOUGHTS_KEPT = 1024
"""Answers whose thinking blocks are kept for their tool calls, the least recently used
dropped first. The API needs them only while a tool loop goes on; a thousand live
conversations (ADR 0054) each in one loop fit, at a few kilobytes per answer."""

FINISHES: Mapping[str | None, Finish] = {
    "end_turn": Finish.STOP,
    "stop_sequence": Finish.STOP,
    "tool_use": Finish.TOOL_CALLS,
    "max_tokens": Finish.LENGTH,
}
"""``stop_reason`` in the loop's words; any other (``refusal``, ``pause_turn``, none) is
``Finish.OTHER``."""

ERROR_STATUSES: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The status an ``error`` event in a stream stands for: the HTTP status was 200 when
the stream began, so the error's ``type`` is what says what happened."""


@dataclass
class _Block:
    """One content block as it streams."""

    type: str
    parts: list[str] = field(default_factory=list)
    """Its text, thinking, or tool input JSON, as the deltas came."""
    signature: list[str] = field(default_factory=list)
    start: dict[str, Any] = field(default_factory=dict)
    """What ``content_block_start`` said of it (a tool call's id and name, redacted data)."""


def _client(provider: Provider) -> anthropic.AsyncAnthropic:
    import anthropic

    timeouts = provider.spec.timeouts
    idle = timeouts.idleSeconds
    return anthropic.AsyncAnthropic(
        base_url=provider.spec.baseUrl,
        api_key=provider.api_key,
        max_retries=0,
        # read: the wait for the answer's headers and for each read of its body.
        timeout=anthropic.Timeout(
            connect=timeouts.connectSeconds, read=idle, write=idle, pool=idle
        ),
    )


class AnthropicModels:
    """Messages with tool use, streamed, through one client per provider."""

    def __init__(self) -> None:
        self._clients = Clients(_client)
        self._thoughts: OrderedDict[tuple[str, str], tuple[Block, ...]] = OrderedDict()
        """(provider, tool call id) → the thinking blocks of the answer that made the call."""

    async def close(self) -> None:
        await self._clients.close()

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        provider = request.model.provider
        prompt = anthropic_prompt.convert(
            request.messages, request.tools, lambda call: self._kept(provider.name, call)
        )
        params: dict[str, Any] = {
            "model": request.model.model,
            "max_tokens": provider.spec.maxTokens or MAX_TOKENS,
            "messages": prompt.messages,
        }
        if prompt.system:
            params["system"] = prompt.system
        if prompt.tools:
            params["tools"] = prompt.tools
        thinking = anthropic_prompt.thinking_for(request.thinking, prompt)
        if thinking is not None:
            params["thinking"] = thinking
            params["max_tokens"] += thinking["budget_tokens"]
        return await self._stream(self._clients.get(provider), request.model, params, partial)

    def _kept(self, provider: str, call: str) -> Sequence[Block] | None:
        key = (provider, call)
        blocks = self._thoughts.get(key)
        if blocks is not None:
            self._thoughts.move_to_end(key)
        return blocks

    def _keep(self, provider: str, calls: list[ToolCall], blocks: list[Block]) -> None:
        if not blocks or not calls:
            return
        for call in calls:
            self._thoughts[(provider, call.id)] = tuple(blocks)
            self._thoughts.move_to_end((provider, call.id))
        while len(self._thoughts) > THOUGHTS_KEPT:
            self._thoughts.popitem(last=False)

    async def _stream(
        self,
        client: anthropic.AsyncAnthropic,
        model: ModelName,
        params: dict[str, Any],
        partial: Partial,
    ) -> ModelAnswer:
        import anthropic

        idle = model.provider.spec.timeouts.idleSeconds
        try:
            stream = await client.messages.create(**params, stream=True)
            answer = _Answer(partial)
            try:
                async for event in retries.chunks(stream, idle_s=idle, where=model.where):
                    answer.take(event)
            finally:
                answer.calls_so_far()
                await stream.close()
        except anthropic.APIError as error:
            raise _failure(model, error) from error
        except httpx2.TransportError as error:  # the stream broke while it was read
            raise _dropped(model, str(error) or type(error).__name__) from error
        except RecursionError as error:  # raised and unwound inside the SDK's reading
            outcome = "answered JSON nested too deep to read"
            raise ProviderFailure(f"{model.where} {outcome}", outcome=outcome) from error
        if not answer.stopped:
            outcome = "ended its stream before its answer ended"
            raise ProviderFailure(f"{model.where} {outcome}", retryable=True, outcome=outcome)
        self._keep(model.provider.name, answer.tool_calls, answer.thinking)
        return ModelAnswer(
            text=partial.content,
            tool_calls=answer.tool_calls,
            usage=partial.usage,
            finish=FINISHES.get(answer.stop_reason, Finish.OTHER),
        )


class _Answer:
    """Folds the stream's events into the ``Partial`` as they come: text and usage at
    once, a tool call when it starts (its arguments by ``calls_so_far``)."""

    def __init__(self, partial: Partial) -> None:
        self.partial = partial
        self.blocks: dict[int, _Block] = {}
        self.calls: dict[int, int] = {}
        """Content block index → the call's index among the answer's tool calls."""
        self.usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.stopped = False

    def take(self, event: Any) -> None:
        kind = event.type
        if kind == "message_start":
            self._count(event.message.usage)
        elif kind == "content_block_start":
            self._start(event.index, event.content_block)
        elif kind == "content_block_delta":
            self._delta(event.index, event.delta)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason
            self._count(event.usage)
        elif kind == "message_stop":
            self.stopped = True

    def _start(self, index: int, block: Any) -> None:
        start = cast(dict[str, Any], block.model_dump(exclude_none=True))
        self.blocks[index] = _Block(type=block.type, start=start)
        if block.type == "tool_use":
            self.calls[index] = len(self.calls)
            self._call(index)

    def _delta(self, index: int, delta: Any) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        kind = delta.type
        if kind == "text_delta":
            block.parts.append(delta.text)
            self.partial.text.append(delta.text)
            self.partial.delta()
        elif kind == "input_json_delta":
            block.parts.append(delta.partial_json)
            self.partial.delta()
        elif kind == "thinking_delta":
            block.parts.append(delta.thinking)
            self.partial.delta()
        elif kind == "signature_delta":
            block.signature.append(delta.signature)

    def _call(self, index: int) -> None:
        """The call in the ``Partial``, its arguments as far as they streamed, kept as
        written (``""`` for a tool that takes none is the empty object)."""
        block = self.blocks[index]
        self.partial.tool_calls[self.calls[index]] = ToolCall(
            id=block.start.get("id", ""),
            name=block.start.get("name", ""),
            arguments="".join(block.parts),
        )

    def calls_so_far(self) -> None:
        """Every call's arguments into the ``Partial``, however the stream ended. A call
        is put there when it starts, its arguments once, here: a long argument streams
        in thousands of pieces."""
        for index in self.calls:
            self._call(index)

    def _count(self, usage: Any) -> None:
        """Usage as reported so far: ``message_start`` gives the prompt's, ``message_delta``
        the running output (and, from newer servers, the prompt's again)."""
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ):
            value = getattr(usage, name, None)
            if value is not None:
                self.usage[name] = value
        read = self.usage.get("cache_read_input_tokens", 0)
        written = self.usage.get("cache_creation_input_tokens", 0)
        self.partial.usage = Usage(
            promptTokens=self.usage.get("input_tokens", 0) + read + written,
            completionTokens=self.usage.get("output_tokens", 0),
            cacheReadTokens=read,
            cacheWriteTokens=written,
        )

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [self.partial.tool_calls[i] for i in sorted(self.partial.tool_calls)]

    @property
    def thinking(self) -> list[Block]:
        """The answer's thinking blocks, whole, as the API wants them back."""
        kept: list[Block] = []
        for _, block in sorted(self.blocks.items()):
            if block.type == "thinking":
                kept.append(
                    {
                        "type": "thinking",
                        "thinking": "".join(block.parts),
                        "signature": "".join(block.signature),
                    }
                )
            elif block.type == "redacted_thinking":
                kept.append({"type": "redacted_thinking", "data": block.start.get("data", "")})
        return kept


def _failure(model: ModelName, error: anthropic.APIError) -> ProviderFailure:
    """One attempt's SDK error, classified for the retry policy."""
    import anthropic

    if isinstance(error, anthropic.APIStatusError):
        detail = _error_message(error)
        if error.status_code < 400:  # an ``error`` event in a stream that began with 200
            kind = _error_type(error.body) or "error"
            status = ERROR_STATUSES.get(kind, 500)
            outcome = f"reported {kind} in its stream"
            return retries.answered(model, status, {}, detail, outcome=outcome)
        return retries.answered(model, error.status_code, error.response.headers, detail)
    if isinstance(error, anthropic.APITimeoutError):
        return retries.timed_out(model, error.__cause__)
    if isinstance(error, anthropic.APIConnectionError):
        cause = error.__cause__
        return _dropped(model, str(cause) if cause is not None and str(cause) else error.message)
    outcome = "answered something that is not a Messages stream"
    return ProviderFailure(
        f"{model.where} {outcome}: {error.message}", outcome=outcome, detail=error.message
    )


def _dropped(model: ModelName, detail: str) -> ProviderFailure:
    outcome = "could not be reached or dropped the connection"
    return ProviderFailure(
        f"{model.where} {outcome}: {detail}", retryable=True, outcome=outcome, detail=detail
    )


def _error_type(body: object) -> str | None:
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            return cast(str, inner["type"])
    return None


def _error_message(error: anthropic.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return cast(str, inner["message"])
    return error.message
