"""Fixtures of the conformance tier; the parts they are made of live in ``support``."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn_harness.clock import Clock
from kubeturn_harness.scripted import parse_script, serve
from kubeturn_harness.settings import Settings
from tests.harness.support import (
    ORCHESTRATOR_TOKEN,
    TOKEN,
    HarnessClient,
    ScriptedModel,
    StartWorld,
    StubOrchestrator,
    World,
    shared_dir,
    start_harness,
)


@pytest.fixture
async def world(tmp_path: Path, toolbox_socket: Path) -> AsyncIterator[StartWorld]:
    """Start a World from a script (a YAML string); settings may be overridden, the
    Harness's clock given, the provider sent elsewhere (``provider_url``) with more keys
    (``provider``, YAML lines of its entry), and its model requests' clock given."""
    cleanups: list[Callable[[], Awaitable[Any]]] = []
    session = aiohttp.ClientSession()

    async def start(
        script: str,
        *,
        orchestrated: bool = True,
        clock: Clock | None = None,
        provider_url: str | None = None,
        provider: str = "",
        model_clock: Clock | None = None,
        **overrides: Any,
    ) -> World:
        model_runner, model_url = await serve(parse_script(script))
        cleanups.append(model_runner.cleanup)

        stub = StubOrchestrator()
        stub_runner = web.AppRunner(stub.app())
        await stub_runner.setup()
        await web.TCPSite(stub_runner, "127.0.0.1", 0).start()
        stub.url = f"http://127.0.0.1:{stub_runner.addresses[0][1]}"
        cleanups.append(stub_runner.cleanup)

        providers_file = tmp_path / "providers.yaml"
        entry = f"scripted:\n  type: openai\n  baseUrl: {provider_url or model_url}\n"
        providers_file.write_text(entry + "".join(f"  {line}\n" for line in provider.splitlines()))
        workdir = shared_dir()
        cleanups.append(lambda: asyncio.to_thread(shutil.rmtree, workdir, True))
        settings = Settings(
            data_dir=tmp_path / "data",
            token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
            orchestrator_url=stub.url if orchestrated else None,
            orchestrator_token=ORCHESTRATOR_TOKEN,
            providers_file=providers_file,
            **overrides,
        )
        harness, url = await start_harness(
            settings, cleanups, toolbox=toolbox_socket, clock=clock, model_clock=model_clock
        )
        return World(
            ScriptedModel(model_url, session),
            stub,
            HarnessClient(url, session, harness, settings.data_dir, workdir),
        )

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()
    await session.close()
