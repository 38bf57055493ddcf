"""Benchmark: how fast a sweep settles and stops the model, and what a pick costs a Turn.

Run from the repository root: ``.venv/bin/python bench/sweep.py [--turns 200] [--json]``.

What runs: the real Harness as a subprocess (``python -m kubeturn_harness serve``, as it is
deployed, logging at its default level to a file) and the scripted model as a subprocess
(``python -m kubeturn_harness.scripted``); the Orchestrator API is a stub in this process
that serves one fixed surface (a Menu of ``review_verdict``) and answers every pick at once
with a receipt that leaves the Turn open. Everything listens on 127.0.0.1. Turns run one
at a time, each on a fresh instance id, the three kinds interleaved so drift (a growing
conversation table, the page cache) lands on all of them alike; 10 Turns of each kind are
run first and not counted.

What it measures, per kind of Turn:

1. **sweep** (step ``{text, hold: true}``): once the scripted model holds the request,
   time ``POST /agents/{name}/{id}/abort`` with ``{"cause": "pick", "submissionId": sid}``
   from send to the end of its 200. That is sweep → settled: the Harness's abort handler
   awaits ``Conversation.sweep``, which records the settlement (written and fsynced) before
   it returns, so the 200 comes after the settlement is on the record. The history read
   right after confirms it, and that every Submission settled ``ended``.
2. **stream closed**: the scripted model's ``closedAt`` of the held request (epoch
   seconds, ``time.time()``) minus ``time.time()`` taken just before the abort's POST.
3. **pick round trip** (step 1 one ``review_verdict`` pick, step 2 text): the scripted
   model's ``closedAt`` of request 1 to the ``receivedAt`` of request 2. With the stub's
   own handling ~0, that interval is the Harness's whole pick round trip: parse the
   answer, POST the pick, read the receipt, render it as prose, record it, build and send
   the next model request. **read round trip**: the same interval when step 1 calls the
   trivial Working tool ``read`` on a small file instead: the baseline.

Percentiles are nearest-rank over the counted Turns. While a Turn runs, this process
does not touch the Harness: it waits on one long-poll parked at the offset where the
Turn's settlement lands (learnt in the warm-up), so it wakes once, after the measured
interval. Figures only: nothing is asserted beyond sanity (each Turn ended as scripted).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
AGENT = "reviewer"
MENU_PICK = "review_verdict"
WARMUP = 10
"""Turns of each kind run first and not counted: connection pools, imports, caches."""
START_TIMEOUT_S = 30.0
"""A subprocess that has not printed its URL by then has failed to start."""
TURN_TIMEOUT_S = 15.0
"""Far above any Turn here (tens of ms); a Turn that takes this long is a hang."""
POLL_S = 0.002
"""How often the wait for a held model request polls the scripted model (not timed)."""

SWEEP, PICK, READ = "sweep", "pick", "read"
KINDS = (SWEEP, PICK, READ)
SMALL_FILE = "small.txt"

SCRIPT = {
    "conversations": [
        {"match": "BENCH sweep", "steps": [{"text": "Partial words of a reply", "hold": True}]},
        {
            "match": "BENCH pick",
            "steps": [
                {
                    "text": "Approving.",
                    "toolCalls": [
                        {"name": MENU_PICK, "arguments": {"verdict": "approve", "notes": "LGTM"}}
                    ],
                },
                {"text": "Done."},
            ],
        },
        {
            "match": "BENCH read",
            "steps": [
                {
                    "text": "Approving.",
                    "toolCalls": [{"name": "read", "arguments": {"path": SMALL_FILE}}],
                },
                {"text": "Done."},
            ],
        },
    ]
}

FIGURES: dict[str, tuple[str, float | None]] = {
    "sweep_settled": ("sweep → settled (abort 200)", 20.0),
    "stream_closed": ("sweep → model stream closed", 50.0),
    "pick_round_trip": ("pick round trip", None),
    "pick_out": ("  answer end → pick arrives", None),
    "pick_back": ("  pick arrives → next request", None),
    "read_round_trip": ("read round trip (baseline)", None),
}
"""Figure → its label, and its target in ms for p99 (None: no target)."""


# ----------------------------------------------------------------------------- the stub


@dataclass
class StubOrchestrator:
    """The Orchestrator API as the Harness calls it: one surface for every Turn, and a
    receipt that leaves the Turn open for every pick, answered without any work."""

    picks: int = 0
    arrived: dict[str, float] = field(default_factory=dict)
    """Instance id → ``time.time()`` when its pick arrived (to split the round trip)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/agents/{iid}/surface", self._surface)
        app.router.add_post("/agents/{iid}/events", self._pick)
        return app

    async def _surface(self, request: web.Request) -> web.Response:
        schema = {
            "type": "object",
            "properties": {"verdict": {"type": "string"}, "notes": {"type": "string"}},
            "required": ["verdict"],
        }
        return web.json_response(
            {
                "instanceId": request.match_info["iid"],
                "menu": [{"name": MENU_PICK, "description": "Send the verdict.", "input": schema}],
                "allowed": [MENU_PICK],
            }
        )

    async def _pick(self, request: web.Request) -> web.Response:
        self.arrived[request.match_info["iid"]] = time.time()
        body = await request.json()
        self.picks += 1
        return web.json_response(
            {
                "delivered": True,
                "event": body["type"],
                "turnComplete": False,
                "deliveryId": f"d-{self.picks}",
            }
        )


# ----------------------------------------------------------------------------- the world


@dataclass
class World:
    """The Harness and the scripted model (subprocesses), and this process's client."""

    session: aiohttp.ClientSession
    harness_url: str
    model_url: str
    token: str
    workdir: Path
    stub: StubOrchestrator
    settled_at: dict[str, int] = field(default_factory=dict)
    """Kind → offset of the settlement event in a fresh conversation (from the warm-up)."""

    def agent_url(self, iid: str, *rest: str) -> str:
        return "/".join([self.harness_url, "agents", AGENT, quote(iid, safe=""), *rest])

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def admit(self, iid: str, prompt: str) -> str:
        body = {
            "prompt": prompt,
            "cwd": str(self.workdir),
            "model": "scripted/any",
            "definition": {"instructions": "You review changes.", "workspace": "write"},
        }
        async with self.session.post(self.agent_url(iid), json=body, headers=self.headers) as r:
            answer = await r.json()
            if r.status != 200:
                raise RuntimeError(f"admission refused ({r.status}): {answer}")
            return str(answer["submissionId"])

    async def settlement(self, iid: str, sid: str) -> dict[str, Any] | None:
        url = self.agent_url(iid) + "?view=history"
        async with self.session.get(url, headers=self.headers) as response:
            history = await response.json()
        return next((s for s in history["settlements"] if s["submissionId"] == sid), None)

    async def wait_settled(self, kind: str, iid: str, sid: str) -> dict[str, Any]:
        """Wait for ``sid``'s settlement with long-polls, from the offset it lands at."""
        offset = self.settled_at.get(kind, 0)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while True:
                url = f"{self.agent_url(iid)}?offset={offset}&live=long-poll"
                async with self.session.get(url, headers=self.headers) as response:
                    if response.status == 204:
                        raise RuntimeError(f"{kind} Turn {iid}: no settlement before the long-poll")
                    events = await response.json()
                    after = int(response.headers["stream-next-offset"])
                for event in events:
                    if (
                        event["type"] == "submission-settled"
                        and event["data"]["submissionId"] == sid
                    ):
                        self.settled_at.setdefault(kind, event["offset"])
                        return dict(event["data"])
                offset = after

    async def model_requests(self) -> list[dict[str, Any]]:
        async with self.session.get(f"{self.model_url}/_requests") as response:
            return list(await response.json())

    async def clear_model_requests(self) -> None:
        async with self.session.delete(f"{self.model_url}/_requests") as response:
            response.raise_for_status()

    async def wait_model(self, ready: str) -> dict[str, Any]:
        """Poll until the one request of this Turn is ``held`` or ``closed``; return it."""
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while True:
                records = await self.model_requests()
                if records and (records[0]["held"] if ready == "held" else records[0]["closedAt"]):
                    return records[0]
                await asyncio.sleep(POLL_S)


# ----------------------------------------------------------------------------- the Turns


@dataclass
class Samples:
    """Seconds, by figure (the keys of ``FIGURES``), and what the sweeps settled."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {key: [] for key in FIGURES})
    outcomes: dict[str, int] = field(default_factory=dict)
    visible_after_200: int = 0


async def sweep_turn(world: World, iid: str, samples: Samples) -> None:
    await world.clear_model_requests()
    sid = await world.admit(iid, "BENCH sweep: review the change")
    await world.wait_model("held")
    body = {"cause": "pick", "submissionId": sid}
    sent = time.time()
    started = time.perf_counter()
    async with world.session.post(
        world.agent_url(iid, "abort"), json=body, headers=world.headers
    ) as r:
        answer = await r.json()
    settled = time.perf_counter() - started
    if r.status != 200 or answer != {"aborted": True}:
        raise RuntimeError(f"sweep of {iid} answered {r.status}: {answer}")
    settlement = await world.settlement(iid, sid)
    closed = await world.wait_model("closed")
    samples.seconds["sweep_settled"].append(settled)
    samples.seconds["stream_closed"].append(float(closed["closedAt"]) - sent)
    samples.visible_after_200 += settlement is not None
    outcome = settlement["outcome"] if settlement else "not-visible"
    samples.outcomes[outcome] = samples.outcomes.get(outcome, 0) + 1


async def round_trip_turn(world: World, kind: str, iid: str, samples: Samples) -> None:
    await world.clear_model_requests()
    sid = await world.admit(iid, f"BENCH {kind}: review the change")
    settlement = await world.wait_settled(kind, iid, sid)
    first, second = await world.model_requests()
    if settlement["outcome"] != "completed" or second["step"] != 1:
        raise RuntimeError(f"{kind} Turn {iid} did not run as scripted: {settlement}")
    tool_result = second["body"]["messages"][-1]["content"]
    expected = "Your turn is not over." if kind == PICK else "small file"
    if expected not in tool_result:
        raise RuntimeError(f"{kind} Turn {iid}: the tool result was {tool_result!r}")
    answered, asked = float(first["closedAt"]), float(second["receivedAt"])
    samples.seconds[f"{kind}_round_trip"].append(asked - answered)
    if kind == PICK:
        arrived = world.stub.arrived.pop(iid)
        samples.seconds["pick_out"].append(arrived - answered)
        samples.seconds["pick_back"].append(asked - arrived)


async def run_turns(world: World, count: int, samples: Samples, label: str) -> None:
    for n in range(count):
        for kind in KINDS:
            iid = f"bench.{label}-{n}-{kind}-{secrets.token_hex(4)}"
            if kind == SWEEP:
                await sweep_turn(world, iid, samples)
            else:
                await round_trip_turn(world, kind, iid, samples)


# ----------------------------------------------------------------------------- processes


async def start(
    argv: list[str], log: Path, env: dict[str, str], ready: str
) -> tuple[asyncio.subprocess.Process, str]:
    """Start ``argv``; return the process and the URL its first stdout line names."""
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=stderr, env=env
        )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            line = (await process.stdout.readline()).decode().strip()
    except TimeoutError:
        line = ""
    if not line.startswith(ready):
        process.kill()
        raise RuntimeError(f"{argv[2]} did not start ({line!r}); see {log}")
    return process, line.removeprefix(ready).strip()


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


# ----------------------------------------------------------------------------- report


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` percent of values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50) * 1000, 3),
        "p90": round(percentile(values, 90) * 1000, 3),
        "p99": round(percentile(values, 99) * 1000, 3),
        "max": round(max(values) * 1000, 3),
    }


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }


def report(samples: Samples, host: dict[str, Any], turns: int, elapsed_s: float) -> dict[str, Any]:
    latency = {key: summary_ms(values) for key, values in samples.seconds.items()}
    targets = {key: target for key, (_, target) in FIGURES.items() if target is not None}
    return {
        "machine": host,
        "turns_per_kind": turns,
        "warmup_per_kind": WARMUP,
        "elapsed_s": round(elapsed_s, 1),
        "latency_ms": latency,
        "targets_p99_ms": targets,
        "targets_met": {key: latency[key]["p99"] < target for key, target in targets.items()},
        "pick_over_read_p50": round(
            latency["pick_round_trip"]["p50"] / latency["read_round_trip"]["p50"], 2
        ),
        "sweep_outcomes": samples.outcomes,
        "settlement_visible_after_200": samples.visible_after_200,
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (fsync's cost depends on it)."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        _, point, fstype, *_ = line.split()
        if str(path.resolve()).startswith(point) and len(point) > len(best):
            best, kind = point, fstype
    return kind


def print_table(figures: dict[str, Any]) -> None:
    m = figures["machine"]
    print(
        f"machine: {m['cores']} cores ({m['usable_cores']} usable), {m['implementation']} "
        f"{m['python']}, {m['platform']}, aiohttp {m['aiohttp']}; data dir on "
        f"{m['data_dir_filesystem']}; load average {m['load_average_1m_at_start']} at start"
    )
    print(
        f"{figures['turns_per_kind']} Turns of each kind after {figures['warmup_per_kind']} "
        f"warm-up Turns of each; {figures['elapsed_s']} s measured\n"
    )
    print(f"{'ms':<32}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}   target")
    for key, (label, target) in FIGURES.items():
        figure = figures["latency_ms"][key]
        cells = "".join(f"{figure[p]:>8.2f}" for p in ("p50", "p90", "p99", "max"))
        verdict = ""
        if target is not None:
            met = "met" if figures["targets_met"][key] else "MISSED"
            verdict = f"p99 < {target:g} ms  {met}"
        print(f"{label:<32}{cells}   {verdict}".rstrip())
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(figures["sweep_outcomes"].items()))
    print(
        f"\npick / read round trip (p50): {figures['pick_over_read_p50']:.2f}x\n"
        f"sweeps settled: {outcomes}; settlement in the history right after the 200: "
        f"{figures['settlement_visible_after_200']}/{figures['turns_per_kind']}"
    )


# ----------------------------------------------------------------------------- main


async def bench(turns: int, keep: bool, parent: Path | None) -> tuple[dict[str, Any], Path]:
    root = Path(tempfile.mkdtemp(prefix="kubeturn-bench-", dir=parent))
    host = {**machine(), "data_dir_filesystem": filesystem(root)}
    os.chmod(root, 0o711)  # the tools' unprivileged user must reach the workdir
    workdir, data_dir = root / "work", root / "data"
    workdir.mkdir(mode=0o755)
    (workdir / SMALL_FILE).write_text("a small file\nof two lines\n")
    script = root / "script.json"  # JSON is YAML
    script.write_text(json.dumps(SCRIPT))

    stub = StubOrchestrator()
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    stub_url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    paths = [str(ROOT / "harness_image"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    processes = []
    session = aiohttp.ClientSession()
    try:
        model, model_v1 = await start(
            [sys.executable, "-m", "kubeturn_harness.scripted", "--script", str(script)],
            root / "model.log",
            env,
            "scripted model listening on",
        )
        processes.append(model)
        providers = root / "providers.yaml"
        providers.write_text(f"scripted:\n  type: openai\n  baseUrl: {model_v1}\n")
        token = secrets.token_hex(16)
        harness, harness_url = await start(
            [
                sys.executable,
                "-m",
                "kubeturn_harness",
                "serve",
                "--host=127.0.0.1",
                "--port=0",
                f"--data-dir={data_dir}",
                f"--token-sha256={hashlib.sha256(token.encode()).hexdigest()}",
                f"--orchestrator-url={stub_url}",
                f"--providers={providers}",
            ],
            root / "harness.log",
            {**env, "KUBETURN_ORCHESTRATOR_TOKEN": secrets.token_hex(16)},
            "harness listening on",
        )
        processes.append(harness)
        world = World(session, harness_url, model_v1.removesuffix("/v1"), token, workdir, stub)

        await run_turns(world, WARMUP, Samples(), "warmup")
        samples = Samples()
        began = time.perf_counter()
        await run_turns(world, turns, samples, "turn")
        figures = report(samples, host, turns, time.perf_counter() - began)
    finally:
        await session.close()
        for process in reversed(processes):
            await stop(process)
        await runner.cleanup()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return figures, root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="counted Turns of each kind")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to make the temp dir (default: the system's); its filesystem sets what "
        "the settlement's fsync costs (e.g. /dev/shm to leave the disk out)",
    )
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    figures, root = asyncio.run(bench(args.turns, args.keep, args.dir))
    if args.json:
        print(json.dumps(figures, ensure_ascii=False, indent=2))
    else:
        print_table(figures)
    if args.keep:
        print(f"kept {root}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
