"""The OpenAI adapter's usage: the prompt tokens a server read from its cache
(``prompt_tokens_details.cached_tokens``) are ``cacheReadTokens``; a server that does not
say has none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeturn_harness.models import ModelRequest, Partial
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.providers import ModelName, Provider, ProviderSpec
from kubeturn_harness.wire import Usage
from tests.harness.support import streamed_completions


@pytest.mark.parametrize(
    ("details", "read"), [({"cached_tokens": 30}, 30), (None, 0)], ids=["cached", "unsaid"]
)
async def test_cached_prompt_tokens_are_cache_reads(details: Any, read: int) -> None:
    usage = {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": details}
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Hi."}, "finish_reason": "stop"}],
        },
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [],
            "usage": usage,
        },
    ]

    models = OpenAIModels()
    async with streamed_completions(*(json.dumps(c).encode() for c in chunks)) as url:
        model = ModelName(Provider("local", ProviderSpec(baseUrl=url)), "m")
        try:
            answer = await models.complete(
                ModelRequest(model, [{"role": "user", "content": "Hi."}], [], None), Partial()
            )
        finally:
            await models.close()
    assert answer.usage == Usage(promptTokens=50, completionTokens=5, cacheReadTokens=read)
