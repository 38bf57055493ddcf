"""File descriptors of one Harness serving many conversations at once.

Run from the repository root: ``.venv/bin/python bench/harness_fds.py [--conversations
1000] [--nofile 1024] [--json]``.

What runs: the real Harness as a subprocess (``python -m kubeturn_harness serve``, no
Orchestrator), its RLIMIT_NOFILE set in the child before it starts (``--nofile``, soft and
hard; 1024 is a container's default soft limit), and the scripted model in this process,
all on 127.0.0.1. Every conversation is admitted at once (one Submission each, on its own
Instance ID); the model answers each after ``--delay-ms``, so all of them are live
together. The Harness's open descriptors are counted from ``/proc/<pid>/fd`` every 20 ms.

Figures:
- ``baseline``: descriptors before the first admission (sockets, the toolbox's, logs);
- ``peak``: the most seen while the conversations ran; ``perConversation`` is
  ``(peak - baseline) / conversations``;
- ``settled``: descriptors once every Submission settled (the conversations still in
  memory), and ``outcomes``: how the Submissions settled (all ``completed`` when the
  Harness kept within its limit; a ``failed`` one says what ran out).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from kubeturn_harness.scripted import parse_script, serve

TOKEN = "bench-token"
READY_S = 30.0
"""A Harness that has not printed its URL by then has failed to start."""
SETTLE_S = 300.0
"""How long all Submissions may take to settle: 1,000 take about 15 s on 2 cores."""
CONCURRENT_REQUESTS = 32
"""This client's connections to the Harness at once: a few, as the operator has."""


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def limit_files(nofile: int) -> Callable[[], None]:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return set_limit


async def measure(
    conversations: int,
    *,
    nofile: int,
    root: Path,
    delay_ms: int = 3000,
    harness_args: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``conversations`` at once on a Harness limited to ``nofile`` descriptors; the
    figures of the module docstring."""
    script = {
        "conversations": [
            {"match": "", "repeat": True, "steps": [{"text": "done", "delayMs": delay_ms}]}
        ]
    }
    model, model_url = await serve(parse_script(json.dumps(script)))
    providers = root / "providers.yaml"
    providers.write_text(f"scripted:\n  type: openai\n  baseUrl: {model_url}\n")
    work = root / "work"
    work.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBETURN_")}
    command = [
        sys.executable,
        "-m",
        "kubeturn_harness",
        "serve",
        "--host=127.0.0.1",
        "--port=0",
        f"--data-dir={root / 'data'}",
        f"--token-sha256={hashlib.sha256(TOKEN.encode()).hexdigest()}",
        f"--providers={providers}",
        f"--work-root={work}",
        "--log-level=WARNING",
        *harness_args,
    ]
    log = (root / "harness.log").open("ab")
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
        env=env,
        preexec_fn=limit_files(nofile),
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    connector = aiohttp.TCPConnector(limit=CONCURRENT_REQUESTS)
    session = aiohttp.ClientSession(connector=connector, headers=headers)
    try:
        assert process.stdout is not None
        async with asyncio.timeout(READY_S):
            line = (await process.stdout.readline()).decode().strip()
        url = line.removeprefix("harness listening on ")
        if url == line:
            raise RuntimeError(f"the Harness did not start: {line!r}; see {root}/harness.log")
        baseline = fds(process.pid)
        peak = baseline
        sampling = True

        async def sample() -> None:
            nonlocal peak
            while sampling:
                with contextlib.suppress(FileNotFoundError):
                    peak = max(peak, fds(process.pid))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())

        def address(index: int) -> str:
            return f"{url}/agents/coder/{quote(f'bench.fds/c{index}', safe='')}"

        async def admit(index: int) -> str:
            body = {
                "prompt": f"Conversation {index}.",
                "cwd": str(work),
                "model": "scripted/any",
                "definition": {"instructions": "Answer.", "workspace": "none"},
            }
            async with session.post(address(index), json=body) as answer:
                said = await answer.json()
                if answer.status != 200:
                    return f"refused {answer.status}: {said}"
                return str(said["submissionId"])

        async def outcome(index: int) -> str | None:
            async with session.get(address(index) + "?view=history") as answer:
                if answer.status != 200:
                    return f"history {answer.status}"
                settled = (await answer.json())["settlements"]
                return str(settled[0]["outcome"]) if settled else None

        started = time.monotonic()
        admitted = await asyncio.gather(*(admit(i) for i in range(conversations)))
        admit_s = time.monotonic() - started
        outcomes: dict[int, str] = {}
        async with asyncio.timeout(SETTLE_S):
            while len(outcomes) < conversations:
                await asyncio.sleep(0.5)
                open_ = [i for i in range(conversations) if i not in outcomes]
                for index, said in zip(
                    open_, await asyncio.gather(*(outcome(i) for i in open_)), strict=True
                ):
                    if said is not None:
                        outcomes[index] = said
        settle_s = time.monotonic() - started
        sampling = False
        await sampler
        settled = fds(process.pid)
        return {
            "conversations": conversations,
            "nofile": nofile,
            "refused": sum(1 for a in admitted if a.startswith("refused")),
            "baseline": baseline,
            "peak": peak,
            "perConversation": round((peak - baseline) / conversations, 3),
            "settled": settled,
            "outcomes": dict(Counter(outcomes.values())),
            "admitS": round(admit_s, 2),
            "settleS": round(settle_s, 2),
        }
    finally:
        await session.close()
        if process.returncode is None:
            process.terminate()
            await process.wait()
        log.close()
        await model.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--nofile", type=int, default=1024, help="the Harness's RLIMIT_NOFILE")
    parser.add_argument("--delay-ms", type=int, default=3000, help="the model's answer delay")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    options = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kubeturn-fds-"))
    try:
        figures = asyncio.run(
            measure(
                options.conversations, nofile=options.nofile, root=root, delay_ms=options.delay_ms
            )
        )
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)
    if options.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>16}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
