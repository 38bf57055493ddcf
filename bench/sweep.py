"""Benchmark: how fast a sweep settles and stops the model, and what a pick costs a Turn.

Run from the repository root: ``.venv/bin/python bench/sweep.py [--turns 200] [--json]``.

What runs: the real Harness as a subprocess (``python -m kubeturn_harness serve``, as it is
deployed, logging at its default level to a file); the scripted model
(``kubeturn_harness.scripted``) as a subprocess too (this file run with ``--serve-model``,
which adds one route to it, below); and in this process a stub Orchestrator API that
serves one fixed surface (a Menu of ``review_verdict``) and answers every pick at once
with a receipt that leaves the Turn open. Everything listens on 127.0.0.1. Turns run one
at a time, each on a fresh instance id, the three kinds interleaved so drift (the
Harness's conversation table and heap) lands on all of them alike; 10 Turns of
each kind run first, not counted.

What it measures, per kind of Turn:

1. **sweep** (step ``{text, hold: true}``): once the scripted model holds the request,
   time ``POST /agents/{name}/{id}/abort`` with ``{"cause": "pick", "submissionId": sid}``
   from send to the end of its 200. That is sweep → settled: the abort handler awaits
   ``Conversation.sweep``, which records the settlement (written and fsynced) before it
   returns, so the 200 comes after the settlement is on the record; the history read
   right after confirms it, and that every Submission settled ``ended``.
2. **stream closed**: the scripted model's ``closedAt`` of the held request (epoch
   seconds, ``time.time()``) minus ``time.time()`` taken just before the abort's POST.
3. **pick round trip** (step 1 one ``review_verdict`` pick, step 2 text): the scripted
   model's ``closedAt`` of request 1 to the ``receivedAt`` of request 2. The stub's own
   handling is ~0, so the interval is the Harness's whole pick round trip: parse the
   answer, POST the pick, read the receipt, render it as prose, record it, build and send
   the next model request. It is split at the pick's arrival at the stub. **read round
   trip**: the same interval when step 1 calls the trivial Working tool ``read`` on a
   small file instead: the baseline.

4. **the Harness's memory**, once the counted Turns are done: its RSS (``VmRSS`` in
   ``/proc/<pid>/status``) and peak RSS (``VmHWM``), and the conversations it holds in
   memory (its ``kubeturn_harness_conversations_in_memory`` gauge, when it exports one).
   A long run (``--turns 1000``) serves thousands of conversations: these figures, with the
   sweep's max, show whether the Harness's heap and its garbage collector's pauses grow
   with them.

Nothing polls while an interval is measured: this process learns that a model request
was held or closed from one parked ``GET /_wait?index=N&state=held|closed`` that the
scripted model answers when its journal records it, and reads the Harness's stream only
after. (With the model in this process instead, its disconnect handling would land in the
client's timing of the sweep.) Percentiles are nearest-rank. Figures only: nothing
is asserted beyond sanity (each Turn ended as scripted).
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "harness_image"))

from kubeturn_harness import scripted  # noqa: E402
from kubeturn_harness.scripted.journal import Journal, RequestRecord  # noqa: E402

AGENT = "reviewer"
MENU_PICK = "review_verdict"
WARMUP = 10
"""Turns of each kind run first and not counted: connection pools, imports, caches."""
START_TIMEOUT_S = 30.0
"""A subprocess that has not printed its URL by then has failed to start."""
TURN_TIMEOUT_S = 15.0
"""Far above any Turn here (tens of ms); a Turn that takes this long is a hang."""

SWEEP, PICK, READ = "sweep", "pick", "read"
KINDS = (SWEEP, PICK, READ)
SMALL_FILE = "small.txt"

SCRIPT: dict[str, Any] = {
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

T = TypeVar("T")
HARNESS_READY = "harness listening on"
IN_MEMORY = "kubeturn_harness_conversations_in_memory"
MIB = 1024
"""``/proc/<pid>/status`` gives memory in kB."""
MODEL_READY = "bench model listening on"


# ----------------------------------------------------------------------------- the model


class WatchedJournal(Journal):
    """The scripted model's request record, which wakes waiters when a request is held
    or closed, so nothing polls while an interval is being measured."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    @contextmanager
    def receiving(self, body: Any) -> Iterator[RequestRecord]:
        try:
            with super().receiving(body) as record:
                self._poke()
                yield record
        finally:
            self._poke()

    async def hold(self, record: RequestRecord) -> None:
        record.held = True
        self._poke()
        await super().hold(record)

    async def until(self, found: Callable[[list[RequestRecord]], T | None]) -> T:
        """Wait until ``found`` answers something other than None for the records."""
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while (answer := found(self.records())) is None:
                await self._changed.wait()
        return answer

    def _poke(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


def request(index: int, *, state: str) -> Callable[[list[RequestRecord]], RequestRecord | None]:
    """The ``index``-th request since the last clear, once it is ``held`` or ``closed``."""

    def found(records: list[RequestRecord]) -> RequestRecord | None:
        if len(records) <= index:
            return None
        record = records[index]
        ready = record.held if state == "held" else record.closed_at is not None
        return record if ready else None

    return found


async def _wait(http: web.Request) -> web.Response:
    """``GET /_wait?index=N&state=held|closed``: that request's record, once it is so."""
    journal = http.app[scripted.JOURNAL]
    assert isinstance(journal, WatchedJournal)
    ready = request(int(http.query["index"]), state=http.query["state"])
    return web.json_response((await journal.until(ready)).to_json())


async def serve_model() -> None:
    """The scripted model with a ``WatchedJournal`` and ``/_wait``, until SIGTERM."""
    app = scripted.make_app(scripted.parse_script(json.dumps(SCRIPT)))
    app[scripted.JOURNAL] = WatchedJournal()
    app.router.add_get("/_wait", _wait)
    # handler_cancellation: a Harness that drops the stream cancels the held answer, which
    # stamps closedAt (``scripted.serve`` sets it for the same reason).
    runner, url = await serve(app, handler_cancellation=True)
    print(f"{MODEL_READY} {url}", flush=True)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    await stopping.wait()
    await runner.cleanup()


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


async def serve(app: web.Application, **options: Any) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None, **options)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


# ----------------------------------------------------------------------------- the world


@dataclass
class World:
    """The Harness's and the model's addresses, this process's client and the stub."""

    session: aiohttp.ClientSession
    harness_url: str
    model_url: str
    token: str
    workdir: Path
    stub: StubOrchestrator

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

    async def wait_settled(self, iid: str, sid: str) -> dict[str, Any]:
        """Follow the conversation's stream (long-polls) until ``sid`` settles."""
        offset = 0
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while True:
                url = f"{self.agent_url(iid)}?offset={offset}&live=long-poll"
                async with self.session.get(url, headers=self.headers) as response:
                    if response.status == 204:
                        continue
                    if response.status != 200:
                        raise RuntimeError(f"stream read answered {response.status}")
                    events = await response.json()
                    offset = int(response.headers["stream-next-offset"])
                for event in events:
                    data = event["data"]
                    if event["type"] == "submission-settled" and data["submissionId"] == sid:
                        return dict(data)

    async def conversations_in_memory(self) -> int | None:
        """The Harness's gauge of conversations in memory; None when it has none."""
        async with self.session.get(f"{self.harness_url}/metrics", headers=self.headers) as r:
            r.raise_for_status()
            text = await r.text()
        for line in text.splitlines():
            if line.startswith(f"{IN_MEMORY} "):
                return int(float(line.split()[1]))
        return None

    async def clear_model(self) -> None:
        async with self.session.delete(f"{self.model_url}/_requests") as response:
            response.raise_for_status()

    async def model_request(self, index: int, *, state: str) -> dict[str, Any]:
        """The ``index``-th model request since the clear, once ``held`` or ``closed``."""
        url = f"{self.model_url}/_wait?index={index}&state={state}"
        timeout = aiohttp.ClientTimeout(total=TURN_TIMEOUT_S)
        async with self.session.get(url, timeout=timeout) as response:
            response.raise_for_status()
            return dict(await response.json())


# ----------------------------------------------------------------------------- the Turns


@dataclass
class Samples:
    """Seconds, by figure (the keys of ``FIGURES``), and what the sweeps settled."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {key: [] for key in FIGURES})
    outcomes: dict[str, int] = field(default_factory=dict)
    visible_after_200: int = 0


async def sweep_turn(world: World, iid: str, samples: Samples) -> None:
    await world.clear_model()
    sid = await world.admit(iid, "BENCH sweep: review the change")
    await world.model_request(0, state="held")
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
    closed = await world.model_request(0, state="closed")
    samples.seconds["sweep_settled"].append(settled)
    samples.seconds["stream_closed"].append(float(closed["closedAt"]) - sent)
    samples.visible_after_200 += settlement is not None
    outcome = settlement["outcome"] if settlement else "not-visible"
    samples.outcomes[outcome] = samples.outcomes.get(outcome, 0) + 1


async def round_trip_turn(world: World, kind: str, iid: str, samples: Samples) -> None:
    await world.clear_model()
    sid = await world.admit(iid, f"BENCH {kind}: review the change")
    second = await world.model_request(1, state="closed")
    first = await world.model_request(0, state="closed")
    settlement = await world.wait_settled(iid, sid)
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
        await stop(process)
        raise RuntimeError(f"{argv[1:3]} did not start ({line!r}); see {log}")
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


def machine(data_dir: Path) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "data_dir_filesystem": filesystem(data_dir),
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (what an fsync costs depends on it)."""
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


def memory_mib(pid: int) -> dict[str, float]:
    """The process's RSS and peak RSS, in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {
        "rss_mib": round(int(fields["VmRSS"].split()[0]) / MIB, 1),
        "peak_rss_mib": round(int(fields["VmHWM"].split()[0]) / MIB, 1),
    }


def report(
    samples: Samples, host: dict[str, Any], turns: int, elapsed_s: float, harness: dict[str, Any]
) -> dict[str, Any]:
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
        "harness": harness,
    }


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
    h = figures["harness"]
    held = h["conversations_in_memory"]
    print(
        f"harness after the counted Turns: RSS {h['rss_mib']:.1f} MiB (peak "
        f"{h['peak_rss_mib']:.1f} MiB); conversations in memory: "
        f"{'not exported' if held is None else held} of {h['conversations_served']} served"
    )


# ----------------------------------------------------------------------------- main


async def bench(turns: int, keep: bool, parent: Path | None) -> tuple[dict[str, Any], Path]:
    root = Path(tempfile.mkdtemp(prefix="kubeturn-bench-", dir=parent))
    os.chmod(root, 0o711)  # the tools' unprivileged user must reach the workdir
    workdir, data_dir = root / "work", root / "data"
    workdir.mkdir(mode=0o755)
    (workdir / SMALL_FILE).write_text("a small file\nof two lines\n")
    host = machine(root)

    stub = StubOrchestrator()
    stub_runner, stub_url = await serve(stub.app())
    paths = [str(ROOT / "harness_image"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    token = secrets.token_hex(16)
    session = aiohttp.ClientSession()
    processes: list[asyncio.subprocess.Process] = []
    try:
        model, model_url = await start(
            [sys.executable, __file__, "--serve-model"], root / "model.log", env, MODEL_READY
        )
        processes.append(model)
        providers = root / "providers.yaml"
        providers.write_text(f"scripted:\n  type: openai\n  baseUrl: {model_url}/v1\n")
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
            HARNESS_READY,
        )
        processes.append(harness)
        world = World(session, harness_url, model_url, token, workdir, stub)
        await run_turns(world, WARMUP, Samples(), "warmup")
        samples = Samples()
        began = time.perf_counter()
        await run_turns(world, turns, samples, "turn")
        elapsed = time.perf_counter() - began
        memory: dict[str, Any] = {
            **memory_mib(harness.pid),
            "conversations_in_memory": await world.conversations_in_memory(),
            "conversations_served": (WARMUP + turns) * len(KINDS),
        }
        figures = report(samples, host, turns, elapsed, memory)
    finally:
        await session.close()
        for process in reversed(processes):
            await stop(process)
        await stub_runner.cleanup()
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
        "the settlement's fsync costs (e.g. /dev/shm leaves the disk out)",
    )
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_model:
        asyncio.run(serve_model())
        return 0
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
