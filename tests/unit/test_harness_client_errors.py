"""The Harness client's translation of aiohttp's exceptions is complete.

Cases:
- every exception class aiohttp exports is one a request may raise, and so is
  translated (``NO_ANSWER``: the Harness was not reached), or is one of the few that
  never reach a client's request (warnings, WebSocket errors, the parser's own signal);
  a class a new aiohttp adds fails this test until it is placed;
- a request's timeout is translated;
- the failures that sent nothing (``NOT_SENT``) are among those translated, and are
  exactly aiohttp's failures to connect;
- every kind of ``HarnessCallFailed`` is one, and none is an ``AdmitFailed``: a failed
  sweep, exec or read is no failed admission (``admit`` says one with ``AdmitFailed``).

How each call fails, a closed client's among them, is in
tests/system/test_harness_client.py.
"""

from __future__ import annotations

import inspect

import aiohttp

from kubeturn import errors
from kubeturn.orchestrator import harness_client

NEVER_FROM_A_REQUEST = {
    "BadContentDispositionHeader",  # warnings, of multipart parsing
    "BadContentDispositionParam",
    "EofStream",  # the WebSocket reader's end-of-stream signal
    "WSMessageTypeError",  # WebSocket messages
    "WebSocketError",
}


def exported() -> dict[str, type[BaseException]]:
    return {
        name: value
        for name, value in vars(aiohttp).items()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }


def test_every_exception_aiohttp_exports_is_translated_or_never_raised_by_a_request() -> None:
    untranslated = {
        name
        for name, error in exported().items()
        if not issubclass(error, harness_client.NO_ANSWER)
    }
    assert untranslated == NEVER_FROM_A_REQUEST


def test_a_request_timeout_is_translated() -> None:
    assert issubclass(TimeoutError, harness_client.NO_ANSWER)
    assert issubclass(aiohttp.ServerTimeoutError, harness_client.NO_ANSWER)


def test_what_sent_nothing_is_a_failure_to_connect() -> None:
    for error in harness_client.NOT_SENT:
        assert issubclass(error, harness_client.NO_ANSWER)
    connecting = {
        name for name, error in exported().items() if issubclass(error, harness_client.NOT_SENT)
    }
    assert connecting == {
        "ClientConnectorError",
        "ClientConnectorCertificateError",
        "ClientConnectorDNSError",
        "ClientConnectorSSLError",
        "ClientProxyConnectionError",
        "ClientSSLError",
        "ConnectionTimeoutError",
    }


def test_a_harness_call_s_failure_is_no_admission_failure() -> None:
    for error in (errors.HarnessUnreachable, errors.HarnessRefused, errors.ConversationLost):
        assert issubclass(error, errors.HarnessCallFailed)
        assert not issubclass(error, errors.AdmitFailed)
