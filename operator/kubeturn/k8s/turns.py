"""Turns on a cluster: a ``TurnPort`` whose Turns are AgentTurn objects.

Admitting creates the AgentTurn (owned by its Run, with the sweep finalizer), waits for
the Workspace and for every earlier AgentTurn of the same conversation to be gone (the
ordered abort; "earlier" is a lower Turn number, since an Instance ID belongs to one
Run), then for a slot under the caps on live Turns (its Workspace's, its namespace's,
ADR 0116: while it waits, the AgentTurn is ``Pending`` with the reason), then admits to
the Workspace's Harness. Its answer goes back to the Run
at once: a Harness runs a Submission as soon as it admits it, and a quick pick must find
the Submission known. The AgentTurn's status hears of it from the settlement follower,
which records it and then how it settled. Sweeping writes ``status.exit`` (the cause) and
deletes the AgentTurn; its finalizer sends the sweep and reports what it settled.

The Harness's client is asked for after every wait and every failure to reach it, never
kept across them: the sandbox Pod may be made again meanwhile (ADR 0024), its old client
closed. An admission that did not reach the Harness is sent again (its key admits it
once); the follower reads on from its offset at the new Harness, which recovered the
conversation's log and settled what the old one left running.

Status writes are built from the ``AgentTurnStatus`` model, made against the version of
the AgentTurn this Run was last answered with (no read first; a conflict reads again, ADR
0092), never sent when they change nothing, and never move a Turn back: once its state
exited it stays ``Settling``, once its finalizer wrote the settlement it stays
``Settled``. A Submission that settles after the exit is written by the finalizer, with
the settlement. Only a Turn that continues a conversation past its Run's first Turn can
have an earlier Turn to wait for; the others list nothing (ADR 0091).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubeturn.api import agentturn
from kubeturn.api.agentturn import AgentTurnStatus, Exit, TurnPhase
from kubeturn.api.status import SubmissionRecord
from kubeturn.errors import AdmitFailed, Conflict, HarnessCallFailed, HarnessUnreachable, NotFound
from kubeturn.k8s import harnesses, objects, patches, retention
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator import caps, harness_client, ids
from kubeturn.orchestrator.actor import Progress, Settled
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.orchestrator.ids import TurnId
from kubeturn_harness.wire import Outcome, SubmissionId

POLL_S = 0.2
"""How often an admission re-checks the Workspace and a continued conversation's earlier Turns:
a sweep takes a Harness round trip or more, so five looks a second wait little longer
than it does, at one list each."""

SETTINGS = {
    caps.WORKSPACE: "its spec.maxLiveTurns",
    caps.NAMESPACE: "the operator's --namespace-max-live-turns",
}
"""Where each kind of cap is set, for the AgentTurn's message."""

log = logging.getLogger(__name__)


class ClusterTurns:
    def __init__(
        self,
        hub: Hub,
        run: dict[str, Any],
        loaded: LoadedRun,
        workspace: str | None,
        slots: caps.RunSlots | None = None,
    ) -> None:
        self._hub = hub
        self._slots = slots
        self._run = run
        self._loaded = loaded
        self._workspace = workspace
        self._namespace = run["metadata"]["namespace"]
        self._known: dict[str, dict[str, Any]] = {}
        """AgentTurn name → the last version of it this Run's writes were answered with
        (from its create on, until its sweep deletes it): a status write is made against
        it, with no read first; one that is stale meets a conflict, and is read then."""
        self._exited: set[str] = set()
        """AgentTurns whose sweep this Run began (a name each, for the Run's life): their
        finalizer writes how their Submissions settled, with the settlement, so a
        settlement heard after the exit needs no write of its own."""

    def _name(self, turn: TurnId) -> str:
        return objects.turn_name(self._run["metadata"]["name"], turn)

    async def _harness(self) -> HarnessClient:
        """The Harness serving the Workspace now, waiting while none is known (the
        sandbox is starting, or being made again)."""
        while (harness := self._hub.harness_of(self._namespace, self._workspace or "")) is None:
            await asyncio.sleep(POLL_S)
        return harness

    async def admit(self, effect: Admit) -> SubmissionId:
        menu = [
            {"name": m.name, "description": m.description, "schema": dict(m.schema)}
            for m in self._loaded.menu(StatePath(effect.state))
        ]
        kept = retention.retention(
            self._loaded.spec.turnRetention, self._hub.settings.turn_retention_s
        )
        body = objects.agent_turn(
            self._run, effect, workspace=self._workspace, menu=menu, retention=kept
        )
        created = await self._hub.kube.create(body)
        self._known.setdefault(created["metadata"]["name"], created)
        await self._earlier_gone(effect)
        if self._slots is not None:
            name = created["metadata"]["name"]
            await self._slots.enter(effect.turn, lambda held: self._pending(name, held))
        # Nothing between the Harness's answer and the Run's record of it (see above).
        return await self._admit(effect)

    async def _admit(self, effect: Admit) -> SubmissionId:
        """Admit at the Harness serving now. One that was not reached is asked again,
        with the client known then, for up to ``harnesses.WAIT_S``: the key admits the
        Submission once, whether or not an earlier try reached the Harness. A failure
        that ends the admission is ``AdmitFailed``, with it chained."""
        deadline: float | None = None
        while True:
            harness = await self._harness()
            try:
                return await harness.send_admit(effect)
            except HarnessUnreachable as unreached:
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + harnesses.WAIT_S
                if now > deadline:
                    raise AdmitFailed(str(unreached)) from unreached
                log.debug("admitting %s: %s; trying again", effect.key, unreached)
            except HarnessCallFailed as failed:
                raise AdmitFailed(str(failed)) from failed
            await asyncio.sleep(POLL_S)

    async def _pending(self, name: str, held: caps.Held) -> None:
        """Show the AgentTurn ``Pending``, saying why it waits for a slot."""
        reason = held.reason
        message = caps.describe(held, where=SETTINGS)

        def waiting(status: AgentTurnStatus, _: bool) -> AgentTurnStatus | None:
            if status.exit is not None or status.submissions:
                return None
            return AgentTurnStatus(phase=TurnPhase.PENDING, reason=reason, message=message)

        await self._update(name, waiting)

    async def _earlier_gone(self, effect: Admit) -> None:
        """Wait until no earlier Turn of the conversation has an unsettled AgentTurn: its
        sweep is done before this admission (docs/turn-semantics.md §5). One list per look.

        A Turn that does not continue a conversation has an Instance ID made for it alone
        (``ids.fresh``), and the Run's first Turn has no Turn before it: neither has an
        earlier Turn to wait for, so neither lists (ADR 0091).
        """
        seq = ids.turn_seq(effect.turn)
        if not effect.continue_ or seq == 1:
            return
        label = {objects.INSTANCE_LABEL: objects.instance_label(effect.instance_id)}
        while earlier(await self._hub.kube.list(AGENTTURNS, self._namespace, labels=label), seq):
            await asyncio.sleep(POLL_S)

    async def _update(
        self,
        name: str,
        change: Callable[[AgentTurnStatus, bool], AgentTurnStatus | None],
    ) -> dict[str, Any] | None:
        """Patch the AgentTurn's status with the fields ``change(current status, whether
        it is being deleted)`` sets (None, or fields that are already so: no write),
        against the version this Run holds (read when it holds none, or when that one is
        stale: a conflict); the AgentTurn as last known, None once it is gone."""
        current = self._known.get(name)
        while True:
            if current is None:
                current = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
                if current is None:
                    self._known.pop(name, None)
                    return None
                self._known[name] = current
            status = AgentTurnStatus.model_validate(current.get("status") or {})
            deleting = bool(current["metadata"].get("deletionTimestamp"))
            wanted = change(status, deleting)
            if wanted is None or _unchanged(status, wanted):
                return current
            version = current["metadata"].get("resourceVersion")
            try:
                current = await self._hub.kube.patch(
                    AGENTTURNS,
                    self._namespace,
                    name,
                    patches.status(wanted, version=version),
                    status=True,
                )
            except NotFound:
                self._known.pop(name, None)
                return None
            except Conflict:
                current = None
                continue
            self._known[name] = current
            return current

    async def settlement(
        self, effect: Admit, submission: SubmissionId, *, progress: Progress | None = None
    ) -> Settled:
        name = self._name(effect.turn)
        admitted = time.time()

        def running(status: AgentTurnStatus, _: bool) -> AgentTurnStatus | None:
            if any(entry.id == submission for entry in status.submissions):
                return None
            entry = SubmissionRecord(id=submission, admittedAt=admitted)
            return AgentTurnStatus(
                phase=_phase(status, TurnPhase.RUNNING),
                submissions=[*status.submissions, entry],
                reason=None,
                message=None,
            )

        await self._update(name, running)
        settled = await harness_client.settlement(
            self._harness, effect, submission, progress=progress
        )
        if name in self._exited:
            return settled  # its finalizer writes this outcome, with the settlement

        def done(status: AgentTurnStatus, _: bool) -> AgentTurnStatus | None:
            if status.exit is not None:
                return None  # exited: as above
            update = {"outcome": settled.outcome, "settledAt": time.time(), "usage": settled.usage}
            entries = [
                entry.model_copy(update=update) if entry.id == submission else entry
                for entry in status.submissions
            ]
            idle = settled.outcome is Outcome.COMPLETED
            phase = TurnPhase.IDLE if idle else TurnPhase.SETTLING
            return AgentTurnStatus(
                phase=_phase(status, phase),
                submissions=entries,
                **agentturn.used(entries),
            )

        await self._update(name, done)
        return settled

    async def sweep(self, effect: Sweep) -> list[Settled]:
        """Write the exit and delete the AgentTurn; what its finalizer reports, waited for
        as long as the AgentTurn is there (ADR 0028).

        The finalizer reports before it lets the AgentTurn go, and bounds its own wait for
        the Harness, so the Run records what the AgentTurn says: a report that came after
        a shorter wait here would have been dropped for a guess. An AgentTurn that went
        without reporting here (swept by this operator before a restart, or by another
        one) has its settlements read back by a repeated sweep.
        """
        name = self._name(effect.turn)
        key = (self._namespace, name)
        exit_ = Exit(cause=effect.cause, submissionId=effect.submission, at=_now())
        self._exited.add(name)

        def exited(status: AgentTurnStatus, deleting: bool) -> AgentTurnStatus | None:
            # One being deleted already (by a person, with its Run, or by this sweep before
            # a restart) has its finalizer at work: it reports to ``sweep_result``.
            if deleting or status.settlement is not None:
                return None  # swept already (deleted by a person): its record stands
            return AgentTurnStatus(exit=exit_, phase=_phase(status, TurnPhase.SETTLING))

        current = await self._update(name, exited)
        if current is None or settled(current):
            return await self._swept_elsewhere(effect, key)
        if not current["metadata"].get("deletionTimestamp"):
            await self._hub.kube.delete(AGENTTURNS, self._namespace, name)
        self._known.pop(name, None)  # it is going: nothing more is written to it
        look_s = self._hub.settings.sweep_look_s
        while (result := await self._hub.sweep_result(key, look_s)) is None:
            found = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
            if found is None or settled(found):
                return await self._swept_elsewhere(effect, key)
        return result

    async def _swept_elsewhere(self, effect: Sweep, key: tuple[str, str]) -> list[Settled]:
        """The settlements of a Turn whose AgentTurn is gone or settled (kept for a while,
        ADR 0106): its finalizer's report, if it came here; otherwise a repeated sweep's
        (it settles nothing again)."""
        result = self._hub.sweep_done(key)
        if result is not None:
            return result
        harness = self._hub.harness_of(self._namespace, self._workspace or "")
        return await harness.sweep(effect) if harness is not None else []


def _phase(status: AgentTurnStatus, wanted: TurnPhase) -> TurnPhase:
    """``wanted``, unless the Turn is further along: an exited Turn stays ``Settling``, a
    settled one ``Settled``."""
    if status.settlement is not None:
        return TurnPhase.SETTLED
    if status.exit is not None:
        return TurnPhase.SETTLING
    return wanted


def _unchanged(status: AgentTurnStatus, wanted: AgentTurnStatus) -> bool:
    """Whether every field ``wanted`` sets is so already: such a patch would change
    nothing."""
    return all(
        getattr(status, field) == getattr(wanted, field) for field in wanted.model_fields_set
    )


def settled(body: dict[str, Any]) -> bool:
    """Whether the AgentTurn's sweep is done, its settlement written: it runs no more,
    though it may stay a while for kubectl to show (ADR 0106)."""
    return bool((body.get("status") or {}).get("settlement"))


def earlier(agent_turns: list[dict[str, Any]], seq: int) -> list[str]:
    """The names of the unsettled AgentTurns of Turns before Turn ``seq`` (of one
    conversation, so of one Run). One that carries no Turn number (made by an older
    operator) counts as earlier: waiting for it is safe, admitting past its sweep is not."""
    found = []
    for body in agent_turns:
        if settled(body):
            continue
        number = objects.turn_seq(body)
        if number is None or number < seq:
            found.append(body["metadata"]["name"])
    return found


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
