"""kubeturn's retry policy and timeouts against llama.cpp's real server, through the fault
proxy: each scenario asserts the requests the proxy received (``exchanges``) and the
settlement the Turn got (issue 13, failures 4 and 6).

Cases (default policy unless said: 3 attempts, back-off from 1 s, Retry-After up to
30 s; the Harness's waits take no time, on a ``NoWaitClock``, except where a sweep must
cut one):
- 500, 500, then the server's own answer: 3 requests, the Turn ``completed`` with it;
- 429 with ``Retry-After: 1``, then the server: 2 requests, the 1 s asked is waited;
- 429 with ``Retry-After: 120``: 1 request, ``failed`` at once, saying what was asked and
  what kubeturn waits;
- 400: 1 request, ``failed``, not retried;
- a stream cut after 2 events, then the server: 2 requests, ``completed``;
- a stream that stalls every time (``idleSeconds: 0.5``): 3 requests, ``failed`` saying
  the provider sent nothing, within about idle × attempts;
- a stall, then the server: 2 requests, ``completed``;
- a sweep during a 20 s back-off (a real wait): the Turn settles ``ended`` at once and
  the server gets no further request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kubeturn_harness.clock import Clock, SystemClock
from tests.harness.support import (
    HarnessClient,
    NoWaitClock,
)
from tests.provider.conftest import MODEL, StartProviderWorld, providers_yaml
from tests.provider.faults import Answer, Cut, FaultProxy, PassThrough, Stall, Steer

IID = "iid-retries-1"


@dataclass
class RetryWorld:
    proxy: FaultProxy
    harness: HarnessClient
    clock: Clock

    async def turn(self) -> tuple[str, dict[str, Any]]:
        sid = await self.harness.admit(IID, "Say hello.", model=MODEL)
        return sid, await self.harness.settlement(IID, sid, timeout=60)

    @property
    def statuses(self) -> list[int]:
        return [exchange.status for exchange in self.proxy.exchanges]


StartRetryWorld = Callable[..., Awaitable[RetryWorld]]


@pytest.fixture
def retry_world(provider_world: StartProviderWorld, proxy: FaultProxy) -> StartRetryWorld:
    """The real Harness asking llama.cpp through ``proxy``, the provider's entry given
    more keys (``provider``, YAML lines), its model requests waiting on ``clock``; the
    model is steered to answer text, so a Turn that gets an answer settles ``completed``."""

    async def start(*, provider: str = "", clock: Clock | None = None) -> RetryWorld:
        extra = "".join(f"  {line}\n" for line in provider.splitlines())
        model_clock = clock or NoWaitClock()
        world = await provider_world(
            providers=providers_yaml("llama", proxy.url) + extra, model_clock=model_clock
        )
        world.orchestrator.surfaces[IID] = {"instanceId": IID, "menu": [], "allowed": []}
        proxy.steer(Steer(text=True))
        return RetryWorld(proxy, world.harness, model_clock)

    return start


def where(proxy: FaultProxy) -> str:
    return f"provider 'llama' ({proxy.url}), model 'tiny'"


def message(settled: dict[str, Any]) -> str:
    return str(settled["error"]["message"])


async def test_5xx_twice_then_the_servers_answer(retry_world: StartRetryWorld) -> None:
    w = await retry_world()
    w.proxy.queue(Answer(500), Answer(502))
    _, settled = await w.turn()
    assert settled["outcome"] == "completed"
    assert w.statuses == [500, 502, 200]
    assert w.proxy.exchanges[-1].finished
    assert w.proxy.sent[0] == w.proxy.sent[2]  # the same request, sent again


async def test_429_with_a_short_retry_after(retry_world: StartRetryWorld) -> None:
    w = await retry_world()
    w.proxy.queue(Answer(429, headers={"Retry-After": "1"}))
    _, settled = await w.turn()
    assert (settled["outcome"], w.statuses) == ("completed", [429, 200])
    assert isinstance(w.clock, NoWaitClock)
    assert w.clock.slept == [1.0]


async def test_429_with_a_retry_after_beyond_the_ceiling(retry_world: StartRetryWorld) -> None:
    w = await retry_world()
    w.proxy.queue(Answer(429, headers={"Retry-After": "120"}))
    _, settled = await w.turn()
    assert (settled["outcome"], w.statuses) == ("failed", [429])
    assert message(settled) == (
        f"{where(w.proxy)} answered HTTP 429 (rate limited) to 1 request; it asked to wait "
        "120 s, more than the 30 s kubeturn waits (retry.maxRetryAfterSeconds): injected"
    )


async def test_400_is_not_retried(retry_world: StartRetryWorld) -> None:
    w = await retry_world()
    w.proxy.queue(Answer(400))
    _, settled = await w.turn()
    assert (settled["outcome"], w.statuses) == ("failed", [400])
    assert message(settled) == (
        f"{where(w.proxy)} answered HTTP 400 (bad request) to 1 request, which kubeturn does "
        "not retry: injected"
    )


async def test_a_cut_stream_is_sent_again(retry_world: StartRetryWorld) -> None:
    w = await retry_world()
    w.proxy.queue(Cut(after=2))
    _, settled = await w.turn()
    assert settled["outcome"] == "completed"
    assert [e.finished for e in w.proxy.exchanges] == [False, True]


async def test_a_stream_that_stalls_every_time(retry_world: StartRetryWorld) -> None:
    w = await retry_world(provider="timeouts: {idleSeconds: 0.5}")
    w.proxy.queue(Stall(), Stall(), Stall())
    _, settled = await w.turn()
    assert (settled["outcome"], len(w.proxy.exchanges)) == ("failed", 3)
    assert re.fullmatch(
        re.escape(f"{where(w.proxy)} sent nothing for 0.5 s (timeouts.idleSeconds) in 3 ")
        + r"requests over \d+\.\d s; kubeturn makes 3 attempts \(retry\.attempts\)",
        message(settled),
    ), message(settled)


async def test_a_stall_then_the_servers_answer(retry_world: StartRetryWorld) -> None:
    w = await retry_world(provider="timeouts: {idleSeconds: 0.5}")
    w.proxy.queue(Stall(), PassThrough())
    _, settled = await w.turn()
    assert settled["outcome"] == "completed"
    assert [e.finished for e in w.proxy.exchanges] == [False, True]


async def test_a_sweep_cuts_a_back_off(retry_world: StartRetryWorld) -> None:
    w = await retry_world(clock=SystemClock())
    w.proxy.queue(Answer(503, headers={"Retry-After": "20"}))
    sid = await w.harness.admit(IID, "Say hello.", model=MODEL)
    async with asyncio.timeout(30):
        while not w.proxy.exchanges:
            await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    swept_at = loop.time()
    await w.harness.abort(IID, {"cause": "pick", "submissionId": sid})
    settled = await w.harness.settlement(IID, sid, timeout=10)
    assert loop.time() - swept_at < 10  # not the 20 s asked for
    assert settled["outcome"] == "ended"
    await asyncio.sleep(0.5)
    assert w.statuses == [503]
