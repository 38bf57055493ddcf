"""``deliver`` invokes in the Run core: started as rendered, recorded once when they end,
their result sent to the state that asked if it is still active, never stopped by an
exit, and started again by a core restored while one runs (ADR 0063)."""

from __future__ import annotations

import itertools
import json

from kubeturn.api.status import RunPhase, RunStatus
from kubeturn.k8s import patches
from kubeturn.machine.load import load_run_yaml
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import StartDeliver, StopExec
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.invokes import DeliverResult
from tests.statuses import unfit, without_nulls

MACHINE = """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: r}
spec:
  workspace: {template: {repos: {target: {url: .}}}}
  input: {task: fix}
  agents: {}
  machine:
    initial: delivering
    states:
      delivering:
        invoke:
          deliver: {slot: target, message: "kubeturn: {{ input.task }}", push: true}
          onDone: {target: done, assign: {context.commit: event.output.commit}}
          onError: {target: failed, assign: {context.why: event.message}}
        on: {leave: elsewhere}
      elsewhere: {}
      done: {type: final, output: context.commit}
      failed: {type: final, outcome: failed, output: context.why}
"""
WORKSPACE = WorkspaceView({"target": "/work/target/kubeturn-r"})
INVOCATION = "delivering#1"
PUSHED = DeliverResult(
    branch="kubeturn/r", commit="c0ffee", changed=True, pushed=True, remote="https://git.test/r"
)


def new_core() -> RunCore:
    counter = itertools.count(1)
    return RunCore(load_run_yaml(MACHINE), workspace=WORKSPACE, new_id=lambda: f"n{next(counter)}")


def from_status(core: RunCore) -> RunCore:
    status = statuses.run_status(core.view(), core.snapshot())
    kept = without_nulls(json.loads(json.dumps(patches.status(status)["status"])))
    assert unfit(RunStatus, kept) == []
    return RunCore(
        core.run, workspace=WORKSPACE, new_id=lambda: "r", snapshot=statuses.resume_point(kept)
    )


def test_a_delivery_is_started_as_rendered() -> None:
    effects = new_core().start(0.0)
    assert effects.items == [
        StartDeliver(
            INVOCATION,
            "delivering",
            "target",
            "kubeturn: fix",
            True,
            "kubeturn",
            "kubeturn@users.noreply.kubeturn.dev",
        )
    ]


def test_done_goes_to_on_done_and_is_recorded_once() -> None:
    core = new_core()
    core.start(0.0)
    core.deliver_done(INVOCATION, PUSHED, 5.0)
    assert core.phase is RunPhase.SUCCEEDED
    assert core.config is not None
    assert core.config.output == "c0ffee"
    assert core.deliver_done(INVOCATION, PUSHED, 6.0).items == []
    [record] = statuses.run_status(core.view(), core.snapshot()).deliveries
    assert record.model_dump(exclude_none=True) == {
        "state": "delivering",
        "slot": "target",
        "branch": "kubeturn/r",
        "commit": "c0ffee",
        "changed": True,
        "pushed": True,
        "remote": "https://git.test/r",
        "time": 5.0,
    }


def test_an_error_goes_to_on_error_with_reason_deliver() -> None:
    core = new_core()
    core.start(0.0)
    refused = DeliverResult(branch="kubeturn/r", commit="c0ffee", changed=True, error="no")
    core.deliver_done(INVOCATION, refused, 5.0)
    assert core.phase is RunPhase.FAILED
    assert core.config is not None
    assert core.config.output == "no"
    assert [r.error for r in core.delivered] == ["no"]


def test_an_exit_does_not_stop_it_and_its_result_is_recorded_only() -> None:
    core = new_core()
    core.start(0.0)
    effects = core.signal("leave", {}, 1.0)
    assert effects.of(StopExec) == []
    assert core.state == "elsewhere"
    assert core.deliver_done(INVOCATION, PUSHED, 5.0).items == []
    assert core.state == "elsewhere"
    assert [r.commit for r in core.delivered] == ["c0ffee"]


def test_one_cut_by_a_restart_is_started_again_and_the_records_resume() -> None:
    core = new_core()
    [start] = core.start(0.0).items
    again = from_status(core)
    assert again.resume().items == [start]
    again.deliver_done(INVOCATION, PUSHED, 5.0)
    later = from_status(again)
    assert [r.commit for r in later.delivered] == ["c0ffee"]
    assert later.resume().items == []
    assert later.phase is RunPhase.SUCCEEDED


def test_a_slot_the_workspace_lacks_is_refused() -> None:
    counter = itertools.count(1)
    core = RunCore(
        load_run_yaml(MACHINE),
        workspace=WorkspaceView({"other": "/work/other/kubeturn-r"}),
        new_id=lambda: f"n{next(counter)}",
    )
    assert core.start(0.0).of(StartDeliver) == []
    assert core.phase is RunPhase.FAILED
    assert core.config is not None
    assert "no repo slot 'target' in the Workspace (its repos: other)" in core.config.output
