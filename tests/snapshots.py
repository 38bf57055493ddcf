"""Representative Runs, and the golden snapshots made of them (``tests/unit/snapshots/``).

Each scenario drives a core of a fixture Machine (``tests/unit/machines/``) to a point a
Run is often saved at. ``python -m tests.snapshots`` writes the Run's status, as the
operator writes it and the API server keeps it, for every scenario, as
``tests/unit/snapshots/v<VERSION>-<scenario>.json``; it never overwrites a golden: a
released format's goldens stay as they were written (``test_snapshot_versions.py``
restores them all).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubeturn.k8s import patches
from kubeturn.machine.load import LoadedRun, load_run_yaml
from kubeturn.orchestrator import snapshots, statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.invokes import DeliverResult
from kubeturn_harness.wire import Outcome
from tests.statuses import without_nulls

MACHINES = Path(__file__).parent / "unit" / "machines"
GOLDEN = Path(__file__).parent / "unit" / "snapshots"


def loaded(machine: str) -> LoadedRun:
    path = MACHINES / f"{machine}.yaml"
    return load_run_yaml(path.read_text(), str(path))


def core_of(machine: str, workspace: WorkspaceView | None = None) -> RunCore:
    counter = itertools.count(1)
    return RunCore(loaded(machine), workspace=workspace, new_id=lambda: f"n{next(counter)}")


def _admit_all(core: RunCore, effects: Any, submission: str, now: float) -> None:
    for effect in effects.items:
        if isinstance(effect, Admit):
            core.admitted(effect.turn, submission, now)


def _sweep(core: RunCore, effects: Any, running: str, outcome: Outcome, now: float) -> Any:
    """The Harness's answer to the one sweep in ``effects``; the effects that follow."""
    (sweep,) = [e for e in effects.items if isinstance(e, Sweep)]
    return core.swept(sweep.turn, {running: (outcome, None, None)}, now)


def pending() -> tuple[str, RunCore]:
    return "handoff", core_of("handoff")


def running_with_live_turn() -> tuple[str, RunCore]:
    core = core_of("handoff")
    _admit_all(core, core.start(0.0), "s1", 0.5)
    core.pick("default.handoff/root/coder/t-n1", "note", {}, 1.0)
    return "handoff", core


def waiting_on_timer() -> tuple[str, RunCore]:
    core = core_of("timers")
    core.start(0.0)
    core.signal("poke", {}, 1.0)
    core.signal("back", {}, 2.0)
    return "timers", core


def continued_conversation() -> tuple[str, RunCore]:
    core = core_of("continued")
    _admit_all(core, core.start(0.0), "s1", 0.5)
    iid = core.live_turns()[0].instanceId
    _, effects = core.pick(iid, "submit", {}, 1.0)
    _admit_all(core, _sweep(core, effects, "s1", Outcome.ENDED, 2.0), "s2", 2.5)
    return "continued", core


def running_command() -> tuple[str, RunCore]:
    core = core_of("execs")
    core.start(0.0)
    core.signal("build", {}, 1.0)
    return "execs", core


def finished_with_history() -> tuple[str, RunCore]:
    core = core_of("handoff")
    _admit_all(core, core.start(0.0), "s1", 0.5)
    iid = "default.handoff/root/coder/t-n1"
    core.pick(iid, "note", {}, 1.0)
    _, effects = core.pick(iid, "submit", {"summary": "did it"}, 2.0)
    _sweep(core, effects, "s1", Outcome.ENDED, 3.0)
    return "handoff", core


def failed() -> tuple[str, RunCore]:
    core = core_of("handoff")
    _admit_all(core, core.start(0.0), "s1", 0.5)
    _, effects = core.pick("default.handoff/root/coder/t-n1", "giveUp", {}, 1.0)
    _sweep(core, effects, "s1", Outcome.ENDED, 2.0)
    return "handoff", core


def delivering() -> tuple[str, RunCore]:
    """One delivery recorded, the next under way."""
    core = core_of("delivers", WorkspaceView({"target": "/work/target/kubeturn-delivers"}))
    core.start(0.0)
    done = DeliverResult(branch="kubeturn/delivers", commit="c" * 40, changed=True)
    core.deliver_done("first#1", done, 1.0)
    return "delivers", core


SCENARIOS: dict[str, Callable[[], tuple[str, RunCore]]] = {
    "pending": pending,
    "running-live-turn": running_with_live_turn,
    "waiting-on-timer": waiting_on_timer,
    "continued-conversation": continued_conversation,
    "running-command": running_command,
    "finished-with-history": finished_with_history,
    "failed": failed,
    "delivering": delivering,
}


def stored_status(core: RunCore) -> dict[str, Any]:
    """``core``'s status as the operator writes it and the API server keeps it (nulls
    dropped)."""
    status = statuses.run_status(core.view(), core.snapshot())
    written = patches.status(status, removed={"snapshot": snapshots.LEGACY_KEYS})["status"]
    kept: dict[str, Any] = without_nulls(json.loads(json.dumps(written)))
    return kept


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name, scenario in SCENARIOS.items():
        path = GOLDEN / f"v{snapshots.VERSION}-{name}.json"
        if path.exists():
            continue
        machine, core = scenario()
        golden = {
            "version": snapshots.VERSION,
            "machine": machine,
            "writtenBy": "tests/snapshots.py (the operator's StatusStore.save)",
            "status": stored_status(core),
        }
        path.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
