"""The AgentTurn finalizer: a deleted AgentTurn is swept before it goes, and how its Turn
ended is written where kubectl shows it.

The sweep carries the cause the Run controller wrote into ``status.exit`` before it
deleted the AgentTurn; a user's ``kubectl delete`` wrote none, so its sweep has no cause,
and the Run's Machine hears it as the Agent's fault (``deleted``). The settlement goes
into ``status.settlement`` and a ``TurnSettled`` Event before the finalizer is removed;
the Run records the Turn in ``Run.status.turns`` (exactly once, through its core).
"""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import kopf

from kubeturn.k8s import events, metrics
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, NotFound
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Sweep
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
        swept_at = _now()
        workspace = (spec.get("workspaceRef") or {}).get("name", "")
        harness = hub.harnesses.get((namespace, workspace))
        settled: list[Settled] = []
        if harness is not None:
            effect = Sweep(
                turn=spec["turn"],
                agent=spec["agent"]["slot"],
                instance_id=spec["instanceId"],
                cause=cause,
                submission=submission,
            )
            started = time.monotonic()
            settled = await harness.sweep(effect)
            metrics.SWEEP_SECONDS.observe(time.monotonic() - started)
        mine = {s.submission: s for s in settled}
        named = mine.get(submission or "")
        open_ = {e.get("id") for e in status.get("submissions", []) if not e.get("outcome")}
        unnamed = [s for s in settled if s.submission in open_]
        if named is not None:
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
        if not exit_:
            await _deleted_by_user(hub, namespace, spec, submission)


async def _deleted_by_user(
    hub: Hub, namespace: str, spec: kopf.Spec, submission: str | None
) -> None:
    """A Turn deleted by a person: its Run's Machine gets the Agent's fault, reason deleted."""
    run = (spec.get("runRef") or {}).get("name")
    actor = hub.registry.actors.get(f"{namespace}/{run}")
    if actor is None:
        return
    await actor.turn_deleted(spec["turn"], submission)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
