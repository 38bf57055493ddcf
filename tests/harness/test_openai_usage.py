"""The OpenAI adapter's usage: the prompt tokens a server read from its cache
(``prompt_tokens_details.cached_tokens``) are ``cacheReadTokens``; a server that does not
say has none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from kubeturn_harness.models import ModelRequest, Partial
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.providers import ModelName, Provider, ProviderSpec
from kubeturn_harness.wire import Usage


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

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    models = OpenAIModels()
    model = ModelName(Provider("local", ProviderSpec(baseUrl=url)), "m")
    try:
        answer = await models.complete(
            ModelRequest(model, [{"role": "user", "content": "Hi."}], [], None), Partial()
        )
    finally:
        await models.close()
        await runner.cleanup()
    assert answer.usage == Usage(promptTokens=50, completionTokens=5, cacheReadTokens=read)
