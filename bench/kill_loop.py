"""Benchmark: the operator SIGKILLed 50 times at random moments while Runs progress.

The scenario of ``tests/operator/test_kill_loop.py`` (``tests/operator/kill_loops.py``)
at a larger size, in a fresh world: the emulator on 127.0.0.1 with the chart's RBAC
(rendered by helm from the kubectl wheel), the kubelet running the shared Workspace's
Harness, the scripted model, the operator in a process of its own, killed with SIGKILL
at a seeded random moment after each start and started again at once.

Prints: kills, Runs (Succeeded / not), Turns recorded, Turns failed by the downtime,
Turns aborted because their sweep came late, Turns admitted twice, Submissions settled
other than once, duplicate and missing Turn Events, AgentTurns left, Run versions
showing a final phase without their Turns, and the wall time from the Runs' creation
until every Run ended and its AgentTurns went.

Run: ``python bench/kill_loop.py [--kills 50] [--runs 8] [--turns 3] [--seed 1] [--json]``.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.operator.kill_loops import Figures, kill_loop  # noqa: E402
from tests.operator.operator_support import charted  # noqa: E402


async def measure(args: argparse.Namespace, root: Path) -> Figures:
    async with contextlib.AsyncExitStack() as stack:
        k8s, installed, kubelet = await charted(stack, root)
        return await kill_loop(
            k8s,
            installed,
            kubelet,
            root,
            kills=args.kills,
            runs=args.runs,
            turns=args.turns,
            seed=args.seed,
            log=root / "operator.log",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubeturn-kill-loop-") as scratch:
        figures = asyncio.run(measure(args, Path(scratch)))
    if args.json:
        print(json.dumps(dataclasses.asdict(figures), indent=2))
        return
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"kills: {figures.kills} (seed {args.seed})")
    print(
        f"Runs: {figures.runs}, Succeeded {figures.succeeded}, "
        f"not Succeeded {len(figures.not_succeeded)}"
    )
    print(
        f"Turns recorded: {figures.turns}; failed by downtime {len(figures.failed_turns)}; "
        f"aborted (sweep after the Harness's wait) {len(figures.other_turns)}"
    )
    print(
        f"admitted twice: {len(figures.admitted_twice)}; Submissions settled other than "
        f"once: {len(figures.settled_not_once)}"
    )
    print(
        f"Turn Events duplicated: {len(figures.duplicate_events)}; missing: "
        f"{len(figures.missing_events)}"
    )
    print(
        f"AgentTurns left: {len(figures.agentturns_left)}; Run versions final without "
        f"their Turns: {len(figures.final_without_turns)}"
    )
    print(f"time: {figures.wall_s:.1f} s from the Runs' creation to the end")
    for label, found in (
        ("not Succeeded", figures.not_succeeded),
        ("failed", figures.failed_turns),
        ("aborted", figures.other_turns),
        ("admitted twice", figures.admitted_twice),
        ("settled other than once", figures.settled_not_once),
        ("duplicate Events", figures.duplicate_events),
        ("missing Events", figures.missing_events),
        ("final without Turns", figures.final_without_turns),
    ):
        if found:
            print(f"  {label}: {found[:5]}")


if __name__ == "__main__":
    main()
