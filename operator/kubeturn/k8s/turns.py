"""Turns on a cluster: a ``TurnPort`` whose Turns are AgentTurn objects.

Admitting creates the AgentTurn (owned by its Run, with the sweep finalizer), waits for
the Workspace and for every earlier AgentTurn of the same conversation to be gone (the
ordered abort), then admits to the Workspace's Harness. Its answer goes back to the Run
at once: a Harness runs a Submission as soon as it admits it, and a quick pick must find
the Submission known. The AgentTurn's status hears of it from the settlement follower,
which records it and then how it settled. Sweeping writes ``status.exit`` (the cause) and
deletes the AgentTurn; its finalizer sends the sweep and reports what it settled.

Status writes are made against the version read (a conflict reads again), and never
move a Turn back: once its state exited it stays ``Settling``, once its finalizer wrote
the settlement it stays ``Settled``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubeturn.k8s import objects
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, Conflict, NotFound
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.harness_client import HarnessClient

POLL_S = 0.2
"""How often an admission re-checks the Workspace and the conversation's earlier Turns."""

Status = dict[str, Any]


class ClusterTurns:
    def __init__(
        self,
        hub: Hub,
        run: dict[str, Any],
        loaded: LoadedRun,
        workspace: str | None,
    ) -> None:
        self._hub = hub
        self._run = run
        self._loaded = loaded
        self._workspace = workspace
        self._namespace = run["metadata"]["namespace"]

    def _name(self, turn: str) -> str:
        return objects.turn_name(self._run["metadata"]["name"], turn)

    async def _harness(self) -> HarnessClient:
        key = (self._namespace, self._workspace or "")
        while key not in self._hub.harnesses:
            await asyncio.sleep(POLL_S)
        return self._hub.harnesses[key]

    async def admit(self, effect: Admit, key: str) -> str:
        menu = [
            {"name": m.name, "description": m.description, "schema": dict(m.schema)}
            for m in self._loaded.menu(StatePath(effect.state))
        ]
        body = objects.agent_turn(self._run, effect, workspace=self._workspace, menu=menu)
        name = body["metadata"]["name"]
        await self._hub.kube.create(body)
        harness = await self._harness()
        await self._earlier_gone(effect.instance_id, name)
        # Nothing between the Harness's answer and the Run's record of it (see above).
        return await harness.admit(effect, key)

    async def _earlier_gone(self, instance_id: str, name: str) -> None:
        label = {"kubeturn.dev/instance": objects.instance_label(instance_id)}
        while True:
            others = [
                o
                for o in await self._hub.kube.list(AGENTTURNS, self._namespace, labels=label)
                if o["metadata"]["name"] != name
                and o["metadata"]["creationTimestamp"]
                <= _created(await self._hub.kube.get(AGENTTURNS, self._namespace, name))
            ]
            if not others:
                return
            await asyncio.sleep(POLL_S)

    async def _update(self, name: str, change: Callable[[Status], Status | None]) -> None:
        """Patch the AgentTurn's status with ``change(current status)`` (None: no write),
        against the version read; a gone AgentTurn needs no write."""
        while True:
            current = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
            if current is None:
                return
            patch = change(dict(current.get("status") or {}))
            if patch is None:
                return
            version = current["metadata"].get("resourceVersion")
            try:
                await self._hub.kube.patch(
                    AGENTTURNS,
                    self._namespace,
                    name,
                    {"metadata": {"resourceVersion": version}, "status": patch},
                    status=True,
                )
            except NotFound:
                return
            except Conflict:
                continue
            return

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        name = self._name(effect.turn)
        admitted = time.time()

        def running(status: Status) -> Status | None:
            entries = list(status.get("submissions") or [])
            if any(entry.get("id") == submission for entry in entries):
                return None
            entries.append({"id": submission, "admittedAt": admitted})
            return {"phase": _phase(status, "Running"), "submissions": entries}

        await self._update(name, running)
        harness = await self._harness()
        settled = await harness.settlement(effect, submission)

        def done(status: Status) -> Status:
            entries = []
            for entry in status.get("submissions") or []:
                if entry.get("id") == submission:
                    entry = {**entry, "outcome": settled.outcome.value, "settledAt": time.time()}
                entries.append(entry)
            phase = "Idle" if settled.outcome.value == "completed" else "Settling"
            return {"phase": _phase(status, phase), "submissions": entries}

        await self._update(name, done)
        return settled

    async def sweep(self, effect: Sweep) -> list[Settled]:
        name = self._name(effect.turn)
        key = (self._namespace, name)
        current = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
        if current is None:
            # Gone already: its finalizer swept it, and the Run did not hear the answer
            # (a restart). A repeated sweep settles nothing again; its answer is read back.
            result = self._hub.sweep_done(key)
            if result is not None:
                return result
            harness = self._hub.harnesses.get((self._namespace, self._workspace or ""))
            return await harness.sweep(effect) if harness is not None else []
        exit_ = {"cause": effect.cause, "submissionId": effect.submission, "at": _now()}

        def exited(status: Status) -> Status | None:
            if status.get("settlement"):
                return None  # swept already (deleted by a person): its record stands
            return {"exit": exit_, "phase": _phase(status, "Settling")}

        # One being deleted already (by a person, with its Run, or by this sweep before a
        # restart) has its finalizer at work: it reports to ``sweep_result``.
        if not current["metadata"].get("deletionTimestamp"):
            await self._update(name, exited)
            await self._hub.kube.delete(AGENTTURNS, self._namespace, name)
        result = await self._hub.sweep_result(key, self._hub.settings.sweep_wait_s)
        return result or []


def _phase(status: Status, wanted: str) -> str:
    """``wanted``, unless the Turn is further along: an exited Turn stays ``Settling``, a
    settled one ``Settled``."""
    if status.get("settlement"):
        return "Settled"
    if status.get("exit"):
        return "Settling"
    return wanted


def _created(body: dict[str, Any] | None) -> str:
    return str(((body or {}).get("metadata") or {}).get("creationTimestamp", "9999"))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
