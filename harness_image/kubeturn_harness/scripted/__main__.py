"""``python -m kubeturn_harness.scripted``: run the scripted model until SIGINT or SIGTERM.

The first line on stdout is ``scripted model listening on <URL>`` with the bound port
(``--port 0`` picks a free one), flushed, so a parent process can read where to connect.
Logs go to stderr. Exit status: 0 after a signal, 1 when it cannot listen, 2 for a bad
script or bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from kubeturn_harness.errors import ScriptError
from kubeturn_harness.scripted.script import Script, load_script
from kubeturn_harness.scripted.server import serve


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, load the script and serve it; return the exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        script = load_script(args.script)
    except ScriptError as error:
        print(error, file=sys.stderr)
        return 2
    try:
        asyncio.run(_run(script, args.host, args.port))
    except OSError as error:
        print(f"cannot listen on {args.host}:{args.port}: {error}", file=sys.stderr)
        return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kubeturn_harness.scripted",
        description="An OpenAI-compatible chat-completions server that answers from a script.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--script", type=Path, required=True, help="the YAML script to answer from")
    parser.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default: %(default)s; info logs each request's step)",
    )
    return parser


async def _run(script: Script, host: str, port: int) -> None:
    runner, url = await serve(script, host, port)
    try:
        print(f"scripted model listening on {url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
