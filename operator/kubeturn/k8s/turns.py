"""Turns on a cluster: a ``TurnPort`` whose Turns are AgentTurn objects.

Admitting creates the AgentTurn (owned by its Run, with the sweep finalizer), waits for
the Workspace and for every earlier AgentTurn of the same conversation to be gone (the
ordered abort), then admits to the Workspace's Harness and records the Submission in
the AgentTurn's status. Sweeping writes ``status.exit`` (the cause) and deletes the
AgentTurn; its finalizer sends the sweep and reports what it settled.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from kubeturn.k8s import objects
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, NotFound
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator.actor import AdmitFailed, Settled
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.harness_client import HarnessClient

POLL_S = 0.2
"""How often an admission re-checks the Workspace and the conversation's earlier Turns."""


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
        submission = await harness.admit(effect, key)
        await self._status(
            name,
            {
                "phase": "Running",
                "submissions": [
                    *await self._submissions(name),
                    {"id": submission, "admittedAt": time.time()},
                ],
            },
        )
        return submission

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

    async def _submissions(self, name: str) -> list[dict[str, Any]]:
        current = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
        if current is None:
            raise AdmitFailed(f"the AgentTurn {name} was deleted before it was admitted")
        return list((current.get("status") or {}).get("submissions", []))

    async def _status(self, name: str, patch: dict[str, Any]) -> None:
        try:
            await self._hub.kube.patch(
                AGENTTURNS, self._namespace, name, {"status": patch}, status=True
            )
        except NotFound:
            return

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        harness = await self._harness()
        settled = await harness.settlement(effect, submission)
        name = self._name(effect.turn)
        entries = []
        for entry in await self._submissions_or_empty(name):
            if entry.get("id") == submission:
                entry = {**entry, "outcome": settled.outcome.value, "settledAt": time.time()}
            entries.append(entry)
        phase = "Idle" if settled.outcome.value == "completed" else "Settling"
        await self._status(name, {"phase": phase, "submissions": entries})
        return settled

    async def _submissions_or_empty(self, name: str) -> list[dict[str, Any]]:
        current = await self._hub.kube.get(AGENTTURNS, self._namespace, name)
        return list(((current or {}).get("status") or {}).get("submissions", []))

    async def sweep(self, effect: Sweep) -> list[Settled]:
        name = self._name(effect.turn)
        exit_ = {"cause": effect.cause, "submissionId": effect.submission, "at": _now()}
        await self._status(name, {"exit": exit_, "phase": "Settling"})
        await self._hub.kube.delete(AGENTTURNS, self._namespace, name)
        result = await self._hub.sweep_result(
            (self._namespace, name), self._hub.settings.sweep_wait_s
        )
        return result or []


def _created(body: dict[str, Any] | None) -> str:
    return str(((body or {}).get("metadata") or {}).get("creationTimestamp", "9999"))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
