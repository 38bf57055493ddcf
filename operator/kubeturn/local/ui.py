"""``kubeturn ui``: the web console of local Runs, served on 127.0.0.1 until interrupted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TextIO

from aiohttp import web

from kubeturn.console.app import console_app
from kubeturn.errors import CommandError
from kubeturn.local.console import LocalConsole

HOST = "127.0.0.1"
"""Only this machine's users reach the console: it shows what the Agents did, and asks
no one who they are."""


async def serve(root: Path, port: int, out: TextIO) -> None:
    """Serve the console of the Runs under ``root`` on ``port`` (0: a free one), print its
    URL to ``out``, and serve until cancelled."""
    app = console_app(LocalConsole(root), title="kubeturn")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, port)
        try:
            await site.start()
        except OSError as error:
            raise CommandError(f"cannot listen on {HOST}:{port}: {error.strerror}") from error
        bound = runner.addresses[0][1]
        url = f"http://{HOST}:{bound}/runs"
        print(f"kubeturn ui: serving the Runs under {root} at {url} (Ctrl-C stops it)", file=out)
        out.flush()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
