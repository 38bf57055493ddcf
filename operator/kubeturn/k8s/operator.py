"""The operator process: kopf's handlers, the Orchestrator API, one active replica.

kopf peering keeps one replica active at a time; the Orchestrator API runs in the same
process, because the Harnesses' picks must reach the process that holds the Run actors.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from kubeturn.api.agentturn import SWEEP_FINALIZER
from kubeturn.k8s import agentturns, runs, workspaces
from kubeturn.k8s.hub import Hub, OperatorSettings
from kubeturn.k8s.kube import Kube
from kubeturn.orchestrator import api

log = logging.getLogger(__name__)


def kube_client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    """The official client: in-cluster when running in a pod, else from a kubeconfig."""
    if kubeconfig is None:
        try:
            kubernetes.config.load_incluster_config()
            return kubernetes.client.ApiClient()
        except kubernetes.config.ConfigException:
            pass
    configuration = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def connection_info(client: kubernetes.client.ApiClient) -> kopf.ConnectionInfo:
    """How kopf reaches the API: the same server and credentials as the official client.

    Read at each login, so a rotated token (a refresh hook of the client's configuration,
    as in-cluster) is picked up when kopf logs in again after a 401.
    """
    config = client.configuration
    header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _, token = (header or "").rpartition(" ")
    return kopf.ConnectionInfo(
        server=config.host,
        ca_path=config.ssl_ca_cert or None,
        insecure=not config.verify_ssl,
        username=config.username or None,
        password=config.password or None,
        scheme=scheme or ("Bearer" if token else None),
        token=token or None,
        certificate_path=config.cert_file or None,
        private_key_path=config.key_file or None,
    )


def build(hub: Hub, client: kubernetes.client.ApiClient) -> kopf.OperatorRegistry:
    """Every handler, in a registry of this operator's own (no global state).

    kopf logs in with ``client``'s connection: a registry of one's own has none of
    kopf's default login handlers, and those would read the default kubeconfig, not the
    one the operator was given.
    """
    registry = kopf.OperatorRegistry()
    workspaces.register(hub, registry)
    runs.register(hub, registry)
    agentturns.register(hub, registry)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(client)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = SWEEP_FINALIZER
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300

    return registry


def health_app(ready: asyncio.Event) -> web.Application:
    """``/healthz``: the event loop answers; ``/readyz``: kopf's handlers are running."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        if not ready.is_set():
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


def metrics_app() -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def run(
    settings: OperatorSettings,
    *,
    kubeconfig: str | None = None,
    peering: str | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the operator until ``stop`` is set (or the process is signalled)."""
    client = kube_client(kubeconfig)
    hub = Hub(Kube(client), settings)
    registry = build(hub, client)
    ready = asyncio.Event()
    servers = [
        (api.make_app(hub.registry), settings.api_port),
        (health_app(ready), settings.health_port),
        (metrics_app(), settings.metrics_port),
    ]
    runners = []
    for app, port in servers:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.api_host, port).start()
        runners.append(runner)
    log.info("Orchestrator API on %s:%d", settings.api_host, settings.api_port)
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces),
            standalone=peering is None,
            peering_name=peering,
            ready_flag=ready,
            stop_flag=stop,
        )
    finally:
        for runner in runners:
            await runner.cleanup()
        await hub.close()
