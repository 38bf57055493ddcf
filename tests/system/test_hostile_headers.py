"""Requests no HTTP client library would send, written byte for byte to both APIs.

Cases, for the Harness and for the Orchestrator API, each served on 127.0.0.1:
- an ``Authorization`` header holding bytes that are not UTF-8 (after ``Bearer``, in the
  scheme, a Latin-1 token, the valid token with one such byte added) is 401 with the
  JSON error body and ``WWW-Authenticate: Bearer``, as a missing token is;
- a request line with bytes that are not UTF-8 in its path or query is 400;
- none of them logs above debug: an unauthenticated caller cannot flood the log (before,
  the first answered 500 and logged a traceback per request);
- the valid token, sent the same way, is served;
- a Workspace token lookup of such a header's text finds no Workspace, and raises
  nothing (the operator's resume gate looks a token up before the API does).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from kubeturn.orchestrator import api
from kubeturn_harness.settings import Settings
from tests import raw_http
from tests.harness.support import start_harness
from tests.system.support import WORKSPACE, Cleanup

TOKEN = "hostile-headers-token"
HOSTILE_AUTHORIZATION = [
    pytest.param(b"Authorization: Bearer \xff\xfe\xfd", id="not-utf8-token"),
    pytest.param(b"Authorization: \xc3\x28earer " + TOKEN.encode(), id="not-utf8-scheme"),
    pytest.param(b"Authorization: Bearer caf\xe9", id="latin1-token"),
    pytest.param(b"Authorization: Bearer " + TOKEN.encode() + b"\x80", id="token-plus-a-byte"),
    pytest.param(b"Authorization: Bearer " + TOKEN.encode() + b" \xff", id="token-space-byte"),
]
MALFORMED_TARGETS = [
    pytest.param(b"/agents/a/\xff\xfe", id="path"),
    pytest.param(b"/healthz?offset=\xff", id="query"),
]


@pytest.fixture(params=["harness", "orchestrator"])
async def server(
    request: pytest.FixtureRequest, toolbox_socket: Path
) -> AsyncIterator[tuple[str, bytes]]:
    """One API whose token is ``TOKEN``: its base URL, and a route that needs the token."""
    cleanups: list[Cleanup] = []
    if request.param == "harness":
        data = Path(tempfile.mkdtemp(prefix="kubeturn-headers-"))
        settings = Settings(
            data_dir=data / "data",
            token_sha256=hashlib.sha256(TOKEN.encode()).hexdigest(),
            orchestrator_url=None,
            orchestrator_token=None,
            providers_file=None,
        )
        _, url = await start_harness(settings, cleanups, toolbox=toolbox_socket)
        path = b"/repos"
    else:
        registry = api.Registry()
        registry.set_token(WORKSPACE, TOKEN)
        runner = web.AppRunner(api.make_app(registry), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        cleanups.append(runner.cleanup)
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        path = b"/agents/nobody/surface"
    yield url, path
    for cleanup in reversed(cleanups):
        await cleanup()


def _loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno > logging.DEBUG]


async def _get(
    server: tuple[str, bytes], *headers: bytes, target: bytes | None = None
) -> raw_http.Answer:
    url, path = server
    return await raw_http.request(url, b"GET", target or path, list(headers))


@pytest.mark.parametrize("authorization", HOSTILE_AUTHORIZATION)
async def test_an_authorization_header_that_is_not_text_is_401_and_quiet(
    server: tuple[str, bytes], authorization: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = await _get(server, authorization)
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == "Bearer"
    assert answer.json()["error"] == "unauthorized"
    assert _loud(caplog) == []


@pytest.mark.parametrize("target", MALFORMED_TARGETS)
async def test_a_request_line_that_is_not_text_is_400_and_quiet(
    server: tuple[str, bytes], target: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = await _get(server, b"Authorization: Bearer " + TOKEN.encode(), target=target)
    assert answer.status == 400
    assert _loud(caplog) == []


async def test_the_valid_token_sent_the_same_way_is_served(server: tuple[str, bytes]) -> None:
    answer = await _get(server, b"Authorization: Bearer " + TOKEN.encode())
    # The Harness lists its clones; the Orchestrator has no Turn at that Instance ID.
    assert (answer.status, answer.json().get("error")) in ((200, None), (404, "not-found"))


@pytest.mark.parametrize("token", ["\udcff\udcfe", "caf\u00e9", TOKEN + "\udc80"])
def test_a_token_that_is_not_ascii_belongs_to_no_workspace(token: str) -> None:
    registry = api.Registry()
    registry.set_token(WORKSPACE, TOKEN)
    assert registry.workspace_of(token) is None
    assert registry.workspace_of(TOKEN) == WORKSPACE
