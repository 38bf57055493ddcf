"""kubeturn's retry policy for model requests: one place, for every adapter.

An adapter makes ONE attempt and raises ``ProviderFailure`` classified: the HTTP status,
whether the same request again may help (``retryable``), and how long the provider asked
to be left alone (``retry_after_s``). ``call`` decides whether and when to try again, per
provider (``ProviderSpec.retry``, docs/decisions/0076):

- at most ``attempts`` requests; a failure that is not retryable (400, 401, 403, 404,
  422, a stream the Harness cannot read) ends the call at once;
- between two requests a back-off that doubles from ``backoffSeconds`` up to
  ``maxBackoffSeconds``, jittered to between half and all of it, so Harnesses that lost
  one provider do not all call it again at the same instant;
- a ``Retry-After`` (``retry-after-ms``, seconds, or an HTTP date) is honoured: the wait
  is the longer of it and the back-off. One beyond ``maxRetryAfterSeconds`` fails the
  call at once, saying so: the state waiting on the Turn should hear now, not in minutes;
- waits are the clock's (``Clock.sleep``): a sweep cancels the run's task, which ends a
  wait at once, and no further request is made.

The message of the failure that ends a call says what each request met, how many were
made over how long, and why no further one was. ``chunks`` is the idle timeout every
adapter puts around its stream's chunks (``ProviderSpec.timeouts``, docs/decisions/0077).
This module does no IO of its own.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import TypeVar

from kubeturn_harness.clock import Clock
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.providers import ModelName, RetrySpec

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS_NAMES = {
    400: "bad request",
    401: "unauthorized",
    403: "forbidden",
    404: "not found",
    408: "request timeout",
    409: "conflict",
    413: "request too large",
    422: "unprocessable",
    429: "rate limited",
    500: "server error",
    502: "bad gateway",
    503: "unavailable",
    504: "gateway timeout",
    529: "overloaded",
}


def status_phrase(status: int) -> str:
    """``HTTP 429 (rate limited)``; the bare status for one without a common name."""
    name = STATUS_NAMES.get(status)
    return f"HTTP {status} ({name})" if name else f"HTTP {status}"


def retryable_status(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a request answered ``status`` may succeed when sent again: 408 (the
    server's own timeout), 409 (a lock it held), 429 and 5xx; not another 4xx, which the
    same request meets again. A server's ``x-should-retry: true|false`` (OpenAI's and
    Anthropic's APIs send it) wins. ``headers`` is read by lower-case name."""
    said = (headers.get("x-should-retry") or "").strip().lower()
    if said in ("true", "false"):
        return said == "true"
    return status in (408, 409, 429) or status >= 500


def retry_after_s(headers: Mapping[str, str], now: float) -> float | None:
    """How long the provider asked to be left alone, in seconds, or None when it did not
    say (or said something unreadable): ``retry-after-ms``, then ``retry-after`` as
    seconds or an HTTP date (``now`` is the wall clock's epoch seconds). A time in the
    past is 0; ``headers`` is read by lower-case name."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if math.isnan(seconds):
            return None
        return max(0.0, seconds)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)


def answered(
    model: ModelName, status: int, headers: Mapping[str, str], detail: str, *, outcome: str = ""
) -> ProviderFailure:
    """A provider's error status, classified: every adapter's SDK says it so.
    ``outcome`` overrides "answered HTTP …" (an error reported inside a stream)."""
    outcome = outcome or f"answered {status_phrase(status)}"
    return ProviderFailure(
        f"{model.where} {outcome}: {detail}",
        status=status,
        retryable=retryable_status(status, headers),
        retry_after_s=retry_after_s(headers, time.time()),
        outcome=outcome,
        detail=detail,
    )


def timed_out(model: ModelName, cause: BaseException | None) -> ProviderFailure:
    """A transport timeout, retryable; ``cause`` (what the SDK wrapped) says which ran out."""
    timeouts = model.provider.spec.timeouts
    if type(cause).__name__ == "ConnectTimeout":
        outcome = f"was not reached in {timeouts.connectSeconds:g} s (timeouts.connectSeconds)"
    else:
        outcome = f"sent nothing for {timeouts.idleSeconds:g} s (timeouts.idleSeconds)"
    return ProviderFailure(f"{model.where} {outcome}", retryable=True, outcome=outcome)


def backoff_s(retry: RetrySpec, retries_made: int, jitter: float) -> float:
    """The back-off before retry ``retries_made + 1``: ``backoffSeconds`` doubled per
    retry made, at most ``maxBackoffSeconds``, scaled by ``jitter`` in [0, 1) to between
    half and all of it."""
    full = min(retry.backoffSeconds * 2.0**retries_made, retry.maxBackoffSeconds)
    return full * (0.5 + jitter / 2)


async def call(
    attempt: Callable[[], Awaitable[T]],
    model: ModelName,
    clock: Clock,
    jitter: Callable[[], float],
) -> T:
    """``attempt`` until it returns, under ``model``'s provider's retry policy; the
    ``ProviderFailure`` that ends it says what happened (see the module docstring)."""
    retry = model.provider.spec.retry
    started = clock.monotonic()
    failures: list[ProviderFailure] = []
    while True:
        try:
            return await attempt()
        except ProviderFailure as failure:
            failures.append(failure)
            if not failure.retryable:
                raise _gave_up(model, failures, clock.monotonic() - started, None) from failure
            if len(failures) >= retry.attempts:
                why = f"kubeturn makes {_count(retry.attempts, 'attempt')} (retry.attempts)"
                raise _gave_up(model, failures, clock.monotonic() - started, why) from failure
            asked = failure.retry_after_s
            if asked is not None and asked > retry.maxRetryAfterSeconds:
                why = (
                    f"it asked to wait {asked:g} s, more than the {retry.maxRetryAfterSeconds:g}"
                    " s kubeturn waits (retry.maxRetryAfterSeconds)"
                )
                raise _gave_up(model, failures, clock.monotonic() - started, why) from failure
            wait = max(backoff_s(retry, len(failures) - 1, jitter()), asked or 0.0)
            log.info(
                "%s %s; request %d of %d in %.1f s",
                model.where,
                failure.outcome,
                len(failures) + 1,
                retry.attempts,
                wait,
            )
            await clock.sleep(wait)


def _gave_up(
    model: ModelName, failures: list[ProviderFailure], elapsed: float, why: str | None
) -> ProviderFailure:
    last = failures[-1]
    requests = _count(len(failures), "request")
    span = f" over {elapsed:.1f} s" if len(failures) > 1 else ""
    outcomes = [failure.outcome for failure in failures]
    if len(set(outcomes)) == 1:
        to = "to" if last.status is not None else "in"
        said = f"{model.where} {last.outcome} {to} {requests}{span}"
    else:
        said = f"{model.where} failed {requests}{span}: {', then '.join(outcomes)}"
    if why is None:
        said += ", which kubeturn does not retry"
    else:
        said += f"; {why}"
    if last.detail:
        said += f": {last.detail}"
    return ProviderFailure(
        said,
        status=last.status,
        retryable=last.retryable,
        retry_after_s=last.retry_after_s,
        outcome=last.outcome,
        detail=last.detail,
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


async def chunks(stream: AsyncIterable[T], *, idle_s: float, where: str) -> AsyncIterator[T]:
    """``stream``'s items, failing the attempt (retryable) when none comes for
    ``idle_s``: a stalled stream ends within the idle timeout, not the SDK's read
    timeout, and also when the server keeps the connection busy with bytes that are not
    chunks (SSE comments, keep-alives)."""
    items = aiter(stream)
    while True:
        try:
            async with asyncio.timeout(idle_s) as timer:
                item = await anext(items)
        except StopAsyncIteration:
            return
        except TimeoutError as error:
            if not timer.expired():
                raise
            outcome = f"sent nothing for {idle_s:g} s (timeouts.idleSeconds)"
            raise ProviderFailure(f"{where} {outcome}", retryable=True, outcome=outcome) from error
        yield item
