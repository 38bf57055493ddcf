"""The console's TLS (``kubeturn.k8s.console_server.Certificates``) over real connections
on 127.0.0.1.

Cases:
- a client presenting a certificate the request-header CA signed is seen by its common
  name; a client without one still connects (the server answers it 401, not a cut
  handshake); a client whose certificate another CA signed is refused in the handshake;
- a serving certificate renewed in its files (as the kubelet rewrites a mounted Secret)
  is served to the next connection, without a restart;
- certificate files that cannot be read are ``ConsoleUnavailable``, naming the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from kubeturn.errors import ConsoleUnavailable
from kubeturn.k8s import console_server
from tests.operator import aggregation

NAME = "console.kubeturn-system.svc"


def served_certificate(ca: aggregation.Authority, directory: Path, common_name: str) -> None:
    certificate, key = aggregation.issue(ca, common_name, dns_names=(NAME,))
    (directory / "tls.crt").write_bytes(certificate)
    (directory / "tls.key").write_bytes(key)


async def common_name(request: web.Request) -> web.Response:
    return web.json_response({"client": console_server._common_name(request)})


@dataclasses.dataclass(frozen=True)
class Server:
    port: int
    serving: aggregation.Authority
    front: aggregation.FrontProxy
    """The front proxy whose CA the server was given as the request-header CA."""
    directory: Path


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    """A server with ``Certificates`` from files under ``tmp_path``."""
    serving, front = aggregation.authority("serving-ca"), aggregation.FrontProxy.make()
    served_certificate(serving, tmp_path, "first")
    certificates = console_server.Certificates(
        str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), front.ca.pem
    )
    app = web.Application()
    app.router.add_get("/", common_name)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificates.context).start()
    try:
        yield Server(runner.addresses[0][1], serving, front, tmp_path)
    finally:
        await runner.cleanup()


async def ask(
    server: Server, client: aggregation.FrontProxy | None = None
) -> tuple[str | None, str]:
    """The client's common name as the server saw it, and the server's own: one HTTP/1.1
    request on a connection of its own."""
    context = ssl.create_default_context(cadata=server.serving.pem)
    if client is not None:
        client.present(context)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=context, server_hostname=NAME
    )
    try:
        peer = writer.get_extra_info("ssl_object").getpeercert(True)
        writer.write(f"GET / HTTP/1.1\r\nHost: {NAME}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()
    if not answer:  # TLS 1.3: a refused client certificate is told after the handshake
        raise ConnectionError("the server closed the connection without an answer")
    _, _, body = answer.partition(b"\r\n\r\n")
    served = x509.load_der_x509_certificate(peer).subject.rfc4514_string()
    return json.loads(body)["client"], served


async def test_the_front_proxy_is_seen_by_its_name(server: Server) -> None:
    assert await ask(server, server.front) == ("front-proxy-client", "CN=first")


async def test_a_client_without_a_certificate_connects_as_nobody(server: Server) -> None:
    assert await ask(server) == (None, "CN=first")


async def test_a_certificate_of_another_ca_is_refused_in_the_handshake(server: Server) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await ask(server, aggregation.FrontProxy.make())


async def test_a_renewed_certificate_is_served_at_the_next_connection(server: Server) -> None:
    assert (await ask(server))[1] == "CN=first"
    served_certificate(server.serving, server.directory, "renewed")
    later = os.stat(server.directory / "tls.crt").st_mtime_ns + 1_000_000_000
    for name in ("tls.crt", "tls.key"):
        os.utime(server.directory / name, ns=(later, later))
    assert (await ask(server))[1] == "CN=renewed"


def test_unreadable_files_are_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ConsoleUnavailable, match="cannot load the console's certificate"):
        console_server.Certificates(
            str(tmp_path / "missing.crt"), str(tmp_path / "missing.key"), "x"
        )
