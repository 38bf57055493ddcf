"""Benchmark of the Orchestrator core on the task-with-review Machine.

Prints:
1. macrosteps per second of the pure interpreter (``interpreter.step``), cycling the
   example's review loop (submit → approve → reject at the gate → fixing → submit …);
2. pick → receipt latency (p50, p99) of ``RunCore.pick`` in-process, each pick ending a
   Turn and starting the next (interpreter step, causes, sweep and admit effects);
3. the same through the Orchestrator API over loopback HTTP (aiohttp client → API →
   RunActor → core → snapshot save), with an in-memory TurnPort that admits at once.

Run: ``python bench/machine.py [--rounds N] [--json]``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubeturn.machine import interpreter  # noqa: E402
from kubeturn.machine.interpreter import Event, Scope  # noqa: E402
from kubeturn.machine.load import LoadedRun, load_run_yaml  # noqa: E402
from kubeturn.orchestrator import api  # noqa: E402
from kubeturn.orchestrator.actor import RunActor, Settled  # noqa: E402
from kubeturn.orchestrator.core import RunCore  # noqa: E402
from kubeturn.orchestrator.effects import Admit, Effects, StartExec, Sweep  # noqa: E402
from kubeturn.orchestrator.frames import WorkspaceView  # noqa: E402
from kubeturn.orchestrator.invokes import ExecResult  # noqa: E402
from kubeturn_harness.wire import Outcome  # noqa: E402

EXAMPLE = REPO / "examples" / "task-with-review.yaml"
WORKSPACE = WorkspaceView({"target": "/work/target/bench"})
PICKS = [
    ("submit", {"summary": "done"}),
    ("review_verdict", {"verdict": "approve"}),
]
GATE = ("reject", {"notes": "not yet"})
"""The person at the gate sends the change back, so the loop never ends the Run."""
LOOP = [*PICKS, GATE]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def macrosteps_per_second(run: LoadedRun, rounds: int) -> float:
    scope = Scope(input=run.spec.input, workspace=WORKSPACE.activation())
    config = interpreter.start(run.chart, scope, 0.0).config
    steps = 0
    started = time.perf_counter()
    for _ in range(rounds):
        for event, data in LOOP:
            config = interpreter.step(run.chart, config, Event(event, data), scope, 0.0).config
            steps += 1
        config = interpreter.step(
            run.chart, config, Event("always"), scope, 0.0
        ).config  # an event no state takes: the cost of a miss
        steps += 1
    return steps / (time.perf_counter() - started)


def new_core(run: LoadedRun) -> tuple[RunCore, Effects]:
    counter = itertools.count()
    core = RunCore(run, workspace=WORKSPACE, new_id=lambda: f"b{next(counter)}")
    return core, core.start(0.0)


def settle(core: RunCore, effects: Effects, now: float) -> Admit | None:
    """Answer the core's effects as a Harness would: sweeps settle, admissions admit."""
    admit: Admit | None = None
    for effect in effects.items:
        if isinstance(effect, Sweep):
            outcome = Outcome.ENDED if effect.cause == "pick" else Outcome.ABORTED
            settled = {effect.submission: (outcome, None, None)} if effect.submission else {}
            core.swept(effect.turn, settled, now)
        elif isinstance(effect, Admit):
            core.admitted(effect.turn, f"s-{effect.turn}", now)
            admit = effect
    return admit


def core_pick_latency(run: LoadedRun, rounds: int) -> list[float]:
    samples: list[float] = []
    core, effects = new_core(run)
    admit = settle(core, effects, 0.0)
    for round_ in range(rounds):
        for event, data in PICKS:
            assert admit is not None
            began = time.perf_counter()
            _, effects = core.pick(admit.instance_id, event, data, float(round_))
            samples.append(time.perf_counter() - began)
            admit = settle(core, effects, float(round_))
        effects = core.signal(*GATE, float(round_))
        admit = settle(core, effects, float(round_))
    return samples


class InstantTurns:
    """A TurnPort that admits at once and settles sweeps as the sweep's body says."""

    def __init__(self) -> None:
        self._ids = itertools.count()

    async def admit(self, effect: Admit) -> str:
        return f"s{next(self._ids)}"

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def sweep(self, effect: Sweep) -> list[Settled]:
        if effect.submission is None:
            return []
        outcome = Outcome.ENDED if effect.cause == "pick" else Outcome.ABORTED
        return [Settled(effect.submission, outcome)]


class NoExecs:
    async def run(self, effect: StartExec) -> ExecResult:
        return ExecResult(0, "")


class MemoryStore:
    def __init__(self) -> None:
        self.saved = 0

    async def save(self, snapshot: dict[str, Any]) -> None:
        json.dumps(snapshot)
        self.saved += 1


async def api_pick_latency(run: LoadedRun, rounds: int) -> list[float]:
    counter = itertools.count()
    core = RunCore(run, workspace=WORKSPACE, new_id=lambda: f"b{next(counter)}")
    actor = RunActor(
        core, turns=InstantTurns(), execs=NoExecs(), store=MemoryStore(), clock=time.time
    )
    registry = api.Registry()
    registry.set_token("bench", "bench-token")
    registry.workspaces["default/task-with-review"] = "bench"
    registry.actors["default/task-with-review"] = actor
    runner = web.AppRunner(api.make_app(registry), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    samples: list[float] = []
    headers = {"Authorization": "Bearer bench-token"}
    try:
        await actor.start()
        async with aiohttp.ClientSession(headers=headers) as session:
            for _ in range(rounds):
                for event, data in PICKS:
                    iid = await _live(core)
                    url = f"{base}/agents/{quote(iid, safe='')}/events"
                    began = time.perf_counter()
                    async with session.post(url, json={"type": event, **data}) as response:
                        assert response.status == 200, await response.text()
                        await response.read()
                    samples.append(time.perf_counter() - began)
                await actor.signal(*GATE)
    finally:
        await actor.close()
        await runner.cleanup()
    return samples


async def _live(core: RunCore) -> str:
    """The Instance ID of the live Turn, once its admission has been answered."""
    for _ in range(1000):
        live = [t for t in core.live_turns() if t.phase.value == "live"]
        if live:
            return live[0].instanceId
        await asyncio.sleep(0.0005)
    raise AssertionError("no live Turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    run = load_run_yaml(EXAMPLE.read_text(), str(EXAMPLE))
    macro_per_s = macrosteps_per_second(run, args.rounds * 10)
    core_samples = core_pick_latency(run, args.rounds)
    api_samples = asyncio.run(api_pick_latency(run, args.rounds // 3 or 1))
    figures = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "macrosteps_per_second": round(macro_per_s),
        "core_pick_ms": {
            "p50": percentile(core_samples, 0.5) * 1000,
            "p99": percentile(core_samples, 0.99) * 1000,
            "n": len(core_samples),
        },
        "api_pick_ms": {
            "p50": percentile(api_samples, 0.5) * 1000,
            "p99": percentile(api_samples, 0.99) * 1000,
            "mean": statistics.fmean(api_samples) * 1000,
            "n": len(api_samples),
        },
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}")
    rate = figures["macrosteps_per_second"]
    print(f"interpreter macrosteps/s (task-with-review loop): {rate:>10,}")
    for label, key in (("core in-process", "core_pick_ms"), ("Orchestrator API", "api_pick_ms")):
        ms = figures[key]
        print(
            f"pick → receipt, {label:<17} p50 {ms['p50']:7.3f} ms   "
            f"p99 {ms['p99']:7.3f} ms   (n={ms['n']})"
        )


if __name__ == "__main__":
    main()
