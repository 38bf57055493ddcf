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


def build(hub: Hub) -> kopf.OperatorRegistry:
    """Every handler, in a registry of this operator's own (no global state)."""
    registry = kopf.OperatorRegistry()
    workspaces.register(hub, registry)
    runs.register(hub, registry)
    agentturns.register(hub, registry)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.persistence.finalizer = SWEEP_FINALIZER
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300

    return registry


async def run(
    settings: OperatorSettings,
    *,
    kubeconfig: str | None = None,
    peering: str | None = None,
    liveness: str | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the operator until ``stop`` is set (or the process is signalled)."""
    hub = Hub(Kube(kube_client(kubeconfig)), settings)
    registry = build(hub)
    runner = web.AppRunner(api.make_app(hub.registry), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.api_host, settings.api_port).start()
    log.info("Orchestrator API on %s:%d", settings.api_host, settings.api_port)
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces),
            standalone=peering is None,
            peering_name=peering,
            liveness_endpoint=liveness,
            stop_flag=stop,
        )
    finally:
        await runner.cleanup()
        await hub.close()
