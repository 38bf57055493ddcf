"""``python -m kubeturn_harness serve``: the Harness's entry point.

The only place that reads the Harness's flags and environment. Every flag has an
environment twin (``KUBETURN_*``); a flag wins over its twin. The toolbox has its own
entry point (``python -m kubeturn_harness.sandbox``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from aiohttp import web

from kubeturn_harness.anthropic_models import AnthropicModels
from kubeturn_harness.app import make_runner
from kubeturn_harness.clock import SystemClock
from kubeturn_harness.errors import ConfigError
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import ProviderModels
from kubeturn_harness.openai_models import OpenAIModels
from kubeturn_harness.orchestrator import OrchestratorClient
from kubeturn_harness.providers import Providers, ProviderType
from kubeturn_harness.sandbox import privileges
from kubeturn_harness.sandbox.client import LocalToolbox, Toolbox
from kubeturn_harness.sandbox.protocol import Limits
from kubeturn_harness.service import Harness
from kubeturn_harness.settings import NOBODY, Settings, ToolSettings
from kubeturn_harness.tools import tool_identity
from kubeturn_harness.tracing import Tracing

SERVICE = "kubeturn-harness"
"""The service its spans are of, unless ``OTEL_SERVICE_NAME`` names another."""

log = logging.getLogger("kubeturn_harness")

QUIET_LOGGERS = ("httpx", "httpx2", "openai", "anthropic")
"""Libraries that log every model request at INFO; the Harness's own records say more."""


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m kubeturn_harness")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Harness API")
    serve.add_argument("--host", default=env("KUBETURN_HARNESS_HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=env("KUBETURN_HARNESS_PORT", "8080"))
    serve.add_argument(
        "--data-dir", type=Path, default=Path(env("KUBETURN_HARNESS_DATA_DIR", "/var/lib/kubeturn"))
    )
    serve.add_argument(
        "--token-sha256",
        default=env("KUBETURN_HARNESS_TOKEN_SHA256"),
        help="hex SHA-256 of the bearer token to accept (env KUBETURN_HARNESS_TOKEN_SHA256)",
    )
    serve.add_argument("--orchestrator-url", default=env("KUBETURN_ORCHESTRATOR_URL"))
    serve.add_argument("--providers", type=Path, default=_path(env("KUBETURN_PROVIDERS")))
    serve.add_argument("--default-model", default=env("KUBETURN_DEFAULT_MODEL"))
    serve.add_argument(
        "--toolbox",
        type=Path,
        default=_path(env("KUBETURN_TOOLBOX_SOCKET")),
        help="the toolbox's Unix socket (env KUBETURN_TOOLBOX_SOCKET); without it the "
        "Harness starts a toolbox of its own",
    )
    serve.add_argument("--tool-uid", type=int, default=env("KUBETURN_TOOL_UID", str(NOBODY)))
    serve.add_argument("--tool-gid", type=int, default=env("KUBETURN_TOOL_GID", str(NOBODY)))
    serve.add_argument(
        "--tool-processes",
        type=int,
        default=env("KUBETURN_TOOL_PROCESSES", str(ToolSettings.processes)),
        help="processes one session of the tools may add (env KUBETURN_TOOL_PROCESSES)",
    )
    serve.add_argument(
        "--private",
        type=Path,
        action="append",
        default=[Path(p) for p in env("KUBETURN_PRIVATE", "").split(os.pathsep) if p],
        help="a path no tool may reach, besides the data dir (repeatable; env "
        "KUBETURN_PRIVATE, paths separated by ':')",
    )
    serve.add_argument(
        "--sweep-wait",
        type=float,
        default=env("KUBETURN_SWEEP_WAIT_S", str(Settings.sweep_wait_s)),
        help="seconds a run whose Turn is over waits for the sweep (env KUBETURN_SWEEP_WAIT_S)",
    )
    serve.add_argument(
        "--pick-retry",
        type=float,
        default=env("KUBETURN_PICK_RETRY_S", str(Settings.pick_retry_s)),
        help="seconds a pick is sent again (same idempotency key) while the Orchestrator "
        "is unreachable or answers 503, before the model is told it may be lost (env "
        "KUBETURN_PICK_RETRY_S)",
    )
    serve.add_argument(
        "--idle-eviction",
        type=float,
        default=env("KUBETURN_IDLE_EVICTION_S", str(Settings.idle_eviction_s)),
        help="seconds an idle conversation stays in memory before it is read back from its "
        "log when asked for (env KUBETURN_IDLE_EVICTION_S)",
    )
    serve.add_argument(
        "--idle-conversations-kept",
        type=int,
        default=env("KUBETURN_IDLE_CONVERSATIONS_KEPT", str(Settings.idle_conversations_kept)),
        help="most idle conversations kept in memory (env KUBETURN_IDLE_CONVERSATIONS_KEPT)",
    )
    serve.add_argument(
        "--model-calls",
        type=int,
        default=env("KUBETURN_MODEL_CALLS", str(Settings.model_calls)),
        help="model requests in flight at once to one provider; more wait (env "
        "KUBETURN_MODEL_CALLS)",
    )
    serve.add_argument(
        "--stream-progress-tokens",
        type=int,
        default=env("KUBETURN_STREAM_PROGRESS_TOKENS", str(Settings.stream_progress_tokens)),
        help="output tokens of a model answer between two reports of how far it has "
        "streamed, at the least (env KUBETURN_STREAM_PROGRESS_TOKENS)",
    )
    serve.add_argument(
        "--stream-progress",
        type=float,
        default=env("KUBETURN_STREAM_PROGRESS_S", str(Settings.stream_progress_s)),
        help="seconds between two reports of how far a model answer has streamed, at the "
        "least (env KUBETURN_STREAM_PROGRESS_S)",
    )
    serve.add_argument(
        "--work-root",
        type=Path,
        default=Path(env("KUBETURN_WORK_ROOT", "/work")),
        help="where the Workspace's clones and worktrees live",
    )
    serve.add_argument("--log-level", default=env("KUBETURN_LOG_LEVEL", "INFO"))
    return parser


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def settings_from(args: argparse.Namespace) -> Settings:
    token_hash = args.token_sha256
    if token_hash is not None and (len(token_hash) != 64 or not _is_hex(token_hash)):
        raise ConfigError("KUBETURN_HARNESS_TOKEN_SHA256 must be 64 hex digits (a SHA-256)")
    if token_hash is None:
        raise ConfigError(
            "no bearer token configured: set KUBETURN_HARNESS_TOKEN_SHA256 to the hex SHA-256 "
            "of the token the Orchestrator sends"
        )
    return Settings(
        data_dir=args.data_dir,
        token_sha256=token_hash.lower(),
        orchestrator_url=args.orchestrator_url,
        orchestrator_token=os.environ.get("KUBETURN_ORCHESTRATOR_TOKEN"),
        providers_file=args.providers,
        default_model=args.default_model,
        sweep_wait_s=args.sweep_wait,
        pick_retry_s=args.pick_retry,
        idle_eviction_s=args.idle_eviction,
        idle_conversations_kept=args.idle_conversations_kept,
        model_calls=args.model_calls,
        stream_progress_tokens=args.stream_progress_tokens,
        stream_progress_s=args.stream_progress,
        work_root=args.work_root,
        tools=ToolSettings(
            socket=args.toolbox,
            uid=args.tool_uid,
            gid=args.tool_gid,
            processes=args.tool_processes,
        ),
        private=tuple(args.private),
    )


def _is_hex(value: str) -> bool:
    try:
        int(value, 16)
    except ValueError:
        return False
    return True


def toolbox_client(settings: Settings, socket: Path) -> Toolbox:
    """The Harness's client of the toolbox at ``socket``, with its settings' limits."""
    tools = settings.tools
    return Toolbox(
        socket=socket,
        work_root=settings.work_root,
        limits=Limits(
            bashTimeoutS=tools.bash_timeout_s,
            outputLimitBytes=tools.output_limit_bytes,
            processes=tools.processes,
            memoryBytes=tools.memory_bytes,
        ),
        private=settings.private_paths(),
    )


@contextlib.contextmanager
def toolbox_for(settings: Settings) -> Iterator[Toolbox]:
    """The toolbox the settings name, or one started here (and stopped on leaving)."""
    if settings.tools.socket is not None:
        yield toolbox_client(settings, settings.tools.socket)
        return
    started = LocalToolbox.start(run_as=tool_identity(settings.tools.uid, settings.tools.gid))
    try:
        yield toolbox_client(settings, started.socket)
    finally:
        started.stop()


async def serve(settings: Settings, toolbox: Toolbox, host: str, port: int) -> None:
    providers = Providers.load(settings.providers_file)
    orchestrator = (
        OrchestratorClient(settings.orchestrator_url, settings.orchestrator_token)
        if settings.orchestrator_url
        else None
    )
    clock = SystemClock()
    tracing = Tracing.of(os.environ, service=SERVICE)
    models = ProviderModels(
        {
            ProviderType.OPENAI: OpenAIModels(),
            ProviderType.ANTHROPIC: AnthropicModels(),
        },
        clock=clock,
        calls=settings.model_calls,
    )
    harness = Harness(
        settings,
        clock=clock,
        model=models,
        orchestrator=orchestrator,
        providers=providers,
        metrics=HarnessMetrics(),
        toolbox=toolbox,
        tracer=tracing.tracer,
    )
    runner = make_runner(harness)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as error:
            raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}") from error
        await harness.start()
        bound = runner.addresses[0][1]
        print(f"harness listening on http://{host}:{bound}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await harness.close()
        await runner.cleanup()
        await models.close()
        if orchestrator is not None:
            await orchestrator.close()
        await asyncio.to_thread(tracing.shutdown)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for chatty in QUIET_LOGGERS:
        logging.getLogger(chatty).setLevel(logging.WARNING)
    try:
        settings = settings_from(args)
        privileges.undumpable()
        with toolbox_for(settings) as toolbox:
            asyncio.run(serve(settings, toolbox, args.host, args.port))
    except ConfigError as error:
        print(f"kubeturn-harness: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
