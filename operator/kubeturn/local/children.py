"""The processes a local Run needs beside kubeturn: the Harness, and the scripted model.

Each starts through ``kubeturn.local.launch`` (it ends when ``kubeturn run`` does, however
that ends) in a session of its own, so a Ctrl-C at the terminal reaches ``kubeturn run``
alone: it sweeps the Run's Turns through the Harness first, and stops the children after.
Each says where it listens on its first stdout line; its logs go to a file in the
workdir, whose last line is the error when it does not start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kubeturn.errors import CommandError

START_TIMEOUT_S = 30.0
"""How long a child may take to say where it listens: a cold Python start with the
Harness's imports takes about a second; thirty allow for a loaded machine."""
STOP_GRACE_S = 5.0
"""How long a child may take to stop after SIGTERM before it is killed."""


@dataclass
class Child:
    name: str
    process: asyncio.subprocess.Process
    url: str
    log: Path
    _drain: asyncio.Task[None] | None = field(default=None, repr=False)

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(STOP_GRACE_S):
                    await self.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        if self._drain is not None:
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)


async def start(
    name: str,
    command: Sequence[str],
    *,
    environment: Mapping[str, str],
    log: Path,
    listening: re.Pattern[str],
    hint: str = "",
) -> Child:
    """Start ``command`` and wait for the stdout line ``listening`` matches (group 1 is
    the URL). A child that exits first is a ``CommandError`` quoting its last log line,
    followed by ``hint``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    launcher = [sys.executable, "-m", "kubeturn.local.launch", str(os.getpid()), "--"]
    with _appending(log) as sink:
        process = await asyncio.create_subprocess_exec(
            *launcher,
            *command,
            env=dict(environment),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            start_new_session=True,
        )
    assert process.stdout is not None
    child = Child(name, process, "", log)
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                line = (await process.stdout.readline()).decode(errors="replace")
                if not line:
                    await process.wait()
                    raise CommandError(
                        f"the {name} did not start: {last_line(log) or 'it said nothing'} "
                        f"(exit status {process.returncode}){hint}"
                    )
                found = listening.search(line)
                if found:
                    child.url = found.group(1)
                    break
    except TimeoutError:
        await child.stop()
        raise CommandError(
            f"the {name} did not say where it listens within {START_TIMEOUT_S:g} s; its log: {log}"
        ) from None
    except BaseException:
        await child.stop()
        raise
    child._drain = asyncio.create_task(_drain(process.stdout, log), name=f"{name} stdout")
    return child


async def _drain(stream: asyncio.StreamReader, log: Path) -> None:
    """Keep reading what the child prints after its first line, into its log, so a full
    pipe never blocks it."""
    with _appending(log) as handle:
        while line := await stream.readline():
            handle.write(line)
            handle.flush()


def _appending(log: Path) -> IO[bytes]:
    """A log file to append to (opened at once: a local file, not worth a thread)."""
    return open(log, "ab")  # the caller's ``with`` closes it


def last_line(log: Path) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")
