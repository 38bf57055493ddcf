"""The operator process: kopf's handlers, the Orchestrator API, one active replica.

One replica leads at a time, by a Lease (``leader``): only the leader runs kopf's handlers
and serves the Orchestrator API, in one process, because the Harnesses' picks must reach
the process that holds the Run actors. ``/readyz`` is ready on the leader alone, so the
Orchestrator Service routes Harness calls to it; standbys answer ``/healthz`` and metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from kubeturn.api.agentturn import SWEEP_FINALIZER
from kubeturn.api.status import FINISHED
from kubeturn.errors import ConsoleUnavailable, LeadershipLost
from kubeturn.k8s import (
    agentturns,
    console_server,
    diffbase,
    leader,
    retention,
    runs,
    workspaces,
)
from kubeturn.k8s.deliveries import KubePusher
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import RUNS, Kube, pool_size
from kubeturn.orchestrator import api, ids
from kubeturn.settings import OperatorSettings
from kubeturn.tracing import Tracing

log = logging.getLogger(__name__)

RECURSION_LIMIT = 30_000
"""Python's recursion limit in the operator process (1,000 by default). kopf decodes each
object it watches with Python's ``json``, which recurses once per level, and copies and
compares it likewise; the API server stores JSON nested up to 10,000 levels wherever a
CRD's schema keeps unknown fields (a Run's input, its states). Under the default one such
Run made kopf's watch raise ``RecursionError``, and the operator exit on every start.
30,000 levels of that recursion take a few MiB of C stack, within a thread's 8 MiB; the
Run loader refuses such a Run far sooner (``kubeturn.api.depth``)."""


def kube_client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    """The official client: in-cluster when running in a pod, else from a kubeconfig."""
    configuration = kubernetes.client.Configuration()
    if kubeconfig is not None or not _in_cluster(configuration):
        kubernetes.config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration
        )
    pool_size(configuration)
    return kubernetes.client.ApiClient(configuration)


def _in_cluster(configuration: kubernetes.client.Configuration) -> bool:
    """Load the pod's service account (token, CA) if this runs in a pod."""
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException:
        return False
    return True


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
    runs.register(hub, registry, also=workspaces.register(hub, registry))
    agentturns.register(hub, registry)
    retention.register(hub, registry)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(client)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        kopf_settings(settings)

    return registry


def kopf_settings(settings: kopf.OperatorSettings) -> None:
    """kubeturn's settings of kopf (also those of the benchmark's floor operator)."""
    settings.persistence.finalizer = SWEEP_FINALIZER
    settings.persistence.diffbase_storage = diffbase.DigestDiffBaseStorage()
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # No scanning of the cluster (ADR 0041): the namespaces served are given (or all of
    # them), and the CRDs are read from discovery at the start, so the operator needs no
    # list or watch of Namespaces or CustomResourceDefinitions, cluster-scoped both.
    settings.scanning.disabled = True


def health_app(ready: asyncio.Event, leading: Callable[[], bool]) -> web.Application:
    """``/healthz``: the event loop answers (on standbys too). ``/readyz``: this replica
    leads and kopf's handlers run; else 503, ``standby`` or ``starting``, so that the
    Orchestrator Service sends Harness calls only to the process holding the Run actors."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        if not leading():
            return web.json_response({"status": "standby"}, status=503)
        if not ready.is_set():
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


RESUME_GRACE_S = 120.0
"""How long after a start the Orchestrator API may hold back what it cannot attribute
while the Runs it found unfinished resume: far above a Workspace's probe (2 s) and a
Run's load, and bounded, so a Run that cannot resume (its Workspace is gone) does not
hold it back for ever."""
RESUME_WAIT_S = 20.0
"""How long one Harness request that names an unknown Turn or token is parked while the
Runs resume, before it is answered 503 (a surface read retries; a pick is lost)."""


async def unfinished_runs(hub: Hub, namespaces: tuple[str, ...]) -> set[str]:
    """The Runs (``namespace/name``) whose Machine may hold live Turns."""
    found = []
    for namespace in namespaces or (None,):
        found += await hub.kube.list(RUNS, namespace)
    return {
        f"{run['metadata']['namespace']}/{run['metadata']['name']}"
        for run in found
        if (run.get("status") or {}).get("phase") not in FINISHED
        and not run["metadata"].get("deletionTimestamp")
    }


def resume_gate(hub: Hub) -> Any:
    """An Orchestrator API middleware for the time after a start: a Harness request whose
    token or Turn is unknown may be for a Run not resumed yet, so it waits for the Runs,
    and is answered 503 (retry) rather than 401 or 404 ("the Turn is over", which would
    end a live Turn) while they still resume."""

    def attributable(request: web.Request) -> bool:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or hub.registry.workspace_of(token) is None:
            return False
        return hub.registry.owner(ids.InstanceId(request.match_info["iid"])) is not None

    @web.middleware
    async def gate(request: web.Request, handler: api.Handler) -> web.StreamResponse:
        if "iid" not in request.match_info or not hub.resuming():
            return await handler(request)
        if not attributable(request):
            await hub.wait_resumed(RESUME_WAIT_S)
        response = await handler(request)
        if response.status in (401, 404) and hub.resuming() and not attributable(request):
            return web.json_response(
                {"error": "unavailable", "message": "the Orchestrator is resuming its Runs"},
                status=503,
                headers={"Retry-After": "1"},
            )
        return response

    return gate


def metrics_app() -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


SHUTDOWN_S = 1.0
"""How long a stopping server lets a request in flight finish: a Harness's delivery poll
parks for up to 25 s and is retried, so it is cut rather than waited for."""


class Servers:
    """The operator's HTTP servers (Orchestrator API, health, metrics, the console)."""

    def __init__(self) -> None:
        self._runners: list[web.AppRunner] = []

    async def start(
        self,
        app: web.Application,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()

    async def close(self) -> None:
        """Stop serving and close every connection; a second call does nothing."""
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()


def stop_on_signals() -> asyncio.Event:
    """A stop event that SIGTERM and SIGINT set (in the main thread), so that a standby
    stops at once and a leader releases its Lease; while kopf runs, its own handlers take
    these signals over and stop it the same way."""
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
    return stop


async def unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Await ``work`` unless ``stop`` is set first (``work`` is then cancelled): whether it
    finished with ``stop`` still clear."""
    task = asyncio.create_task(work)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (task, stopped):
            waiting.cancel()
        await asyncio.gather(task, stopped, return_exceptions=True)
    if stop.is_set() or task.cancelled():
        return False
    task.result()
    return True


async def keep_leading(
    elector: leader.LeaderElector, stop: asyncio.Event, lost: list[LeadershipLost]
) -> None:
    """Renew the Lease while kopf runs; once it is lost, note why and stop kopf."""
    try:
        await elector.keep()
    except LeadershipLost as error:
        log.error("%s: stopping, to restart as a standby", error)
        lost.append(error)
        stop.set()


ConsoleApp = Callable[[Hub], web.Application]
"""Makes the console's app, routes relative to its root, for the Runs of a hub."""


async def serve_console(
    servers: Servers, hub: Hub, settings: OperatorSettings, console: ConsoleApp | None
) -> None:
    """Serve the aggregated console on ``settings.console_port`` (TLS), when the settings
    name its certificate; a console that cannot serve is logged, and the operator runs on
    without it (its APIService then says it is not Available)."""
    if settings.console_certificate is None or settings.console_key is None:
        return
    try:
        app, context = await console_server.prepare(
            hub.kube,
            settings.console_certificate,
            settings.console_key,
            console(hub) if console is not None else web.Application(),
        )
    except ConsoleUnavailable as error:
        log.error("the console is not served: %s", error)
        return
    await servers.start(app, settings.api_host, settings.console_port, context)
    log.info("console (aggregated API) on %s:%d", settings.api_host, settings.console_port)


async def run(
    settings: OperatorSettings,
    *,
    kubeconfig: str | None = None,
    election: leader.Election | None = None,
    stop: asyncio.Event | None = None,
    tracing: Tracing | None = None,
    console: ConsoleApp | None = None,
) -> None:
    """Run the operator until ``stop`` is set (or the process is signalled).

    Health and metrics answer at once. With an ``election`` the replica is a standby
    until it holds the Lease; then it serves the Orchestrator API and the aggregated
    console (``console``'s app under ``console.kubeturn.dev``; none: its discovery only,
    ADR 0110) and runs kopf
    (standalone), renewing the Lease meanwhile. A graceful stop releases the Lease after
    kopf stopped, so a standby takes over at once; a lost Lease stops kopf and raises
    ``LeadershipLost`` (the process exits, and restarts as a standby): never two
    active replicas. Without an ``election`` this replica leads at once: one replica only.

    The servers and the Harness clients close in kopf's cleanup, once every daemon (every
    Run actor) stopped: kopf then waits (5 s) for every task begun after it started, and
    the servers' tasks for the Harnesses' idle connections would be among them. The
    Lease's renewal begins before kopf, so kopf leaves it alone.
    """
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    client = kube_client(kubeconfig)
    kube = Kube(client)
    hub = Hub(
        kube,
        settings,
        pusher=KubePusher(kube, resources=settings.sandbox_resources),
        tracing=tracing,
    )
    registry = build(hub, client)
    servers = Servers()
    stop = stop if stop is not None else stop_on_signals()
    elector = leader.LeaderElector(kube, election) if election is not None else None
    lost: list[LeadershipLost] = []

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        await servers.close()
        await hub.close()

    def leading() -> bool:
        return elector is None or elector.leading

    ready = asyncio.Event()
    keeper: asyncio.Task[None] | None = None
    try:
        await servers.start(health_app(ready, leading), settings.api_host, settings.health_port)
        await servers.start(metrics_app(), settings.api_host, settings.metrics_port)
        if elector is None:
            log.info("no leader election: this replica is active (run only one)")
        else:
            log.info(
                "standby until this replica (%s) holds the Lease %s/%s",
                elector.election.identity,
                elector.election.namespace,
                elector.election.name,
            )
            if not await unless_stopped(elector.acquire(), stop):
                return
            keeper = asyncio.create_task(keep_leading(elector, stop, lost), name="leader lease")
        hub.expect(await unfinished_runs(hub, settings.namespaces), RESUME_GRACE_S)
        orchestrator = api.make_app(hub.registry)
        orchestrator.middlewares.insert(0, resume_gate(hub))
        await servers.start(orchestrator, settings.api_host, settings.api_port)
        log.info("Orchestrator API on %s:%d", settings.api_host, settings.api_port)
        await serve_console(servers, hub, settings, console)
        await kopf.operator(
            registry=registry,
            clusterwide=not settings.namespaces,
            namespaces=list(settings.namespaces),
            standalone=True,
            ready_flag=ready,
            stop_flag=stop,
        )
    finally:
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        if elector is not None:
            await elector.release()
        await servers.close()
        await hub.close()
        kube.close()
        client.close()
        if tracing is not None:
            await asyncio.to_thread(tracing.shutdown)
    if lost:
        raise lost[0]
