"""The OpenAI adapter's translation of the SDK's errors (``openai_models._failure``):
every ``APIError`` class the SDK exports becomes a classified ``ProviderFailure``.

Cases:
- each status error class, answered with its status: retryable as the policy says
  (408/409/429/5xx yes; 400/401/403/404/422 no), the status and the server's words kept,
  the SDK's ``Error code: N -`` prefix dropped;
- ``Retry-After`` and ``x-should-retry`` are read from the answer's headers;
- a connect timeout and a read timeout name the timeout that ran out;
- a connection error keeps its cause's words; all three are retryable;
- a response that is not a completion, and an error reported inside a stream, are not;
- the mapping is complete: no ``APIError`` class of the SDK is left out of these cases.
"""

from __future__ import annotations

import inspect

import httpx2
import openai
import pytest

from kubeturn_harness.openai_models import _failure
from kubeturn_harness.providers import ModelName, Provider, ProviderSpec

URL = "http://127.0.0.1:9/v1"
MODEL = ModelName(Provider("p", ProviderSpec(baseUrl=URL)), "m")
WHERE = f"provider 'p' ({URL}), model 'm'"
REQUEST = httpx2.Request("POST", f"{URL}/chat/completions")

STATUS_CLASSES: dict[type[openai.APIStatusError], int] = {
    openai.BadRequestError: 400,
    openai.AuthenticationError: 401,
    openai.PermissionDeniedError: 403,
    openai.NotFoundError: 404,
    openai.ConflictError: 409,
    openai.UnprocessableEntityError: 422,
    openai.RateLimitError: 429,
    openai.InternalServerError: 500,
    openai.APIStatusError: 408,
}
OTHER_CLASSES = {
    openai.APIError,
    openai.APIConnectionError,
    openai.APITimeoutError,
    openai.APIResponseValidationError,
    openai.OAuthError,
}
RETRYABLE = {400: False, 401: False, 403: False, 404: False, 408: True, 409: True}
RETRYABLE |= {422: False, 429: True, 500: True}


def status_error(
    cls: type[openai.APIStatusError], status: int, **headers: str
) -> openai.APIStatusError:
    response = httpx2.Response(status, headers=headers, request=REQUEST)
    return cls(f"Error code: {status} - boom", response=response, body=None)


@pytest.mark.parametrize("cls", list(STATUS_CLASSES), ids=lambda cls: cls.__name__)
def test_status_errors(cls: type[openai.APIStatusError]) -> None:
    status = STATUS_CLASSES[cls]
    failure = _failure(MODEL, status_error(cls, status))
    assert (failure.status, failure.retryable, failure.detail) == (
        status,
        RETRYABLE[status],
        "boom",
    )
    assert failure.message.startswith(f"{WHERE} answered HTTP {status} (")
    assert failure.message.endswith("): boom")


def test_the_answers_headers_are_read() -> None:
    error = status_error(openai.RateLimitError, 429, **{"Retry-After": "7"})
    assert _failure(MODEL, error).retry_after_s == 7.0
    error = status_error(openai.InternalServerError, 500, **{"x-should-retry": "false"})
    assert _failure(MODEL, error).retryable is False


def test_oauth_errors_are_401s() -> None:
    response = httpx2.Response(401, request=REQUEST)
    failure = _failure(MODEL, openai.OAuthError(response=response, body=None))
    assert (failure.status, failure.retryable) == (401, False)


def test_timeouts_name_the_one_that_ran_out() -> None:
    for cause, said in [
        (httpx2.ConnectTimeout("slow"), "was not reached in 10 s (timeouts.connectSeconds)"),
        (httpx2.ReadTimeout("slow"), "sent nothing for 60 s (timeouts.idleSeconds)"),
    ]:
        error = openai.APITimeoutError(request=REQUEST)
        error.__cause__ = cause
        failure = _failure(MODEL, error)
        assert (failure.message, failure.retryable, failure.status) == (
            f"{WHERE} {said}",
            True,
            None,
        )


def test_a_connection_error_keeps_its_cause() -> None:
    error = openai.APIConnectionError(request=REQUEST)
    error.__cause__ = httpx2.ConnectError("[Errno 111] Connection refused")
    failure = _failure(MODEL, error)
    assert failure.retryable
    assert failure.message == (
        f"{WHERE} could not be reached or dropped the connection: [Errno 111] Connection refused"
    )


def test_what_is_not_a_completion_is_not_retried() -> None:
    response = httpx2.Response(200, request=REQUEST)
    invalid = openai.APIResponseValidationError(response, None, message="not a completion")
    in_stream = openai.APIError("the model crashed", REQUEST, body=None)
    failures = [_failure(MODEL, error) for error in (invalid, in_stream)]
    assert [(f.retryable, f.message) for f in failures] == [
        (False, f"{WHERE} answered something that is not a chat completion: not a completion"),
        (False, f"{WHERE} reported an error in its stream: the model crashed"),
    ]


def test_the_mapping_is_complete() -> None:
    exported = {
        value
        for value in (getattr(openai, name) for name in openai.__all__ if name.endswith("Error"))
        if inspect.isclass(value) and issubclass(value, openai.APIError)
    }
    assert exported == set(STATUS_CLASSES) | OTHER_CLASSES
