"""The local Run's TurnPort and ExecPort: the Harness client, with what the live table
shows besides the core's own state.

Every port call goes to ``HarnessClient`` unchanged. Beside it, each conversation a
Turn is admitted to is followed on the Harness's stream (``HarnessClient.follow``) to
count the tool calls of each Submission, and a refused admission is kept to be said to
the person at the terminal: an unknown provider is a 400 naming ``model``, and the
Machine hears it only as the Agent's fault. Under a cap on live Turns (ADR 0116) an
admission first waits for a slot, and the person is told which Turn waits, and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

from kubeturn.errors import AdmitFailed
from kubeturn.orchestrator import caps
from kubeturn.orchestrator.actor import Progress, Settled
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.orchestrator.ids import InstanceId
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn_harness.wire import EventType, Message, MessageStatus, StreamEvent, SubmissionId

log = logging.getLogger(__name__)


class WatchedHarness:
    def __init__(
        self,
        client: HarnessClient,
        on_change: Callable[[], None],
        slots: caps.RunSlots | None = None,
    ) -> None:
        self._client = client
        self._slots = slots
        self._on_change = on_change
        self._followers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.tool_calls: dict[str, int] = {}
        """Submission id → tool calls its model made."""
        self.refusals: list[str] = []
        """What the Harness said when it refused an admission, one line each, in order;
        and which Turn waits for a slot under the cap on live Turns, and why."""

    # ------------------------------------------------------------------ TurnPort, ExecPort

    async def admit(self, effect: Admit) -> SubmissionId:
        if self._slots is not None:

            async def queued(held: caps.Held) -> None:
                said = caps.describe(held, where={caps.WORKSPACE: "--max-live-turns"})
                turn = f"Turn {effect.turn} ({effect.agent} in {effect.state})"
                self.refusals.append(f"{turn} {said}")
                self._on_change()

            await self._slots.enter(effect.turn, queued)
        self.watch(effect.agent, effect.instance_id)
        try:
            return await self._client.admit(effect)
        except AdmitFailed as failed:
            said = _one_line(str(failed))
            self.refusals.append(
                f"the Harness refused Turn {effect.turn} ({effect.agent} in {effect.state}): {said}"
            )
            self._on_change()
            raise

    async def settlement(
        self, effect: Admit, submission: SubmissionId, *, progress: Progress | None = None
    ) -> Settled:
        return await self._client.settlement(effect, submission, progress=progress)

    async def sweep(self, effect: Sweep) -> list[Settled]:
        return await self._client.sweep(effect)

    async def run(self, effect: StartExec) -> ExecResult:
        return await self._client.run(effect)

    # ------------------------------------------------------------------ tool calls

    def watch(self, agent: str, instance_id: InstanceId) -> None:
        """Count the tool calls on this conversation (once per conversation)."""
        key = (agent, instance_id)
        if key not in self._followers:
            self._followers[key] = asyncio.create_task(
                self._follow(agent, instance_id), name=f"tool calls of {instance_id}"
            )

    async def _follow(self, agent: str, instance_id: InstanceId) -> None:
        async for event in self._client.follow(agent, instance_id):
            self._count([event])

    def _count(self, events: list[StreamEvent]) -> None:
        changed = False
        for event in events:
            if event.type is not EventType.MESSAGE_APPENDED:
                continue
            message = Message.model_validate(event.data["message"])
            # A cut or failed reply's calls never ran.
            if message.toolCalls and message.status is MessageStatus.COMPLETE:
                submission = str(message.submissionId)
                self.tool_calls[submission] = self.tool_calls.get(submission, 0) + len(
                    message.toolCalls
                )
                changed = True
        if changed:
            self._on_change()

    async def close(self) -> None:
        for task in self._followers.values():
            task.cancel()
        await asyncio.gather(*self._followers.values(), return_exceptions=True)


def _one_line(text: str) -> str:
    """A refusal as one line: the Harness's JSON body's message, when it has one."""
    head, brace, body = text.partition("{")
    if brace:
        with contextlib.suppress(ValueError):
            parsed = json.loads(brace + body)
            if isinstance(parsed, dict) and parsed.get("message"):
                field = f" (field {parsed['field']})" if parsed.get("field") else ""
                return f"{head.strip().rstrip(':')}: {parsed['message']}{field}"
    return " ".join(text.split())
