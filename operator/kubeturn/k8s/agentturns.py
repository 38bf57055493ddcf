"""The AgentTurn finalizer: a deleted AgentTurn is swept before it goes, and how its Turn
ended is written where kubectl shows it.

The sweep carries the cause the Run controller wrote into ``status.exit`` before it
deleted the AgentTurn; a user's ``kubectl delete`` wrote none, so its sweep has no cause,
and the Run's Machine hears it as the Agent's fault (``deleted``). The settlement goes
into ``status.settlement`` and a ``TurnSettled`` Event before the finalizer is removed;
the Run records the Turn in ``Run.status.turns`` (exactly once, through its core).
A sweep is never sent nowhere: while the Workspace exists and this operator does not
know its Harness (it just started, or the sandbox Pod is being made again), the finalizer
waits for it, and a sweep that did not reach the Harness is sent again to the one known
then (a sweep is safe to repeat), within one bound (``harnesses.WAIT_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from kubeturn.k8s import conditions, events, harnesses, metrics
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, RUNS, NotFound
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Sweep
from kubeturn.orchestrator.harness_client import HarnessRefused, HarnessUnreachable
from kubeturn_harness.wire import Outcome

GROUP, VERSION = "kubeturn.dev", "v1alpha1"


def register(hub: Hub, registry: kopf.OperatorRegistry) -> None:
    @kopf.on.delete(GROUP, VERSION, "agentturns", registry=registry)
    @metrics.counting_errors("agentturns")
    async def sweep(
        body: kopf.Body,
        spec: kopf.Spec,
        status: kopf.Status,
        namespace: str | None,
        name: str,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        assert namespace is not None, "AgentTurns are namespaced"
        exit_ = dict(status.get("exit") or {})
        cause, submission = exit_.get("cause"), exit_.get("submissionId")
        running = [s for s in status.get("submissions", []) if not s.get("outcome")]
        if not exit_ and running:
            submission = running[-1]["id"]
        workspace = (spec.get("workspaceRef") or {}).get("name", "")
        if not exit_:
            # A person deleted it: the Machine hears so before the sweep, whose
            # settlement the Run's follower reads too and would take for the Agent's
            # own failure.
            await _deleted_by_user(hub, namespace, spec, submission)
        effect = Sweep(
            turn=spec["turn"],
            agent=spec["agent"]["slot"],
            instance_id=spec["instanceId"],
            cause=cause,
            submission=submission,
        )
        swept_at = _now()
        started = time.monotonic()
        reached = await _send(hub, namespace, workspace, effect, logger)
        if reached is not None:
            metrics.SWEEP_SECONDS.observe(time.monotonic() - started)
        settled = reached or []
        mine = {s.submission: s for s in settled}
        named = mine.get(submission or "")
        open_ = {e.get("id") for e in status.get("submissions", []) if not e.get("outcome")}
        unnamed = [s for s in settled if s.submission in open_]
        message: str | None
        if reached is None:
            outcome = Outcome.ABORTED
            message = f"the Harness of Workspace {workspace!r} was not reached: nothing was swept"
        elif named is not None:
            outcome, message = named.outcome, named.message
        elif submission is None and unnamed:
            # None was named (the next one was being admitted at the exit): the Turn
            # ended as the sweep settled that one (ADR 0015).
            outcome, message = unnamed[-1].outcome, unnamed[-1].message
        elif submission is None:
            outcome = Outcome.ENDED if cause == "pick" else Outcome.ABORTED
            message = None
        else:
            outcome, message = Outcome.ABORTED, "no settlement came back from the Harness"
        settlement = {
            "outcome": outcome.value,
            "cause": cause,
            "message": message,
            "sweptAt": swept_at,
            "settledAt": _now(),
        }
        with contextlib.suppress(NotFound):
            await hub.kube.patch(
                AGENTTURNS,
                namespace,
                name,
                {"status": {"settlement": settlement, "phase": "Settled"}},
                status=True,
            )
        said = f"{spec['agent']['slot']} in {spec['statePath']}: {outcome.value}"
        said += (f" (cause {cause})" if cause else "") + (f": {message}" if message else "")
        await events.post(hub.kube, dict(body), events.TURN_SETTLED, said)
        # Every settlement of the conversation goes back: the Run's core takes those of
        # this Turn's Submissions, whether or not this status listed them yet.
        reported = list(settled)
        if named is None and submission is not None:
            reported.append(Settled(submission, outcome, message=message))
        hub.swept((namespace, name), reported)


async def _send(
    hub: Hub, namespace: str, workspace: str, effect: Sweep, logger: kopf.Logger
) -> list[Settled] | None:
    """Sweep at the Workspace's Harness: what the sweep settled, or None when no Harness
    was reached within ``harnesses.WAIT_S`` (or the Workspace is gone).

    The client is asked for afresh after every failure to reach it: the sandbox Pod may
    be being made again (ADR 0024), and its new Harness, which found the conversation on
    the volume, answers the repeated sweep. A sweep sent nowhere would leave the Turn
    running on the Harness.
    """
    deadline = time.monotonic() + harnesses.WAIT_S
    tries = 0
    while (harness := await harnesses.wait(hub, namespace, workspace, deadline)) is not None:
        try:
            return await harness.send_sweep(effect)
        except HarnessRefused as refused:
            logger.warning(f"sweeping {effect.instance_id}: {refused}")
            return []
        except HarnessUnreachable as unreached:
            # Said once (an Event), not at every try.
            said = logger.info if tries == 0 else logger.debug
            said(f"sweeping {effect.instance_id}: {unreached}; trying again")
            tries += 1
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(harnesses.POLL_S)
    return None


async def _deleted_by_user(
    hub: Hub, namespace: str, spec: kopf.Spec, submission: str | None
) -> None:
    """A Turn deleted by a person: its Run's Machine gets the Agent's fault, reason deleted.

    Waits (bounded) for the Run's actor while the Run is being resumed (this operator
    just started); a Run being deleted, finished or invalid has no Machine to tell.
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
            or status.get("phase") in ("Succeeded", "Failed", "Cancelled")
            or (ready and ready[0].get("reason") == conditions.INVALID)
        ):
            return
        actor = hub.registry.actors.get(f"{namespace}/{run}")
        if actor is not None:
            await actor.turn_deleted(spec["turn"], submission)
            return
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(harnesses.POLL_S)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
