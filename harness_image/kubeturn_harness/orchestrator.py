"""The Harness's client of the Orchestrator API: surface reads, picks, and delivery polls.

Retry policy lives here, once: a surface read is retried (503 or a transport failure)
with jittered backoff for up to 90 s, because reading is safe and an Orchestrator may be
changing leader or restarting. A pick is retried the same way (``deliver``), and only
with the idempotency key it was first sent with: the Orchestrator answers a repeat of a
key with the first delivery's receipt, also after a restart (the key is in the Run's
snapshot), so a pick is delivered once however often it is sent (ADR 0047). Only what
says the Orchestrator is not there is retried (no connection, a connection cut, a
timeout, 503); any other answer is final. A delivery poll is retried, because a delivery
id makes it safe.
Every aiohttp and pydantic error is translated here; the Orchestrator's answers are read
by pydantic or ``bodies``, whose depth limits keep an answer nested arbitrarily deep from
raising ``RecursionError``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from kubeturn_harness import bodies
from kubeturn_harness.clock import Clock
from kubeturn_harness.errors import MenuUnreadable, NotJson, PollFailed, SurfaceUnavailable
from kubeturn_harness.wire import PICK_KEY_HEADER, DeliveryId, Receipt, Refusal, Surface

log = logging.getLogger(__name__)

SURFACE_RETRY_S = 90.0
"""Long enough to ride out an Orchestrator restart or a leader change."""
PICK_RETRY_S = 90.0
"""How long a pick is sent again while the Orchestrator is not there, before the model
is told it may be lost: an operator restart or a leader change takes seconds, a Lease
expiry after a crash up to 15 s, and kopf's start and the Runs' resumption some more;
90 s rides out all of them with room, and stays short beside a Turn's own time."""
PICK_ATTEMPT_S = 30.0
"""One pick's POST at most: the Orchestrator answers a pick within one status write
(work below the Agent's state is answered by a delivery poll), so a POST still
unanswered after 30 s is from a process that is not serving; it is sent again."""

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0
POLL_TIMEOUT_S = 35.0
"""Above the Orchestrator's 25 s long-poll park, so a parked poll is never cut short."""


@dataclass(frozen=True)
class Delivered:
    receipt: Receipt


@dataclass(frozen=True)
class Refused:
    refusal: Refusal


@dataclass(frozen=True)
class Gone:
    """404: no live Turn at this Instance ID; the Turn is over."""


@dataclass(frozen=True)
class Rejected:
    """Another 4xx: the pick's payload was refused."""

    message: str


@dataclass(frozen=True)
class Lost:
    """The pick's POST failed in transport or answered 5xx; whether it arrived is unknown."""

    reason: str
    unavailable: bool = False
    """The Orchestrator was not there (no connection, a cut one, a timeout, 503): the
    same pick may be sent again with its key."""


PickResult = Delivered | Refused | Gone | Rejected | Lost


class OrchestratorPort(Protocol):
    async def surface(self, instance_id: str) -> Surface | None: ...

    async def pick(
        self, instance_id: str, event: str, payload: dict[str, Any], key: str
    ) -> PickResult:
        """Send one pick; ``key`` is its idempotency key, the same on every repeat."""
        ...

    async def poll(self, instance_id: str, delivery: DeliveryId) -> Receipt | Gone | None:
        """The answer of an outstanding pick; None while it is still being worked on.

        Raises ``PollFailed`` when the poll itself failed (worth a slower retry).
        """
        ...


class OrchestratorClient:
    def __init__(self, base_url: str, token: str | None) -> None:
        self._base = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session = aiohttp.ClientSession(headers=headers)

    async def close(self) -> None:
        await self._session.close()

    def _url(self, instance_id: str, *rest: str) -> str:
        return "/".join([self._base, "agents", quote(instance_id, safe=""), *rest])

    async def surface(self, instance_id: str) -> Surface | None:
        try:
            async with self._session.get(self._url(instance_id, "surface")) as response:
                if response.status == 404:
                    return None
                if response.status == 503:
                    raise SurfaceUnavailable("the Orchestrator answered 503")
                if response.status != 200:
                    raise MenuUnreadable(f"the surface read answered HTTP {response.status}")
                return Surface.model_validate_json(await response.read())
        except aiohttp.ClientError as error:
            raise SurfaceUnavailable(f"the surface read failed: {error}") from error
        except ValidationError as error:
            raise MenuUnreadable(f"the Menu did not parse: {_first(error)}") from error

    async def pick(
        self, instance_id: str, event: str, payload: dict[str, Any], key: str
    ) -> PickResult:
        body = {**payload, "type": event}
        url = self._url(instance_id, "events")
        timeout = aiohttp.ClientTimeout(total=PICK_ATTEMPT_S)
        try:
            async with self._session.post(
                url, json=body, headers={PICK_KEY_HEADER: key}, timeout=timeout
            ) as response:
                raw = await response.read()
                if response.status == 503:
                    message = _error_message(raw, response.status)
                    return Lost(f"the Orchestrator answered HTTP 503: {message}", unavailable=True)
                if response.status == 404:
                    return Gone()
                if response.status == 409:
                    return Refused(Refusal.model_validate_json(raw))
                if response.status >= 500:
                    # The Orchestrator may have delivered the pick before it failed: its
                    # fate is unknown, as for a transport failure, never "not delivered".
                    message = _error_message(raw, response.status)
                    return Lost(f"the Orchestrator answered HTTP {response.status}: {message}")
                if response.status >= 400:
                    return Rejected(_error_message(raw, response.status))
                return Delivered(Receipt.model_validate_json(raw))
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as error:
            # No connection, one cut (also mid-answer), or no answer in time.
            return Lost(str(error) or type(error).__name__, unavailable=True)
        except aiohttp.ClientError as error:
            return Lost(str(error) or type(error).__name__)
        except ValidationError as error:
            return Lost(f"the receipt did not parse: {_first(error)}")

    async def poll(self, instance_id: str, delivery: DeliveryId) -> Receipt | Gone | None:
        url = self._url(instance_id, "deliveries", quote(delivery, safe=""))
        timeout = aiohttp.ClientTimeout(total=POLL_TIMEOUT_S)
        try:
            async with self._session.get(url, timeout=timeout) as response:
                if response.status == 404:
                    return Gone()
                if response.status == 204:
                    return None
                response.raise_for_status()
                return Receipt.model_validate_json(await response.read())
        except (aiohttp.ClientError, TimeoutError, ValidationError) as error:
            raise PollFailed(str(error) or type(error).__name__) from error


Sleep = Callable[[float], Awaitable[None]]


async def read_surface(
    port: OrchestratorPort,
    instance_id: str,
    clock: Clock,
    *,
    budget_s: float = SURFACE_RETRY_S,
    sleep: Sleep = asyncio.sleep,
) -> Surface | None:
    """Read the surface, retrying what is worth retrying within ``budget_s``."""
    deadline = clock.monotonic() + budget_s
    delay = BACKOFF_FIRST_S
    while True:
        try:
            return await port.surface(instance_id)
        except SurfaceUnavailable as error:
            left = deadline - clock.monotonic()
            if left <= 0:
                raise MenuUnreadable(
                    f"the Orchestrator's surface could not be read for {budget_s:.0f} s: {error}"
                ) from error
            await sleep(min(left, random.uniform(0, delay)))
            delay = min(delay * 2, BACKOFF_MAX_S)


async def deliver(
    port: OrchestratorPort,
    instance_id: str,
    event: str,
    payload: dict[str, Any],
    key: str,
    clock: Clock,
    *,
    window_s: float = PICK_RETRY_S,
    sleep: Sleep = asyncio.sleep,
) -> PickResult:
    """Send a pick, and send it again with the same ``key`` while the Orchestrator is not
    there, within ``window_s``: back-off doubles from ``BACKOFF_FIRST_S`` to
    ``BACKOFF_MAX_S``, jittered, so Harnesses that lost one operator do not all call the
    next at once. Past the window the last ``Lost`` is answered. These sends are
    transport, not model calls: the Runaway watch never sees them. Cancelling (a sweep)
    ends the wait at once."""
    deadline = clock.monotonic() + window_s
    delay = BACKOFF_FIRST_S
    tries = 1
    while True:
        result = await port.pick(instance_id, event, payload, key)
        if not (isinstance(result, Lost) and result.unavailable):
            if tries > 1:
                log.info("pick %s to %s delivered after %d tries", event, instance_id, tries)
            return result
        left = deadline - clock.monotonic()
        if left <= 0:
            return Lost(
                f"the Orchestrator was not reached for {window_s:g} s: {result.reason}",
                unavailable=True,
            )
        log.debug("pick %s to %s: %s; sending it again", event, instance_id, result.reason)
        await sleep(min(left, random.uniform(delay / 2, delay)))
        delay = min(delay * 2, BACKOFF_MAX_S)
        tries += 1


async def await_answer(
    port: OrchestratorPort, instance_id: str, delivery: DeliveryId, *, sleep: Sleep = asyncio.sleep
) -> Receipt | Gone:
    """Long-poll an outstanding pick until its answer comes, or its Turn is gone.

    A parked poll that comes back empty is repeated at once; a failing one backs off
    (jittered, up to ``BACKOFF_MAX_S``), since the answer can wait and the sweep ends
    the run if the Turn ends meanwhile.
    """
    delay = BACKOFF_FIRST_S
    while True:
        try:
            answer = await port.poll(instance_id, delivery)
        except PollFailed as failed:
            log.debug("polling delivery %s failed: %s", delivery, failed)
            await sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, BACKOFF_MAX_S)
            continue
        delay = BACKOFF_FIRST_S
        if answer is not None:
            return answer


def _first(error: ValidationError) -> str:
    first = error.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def _error_message(raw: bytes, status: int) -> str:
    """The Orchestrator's words in an error answer, or the start of its text: an answer
    that is not JSON the Harness reads (one nested 200,000 deep) is only text here."""
    try:
        body = bodies.parse(raw)
    except NotJson:
        body = None
    if isinstance(body, dict):
        for key in ("message", "error", "refused"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return raw.decode(errors="replace").strip()[:500] or f"HTTP {status}"
