"""Fixtures of the system tier; the parts they are made of live in ``support``."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.orchestrator import api
from kubeturn_harness.scripted import parse_script, serve
from kubeturn_harness.settings import Settings
from tests import guarantee
from tests.harness.support import ScriptedModel, shared_dir, start_harness
from tests.system.support import (
    HARNESS_TOKEN,
    WAIT_S,
    WORKSPACE,
    WORKSPACE_TOKEN,
    Cleanup,
    System,
    delay_picks,
    token_digest,
)

StartSystem = Callable[..., Awaitable[System]]


@pytest.fixture
async def system(tmp_path: Path, toolbox_socket: Path) -> AsyncIterator[StartSystem]:
    """Start a System from a script (YAML text).

    ``pick_answer_delay_s`` holds back the Orchestrator API's answer to each pick;
    ``pricing`` (YAML flow text, e.g. ``{any: {input: 1, output: 2}}``) prices the
    scripted model's models; other keyword arguments override the Harness's settings.
    """
    cleanups: list[Cleanup] = []
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S))
    started: list[System] = []

    async def start(
        script: str,
        *,
        pick_answer_delay_s: float = 0.0,
        pricing: str = "",
        **overrides: Any,
    ) -> System:
        model_runner, model_url = await serve(parse_script(script))
        cleanups.append(model_runner.cleanup)

        registry = api.Registry()
        registry.set_token(WORKSPACE, WORKSPACE_TOKEN)
        app = api.make_app(registry)
        if pick_answer_delay_s:
            app.middlewares.append(delay_picks(pick_answer_delay_s))
        api_runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await api_runner.setup()
        await web.TCPSite(api_runner, "127.0.0.1", 0).start()
        cleanups.append(api_runner.cleanup)
        api_url = f"http://127.0.0.1:{api_runner.addresses[0][1]}"

        root = shared_dir()
        cleanups.append(lambda: asyncio.to_thread(shutil.rmtree, root, True))
        providers_file = tmp_path / "providers.yaml"
        priced = f"  pricing: {pricing}\n" if pricing else ""
        providers_file.write_text(f"scripted:\n  type: openai\n  baseUrl: {model_url}\n{priced}")
        settings = Settings(
            data_dir=tmp_path / "data",
            token_sha256=token_digest(HARNESS_TOKEN),
            orchestrator_url=api_url,
            orchestrator_token=WORKSPACE_TOKEN,
            providers_file=providers_file,
            default_model="scripted/any",
            **overrides,
        )
        harness, harness_url = await start_harness(settings, cleanups, toolbox=toolbox_socket)
        world = System(
            model=ScriptedModel(model_url, session),
            harness=harness,
            harness_url=harness_url,
            api_url=api_url,
            registry=registry,
            session=session,
            root=root,
        )
        started.append(world)
        return world

    yield start
    for world in started:
        # No Harness call reaches an actor from here on; then stop what each applies.
        world.registry.actors.clear()
        for actor in world.actors:
            await actor.close()
        for client in world.clients:
            await client.close()
    for cleanup in reversed(cleanups):
        await cleanup()
    await session.close()
    for world in started:
        guarantee.check_counter(world.harness.metrics.registry)
