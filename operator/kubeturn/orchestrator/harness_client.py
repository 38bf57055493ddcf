"""The Orchestrator's client of a Harness: admit, follow, sweep (a ``TurnPort`` over HTTP).

Admissions carry an idempotency key, so re-sending one after a restart admits nothing
twice. Settlements are followed on the conversation's stream with long-polls; a
transport failure is retried, because reading is safe. The sweep answers only after
the Harness recorded what it settled, so its settlements are read back at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from kubeturn.orchestrator.actor import AdmitFailed, Settled
from kubeturn.orchestrator.core import ExecResult
from kubeturn.orchestrator.effects import Admit, StartExec, Sweep
from kubeturn_harness.wire import (
    AdmitResponse,
    EventType,
    ExecResponse,
    History,
    Settlement,
    StreamEvent,
    WorktreesResponse,
)

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Pause before reading a stream again after a transport failure."""
POLL_TIMEOUT_S = 35.0
"""Above the Harness's 25 s long-poll park."""
EXEC_GRACE_S = 30.0
"""How much longer than its own time limit an exec may take to answer."""


class HarnessClient:
    def __init__(self, base_url: str, token: str) -> None:
        self._base = base_url.rstrip("/")
        self._session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"})

    async def close(self) -> None:
        await self._session.close()

    def _url(self, agent: str, instance_id: str, *rest: str) -> str:
        return "/".join(
            [self._base, "agents", quote(agent, safe=""), quote(instance_id, safe=""), *rest]
        )

    async def admit(self, effect: Admit, key: str) -> str:
        body = {
            "prompt": effect.prompt,
            "cwd": effect.cwd,
            "continue": effect.continue_,
            "model": effect.model,
            "thinkingLevel": effect.thinking_level,
            "definition": {"instructions": effect.instructions, "workspace": effect.workspace},
            "notices": [n.model_dump() for n in effect.notices],
            "key": key,
        }
        body = {k: v for k, v in body.items() if v is not None}
        try:
            async with self._session.post(
                self._url(effect.agent, effect.instance_id), json=body
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    said = raw.decode(errors="replace")[:500]
                    raise AdmitFailed(
                        f"the Harness refused the admission (HTTP {response.status}): {said}"
                    )
                return AdmitResponse.model_validate_json(raw).submissionId
        except aiohttp.ClientError as error:
            raise AdmitFailed(f"the Harness could not be reached: {error}") from error

    async def follow(self, agent: str, instance_id: str) -> AsyncIterator[StreamEvent]:
        """Every event of a conversation, from its start, as it happens (long-polls;
        a failed read is retried, because reading is safe). Never ends by itself."""
        offset = 0
        url = self._url(agent, instance_id)
        timeout = aiohttp.ClientTimeout(total=POLL_TIMEOUT_S)
        while True:
            try:
                async with self._session.get(
                    url, params={"offset": str(offset), "live": "long-poll"}, timeout=timeout
                ) as response:
                    if response.status == 200:
                        for raw in await response.json():
                            yield StreamEvent.model_validate(raw)
                    if response.status in (200, 204):
                        offset = int(response.headers.get("stream-next-offset", offset))
                        continue
                    log.warning("following %s: HTTP %d", instance_id, response.status)
            except (aiohttp.ClientError, TimeoutError, ValidationError, ValueError) as error:
                log.debug("following %s: %s", instance_id, error)
            await asyncio.sleep(RETRY_S)

    async def settlement(self, effect: Admit, submission: str) -> Settled:
        async for event in self.follow(effect.agent, effect.instance_id):
            if (
                event.type is EventType.SUBMISSION_SETTLED
                and event.data.get("submissionId") == submission
            ):
                return _settled(Settlement.model_validate(event.data))
        raise AssertionError("a conversation's stream never ends")

    async def sweep(self, effect: Sweep) -> list[Settled]:
        body: dict[str, str] = {}
        if effect.cause is not None:
            body["cause"] = effect.cause
        if effect.submission is not None:
            body["submissionId"] = effect.submission
        url = self._url(effect.agent, effect.instance_id)
        try:
            async with self._session.post(url + "/abort", json=body) as response:
                response.raise_for_status()
            async with self._session.get(url, params={"view": "history"}) as response:
                if response.status == 404:
                    return []
                response.raise_for_status()
                history = History.model_validate_json(await response.read())
        except (aiohttp.ClientError, ValidationError) as error:
            log.warning("sweeping %s failed: %s", effect.instance_id, error)
            return []
        return [_settled(s) for s in history.settlements]

    async def run(self, effect: StartExec) -> ExecResult:
        """An ``exec`` invoke, run in the Workspace by its Harness (an ``ExecPort``)."""
        body = {"command": effect.command, "cwd": effect.cwd, "timeoutSeconds": effect.timeout_s}
        timeout = aiohttp.ClientTimeout(total=effect.timeout_s + EXEC_GRACE_S)
        try:
            async with self._session.post(
                f"{self._base}/exec", json=body, timeout=timeout
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    said = raw.decode(errors="replace")[:500]
                    return ExecResult(
                        None,
                        "",
                        error=f"the Harness refused the exec (HTTP {response.status}): {said}",
                    )
                answer = ExecResponse.model_validate_json(raw)
        except (aiohttp.ClientError, TimeoutError, ValidationError) as error:
            return ExecResult(
                None, "", error=f"the exec could not be run: {error or type(error).__name__}"
            )
        return ExecResult(answer.exitCode, answer.output, timed_out=answer.timedOut)

    async def worktrees(self, run: str, branch: str, slots: list[str]) -> dict[str, str]:
        """The Run's worktree of each repo slot (made if missing): slot → path."""
        body = {"run": run, "branch": branch, "slots": slots}
        async with self._session.post(f"{self._base}/worktrees", json=body) as response:
            raw = await response.read()
            if response.status != 200:
                said = raw.decode(errors="replace")[:500]
                raise AdmitFailed(f"the Harness could not make the worktrees: {said}")
            made = WorktreesResponse.model_validate_json(raw)
        return {slot: tree.path for slot, tree in made.worktrees.items()}


def _settled(settlement: Settlement) -> Settled:
    return Settled(
        submission=settlement.submissionId,
        outcome=settlement.outcome,
        usage=settlement.usage,
        message=settlement.message or (settlement.error.message if settlement.error else None),
        reason=settlement.error.type.value if settlement.error else None,
    )
