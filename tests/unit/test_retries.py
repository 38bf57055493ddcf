"""kubeturn's retry policy for model requests (``kubeturn_harness.retries``), with a fake
clock and a scripted adapter: no waiting, no network.

Cases:
- a retryable failure is tried again up to ``attempts``, the back-off doubling from
  ``backoffSeconds`` to ``maxBackoffSeconds`` and jittered to half or all of it; the
  message counts the requests and the time they took;
- a failure that is not retryable is not tried again, and says so;
- success on a later attempt returns it; the ``Partial`` holds only that attempt's words;
- ``Retry-After`` within the ceiling is waited (the longer of it and the back-off);
  beyond it the call fails at once, saying what was asked and what kubeturn waits;
- mixed failures are listed in order;
- the status classification (408/409/429/5xx retried, other 4xx not, x-should-retry
  wins) and ``Retry-After`` parsing (seconds, ms, HTTP date, past, garbage);
- ``chunks``: a stream silent for the idle timeout fails the attempt, retryable;
- cancelling the task during a back-off ends it at once, with no further attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from kubeturn_harness import retries
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.models import ModelAnswer, ModelRequest, Partial, ProviderModels
from kubeturn_harness.providers import (
    ModelName,
    Provider,
    ProviderSpec,
    ProviderType,
    RetrySpec,
)

URL = "http://127.0.0.1:9/v1"
WHERE = f"provider 'p' ({URL}), model 'm'"


class FakeClock:
    """Monotonic time that moves only by the waits it is asked for."""

    def __init__(self) -> None:
        self.time = 0.0
        self.slept: list[float] = []

    def now(self) -> str:
        return "2026-12-01T00:00:00.000Z"

    def monotonic(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.time += seconds


def model(**retry: float) -> ModelName:
    spec = ProviderSpec(baseUrl=URL, retry=RetrySpec(**retry))  # type: ignore[arg-type]
    return ModelName(Provider("p", spec), "m")


def http(status: int, *, retry_after: float | None = None) -> ProviderFailure:
    outcome = f"answered {retries.status_phrase(status)}"
    return ProviderFailure(
        f"{WHERE} {outcome}: boom",
        status=status,
        retryable=retries.retryable_status(status, {}),
        retry_after_s=retry_after,
        outcome=outcome,
        detail="boom",
    )


STALL = ProviderFailure(
    "stall", retryable=True, outcome="sent nothing for 60 s (timeouts.idleSeconds)"
)
ANSWER = ModelAnswer(text="ok", tool_calls=[], usage=None)


class Adapter:
    """Answers each attempt from a script: a failure to raise, or the answer. Each
    attempt writes its number into the Partial first."""

    def __init__(self, *script: ProviderFailure | ModelAnswer, clock: FakeClock) -> None:
        self.script = list(script)
        self.clock = clock
        self.attempts = 0

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        self.attempts += 1
        partial.text.append(f"attempt {self.attempts}")
        self.clock.time += 0.5  # each request takes half a second
        step = self.script.pop(0)
        if isinstance(step, ProviderFailure):
            raise step
        return step

    async def close(self) -> None:
        pass


async def run(
    name: ModelName, *script: ProviderFailure | ModelAnswer, jitter: float = 0.5
) -> tuple[FakeClock, Adapter, Partial, ModelAnswer | ProviderFailure]:
    clock = FakeClock()
    adapter = Adapter(*script, clock=clock)
    models = ProviderModels({ProviderType.OPENAI: adapter}, clock=clock, jitter=lambda: jitter)
    partial = Partial()
    request = ModelRequest(name, [{"role": "user", "content": "hi"}], [], None)
    try:
        result: ModelAnswer | ProviderFailure = await models.complete(request, partial)
    except ProviderFailure as failure:
        result = failure
    return clock, adapter, partial, result


class TestAttempts:
    async def test_a_retryable_failure_is_tried_attempts_times(self) -> None:
        clock, adapter, _, result = await run(model(), http(500), http(500), http(500))
        assert adapter.attempts == 3
        assert clock.slept == [0.75, 1.5]  # 1 s and 2 s, jittered to three quarters
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} answered HTTP 500 (server error) to 3 requests over 3.8 s; "
            "kubeturn makes 3 attempts (retry.attempts): boom"
        )
        assert result.status == 500

    async def test_the_back_off_doubles_up_to_its_ceiling(self) -> None:
        name = model(attempts=6, backoffSeconds=1, maxBackoffSeconds=4)
        clock, adapter, _, _ = await run(name, *[http(503)] * 6, jitter=0.0)
        assert adapter.attempts == 6
        assert clock.slept == [0.5, 1.0, 2.0, 2.0, 2.0]  # half of 1, 2, 4, 4, 4

    async def test_one_attempt_means_no_retry(self) -> None:
        clock, adapter, _, result = await run(model(attempts=1), http(502))
        assert (adapter.attempts, clock.slept) == (1, [])
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} answered HTTP 502 (bad gateway) to 1 request; "
            "kubeturn makes 1 attempt (retry.attempts): boom"
        )

    @pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
    async def test_a_failure_that_is_not_retryable_is_not_retried(self, status: int) -> None:
        clock, adapter, _, result = await run(model(), http(status), ANSWER)
        assert (adapter.attempts, clock.slept) == (1, [])
        assert isinstance(result, ProviderFailure)
        phrase = retries.status_phrase(status)
        assert result.message == (
            f"{WHERE} answered {phrase} to 1 request, which kubeturn does not retry: boom"
        )

    async def test_a_later_success_is_the_answer_and_the_partial_is_its_own(self) -> None:
        clock, adapter, partial, result = await run(model(), http(500), STALL, ANSWER)
        assert result == ANSWER
        assert adapter.attempts == 3
        assert partial.text == ["attempt 3"]
        assert clock.slept == [0.75, 1.5]

    async def test_mixed_failures_are_told_in_order(self) -> None:
        _, _, _, result = await run(model(), http(500), STALL, http(429))
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} failed 3 requests over 3.8 s: answered HTTP 500 (server error), then "
            "sent nothing for 60 s (timeouts.idleSeconds), then answered HTTP 429 (rate "
            "limited); kubeturn makes 3 attempts (retry.attempts): boom"
        )

    async def test_a_failure_with_no_status_says_in(self) -> None:
        _, _, _, result = await run(model(), STALL, STALL, STALL)
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} sent nothing for 60 s (timeouts.idleSeconds) in 3 requests over 3.8 s; "
            "kubeturn makes 3 attempts (retry.attempts)"
        )


class TestRetryAfter:
    async def test_within_the_ceiling_it_is_waited(self) -> None:
        clock, adapter, _, result = await run(
            model(), http(429, retry_after=20), http(429, retry_after=0.1), ANSWER
        )
        assert result == ANSWER
        assert adapter.attempts == 3
        assert clock.slept == [20, 1.5]  # the longer of Retry-After and the back-off

    async def test_beyond_the_ceiling_it_fails_at_once(self) -> None:
        clock, adapter, _, result = await run(model(), http(429, retry_after=120), ANSWER)
        assert (adapter.attempts, clock.slept) == (1, [])
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} answered HTTP 429 (rate limited) to 1 request; it asked to wait 120 s, "
            "more than the 30 s kubeturn waits (retry.maxRetryAfterSeconds): boom"
        )
        assert result.retry_after_s == 120

    async def test_the_ceiling_is_per_provider(self) -> None:
        name = model(maxRetryAfterSeconds=150)
        clock, adapter, _, result = await run(name, http(503, retry_after=120), ANSWER)
        assert (adapter.attempts, clock.slept, result) == (2, [120], ANSWER)

    async def test_a_later_long_ask_ends_after_the_requests_made(self) -> None:
        clock, _, _, result = await run(model(), http(500), http(429, retry_after=45))
        assert clock.slept == [0.75]
        assert isinstance(result, ProviderFailure)
        assert result.message == (
            f"{WHERE} failed 2 requests over 1.8 s: answered HTTP 500 (server error), then "
            "answered HTTP 429 (rate limited); it asked to wait 45 s, more than the 30 s "
            "kubeturn waits (retry.maxRetryAfterSeconds): boom"
        )


class TestClassification:
    @pytest.mark.parametrize(
        ("status", "retryable"),
        [
            *[(400, False), (401, False), (403, False), (404, False), (408, True)],
            *[(409, True), (413, False), (422, False), (429, True), (500, True)],
            *[(502, True), (503, True), (504, True), (529, True)],
        ],
    )
    def test_statuses(self, status: int, retryable: bool) -> None:
        assert retries.retryable_status(status, {}) is retryable

    def test_the_server_may_say_otherwise(self) -> None:
        assert retries.retryable_status(500, {"x-should-retry": "false"}) is False
        assert retries.retryable_status(400, {"x-should-retry": "true"}) is True
        assert retries.retryable_status(400, {"x-should-retry": "maybe"}) is False

    def test_phrases(self) -> None:
        assert retries.status_phrase(429) == "HTTP 429 (rate limited)"
        assert retries.status_phrase(418) == "HTTP 418"

    @pytest.mark.parametrize(
        ("headers", "seconds"),
        [
            ({}, None),
            ({"retry-after": "120"}, 120.0),
            ({"retry-after": "1.5"}, 1.5),
            ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
            ({"retry-after": "-3"}, 0.0),
            ({"retry-after": "soon"}, None),
            ({"retry-after": "nan"}, None),
            ({"retry-after": "Tue, 01 Dec 2026 00:02:00 GMT"}, 120.0),
            ({"retry-after": "Tue, 01 Dec 2026 00:00:00 GMT"}, 0.0),
            ({"retry-after-ms": "x", "retry-after": "7"}, 7.0),
        ],
    )
    def test_retry_after(self, headers: dict[str, str], seconds: float | None) -> None:
        now = datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC).timestamp()
        assert retries.retry_after_s(headers, now) == seconds

    def test_an_http_date_round_trips(self) -> None:
        when = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)
        headers = {"retry-after": format_datetime(when, usegmt=True)}
        assert retries.retry_after_s(headers, when.timestamp() - 42) == 42.0


@pytest.mark.looptime
class TestIdleChunks:
    async def test_a_silent_stream_fails_the_attempt(self) -> None:
        async def stalls() -> AsyncIterator[int]:
            yield 1
            await asyncio.sleep(3600)
            yield 2

        seen: list[int] = []

        async def read() -> None:
            async for item in retries.chunks(stalls(), idle_s=0.05, where=WHERE):
                seen.append(item)

        with pytest.raises(ProviderFailure) as failed:
            await read()
        assert seen == [1]
        assert failed.value.retryable
        assert failed.value.message == f"{WHERE} sent nothing for 0.05 s (timeouts.idleSeconds)"

    async def test_a_stream_that_keeps_talking_is_read_to_its_end(self) -> None:
        async def talks() -> AsyncIterator[int]:
            for item in range(5):
                await asyncio.sleep(0.01)
                yield item

        items = [item async for item in retries.chunks(talks(), idle_s=0.5, where=WHERE)]
        assert items == [0, 1, 2, 3, 4]

    async def test_a_timeout_of_the_stream_itself_is_its_own(self) -> None:
        async def times_out() -> AsyncIterator[int]:
            raise TimeoutError("the stream's own")
            yield 0

        async def read() -> None:
            async for _ in retries.chunks(times_out(), idle_s=5, where=WHERE):
                pass

        with pytest.raises(TimeoutError, match="the stream's own"):
            await read()


class SleepingClock(FakeClock):
    """Waits for real, so a cancellation can land inside the wait."""

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(seconds)


async def test_a_cancel_ends_a_back_off_at_once_with_no_further_attempt() -> None:
    clock = SleepingClock()
    adapter = Adapter(http(429, retry_after=25), ANSWER, clock=clock)
    models = ProviderModels({ProviderType.OPENAI: adapter}, clock=clock, jitter=lambda: 0.5)
    request = ModelRequest(model(), [{"role": "user", "content": "hi"}], [], None)
    task = asyncio.ensure_future(models.complete(request, Partial()))
    while not clock.slept:
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.time() - cancelled_at < 1  # not the 25 s back-off
    assert (adapter.attempts, clock.slept) == (1, [25])
