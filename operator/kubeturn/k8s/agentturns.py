"""The AgentTurn finalizer: a deleted AgentTurn is swept before it goes, and how its Turn
ended is written where kubectl shows it.

The sweep carries the cause the Run controller wrote into ``status.exit`` before it
deleted the AgentTurn; a user's ``kubectl delete`` wrote none, so its sweep has no cause,
and the Run's Machine hears it as the Agent's fault (``deleted``). The settlement goes
into ``status.settlement`` (with the outcomes the sweep reported for Submissions whose
status has none yet: the Run writes none after the exit, ADR 0092), written by kopf in
the patch before the one that removes the finalizer (a write of the handler's own would
make that one fail its test of the version kopf read, and be sent again), and a
``TurnSettled`` Event
(named for the AgentTurn, so a finalizer run again after a restart posts none again);
the Run records the Turn in ``Run.status.turns`` (exactly once, through its core).
A sweep is never sent nowhere: while the Workspace exists and this operator does not
know its Harness (it just started, or the sandbox Pod is being made again), the finalizer
waits for it, and a sweep that was not answered is sent again to the one known then (a
sweep is safe to repeat), each try within ``harness_client.SWEEP_TIMEOUT_S``, all of it
within one bound (``harnesses.WAIT_S``); past it, the Submission the sweep named is
settled ``aborted``, saying that no Harness answered (ADR 0028).

The Turn's outcome is judged once, by ``turns.outcome`` (ADR 0015): the Run's core
judges it when this operator drives the Run (``RunCore.verdict``, over the settlements
reported to it), and the AgentTurn's status only when no Run here holds the Turn, so
``status.settlement`` says what ``Run.status.turns`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import kopf

from kubeturn.api import agentturn
from kubeturn.api.agentturn import AgentTurnStatus, Settlement, TurnPhase
from kubeturn.api.common import GROUP, VERSION
from kubeturn.api.status import FINISHED, SubmissionRecord
from kubeturn.errors import HarnessRefused, HarnessUnreachable
from kubeturn.k8s import conditions, events, harnesses, metrics, patches
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import RUNS
from kubeturn.orchestrator import turns
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Sweep
from kubeturn.orchestrator.ids import InstanceId, TurnId
from kubeturn_harness.wire import Outcome, SubmissionId


def register(hub: Hub, registry: kopf.OperatorRegistry) -> None:
    @kopf.on.delete(GROUP, VERSION, "agentturns", registry=registry)
    @metrics.counting_errors("agentturns")
    async def sweep(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        patch: kopf.Patch,
        namespace: str | None,
        name: str,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        assert namespace is not None, "AgentTurns are namespaced"
        exit_ = dict(status.get("exit") or {})
        cause, named = exit_.get("cause"), exit_.get("submissionId")
        listed = [dict(entry) for entry in status.get("submissions", [])]
        running = [s for s in listed if not s.get("outcome")]
        if not exit_ and running:
            named = running[-1]["id"]
        submission = SubmissionId(named) if named is not None else None
        workspace = (spec.get("workspaceRef") or {}).get("name", "")
        if not exit_:
            # A person deleted it: the Machine hears so before the sweep, whose
            # settlement the Run's follower reads too and would take for the Agent's
            # own failure.
            await _deleted_by_user(hub, namespace, spec)
        effect = Sweep(
            turn=TurnId(spec["turn"]),
            agent=spec["agent"]["slot"],
            instance_id=InstanceId(spec["instanceId"]),
            cause=cause,
            submission=submission,
        )
        swept_at = _now()
        started = time.monotonic()
        swept = await _send(hub, namespace, workspace, effect, logger)
        if swept.failure is None:
            metrics.SWEEP_SECONDS.observe(time.monotonic() - started)
        # Every settlement of the conversation goes back: the Run's core takes those of
        # this Turn's Submissions, whether or not this status listed them yet. The one the
        # sweep named, if none came back for it, is settled as the failure says.
        reported = list(swept.settled)
        if submission is not None and all(s.submission != submission for s in reported):
            said = swept.failure or turns.NO_SETTLEMENT
            reported.append(Settled(submission, Outcome.ABORTED, message=said))
        caused = {s.submission: (s.outcome, s.usage, s.message) for s in reported}
        judged = await _run_verdict(hub, namespace, spec, caused)
        outcome, message = judged or _verdict(cause, submission, listed, caused)
        settlement = Settlement(
            outcome=outcome, cause=cause, message=message, sweptAt=swept_at, settledAt=_now()
        )
        outcomes = _outcomes(listed, caused, time.time())
        records = outcomes or [SubmissionRecord.model_validate(entry) for entry in listed]
        settled = AgentTurnStatus(
            settlement=settlement,
            phase=TurnPhase.SETTLED,
            **agentturn.used(records),
            **({"submissions": outcomes} if outcomes is not None else {}),
        )
        patch.update(patches.status(settled))
        said = f"{spec['agent']['slot']} in {spec['statePath']}: {outcome.value}"
        said += (f" (cause {cause})" if cause else "") + (f": {message}" if message else "")
        await events.post(hub.kube, dict(body), events.TURN_SETTLED, said, once=spec["turn"])
        hub.swept((namespace, name), reported)


@dataclass(frozen=True)
class _Swept:
    settled: list[Settled]
    """Every settlement of the conversation, as the Harness read it back after the sweep."""
    failure: str | None = None
    """Why nothing came back: no Harness was reached, none answered in time, or the
    Harness refused the sweep."""


async def _send(
    hub: Hub, namespace: str, workspace: str, effect: Sweep, logger: kopf.Logger
) -> _Swept:
    """Sweep at the Workspace's Harness, within ``harnesses.WAIT_S`` in all: what the
    sweep settled, or why nothing came back.

    The client is asked for afresh after every try that was not answered: the sandbox
    Pod may be being made again (ADR 0024), and its new Harness, which found the
    conversation on the volume, answers the repeated sweep. A sweep sent nowhere would
    leave the Turn running on the Harness; one whose Harness never answers (a frozen
    process) holds the AgentTurn, and its Run's deletion, no longer than the bound.
    """
    deadline = time.monotonic() + harnesses.WAIT_S
    unanswered: HarnessUnreachable | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(harnesses.WAIT_S):
            while (
                harness := await harnesses.wait(hub, namespace, workspace, deadline)
            ) is not None:
                try:
                    return _Swept(await harness.send_sweep(effect))
                except HarnessRefused as refused:
                    logger.warning(f"sweeping {effect.instance_id}: {refused}")
                    return _Swept([], str(refused))
                except HarnessUnreachable as unreached:
                    # Said once (an Event), not at every try.
                    said = logger.info if unanswered is None else logger.debug
                    said(f"sweeping {effect.instance_id}: {unreached}; trying again")
                    unanswered = unreached
                await asyncio.sleep(harnesses.POLL_S)
    where = f"the Harness of Workspace {workspace!r}"
    if unanswered is None:
        failure = f"{where} was not reached: nothing was swept"
    elif time.monotonic() >= deadline:
        failure = f"{where} did not answer the sweep within {harnesses.WAIT_S:g} s: {unanswered}"
    else:
        failure = f"{where} did not answer the sweep before the Workspace went: {unanswered}"
    logger.warning(f"sweeping {effect.instance_id}: {failure}")
    return _Swept([], failure)


async def _run_verdict(
    hub: Hub, namespace: str, spec: kopf.Spec, caused: turns.Caused
) -> tuple[Outcome, str | None] | None:
    """How the Run records the Turn with these settlements (``RunCore.verdict``), when
    this operator drives the Run and its core holds the Turn exited (or recorded). Waits
    (bounded) while the operator resumes its Runs after a start."""
    await hub.wait_resumed(harnesses.WAIT_S)
    run = (spec.get("runRef") or {}).get("name")
    actor = hub.actor_of(f"{namespace}/{run}")
    return actor.core.verdict(TurnId(spec["turn"]), caused) if actor is not None else None


def _verdict(
    cause: str | None,
    submission: SubmissionId | None,
    listed: list[dict[str, Any]],
    caused: turns.Caused,
) -> tuple[Outcome, str | None]:
    """The Turn's outcome from what its AgentTurn lists, when no Run here will record it
    (the Run is gone, going or finished, or the Turn's state is still active): the Run's
    rule (``turns.outcome``), the sweep naming ``submission``, with no admission known to
    be in flight at the exit."""
    exit_ = turns.Exit(cause=cause, submission=submission, at=time.time())
    submissions = [
        turns.SubmissionEntry(
            id=entry["id"], admittedAt=entry.get("admittedAt") or 0.0, outcome=entry.get("outcome")
        )
        for entry in listed
    ]
    turns.settle(submissions, caused, exit_.at)
    return turns.outcome(exit_, submissions)


async def _deleted_by_user(hub: Hub, namespace: str, spec: kopf.Spec) -> None:
    """A Turn deleted by a person: its Run's Machine gets the Agent's fault, reason deleted.

    Waits (bounded) for the Run's actor while the Run is being resumed (this operator
    just started); a Run being deleted, finished, invalid or too large has no Machine to
    tell.
    """
    run = str((spec.get("runRef") or {}).get("name"))
    deadline = time.monotonic() + harnesses.WAIT_S
    while True:
        found = await hub.kube.get(RUNS, namespace, run)
        status = (found or {}).get("status") or {}
        ready = [c for c in status.get("conditions", []) if c.get("type") == conditions.READY]
        if (
            found is None
            or found["metadata"].get("deletionTimestamp")  # its Turns go with it
            or status.get("phase") in FINISHED
            or (ready and ready[0].get("reason") in conditions.UNDRIVEN)
        ):
            return
        actor = hub.actor_of(f"{namespace}/{run}")
        if actor is not None:
            await actor.turn_deleted(TurnId(spec["turn"]))
            return
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(harnesses.POLL_S)


def _outcomes(
    listed: list[dict[str, Any]], caused: turns.Caused, now: float
) -> list[SubmissionRecord] | None:
    """The AgentTurn's Submissions with the outcomes the sweep reported for those that
    had none; None when none changes. The Run's follower writes a Submission's outcome
    while the Turn's state is active, and leaves those it hears of after the exit to
    this write, which comes with the settlement."""
    if not any(not entry.get("outcome") and entry["id"] in caused for entry in listed):
        return None
    records = [SubmissionRecord.model_validate(entry) for entry in listed]
    return [
        record.model_copy(
            update={
                "outcome": caused[SubmissionId(record.id)][0],
                "usage": caused[SubmissionId(record.id)][1],
                "settledAt": now,
            }
        )
        if record.outcome is None and record.id in caused
        else record
        for record in records
    ]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
