"""The adapter for OpenAI-compatible chat-completions servers (the official ``openai`` SDK).

Every SDK error is translated to ``ProviderFailure`` here and nowhere else, and so is the
``RecursionError`` the SDK's ``json`` raises reading a streamed chunk nested too deep.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import openai

from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import MODEL_CALLS, Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.providers import ModelName, Provider
from kubeturn_harness.wire import ThinkingLevel, ToolCall, Usage

MODEL_RETRIES = 2
"""The SDK's own retries of a failed request (connection errors, 429, 5xx) before it
fails: a blip is absorbed, a down provider fails the Submission within seconds."""

MODEL_TIMEOUT_S = 600.0
"""A streamed answer may take minutes; a stalled connection may not take forever."""


class OpenAIModels:
    """Chat completions with tool calling, streamed, through one client per provider."""

    def __init__(
        self,
        *,
        retries: int = MODEL_RETRIES,
        timeout: float = MODEL_TIMEOUT_S,
        calls: int = MODEL_CALLS,
    ) -> None:
        self._clients: dict[str, openai.AsyncOpenAI] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        """Per provider: its requests in flight, at most ``calls``."""
        self._retries = retries
        self._timeout = timeout
        self._calls = calls

    def _client(self, provider: Provider) -> openai.AsyncOpenAI:
        client = self._clients.get(provider.name)
        if client is None:
            client = openai.AsyncOpenAI(
                base_url=provider.spec.baseUrl,
                api_key=provider.api_key,
                max_retries=self._retries,
                timeout=self._timeout,
            )
            self._clients[provider.name] = client
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        thinking = request.thinking
        effort = (
            openai.omit if thinking is None or thinking is ThinkingLevel.OFF else thinking.value
        )
        provider = request.model.provider
        client = self._client(provider)
        slots = self._slots.setdefault(provider.name, asyncio.Semaphore(self._calls))
        async with slots:
            return await self._stream(client, request, effort, partial)

    async def _stream(
        self, client: openai.AsyncOpenAI, request: ModelRequest, effort: Any, partial: Partial
    ) -> ModelAnswer:
        try:
            stream = await client.chat.completions.create(
                model=request.model.model,
                messages=cast(Any, request.messages),
                tools=cast(Any, request.tools) if request.tools else openai.omit,
                reasoning_effort=cast(Any, effort),
                stream=True,
                stream_options={"include_usage": True},
            )
            try:
                return await _collect(stream, partial)
            finally:
                await stream.close()
        except openai.APIError as error:
            raise ProviderFailure(_describe(request.model, error)) from error
        except RecursionError as error:  # raised and unwound inside the SDK's reading
            said = f"{_where(request.model)} answered JSON nested too deep to read"
            raise ProviderFailure(said) from error


async def _collect(stream: Any, partial: Partial) -> ModelAnswer:
    """Read one streamed answer into ``partial`` as it comes, then answer it whole.

    ``partial`` holds the text, the calls as far as they streamed and the usage reported,
    however the stream ends: a cut (a sweep cancels the task), an error mid-stream, or the
    end. A stream that ends with no ``finish_reason`` ended before the answer did (a
    connection closed cleanly midway): it fails, and may be retried.
    """
    calls: dict[int, _CallPieces] = {}
    finish: str | None = None
    try:
        async for chunk in stream:
            if chunk.usage is not None:
                partial.usage = Usage(
                    promptTokens=chunk.usage.prompt_tokens or 0,
                    completionTokens=chunk.usage.completion_tokens or 0,
                )
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta.content:
                    partial.text.append(delta.content)
                for call in delta.tool_calls or ():
                    calls.setdefault(call.index, _CallPieces()).add(call)
    finally:
        # Built once at the end, not per delta: a long argument streams in thousands.
        partial.tool_calls = {index: calls[index].call(index) for index in sorted(calls)}
    if finish is None:
        # Worded to follow the provider's name, as the retry policy reports an attempt.
        raise ProviderFailure(
            "ended the answer's stream before the answer (no finish_reason came)",
            retryable=True,
        )
    return ModelAnswer(
        text=partial.content,
        tool_calls=list(partial.tool_calls.values()),
        usage=partial.usage,
        finish=FINISHES.get(finish, Finish.OTHER),
    )


FINISHES = {
    "stop": Finish.STOP,
    "tool_calls": Finish.TOOL_CALLS,
    "function_call": Finish.TOOL_CALLS,
    "length": Finish.LENGTH,
}
"""OpenAI's ``finish_reason`` values in the loop's words; any other (``content_filter``,
a server's own) is ``Finish.OTHER``."""


class _CallPieces:
    """One streamed tool call's pieces: its id and name come once, its arguments in parts
    (kept as written: ``""`` for a tool that takes none is the empty object)."""

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Any) -> None:
        if delta.id:
            self.id = delta.id
        if delta.function is not None:
            if delta.function.name:
                self.name += delta.function.name
            if delta.function.arguments:
                self.arguments.append(delta.function.arguments)

    def call(self, index: int) -> ToolCall:
        arguments = "".join(self.arguments)
        return ToolCall(id=self.id or f"call_{index}", name=self.name, arguments=arguments)


def _where(model: ModelName) -> str:
    return (
        f"provider {model.provider.name!r} ({model.provider.spec.baseUrl}), model {model.model!r}"
    )


def _describe(model: ModelName, error: openai.APIError) -> str:
    where = _where(model)
    status = getattr(error, "status_code", None)
    if status is not None:
        return f"{where} answered HTTP {status} after {MODEL_RETRIES} retries: {error.message}"
    return f"{where} failed after {MODEL_RETRIES} retries: {error.message}"
