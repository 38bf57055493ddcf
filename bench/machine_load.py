"""Benchmark of loading Runs: large Machines, deep nesting, and the event loop meanwhile.

Prints:
1. ``load_run`` time (best and median of ``--repeat``) for Machines of 100, 1,000 and
   5,000 states (a chain by one event, the first state going to the last at once, the
   shape ``tests/operator/test_hostile_manifests.py`` runs), and the compact JSON size
   of each spec against the operator's bound (``runs.MAX_SPEC_BYTES``);
2. the same for the deepest Runs that load (states ``MAX_STATE_DEPTH`` deep, input
   ``MAX_VALUE_DEPTH`` deep) and for the refusal of what the API server stores at most
   (10,000 levels of input, of states);
3. the longest stall of an asyncio event loop (a 1 ms ticker's worst lateness) while the
   5,000-state Machine loads in a thread, as the operator loads it, while it loads on
   the loop itself, and while nothing loads (the machine's own noise). In a thread the
   loop still waits for the GIL while CPython's cyclic garbage collector, set off by
   the load's allocations, scans the heap; the same load with the collector off shows
   how much of the stall is its, and the same once the objects made before are frozen
   (``gc.freeze()``), as ``kubeturn operator`` does at its start.

Run: ``python bench/machine_load.py [--repeat N] [--json]``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import statistics
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubeturn.api.depth import MAX_STATE_DEPTH, MAX_VALUE_DEPTH  # noqa: E402
from kubeturn.errors import DefinitionErrors  # noqa: E402
from kubeturn.k8s.runs import MAX_SPEC_BYTES  # noqa: E402
from kubeturn.machine.load import load_run  # noqa: E402

FINAL: dict[str, Any] = {"type": "final"}


def run(machine: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {"agents": {}, "machine": machine, **spec},
    }


def short_name(index: int) -> str:
    letters, name = string.ascii_lowercase, ""
    while True:
        name = letters[index % 26] + name
        index //= 26
        if index == 0:
            return name


def many_states(count: int) -> dict[str, Any]:
    names = [short_name(index) for index in range(count)]
    states: dict[str, Any] = {
        name: {"on": {"n": after}} for name, after in itertools.pairwise(names)
    }
    states[names[0]]["always"] = names[-1]
    states[names[-1]] = FINAL
    return run({"initial": names[0], "states": states})


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_states(depth: int) -> dict[str, Any]:
    state: dict[str, Any] = FINAL
    for _ in range(depth - 1):
        state = {"initial": "a", "states": {"a": state}}
    return run({"initial": "a", "states": {"a": state}})


SIMPLE = {"initial": "a", "states": {"a": {"always": "b"}, "b": FINAL}}


def timed(document: dict[str, Any], repeat: int) -> tuple[float, float, str]:
    """Best and median seconds of ``load_run``, and whether it loaded or was refused."""
    times, outcome = [], ""
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            load_run(document)
            outcome = "loaded"
        except DefinitionErrors as errors:
            outcome = f"refused: {errors.errors[0]}"[:90]
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times), outcome


async def worst_stall(load: Callable[[], Any]) -> float:
    """The worst lateness (s) of a 1 ms ticker while ``load`` runs."""
    worst = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    await load()
    done.set()
    await ticker
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.setrecursionlimit(30_000)  # as the operator sets it, to build what the API stores
    cases = {
        **{f"{count} states": many_states(count) for count in (100, 1000, 5000)},
        f"states {MAX_STATE_DEPTH} deep": deep_states(MAX_STATE_DEPTH),
        f"input {MAX_VALUE_DEPTH} deep": run(SIMPLE, input=nested(MAX_VALUE_DEPTH)),
        "input 10,000 deep": run(SIMPLE, input=nested(10_000)),
        "states 10,000 deep": deep_states(10_000),
    }
    figures: dict[str, Any] = {}
    for name, document in cases.items():
        best, median, outcome = timed(document, args.repeat)
        size = len(json.dumps(document["spec"], separators=(",", ":")).encode())
        figures[name] = {"best_s": best, "median_s": median, "spec_bytes": size, "outcome": outcome}
    largest = cases["5000 states"]

    async def stalls() -> tuple[float, float, float, float]:
        idle = await worst_stall(lambda: asyncio.sleep(figures["5000 states"]["median_s"]))
        in_thread = await worst_stall(lambda: asyncio.to_thread(load_run, largest))
        gc.disable()
        try:
            without_gc = await worst_stall(lambda: asyncio.to_thread(load_run, largest))
        finally:
            gc.enable()

        async def on_loop() -> None:
            load_run(largest)

        on_the_loop = await worst_stall(on_loop)
        gc.collect()
        gc.freeze()  # as `kubeturn operator` does before it runs
        frozen = await worst_stall(lambda: asyncio.to_thread(load_run, largest))
        return idle, in_thread, without_gc, on_the_loop, frozen

    idle, in_thread, without_gc, on_loop, frozen = asyncio.run(stalls())
    figures["loop stall, 5000 states"] = {
        "idle_s": idle,
        "in_thread_s": in_thread,
        "in_thread_without_gc_s": without_gc,
        "in_thread_frozen_s": frozen,
        "on_loop_s": on_loop,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    python = sys.version.split()[0]
    print(f"python {python}; spec bound {MAX_SPEC_BYTES} bytes; {args.repeat} loads each")
    print(f"{'case':<22} {'best':>9} {'median':>9} {'spec bytes':>11}  outcome")
    for name in cases:
        row = figures[name]
        print(
            f"{name:<22} {row['best_s'] * 1000:>7.1f}ms {row['median_s'] * 1000:>7.1f}ms "
            f"{row['spec_bytes']:>11}  {row['outcome']}"
        )
    print(
        f"worst event-loop stall while 5000 states load: in a thread {in_thread * 1000:.1f} ms, "
        f"on the loop {on_loop * 1000:.1f} ms (idle, as long: {idle * 1000:.1f} ms; in a thread "
        f"with the garbage collector off: {without_gc * 1000:.1f} ms; in a thread once what "
        f"was made before is frozen, as the operator does: {frozen * 1000:.1f} ms)"
    )


if __name__ == "__main__":
    main()
