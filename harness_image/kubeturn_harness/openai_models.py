"""The adapter for OpenAI-compatible chat-completions servers (the official ``openai`` SDK).

Every SDK error is translated to ``ProviderFailure`` here and nowhere else, and so is the
``RecursionError`` the SDK's ``json`` raises reading a streamed chunk nested too deep.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import openai

from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import MODEL_CALLS, ModelAnswer, ModelRequest, Partial
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
    calls: dict[int, dict[str, Any]] = {}
    usage: Usage | None = None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = Usage(
                promptTokens=chunk.usage.prompt_tokens or 0,
                completionTokens=chunk.usage.completion_tokens or 0,
                cacheReadTokens=getattr(chunk.usage.prompt_tokens_details, "cached_tokens", 0) or 0,
            )
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                partial.text.append(delta.content)
            for call in delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": []})
                if call.id:
                    slot["id"] = call.id
                if call.function is not None:
                    if call.function.name:
                        slot["name"] += call.function.name
                    if call.function.arguments:
                        slot["arguments"].append(call.function.arguments)
    tool_calls = [
        ToolCall(
            id=slot["id"] or f"call_{index}",
            name=slot["name"],
            arguments="".join(slot["arguments"]) or "{}",
        )
        for index, slot in sorted(calls.items())
    ]
    return ModelAnswer(text=partial.content, tool_calls=tool_calls, usage=usage)


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
