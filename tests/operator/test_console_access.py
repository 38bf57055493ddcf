"""A user reaches a Run's console and transcript on a cluster through the API server, with
their own credentials and RBAC (ADR 0110): the operator, as the chart installs it (its
RBAC, its APIService, its serving certificate), serves ``console.kubeturn.dev`` behind the
emulator's aggregation layer.

The console app mounted here is the console over the operator's own
:class:`~kubeturn.k8s.console_source.ClusterConsoleSource` (the Runs from the API), each
Run's transcript fixed: what is proved is who reaches them; one test mounts the console
``kubeturn operator`` mounts (``cluster_console``), transcripts read through the Harness.

Cases:
- discovery: the APIResourceList of ``console.kubeturn.dev/v1alpha1`` and the APIGroup,
  through the API server, to any authenticated user;
- a user who may view the namespace (the chart's console ClusterRole and ``get`` on
  ``runs.kubeturn.dev``) reads the Run's transcript NDJSON through the API server, and the
  operator heard it as that user; ``kubeturn logs --kube`` with that user's kubeconfig
  prints the same lines;
- a user without RBAC is refused 403 by the API server: the operator never hears of it;
- a user with the console's RBAC but not ``get`` on the Run is refused 403 by the
  operator's SubjectAccessReview, as a ``Status`` naming ``runs.kubeturn.dev``;
  ``kubeturn logs --kube``, which reads the Run first, is refused it, in one line;
- a request to the operator's console port without the front-proxy client certificate,
  naming ``system:admin`` in ``X-Remote-User``, is 401 and sees nothing;
- the operator's own console: a viewer gets the Runs list, the Run's page (its machine
  marked at its state), its live part and its transcript through the API server; a
  user who may not get the Run is refused each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.console.app import console_app
from kubeturn.k8s import console_source
from kubeturn.k8s.hub import Hub
from kubeturn.transcripts import Entry, EntryKind, Query
from tests.operator import emulator
from tests.operator import installation as installation_
from tests.operator.console_support import (
    GROUP_VERSION,
    PREFIX,
    SERVICE,
    kube_logs,
    place_console,
    user,
)
from tests.operator.operator_support import (
    NAMESPACE,
    RUNS,
    OperatorThread,
    eventually,
    settings,
    status,
)
from tests.operator.world import NO_PROVIDERS

Body = dict[str, Any]
RUN = "hello"
TRANSCRIPT = f"{PREFIX}/namespaces/{NAMESPACE}/runs/{RUN}/transcript"


def entries(namespace: str, name: str) -> list[Entry]:
    """The fixed transcript of every Run here."""
    turn = {"turn": "t1", "number": 1, "state": "waiting", "agent": "coder"}
    return [
        Entry(**turn, kind=EntryKind.PROMPT, at="2026-01-01T00:00:00Z", text=f"Work on {name}."),
        Entry(**turn, kind=EntryKind.TEXT, at="2026-01-01T00:00:01Z", text=f"Done in {namespace}."),
    ]


def as_json(found: list[Entry]) -> list[Body]:
    return [entry.model_dump(mode="json") for entry in found]


@dataclasses.dataclass(frozen=True)
class FixedTranscripts:
    """A Run's transcript as :func:`entries` gives it, whatever the query."""

    namespace: str
    name: str

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        for entry in entries(self.namespace, self.name):
            yield entry


def console(hub: Hub) -> web.Application:
    """The console app over the cluster's console source, each Run's transcript fixed."""
    return console_app(
        console_source.ClusterConsoleSource(hub.kube, hub.settings.namespaces, FixedTranscripts)
    )


@dataclasses.dataclass
class Console:
    k8s: emulator.KubernetesApi
    port: int
    ca: bytes
    """The serving certificate's CA (the APIService's caBundle)."""


@pytest.fixture(name="console_app")
def console_app_() -> Callable[[Hub], web.Application]:
    """The console the operator mounts: the stand-in above, unless a test names another."""
    return console


@pytest.fixture
async def served(
    console_app: Callable[[Hub], web.Application],
    k8s: emulator.KubernetesApi,
    installation: installation_.Installation,
    chart: Callable[[installation_.Shape], list[Body]],
    tmp_path: Path,
) -> AsyncIterator[Console]:
    """The operator serving the console with the chart's certificate, its APIService
    stored and its Service mapped to the console port; the Run ``hello``."""
    place = place_console(
        k8s, chart(installation.shape), installation.operator_namespace, tmp_path / "tls"
    )
    k8s.create_object(
        RUNS,
        {
            "metadata": {"name": RUN, "namespace": NAMESPACE},
            "spec": {
                "agents": {},
                "machine": {
                    "initial": "waiting",
                    "states": {"waiting": {"on": {"approve": "done"}}, "done": {"type": "final"}},
                },
            },
        },
    )
    operating = dataclasses.replace(
        settings(installation, providers_yaml=NO_PROVIDERS),
        **place.settings,
    )
    operator = OperatorThread(operating, installation.kubeconfig, console=console_app)
    await operator.start()
    try:
        # The Run's daemon settled (a daemon stopped while it starts takes kopf 5 s).
        await eventually(lambda: status(k8s, RUNS, RUN).get("state") == "waiting", "the Run")
        yield Console(k8s, place.port, place.ca)
    finally:
        await operator.stop()


async def get(k8s: emulator.KubernetesApi, path: str, token: str) -> tuple[int, str, bytes]:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession(str(k8s.url)) as session,
        session.get(path, headers=headers) as response,
    ):
        return response.status, response.headers.get("Content-Type", ""), await response.read()


async def logs(config: Path, *args: str) -> tuple[int, str, str]:
    """``kubeturn logs --kube`` as a user runs it, without blocking the API's loop."""
    process = await kube_logs(config, *args)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_discovery_through_the_api_server(served: Console) -> None:
    token = user(served.k8s, "anyone", console=False, runs=False)
    status, _, body = await get(served.k8s, PREFIX, token)
    assert status == 200
    document = json.loads(body)
    assert (document["kind"], document["groupVersion"]) == ("APIResourceList", GROUP_VERSION)
    assert {r["name"] for r in document["resources"]} == {
        "runs",
        "runs/turns",
        "runs/transcript",
        "assets",
    }
    status, _, body = await get(served.k8s, "/apis/console.kubeturn.dev", token)
    assert (status, json.loads(body)["preferredVersion"]["groupVersion"]) == (200, GROUP_VERSION)


async def test_a_viewer_reads_the_transcript_through_the_api_server(
    served: Console, tmp_path: Path
) -> None:
    token = user(served.k8s, "viewer", console=True, runs=True)
    status, content_type, body = await get(served.k8s, TRANSCRIPT, token)
    assert (status, content_type) == (200, "application/x-ndjson")
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert lines == as_json(entries(NAMESPACE, RUN))
    heard = served.k8s.aggregator.forwarded[-1]
    assert ("X-Remote-User", "system:serviceaccount:default:viewer") in heard
    assert not [key for key, _ in heard if key.lower() == "authorization"]
    config = emulator.write_kubeconfig(tmp_path / "viewer", str(served.k8s.url), token=token)
    code, out, err = await logs(config, RUN, "-o", "json")
    assert (code, err) == (0, "")
    assert [json.loads(line) for line in out.splitlines()] == as_json(entries(NAMESPACE, RUN))


async def test_a_user_without_rbac_is_refused_by_the_api_server(served: Console) -> None:
    token = user(served.k8s, "stranger", console=False, runs=True)
    proxied = len(served.k8s.aggregator.forwarded)
    status, _, body = await get(served.k8s, TRANSCRIPT, token)
    refusal = json.loads(body)
    assert (status, refusal["kind"], refusal["reason"]) == (403, "Status", "Forbidden")
    assert (
        'cannot get resource "runs/transcript" in API group "console.kubeturn.dev"'
        in (refusal["message"])
    )
    assert len(served.k8s.aggregator.forwarded) == proxied


async def test_a_user_who_may_not_get_the_run_is_refused_by_the_operator(
    served: Console, tmp_path: Path
) -> None:
    token = user(served.k8s, "console-only", console=True, runs=False)
    status, _, body = await get(served.k8s, TRANSCRIPT, token)
    refusal = json.loads(body)
    assert (status, refusal["kind"], refusal["reason"]) == (403, "Status", "Forbidden")
    assert refusal["message"] == (
        'runs.kubeturn.dev "hello" is forbidden: User "system:serviceaccount:default:'
        'console-only" cannot get resource "runs" in API group "kubeturn.dev" in the '
        'namespace "default"'
    )
    config = emulator.write_kubeconfig(tmp_path / "console-only", str(served.k8s.url), token=token)
    code, out, err = await logs(config, RUN)
    assert (code, out) == (1, "")
    assert err.startswith("kubeturn: the cluster refused access to the Run 'hello'")
    assert "HTTP 403" in err
    assert len(err.splitlines()) == 1


async def test_the_console_port_believes_no_header_without_the_front_proxy_certificate(
    served: Console,
) -> None:
    context = ssl.create_default_context(cadata=served.ca.decode())
    forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
    # No idle connection left: kopf, stopping, would wait for its server task.
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(
            f"https://127.0.0.1:{served.port}{TRANSCRIPT}",
            headers=forged,
            ssl=context,
            server_hostname=f"{SERVICE}.{installation_.RELEASE_NAMESPACE}.svc",
        ) as response,
    ):
        assert response.status == 401
        assert (await response.json())["reason"] == "Unauthorized"


@pytest.mark.parametrize("console_app", [console_source.cluster_console])
async def test_the_operators_console_pages_reach_a_viewer_and_not_a_stranger(
    served: Console,
) -> None:
    """The console ``kubeturn operator`` mounts (``cluster_console``), through the API
    server: a viewer gets the namespace's Runs list and the Run's page, its machine
    marked at ``waiting``, the page's live part (its URL with ``?part=1``) and the Run's
    (empty) transcript; a user who may not get the Run is refused every one."""
    viewer = user(served.k8s, "viewer", console=True, runs=True)
    listed = f"{PREFIX}/namespaces/{NAMESPACE}/runs"
    page = f"{listed}/{RUN}"
    status, content_type, body = await get(served.k8s, listed, viewer)
    assert (status, content_type) == (200, "text/html; charset=utf-8")
    assert f'data-run="{NAMESPACE}/{RUN}"'.encode() in body
    status, _, body = await get(served.k8s, page, viewer)
    assert status == 200
    assert b"    class s0 active" in body
    assert b'src="../../../assets/mermaid.min.js"' in body
    status, _, part = await get(served.k8s, f"{page}?part=1", viewer)
    assert (status, part.startswith(b'<div id="live"')) == (200, True)
    status, content_type, body = await get(served.k8s, TRANSCRIPT, viewer)
    assert (status, content_type, body) == (200, "application/x-ndjson", b"")
    stranger = user(served.k8s, "console-only", console=True, runs=False)
    for path in (listed, page, f"{page}?part=1", TRANSCRIPT):
        status, _, _ = await get(served.k8s, path, stranger)
        assert status == 403, path
