"""Benchmark of the Kubernetes operator against the API emulator: its cost per Run as the
number of Runs grows, and against a floor operator doing the least a Run needs.

For each N (``--runs``), in a fresh world each (bench/operator_world.py: the emulator with
the chart's ServiceAccount and RBAC, the kubelet running real Harness processes, the
scripted model, the operator in its own process), N Runs are created at once and driven
until every one is ``Succeeded`` and every AgentTurn is gone. Then, unless ``--no-floor``,
the same with the floor operator (bench/floor_operator.py: kopf and kubeturn's client
facade; a child AgentTurn, two status patches, the child's deletion) instead of kubeturn.
Each Run asks its Agent for ``--turns`` Turns (default 1), one after another. Settled
AgentTurns go at once, unless ``--turn-retention SECONDS`` keeps each that long (ADR 0106:
one write more per Turn, when it goes; the world waits for them to go).

Prints, per N and operator (per Run: the total over the N Runs, divided by N):
1. the 1-minute load average when the size began (the machine is shared: trust a row that
   starts low), the seconds from the first create to the last ``Succeeded``;
2. CPU: the operator process's CPU seconds (user + system, ``/proc/<pid>/stat``) over
   that stretch, per Run and per Turn;
3. parsed: the bytes the operator's client was sent, counted by the emulator for the
   operator's identity (``api.traffic``, tests/operator/traffic.py): every answer's body
   and every watch event (one JSON line each), per Run, split into answers and watch
   events and per kind (runs, workspaces, agentturns, other: pods, secrets, events...);
4. writes: the operator's POST, PUT, PATCH and DELETE requests per Run, per kind, with
   the verbs behind each;
5. the shared Workspace (kubeturn only): the bytes of its JSON at the end and the largest
   version stored meanwhile, and how many versions were stored;
6. create → first AgentTurn p50/p99: per Run, from its creation (the POST sent) to its
   first AgentTurn's ADDED event on a watch; create → ``Succeeded`` (polled, 50 ms);
7. kubeturn's sweep → settled p99 (from its ``kubeturn_sweep_to_settled_seconds``
   histogram; an upper bound, the bucket's edge) and deletionTimestamp → DELETED per
   AgentTurn on the watch; the operator's peak RSS; the largest Run object (bytes of its
   JSON, of its status and of its annotations);
then the flatness of kubeturn's CPU per Run (at the largest N over the smallest) and its
ratio to the floor's at each N.

Run: ``python bench/operator.py [--runs 50 200 500 1000] [--turns K] [--no-floor]
[--turn-retention SECONDS] [--json]`` (default ``--runs 50``); ``--profile DIR`` records
each operator with py-spy (when installed) into DIR. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.operator_world import KINDS, one_size  # noqa: E402

FLAT = 0.2
"""The issue's flatness: CPU per Run within ±20% from the smallest N to the largest."""
FLOOR_RATIO = 3.0
"""The issue's bound on kubeturn's CPU per Run as a multiple of the floor's."""


def per_run(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures divided per Run (and CPU per Turn)."""
    n, turns = figures["runs"], figures["turns_per_run"]
    seen = figures["traffic"]
    answers = {k: v / n for k, v in seen["answer_bytes"].items()}
    events = {k: v / n for k, v in seen["event_bytes"].items()}
    writes = {k: sum(verbs.values()) / n for k, verbs in seen["writes"].items()}
    return {
        "cpu_ms": figures["operator_cpu_s"] / n * 1000,
        "cpu_ms_per_turn": figures["operator_cpu_s"] / (n * turns) * 1000,
        "parsed_bytes": sum(answers.values()) + sum(events.values()),
        "answer_bytes": answers,
        "event_bytes": events,
        "events": {k: v / n for k, v in seen["events"].items()},
        "writes": sum(writes.values()),
        "writes_by_kind": writes,
        "reads": sum(seen["reads"].values()) / n,
    }


def summary(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """kubeturn's flatness and its ratio to the floor at each N."""
    mine = sorted((s for s in sizes if s["operator"] == "kubeturn"), key=lambda s: s["runs"])
    floor = {s["runs"]: s for s in sizes if s["operator"] == "floor"}
    flatness = None
    if len(mine) > 1:
        flatness = {
            "smallest": mine[0]["runs"],
            "largest": mine[-1]["runs"],
            "ratio": mine[-1]["per_run"]["cpu_ms"] / mine[0]["per_run"]["cpu_ms"],
        }
    ratios = {
        s["runs"]: s["per_run"]["cpu_ms"] / floor[s["runs"]]["per_run"]["cpu_ms"]
        for s in mine
        if s["runs"] in floor and floor[s["runs"]]["per_run"]["cpu_ms"] > 0
    }
    return {"cpu_per_run_flatness": flatness, "cpu_per_run_over_floor": ratios}


def kb(value: float) -> str:
    return f"{value / 1024:.1f}"


def print_table(figures: dict[str, Any]) -> None:
    machine = figures["machine"]
    print(f"machine: {machine['cores']} cores, Python {machine['python']}")
    print(
        f"{'N':>5} {'operator':<9} {'load':>5} {'wall s':>7} {'CPU s':>7} {'CPU/Run':>8} "
        f"{'CPU/Turn':>8} {'parsed/Run KB':>13} {'(answers':>8} {'events)':>8} "
        f"{'writes/Run':>10} {'1st AgentTurn p50/p99 ms':>24} {'Workspace end/max KB':>20}"
    )
    for r in figures["sizes"]:
        p = r["per_run"]
        workspace = r["workspace"]
        shared = (
            f"{kb(workspace['end_bytes'])}/{kb(workspace['largest_bytes'])}" if workspace else "-"
        )
        first = r["create_to_first_agentturn_ms"]
        print(
            f"{r['runs']:>5} {r['operator']:<9} {r['load_average_1m_at_start']:>5.1f} "
            f"{r['wall_s']:>7.1f} {r['operator_cpu_s']:>7.1f} {p['cpu_ms']:>6.1f}ms "
            f"{p['cpu_ms_per_turn']:>6.1f}ms {kb(p['parsed_bytes']):>13} "
            f"{kb(sum(p['answer_bytes'].values())):>8} {kb(sum(p['event_bytes'].values())):>8} "
            f"{p['writes']:>10.1f} {first['p50']:>11.0f}/{first['p99']:<12.0f} {shared:>20}"
        )
    print()
    for r in figures["sizes"]:
        p, seen = r["per_run"], r["traffic"]
        label = f"N={r['runs']} {r['operator']}"
        kinds = (*KINDS, "other")
        print(f"{label}: {r['succeeded']} Succeeded, {r['failed']} Failed, ", end="")
        print(f"AgentTurns left {r['agentturns_left']}; Turns per Run {r['turns_per_run']}")
        answers = ", ".join(f"{k} {kb(p['answer_bytes'][k])}" for k in kinds)
        events = ", ".join(f"{k} {kb(p['event_bytes'][k])} ({p['events'][k]:.1f})" for k in kinds)
        print(f"  parsed/Run KB: answers {answers}; watch events (count) {events}")
        writes = "; ".join(
            f"{k} {sum(seen['writes'][k].values()) / r['runs']:.1f} ("
            + ", ".join(f"{v} {c / r['runs']:.1f}" for v, c in sorted(seen["writes"][k].items()))
            + ")"
            for k in kinds
        )
        print(f"  writes/Run: {writes}; reads/Run {p['reads']:.1f}")
        done = r["create_to_succeeded_ms"]
        print(f"  create → Succeeded p50 {done['p50']:.0f} ms, p99 {done['p99']:.0f} ms")
        if r["workspace"]:
            w, gone = r["workspace"], r["deletion_to_deleted_ms"]
            print(
                f"  Workspace {kb(w['end_bytes'])} KB at the end, {kb(w['largest_bytes'])} KB "
                f"at most, {w['stored_versions']} versions stored; sweep → settled p99 ≤ "
                f"{r['sweep_to_settled_histogram_p99_ms_upper']:.0f} ms; deletionTimestamp → "
                f"DELETED p50 {gone['p50']:.0f} ms, p99 {gone['p99']:.0f} ms"
            )
        big = r["largest_run"]
        if r["turns_per_run"] > 1:
            print(
                f"  {r['turns_per_run']} Turns per Run: CPU per Turn {p['cpu_ms_per_turn']:.1f} "
                f"ms; the largest Run's status {big['status_bytes']} bytes; writes per Run "
                f"{p['writes']:.1f}, per Turn {p['writes'] / r['turns_per_run']:.1f}"
            )
        print(
            f"  operator peak RSS {r['operator_peak_rss_mib']:.0f} MiB; the rest: emulator, "
            f"kubelet and model {r['emulator_side_cpu_s']:.1f} s CPU, Harness, git and the "
            f"operator's stop {r['harness_side_cpu_s']:.1f} s; largest Run {big['bytes']} "
            f"bytes (status {big['status_bytes']}, annotations {big['annotations_bytes']}); "
            f"this size took {r['world_s']:.0f} s in all"
        )
        if r["failures"] or r["kubelet_errors"]:
            print(f"  failures: {r['failures']}  kubelet errors: {r['kubelet_errors']}")
    print()
    flat = figures["summary"]["cpu_per_run_flatness"]
    if flat is not None:
        print(
            f"kubeturn CPU per Run at N={flat['largest']} over N={flat['smallest']}: "
            f"{flat['ratio']:.2f} (flat within ±{FLAT:.0%}: {1 - FLAT:.1f}–{1 + FLAT:.1f})"
        )
    ratios = figures["summary"]["cpu_per_run_over_floor"]
    if ratios:
        said = ", ".join(f"N={n} {ratio:.1f}×" for n, ratio in ratios.items())
        print(f"kubeturn CPU per Run over the floor's: {said} (at most {FLOOR_RATIO:.0f}×)")
        if any(r["turns_per_run"] > 1 for r in figures["sizes"]):
            print("  (the floor makes one child per Run: compare it with one Turn per Run)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[50])
    parser.add_argument("--turns", type=int, default=1, help="Turns each Run asks for")
    parser.add_argument(
        "--turn-retention",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep each settled AgentTurn this long (the chart's turnRetention; 0: none)",
    )
    parser.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", type=Path, help="record the operators with py-spy into DIR")
    parser.add_argument("--table", type=Path, help="print the table of a --json output FILE")
    args = parser.parse_args()
    if args.table is not None:
        print_table(json.loads(args.table.read_text()))
        return
    sizes = []
    for n in args.runs:
        for floor in (False, True) if args.floor else (False,):
            with tempfile.TemporaryDirectory(prefix="kubeturn-bench-") as scratch:
                figures = asyncio.run(
                    one_size(
                        n,
                        args.turns,
                        Path(scratch),
                        floor=floor,
                        profile=args.profile,
                        retention_s=args.turn_retention,
                    )
                )
            figures["per_run"] = per_run(figures)
            sizes.append(figures)
            said = f"N={n} {figures['operator']}: {figures['per_run']['cpu_ms']:.1f} ms CPU/Run"
            print(f"{said} ({figures['world_s']:.0f} s)", file=sys.stderr, flush=True)
    machine = {"cores": os.cpu_count(), "python": platform.python_version()}
    result = {"machine": machine, "sizes": sizes, "summary": summary(sizes)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
