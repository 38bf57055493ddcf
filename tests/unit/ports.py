"""Ports of a Run's actor for its unit tests: ``Never``, whose every effect stays under way
until it is cancelled, and which a test subclasses to answer the one port it watches.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kubeturn.orchestrator.actor import Settled
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.invokes import ExecResult


class Never:
    """Ports that never answer: every effect stays under way until it is cancelled."""

    def __init__(self) -> None:
        self.admitted: list[str] = []

    async def admit(self, effect: Admit) -> str:
        self.admitted.append(effect.key)
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def sweep(self, effect: Sweep) -> list[Settled]:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def run(self, effect: StartExec) -> ExecResult:
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    async def save(self, snapshot: dict[str, Any]) -> None:
        return None
