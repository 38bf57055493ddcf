"""Benchmark of the Orchestrator core on the task-with-review Machine.

Prints:
1. macrosteps per second of the pure interpreter (``interpreter.step``), cycling the
   example's review loop (submit → approve → reject at the gate → fixing → submit …);
   then the same on a parallel Machine (``REGIONS`` regions of ``STATES`` states: an
   event that moves every region at once, one per region that moves it alone, one no
   state takes) and on a fan-out of ``CHILDREN`` children (each child's pick ends it,
   the last one's ends the fan-out, and the Machine enters it again), each with its
   ratio to the review loop's rate measured in the same run;
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
from kubeturn.machine.load import LoadedRun, load_run, load_run_yaml  # noqa: E402
from kubeturn.machine.model import StatePath  # noqa: E402
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
REGIONS = 4
STATES = 3
CHILDREN = 20
CONCURRENCY = 4
"""The fan-out's children run 4 at a time (the default): most steps end one child and
start the next."""


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


def parallel_run() -> LoadedRun:
    """``REGIONS`` regions of ``STATES`` states in a ring: ``tick`` moves every region to
    its next state in one microstep, ``r<i>`` moves region i alone."""
    regions = {}
    for region in range(REGIONS):
        states = {}
        for n in range(STATES):
            following = f"s{(n + 1) % STATES}"
            states[f"s{n}"] = {"on": {"tick": following, f"r{region}": following}}
        regions[f"r{region}"] = {"initial": "s0", "states": states}
    machine = {"initial": "all", "states": {"all": {"type": "parallel", "states": regions}}}
    return load_run(_run_document("parallel", machine))


def fan_out_run() -> LoadedRun:
    """A fan-out over ``CHILDREN`` items, ``CONCURRENCY`` at a time; each child's
    ``finish`` ends it, and ``again`` starts the fan-out over once every child is done."""
    child = {
        "initial": "working",
        "states": {
            "working": {"on": {"finish": "finished"}},
            "finished": {"type": "final", "output": "input"},
        },
    }
    fan = {
        "items": "input.items",
        "concurrency": CONCURRENCY,
        "machine": child,
    }
    machine = {
        "initial": "fan",
        "states": {
            "fan": {"invoke": {"forEach": fan, "onDone": "collected"}},
            "collected": {"on": {"again": "fan"}},
        },
    }
    document = _run_document("fan-out", machine)
    document["spec"]["input"] = {"items": [f"c{n}" for n in range(CHILDREN)]}
    return load_run(document)


def _run_document(name: str, machine: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": name},
        "spec": {"agents": {}, "machine": machine},
    }


def parallel_steps_per_second(run: LoadedRun, rounds: int) -> float:
    events = [Event("tick"), *(Event(f"r{r}") for r in range(REGIONS)), Event("missed")]
    return _steps_per_second(run, [events] * rounds)


def fan_out_steps_per_second(run: LoadedRun, rounds: int) -> float:
    round_ = [
        *(Event("finish", scope=StatePath(f"fan[c{n}]")) for n in range(CHILDREN)),
        Event("again"),
    ]
    return _steps_per_second(run, [round_] * rounds)


def _steps_per_second(run: LoadedRun, rounds: list[list[Event]]) -> float:
    scope = Scope(input=run.spec.input)
    config = interpreter.start(run.chart, scope, 0.0).config
    steps = 0
    started = time.perf_counter()
    for events in rounds:
        for event in events:
            config = interpreter.step(run.chart, config, event, scope, 0.0).config
            steps += 1
    elapsed = time.perf_counter() - started
    assert config.status is interpreter.Status.RUNNING, config.message
    return steps / elapsed


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
    parallel_per_s = parallel_steps_per_second(parallel_run(), args.rounds * 5)
    fan_out_per_s = fan_out_steps_per_second(fan_out_run(), args.rounds // 2 or 1)
    core_samples = core_pick_latency(run, args.rounds)
    api_samples = asyncio.run(api_pick_latency(run, args.rounds // 3 or 1))
    figures = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "macrosteps_per_second": round(macro_per_s),
        "parallel_macrosteps_per_second": round(parallel_per_s),
        "parallel_ratio": round(parallel_per_s / macro_per_s, 3),
        "fan_out_macrosteps_per_second": round(fan_out_per_s),
        "fan_out_ratio": round(fan_out_per_s / macro_per_s, 3),
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
    print(f"{'interpreter macrosteps/s (task-with-review loop):':<61} {rate:>8,}")
    for label, key in (
        (f"parallel, {REGIONS} regions × {STATES} states", "parallel"),
        (f"fan-out, {CHILDREN} children, {CONCURRENCY} at a time", "fan_out"),
    ):
        rate, ratio = figures[f"{key}_macrosteps_per_second"], figures[f"{key}_ratio"]
        line = f"interpreter macrosteps/s ({label}):"
        print(f"{line:<61} {rate:>8,}   ({ratio:.2f}× the loop's)")
    for label, key in (("core in-process", "core_pick_ms"), ("Orchestrator API", "api_pick_ms")):
        ms = figures[key]
        print(
            f"pick → receipt, {label:<17} p50 {ms['p50']:7.3f} ms   "
            f"p99 {ms['p99']:7.3f} ms   (n={ms['n']})"
        )


if __name__ == "__main__":
    main()
