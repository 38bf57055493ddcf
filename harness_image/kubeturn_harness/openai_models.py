"""The adapter for OpenAI-compatible chat-completions servers (the official ``openai`` SDK).

It makes ONE attempt per call: the SDK's own retries are off (``max_retries=0``), and
kubeturn's policy (``kubeturn_harness.retries``) decides whether and when to try again.
Every SDK error is translated to a classified ``ProviderFailure`` here and nowhere else
(``_failure``), and so is the ``RecursionError`` the SDK's ``json`` raises reading a
streamed chunk nested too deep. The SDK range this is tested with is pinned in
pyproject (docs/decisions/0076): its error classes, ``Timeout`` and the translation of
a stream's transport errors to ``APIConnectionError`` are what this module relies on.
"""

from __future__ import annotations

import re
from typing import Any, cast

import openai

from kubeturn_harness import retries
from kubeturn_harness.clients import Clients
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.providers import ModelName, Provider
from kubeturn_harness.wire import ThinkingLevel, ToolCall, Usage


def _client(provider: Provider) -> openai.AsyncOpenAI:
    timeouts = provider.spec.timeouts
    idle = timeouts.idleSeconds
    return openai.AsyncOpenAI(
        base_url=provider.spec.baseUrl,
        api_key=provider.api_key,
        max_retries=0,
        # read: the wait for the answer's headers and for each read of its body.
        timeout=openai.Timeout(connect=timeouts.connectSeconds, read=idle, write=idle, pool=idle),
    )


class OpenAIModels:
    """Chat completions with tool calling, streamed, through one client per provider."""

    def __init__(self) -> None:
        self._clients = Clients(_client)

    async def close(self) -> None:
        await self._clients.close()

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        thinking = request.thinking
        effort = (
            openai.omit if thinking is None or thinking is ThinkingLevel.OFF else thinking.value
        )
        provider = request.model.provider
        return await self._stream(self._clients.get(provider), request, effort, partial)

    async def _stream(
        self, client: openai.AsyncOpenAI, request: ModelRequest, effort: Any, partial: Partial
    ) -> ModelAnswer:
        model = request.model
        try:
            stream = await client.chat.completions.create(
                model=model.model,
                messages=cast(Any, request.messages),
                tools=cast(Any, request.tools) if request.tools else openai.omit,
                reasoning_effort=cast(Any, effort),
                stream=True,
                stream_options={"include_usage": True},
            )
            try:
                idle = model.provider.spec.timeouts.idleSeconds
                return await _collect(
                    retries.chunks(stream, idle_s=idle, where=model.where), partial
                )
            finally:
                await stream.close()
        except openai.APIError as error:
            raise _failure(model, error) from error
        except RecursionError as error:  # raised and unwound inside the SDK's reading
            outcome = "answered JSON nested too deep to read"
            raise ProviderFailure(f"{model.where} {outcome}", outcome=outcome) from error


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
                    cacheReadTokens=getattr(chunk.usage.prompt_tokens_details, "cached_tokens", 0)
                    or 0,
                )
            for choice in chunk.choices:
                finish = choice.finish_reason or finish
                delta = choice.delta
                if delta.content:
                    partial.text.append(delta.content)
                    partial.delta()
                if _reasoned(delta):
                    partial.delta()
                for call in delta.tool_calls or ():
                    if calls.setdefault(call.index, _CallPieces()).add(call):
                        partial.delta()
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


REASONING = ("reasoning_content", "reasoning")
"""Where OpenAI-compatible servers stream a reasoning model's thinking, outside OpenAI's
own schema (llama.cpp and DeepSeek: ``reasoning_content``; vLLM and OpenRouter:
``reasoning``). It is not kept (no prompt carries it back), but counted: it is output the
provider bills."""


def _reasoned(delta: Any) -> bool:
    """Whether a chunk's delta carries a piece of reasoning. Read from the fields the
    SDK's schema does not name (``model_extra``): a plain ``getattr`` of a field that is
    absent raises inside pydantic and costs more than the rest of the chunk's handling."""
    extra = delta.model_extra
    return bool(extra) and any(extra.get(name) for name in REASONING)


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

    def add(self, delta: Any) -> bool:
        """Take one delta of the call; True when it carried a piece of the arguments."""
        if delta.id:
            self.id = delta.id
        if delta.function is None:
            return False
        if delta.function.name:
            self.name += delta.function.name
        if delta.function.arguments:
            self.arguments.append(delta.function.arguments)
            return True
        return False

    def call(self, index: int) -> ToolCall:
        arguments = "".join(self.arguments)
        return ToolCall(id=self.id or f"call_{index}", name=self.name, arguments=arguments)


_SDK_PREFIX = re.compile(r"^Error code: \d+ - ")
"""How the SDK starts a status error's message; the status is said apart."""


def _failure(model: ModelName, error: openai.APIError) -> ProviderFailure:
    """One attempt's SDK error, classified for the retry policy."""
    if isinstance(error, openai.APIStatusError):
        detail = _SDK_PREFIX.sub("", error.message)
        return retries.answered(model, error.status_code, error.response.headers, detail)
    if isinstance(error, openai.APITimeoutError):
        return retries.timed_out(model, error.__cause__)
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        detail = str(cause) if cause is not None and str(cause) else error.message
        outcome = "could not be reached or dropped the connection"
        return ProviderFailure(
            f"{model.where} {outcome}: {detail}", retryable=True, outcome=outcome, detail=detail
        )
    if isinstance(error, openai.APIResponseValidationError):
        outcome = "answered something that is not a chat completion"
    else:  # an error the server reported inside its stream
        outcome = "reported an error in its stream"
    return ProviderFailure(
        f"{model.where} {outcome}: {error.message}", outcome=outcome, detail=error.message
    )
