"""Benchmark: how long a failing model provider holds a Turn, and how many requests it gets.

Run from the repository root: ``.venv/bin/python bench/failing_provider.py [--only KIND]``.

A provider on 127.0.0.1 (aiohttp, in this process) fails every request one way; the
Harness's model port (``ProviderModels`` over ``OpenAIModels``, built as ``__main__``
builds it, with the providers file's defaults) is asked for one answer, and the time until
it gives up is what a Turn waiting on that answer is held. Kinds:

- ``500``: HTTP 500 to every request;
- ``429``: HTTP 429 with ``Retry-After: 120`` to every request;
- ``stall``: HTTP 200 and the headers of a stream, then nothing;
- ``hang``: the request is read, and nothing is answered, not even headers.

Prints, per kind: the requests the provider received, the seconds until the failure, and
the failure's message. Timing is printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from aiohttp import web

from kubeturn_harness.models import ModelRequest, Partial, ProviderModels
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.providers import Providers, ProviderType

KINDS = ("500", "429", "stall", "hang")


async def _provider(kind: str, received: list[float]) -> web.AppRunner:
    async def chat(request: web.Request) -> web.StreamResponse:
        received.append(time.monotonic())
        await request.read()
        if kind == "500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        if kind == "429":
            return web.json_response(
                {"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "120"}
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if kind == "stall":
            await response.prepare(request)
        await asyncio.sleep(3600)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def _measure(kind: str, directory: Path) -> None:
    received: list[float] = []
    runner = await _provider(kind, received)
    port = runner.addresses[0][1]
    path = directory / f"{kind}.yaml"
    path.write_text(f"local: {{type: openai, baseUrl: 'http://127.0.0.1:{port}/v1'}}\n")
    model = Providers.load(path).resolve("local/m")
    models = ProviderModels({ProviderType.OPENAI: OpenAIModels()})
    request = ModelRequest(model, [{"role": "user", "content": "hi"}], [], None)
    started = time.monotonic()
    try:
        await models.complete(request, Partial())
        said = "answered (unexpected)"
    except Exception as error:  # the bench reports whatever ended the call
        said = f"{type(error).__name__}: {error}"
    held = time.monotonic() - started
    await models.close()
    await runner.cleanup()
    print(f"{kind:>5}: {len(received)} requests, held {held:7.1f} s; {said}", flush=True)


async def _main(kinds: list[str]) -> None:
    with TemporaryDirectory() as directory:
        for kind in kinds:
            await _measure(kind, Path(directory))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=KINDS, action="append")
    args = parser.parse_args()
    asyncio.run(_main(args.only or list(KINDS)))


if __name__ == "__main__":
    main()
