"""The ``exec`` and ``deliver`` invokes: how one starts, and the event its result sends.

An invoke starts when its state is entered (at the end of the macrostep, for a state
still active); one whose frame cannot be rendered is refused with an ``error.invoke``
event instead, and never runs. An exec is stopped when its state exits; a delivery is
never stopped, and its record is kept even when its state has exited (ADR 0063).
Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubeturn.api.status import DeliveryRecord, bounded
from kubeturn.errors import ExpressionError, FrameRefused
from kubeturn.machine import interpreter, targets
from kubeturn.machine.interpreter import DONE_INVOKE, ERROR_INVOKE, Event, InvokeEntry, Scope
from kubeturn.machine.model import Chart, DeliverCall, StatePath, template
from kubeturn.orchestrator import frames
from kubeturn.orchestrator.effects import StartDeliver, StartExec

DELIVERIES_KEPT = 20
"""Delivery records kept (``Run.status.deliveries``), newest last: a Run delivers a few
times; each record is at most a few KiB (its error is bounded)."""
OUTPUT_TAIL = 2000
"""Characters of a timed-out command's output its error quotes: its last words say most."""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None
    output: str
    timed_out: bool = False
    error: str | None = None
    """Set when the command could not run at all."""


@dataclass(frozen=True)
class DeliverResult:
    """How a delivery ended: its branch and commit, pushed or why not."""

    branch: str | None = None
    commit: str | None = None
    changed: bool = False
    pushed: bool = False
    remote: str | None = None
    error: str | None = None
    """Set when it failed: nothing to deliver, the push refused, ..."""


def path(state: str) -> str:
    """The manifest path of the invoke of the state (instance) at ``state``."""
    return targets.state_where(template(StatePath(state))) + ".invoke"


def start(
    chart: Chart,
    config: interpreter.Config,
    scope: Scope,
    workspace: frames.WorkspaceView | None,
    entry: InvokeEntry,
    event: Event | None,
) -> StartExec | StartDeliver | Event:
    """The command or the delivery to start for ``entry``, or the event that refuses it."""
    invoke = chart.state(entry.state).invoke
    assert invoke is not None
    activation = interpreter.activation(config, event, scope, entry.state)
    if invoke.deliver is not None:
        return _deliver(invoke.deliver, activation, workspace, entry)
    assert invoke.exec is not None
    try:
        frame = frames.exec_frame(invoke.exec, activation, workspace, path(entry.state) + ".exec")
    except FrameRefused as refused:
        return _refused(entry, str(refused))
    return StartExec(entry.id, frame.prompt, frame.cwd, invoke.exec.timeout_s)


def _deliver(
    call: DeliverCall,
    activation: Mapping[str, Any],
    workspace: frames.WorkspaceView | None,
    entry: InvokeEntry,
) -> StartDeliver | Event:
    where = path(entry.state) + ".deliver"
    refused: str | None = None
    message = ""
    try:
        message = call.message.render(activation)
    except ExpressionError as error:
        refused = f"{where}.message: {error}"
    if workspace is not None and call.slot not in workspace.repos:
        listed = ", ".join(sorted(workspace.repos)) or "none"
        refused = f"{where}.slot: no repo slot {call.slot!r} in the Workspace (its repos: {listed})"
    elif workspace is None:
        refused = f"{where}: the Run has no Workspace whose work it could deliver"
    if refused is not None:
        return _refused(entry, refused)
    return StartDeliver(
        invocation=entry.id,
        state=entry.state,
        slot=call.slot,
        message=message,
        push=call.push,
        author_name=call.author_name,
        author_email=call.author_email,
    )


def exec_event(entry: InvokeEntry, result: ExecResult) -> Event:
    """The event an exec's result sends its state: done, or an error when the command
    could not run or timed out."""
    fields = {
        "exitCode": result.exit_code,
        "output": result.output,
        "timedOut": result.timed_out,
    }
    if result.error is not None or result.timed_out:
        why = bounded(
            result.error or f"timed out; its output so far: {result.output[-OUTPUT_TAIL:]}"
        )
        return Event(
            ERROR_INVOKE, {"reason": "exec", "message": why, **fields}, entry.cause, entry.id
        )
    return Event(DONE_INVOKE, {"output": fields}, entry.cause, entry.id)


def deliver_event(entry: InvokeEntry, result: DeliverResult) -> Event:
    """The event a delivery's result sends its state: done, or an error saying why."""
    if result.error is not None:
        fields = {"reason": "deliver", "message": bounded(result.error)}
        return Event(ERROR_INVOKE, fields, entry.cause, entry.id)
    output = {
        "commit": result.commit,
        "branch": result.branch,
        "changed": result.changed,
        "pushed": result.pushed,
        "remote": result.remote,
    }
    return Event(DONE_INVOKE, {"output": output}, entry.cause, entry.id)


def recorded(
    delivered: Sequence[DeliveryRecord], start: StartDeliver, result: DeliverResult, now: float
) -> list[DeliveryRecord]:
    """``delivered`` with the record of how ``start`` ended, the newest ``DELIVERIES_KEPT``."""
    record = DeliveryRecord(
        state=start.state,
        slot=start.slot,
        branch=result.branch,
        commit=result.commit,
        changed=result.changed,
        pushed=result.pushed,
        remote=result.remote,
        error=result.error,
        time=now,
    )
    return [*delivered, record][-DELIVERIES_KEPT:]


def _refused(entry: InvokeEntry, message: str) -> Event:
    return Event(ERROR_INVOKE, {"reason": "refused", "message": message}, entry.cause, entry.id)
