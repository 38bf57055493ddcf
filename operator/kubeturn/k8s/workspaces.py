"""The Workspace controller: tokens, providers, volume, sandbox Pod and NetworkPolicy, and
``Ready`` once the Harness answers ``/readyz``.

Each Workspace gets two tokens, kept in its Secret: the one its Harness accepts (the
pod sees only its SHA-256) and the one its Harness presents to the Orchestrator API,
which accepts it only for Turns admitted to this Workspace.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import aiohttp
import kopf

from kubeturn.api.status import WorkspacePhase
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import conditions, metrics, objects
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import PODS, SECRETS, WORKSPACES
from kubeturn.orchestrator.harness_client import HarnessClient

GROUP, VERSION = "kubeturn.dev", "v1alpha1"
READY_PROBE_S = 2.0
"""How often a Workspace that is not Ready yet is checked: pods start in seconds."""

log = logging.getLogger(__name__)


async def ensure_children(hub: Hub, body: dict[str, Any], spec: WorkspaceSpec) -> None:
    """Create what the Workspace needs; creation is idempotent, tokens are made once."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    existing = await hub.kube.get(SECRETS, namespace, f"{name}-kubeturn-tokens")
    if existing is None:
        harness_token, orchestrator_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        await hub.kube.create(objects.token_secret(body, harness_token, orchestrator_token))
    else:
        harness_token, orchestrator_token = _tokens(existing)
    hub.registry.add_token(f"{namespace}/{name}", orchestrator_token)
    for child in (
        objects.providers_config_map(body, hub.settings.providers_yaml),
        objects.volume_claim(body, spec),
        objects.network_policy(
            body, dict(hub.settings.operator_labels), hub.settings.operator_namespace
        ),
        objects.sandbox_pod(
            body,
            spec,
            image=hub.settings.harness_image,
            orchestrator_url=hub.settings.orchestrator_url,
        ),
    ):
        await hub.kube.create(child)


def _tokens(secret: dict[str, Any]) -> tuple[str, str]:
    import base64

    data = secret.get("data") or {}
    plain = secret.get("stringData") or {}

    def read(key: str) -> str:
        if key in plain:
            return str(plain[key])
        return base64.b64decode(data[key]).decode()

    return read("harness-token"), read("orchestrator-token")


async def probe(hub: Hub, body: dict[str, Any]) -> tuple[WorkspacePhase, str | None, str]:
    """The Workspace's phase from its pod and its Harness: (phase, endpoint, why)."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    pod = await hub.kube.get(PODS, namespace, f"{name}-kubeturn-sandbox")
    if pod is None:
        return WorkspacePhase.PENDING, None, "the sandbox pod does not exist yet"
    status = pod.get("status") or {}
    if status.get("phase") == "Failed":
        return WorkspacePhase.FAILED, None, f"the sandbox pod failed: {status.get('message', '')}"
    ip = status.get("podIP")
    if status.get("phase") != "Running" or not ip:
        return WorkspacePhase.PENDING, None, f"the sandbox pod is {status.get('phase', 'Pending')}"
    endpoint = f"http://{ip}:{objects.HARNESS_PORT}"
    secret = await hub.kube.get(SECRETS, namespace, f"{name}-kubeturn-tokens")
    if secret is None:
        return WorkspacePhase.PENDING, None, "the token Secret is missing"
    harness_token, _ = _tokens(secret)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                f"{endpoint}/readyz",
                headers={"Authorization": f"Bearer {harness_token}"},
                timeout=aiohttp.ClientTimeout(total=5),
            ) as response,
        ):
            if response.status != 200:
                return (
                    WorkspacePhase.PENDING,
                    None,
                    f"the Harness is not ready (HTTP {response.status})",
                )
    except (aiohttp.ClientError, TimeoutError) as error:
        return WorkspacePhase.PENDING, None, f"the Harness does not answer yet: {error}"
    key = (namespace, name)
    if key not in hub.harnesses:
        hub.harnesses[key] = HarnessClient(endpoint, harness_token)
    return WorkspacePhase.READY, endpoint, "the Harness answers /readyz"


def register(hub: Hub, registry: kopf.OperatorRegistry) -> None:
    """Register the Workspace handlers with kopf."""

    @kopf.on.resume(GROUP, VERSION, "workspaces", registry=registry)
    @kopf.on.create(GROUP, VERSION, "workspaces", registry=registry)
    @metrics.counting_errors("workspaces")
    async def create(body: kopf.Body, **_: Any) -> None:
        spec = WorkspaceSpec.model_validate(dict(body["spec"]))
        await ensure_children(hub, _plain(body), spec)

    @kopf.daemon(GROUP, VERSION, "workspaces", cancellation_timeout=5, registry=registry)
    @metrics.counting_errors("workspaces")
    async def watch_ready(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
        last: tuple[WorkspacePhase, str | None] | None = None
        while not stopped:
            plain = _plain(body)
            phase, endpoint, why = await probe(hub, plain)
            if (phase, endpoint) != last:
                await _write(hub, plain, phase, endpoint, why)
                last = (phase, endpoint)
            await stopped.wait(
                READY_PROBE_S if phase is not WorkspacePhase.READY else 10 * READY_PROBE_S
            )


async def _write(
    hub: Hub, body: dict[str, Any], phase: WorkspacePhase, endpoint: str | None, why: str
) -> None:
    meta = body["metadata"]
    current = (body.get("status") or {}).get("conditions", [])
    ready = conditions.put(
        current,
        conditions.READY,
        phase is WorkspacePhase.READY,
        conditions.HARNESS_READY
        if phase is WorkspacePhase.READY
        else conditions.STARTING
        if phase is WorkspacePhase.PENDING
        else conditions.FAILED,
        why,
        meta.get("generation"),
    )
    spec = body.get("spec") or {}
    patch = {
        "phase": phase.value,
        "endpoint": endpoint,
        "podName": f"{meta['name']}-kubeturn-sandbox",
        "repoCount": len(spec.get("repos") or {}),
        "conditions": ready,
        "observedGeneration": meta.get("generation"),
    }
    await hub.kube.patch(
        WORKSPACES, meta["namespace"], meta["name"], {"status": patch}, status=True
    )


def _plain(body: kopf.Body) -> dict[str, Any]:
    """kopf's live body as a plain dict (a copy)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
