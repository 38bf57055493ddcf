"""``kubeturn logs --kube``'s client (``kubeturn.k8s.transcript_client.RemoteTranscripts``)
against a real HTTP server on 127.0.0.1 standing for the API server.

Cases:
- it GETs the console's transcript path of the Run in the kubeconfig context's namespace
  (or the one given), with the query the console reads (``turn``, ``agent``,
  ``sinceTurn``, ``follow=1``), presenting the kubeconfig's bearer token;
- it yields each entry as it arrives: the first before the server wrote the second;
- each refusal is one ``CommandError`` saying what to do: 401, 403 (with the server's
  message), 404, 503, another status; a line that is not JSON;
- a server that cannot be reached is a ``CommandError`` too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from kubeturn.errors import CommandError
from kubeturn.k8s.transcript_client import RemoteTranscripts
from kubeturn.transcripts import Entry, Query
from tests.operator.operator_support import free_port

TOKEN = "user-token"
PATH = "/apis/console.kubeturn.dev/v1alpha1/namespaces/{namespace}/runs/{run}/transcript"
ENTRY = {"turn": "t1", "number": 1, "state": "s", "agent": "a", "kind": "text", "at": "x"}


def kubeconfig(path: Path, server: str, namespace: str = "team") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": "c", "context": {"cluster": "c", "user": "u", "namespace": namespace}}
        ],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


class ApiServer:
    """Answers the transcript path with ``status`` and ``body``, or streams two entries,
    the second once ``release`` is set; records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []
        self.status = 200
        self.body = b""
        self.release = asyncio.Event()

    async def transcript(self, request: web.Request) -> web.StreamResponse:
        self.asked.append(
            {
                "path": request.path,
                "query": dict(request.query),
                "authorization": request.headers.get("Authorization"),
            }
        )
        if self.status != 200 or self.body:
            return web.Response(status=self.status, body=self.body)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        await response.write(json.dumps(ENTRY).encode() + b"\n")
        await self.release.wait()
        await response.write(json.dumps({**ENTRY, "kind": "settlement"}).encode() + b"\n")
        await response.write_eof()
        return response


@pytest.fixture
async def server() -> AsyncIterator[tuple[ApiServer, str]]:
    served = ApiServer()
    app = web.Application()
    app.router.add_get(PATH.format(namespace="{namespace}", run="{run}"), served.transcript)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield served, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        served.release.set()
        await runner.cleanup()


async def read_all(source: RemoteTranscripts, **query: Any) -> list[dict[str, Any]]:
    try:
        return [
            entry.model_dump(exclude_defaults=True)
            async for entry in source.entries(Query(**query))
        ]
    finally:
        source.close()


async def test_it_asks_the_runs_transcript_with_the_users_token(
    server: tuple[ApiServer, str], tmp_path: Path
) -> None:
    served, url = server
    served.release.set()
    source = RemoteTranscripts("hello", None, kubeconfig(tmp_path / "config", url))
    entries = await read_all(source, turn="t2", since_turn=2, follow=True)
    assert entries == [ENTRY, {**ENTRY, "kind": "settlement"}]
    assert served.asked == [
        {
            "path": PATH.format(namespace="team", run="hello"),
            "query": {"turn": "t2", "sinceTurn": "2", "follow": "1"},
            "authorization": f"Bearer {TOKEN}",
        }
    ]
    source = RemoteTranscripts("hello", "other", kubeconfig(tmp_path / "config", url))
    await read_all(source, agent="coder")
    assert served.asked[-1]["path"] == PATH.format(namespace="other", run="hello")
    assert served.asked[-1]["query"] == {"agent": "coder"}


async def test_entries_arrive_as_they_are_sent(
    server: tuple[ApiServer, str], tmp_path: Path
) -> None:
    served, url = server
    source = RemoteTranscripts("hello", None, kubeconfig(tmp_path / "config", url))
    try:
        stream = source.entries(Query(follow=True))
        assert await anext(stream) == Entry.model_validate(ENTRY)
        assert not served.release.is_set()
        served.release.set()
        assert (await anext(stream)).kind == "settlement"
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    finally:
        source.close()


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (401, b"", "did not accept your credentials (HTTP 401)"),
        (
            403,
            json.dumps(
                {"kind": "Status", "message": 'runs.kubeturn.dev "hello" is forbidden'}
            ).encode(),
            "refused the transcript of the Run 'hello' in namespace 'team' (HTTP 403): "
            'runs.kubeturn.dev "hello" is forbidden; reading it needs get on runs.kubeturn.dev',
        ),
        (404, b"", "there is no Run 'hello' in namespace 'team' on the cluster (HTTP 404)"),
        (503, b"", "the console is unavailable (HTTP 503)"),
        (500, b"", "the cluster answered HTTP 500 for the Run 'hello'"),
        (
            200,
            b"<html>\n",
            "a transcript line of the Run 'hello' in namespace 'team' that is not an entry",
        ),
    ],
)
async def test_each_refusal_is_one_line(
    server: tuple[ApiServer, str], tmp_path: Path, status: int, body: bytes, said: str
) -> None:
    served, url = server
    served.status, served.body = status, body
    source = RemoteTranscripts("hello", None, kubeconfig(tmp_path / "config", url))
    with pytest.raises(CommandError) as refused:
        await read_all(source)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


async def test_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    source = RemoteTranscripts("hello", None, kubeconfig(tmp_path / "config", url))
    with pytest.raises(CommandError, match="cannot reach the cluster for the Run 'hello'"):
        await read_all(source)
