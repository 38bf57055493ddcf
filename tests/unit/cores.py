"""A Run's core driven by hand, as the unit tests of ``RunCore`` drive it: the fixture
machines under ``machines/``, fresh ids from a counter, restores through JSON and through
the ``Run.status`` the operator writes, and the Harness's answer to a sweep played by its
own rule (``kubeturn_harness.settlements``).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kubeturn.k8s import patches
from kubeturn.machine.load import LoadedRun, load_run_yaml
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Effect, Effects, Recorded, Sweep
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.turns import TurnRecord
from kubeturn_harness import settlements
from kubeturn_harness.wire import Outcome, SubmissionId
from tests.statuses import without_nulls

MACHINES = Path(__file__).parent / "machines"
E = TypeVar("E", bound=Effect)


@functools.cache
def loaded(name: str) -> LoadedRun:
    path = MACHINES / f"{name}.yaml"
    return load_run_yaml(path.read_text(), str(path))


def new_core(
    name: str,
    *,
    workspace: WorkspaceView | None = None,
    snapshot: Mapping[str, Any] | None = None,
) -> RunCore:
    """A core for the fixture ``name``; fresh ids are ``n1``, ``n2``, ..."""
    counter = itertools.count(1)
    return RunCore(
        loaded(name), workspace=workspace, new_id=lambda: f"n{next(counter)}", snapshot=snapshot
    )


def restored(
    core: RunCore,
    *,
    workspace: WorkspaceView | None = None,
    new_id: Callable[[], str] | None = None,
) -> RunCore:
    """A new core from ``core``'s snapshot, through JSON, as a restarted shell builds it;
    its fresh ids are ``r1``, ``r2``, ... unless ``new_id`` is given."""
    data = json.loads(json.dumps(core.snapshot()))
    counter = itertools.count(1)
    return RunCore(
        core.run,
        workspace=workspace,
        new_id=new_id or (lambda: f"r{next(counter)}"),
        snapshot=data,
    )


def restored_from_status(
    core: RunCore,
    *,
    workspace: WorkspaceView | None = None,
    new_id: Callable[[], str] | None = None,
) -> RunCore:
    """A new core from the ``Run.status`` the operator writes of ``core``, as the API server
    keeps it (through JSON, every null dropped), restored as the operator restores it
    (``statuses.resume_point``); fresh ids as ``restored``'s."""
    status = statuses.run_status(core.view(), core.snapshot())
    kept = without_nulls(json.loads(json.dumps(patches.status(status)["status"])))
    counter = itertools.count(1)
    return RunCore(
        core.run,
        workspace=workspace,
        new_id=new_id or (lambda: f"r{next(counter)}"),
        snapshot=statuses.resume_point(kept),
    )


def only(effects: Effects, kind: type[E]) -> E:
    """The one effect of ``kind``."""
    found = effects.of(kind)
    assert len(found) == 1, effects.items
    effect = found[0]
    assert isinstance(effect, kind)
    return effect


def kinds(effects: Effects) -> list[str]:
    return [type(effect).__name__ for effect in effects.items]


def started(name: str, **submissions: str) -> tuple[RunCore, dict[str, Admit]]:
    """Start ``name``; admit each Turn whose agent slot is a key, as that Submission."""
    core = new_core(name)
    admits = {a.agent: a for a in core.start(0.0).of(Admit) if isinstance(a, Admit)}
    for agent, submission in submissions.items():
        core.admitted(admits[agent].turn, submission, 0.5)
    return core, admits


def harness_settles(
    sweep: Sweep, running: str | None
) -> dict[str, tuple[Outcome, None, str | None]]:
    """What the Harness reports for ``sweep``: the running Submission settled by the
    sweep's body alone (docs/turn-semantics.md §2; ``kubeturn_harness.settlements``)."""
    if running is None:
        return {}
    body = settlements.Sweep(sweep.cause, SubmissionId(sweep.submission or "") or None)
    return {running: (settlements.running_outcome(body, SubmissionId(running)), None, None)}


def record_of(core: RunCore, turn: str) -> TurnRecord:
    """The one history record of ``turn``."""
    records = [r for r in core.history if r.name == turn]
    assert len(records) == 1, core.history
    return records[0]


def settle_sweep(core: RunCore, sweep: Sweep, running: str | None, now: float) -> TurnRecord:
    """Play the Harness's answer to ``sweep``; the Turn's one record, handed out once,
    which says what ``verdict`` said of it before and says after."""
    caused = harness_settles(sweep, running)
    before = core.verdict(sweep.turn, caused)
    effects = core.swept(sweep.turn, caused, now)
    record = record_of(core, sweep.turn)
    (recorded,) = effects.items
    assert isinstance(recorded, Recorded)
    assert recorded.record == record
    assert recorded.exit is not None
    assert (recorded.exit.cause, recorded.exit.submission) == (sweep.cause, sweep.submission)
    assert before == core.verdict(sweep.turn, {}) == (record.outcome, record.message)
    return record


HANDOFF_IID = "default.handoff/root/coder/t-n1"
