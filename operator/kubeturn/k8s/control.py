"""``kubeturn send|cancel|turns|status --kube``: the same commands for a Run on a cluster.

A signal is appended to ``spec.signals`` with a JSON patch (an append never rewrites the
signals already there, so two people sending at once both land); a cancel sets
``spec.cancel``; ``turns`` and ``status`` read ``Run.status``. The operator does the rest,
as it does for ``kubectl edit``. Uses the official client through ``kube.Kube`` (never
kopf): the kubeconfig's current context, or the pod's service account in a cluster.
Every API failure becomes one ``CommandError`` line, here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kubeturn.api.status import FINISHED
from kubeturn.errors import CommandError, NotFound
from kubeturn.k8s.kube import RUNS, Kube

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
PATCH_ATTEMPTS = 3
"""Appends raced by another writer that first made ``spec.signals``: retried, re-read."""

T = TypeVar("T")


class Cluster:
    """One Run on a cluster, reached with the caller's credentials."""

    def __init__(self, name: str, namespace: str | None, kubeconfig: str | None) -> None:
        self.name = name
        client, default_namespace = client_for(kubeconfig)
        self.client = client
        self.namespace = namespace or default_namespace
        self.kube = Kube(client)

    def close(self) -> None:
        self.kube.close()
        self.client.close()  # type: ignore[no-untyped-call]

    @property
    def where(self) -> str:
        return f"Run {self.name!r} in namespace {self.namespace!r}"

    async def run(self) -> dict[str, Any]:
        found = await _translated(self, lambda: self.kube.get(RUNS, self.namespace, self.name))
        if found is None:
            raise CommandError(
                f"there is no {self.where} on the cluster ({self.client.configuration.host}); "
                "check the name and --namespace"
            )
        return found

    async def status(self) -> dict[str, Any]:
        return dict((await self.run()).get("status") or {})

    async def send(self, event: str, data: dict[str, Any], signal_id: str) -> None:
        signal = {"id": signal_id, "event": event, "data": data}
        for _ in range(PATCH_ATTEMPTS):
            run = await self.run()
            phase = (run.get("status") or {}).get("phase")
            if phase in FINISHED:
                raise CommandError(f"the {self.where} is {phase}: it takes no more signals")
            signals = (run.get("spec") or {}).get("signals")
            if signals is not None and any(s.get("id") == signal_id for s in signals):
                raise CommandError(
                    f"the {self.where} already has a signal with id {signal_id!r}; ids are "
                    "unique: pass another --id"
                )
            operations: list[dict[str, Any]]
            if signals is not None:
                operations = [{"op": "add", "path": "/spec/signals/-", "value": signal}]
            else:
                version = run["metadata"]["resourceVersion"]
                operations = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                    {"op": "add", "path": "/spec/signals", "value": [signal]},
                ]
            try:
                await self._patch(operations)
            except _Conflict as conflict:
                if signals is not None:
                    raise CommandError(
                        f"the cluster refused the signal for the {self.where}: {conflict}"
                    ) from conflict
                continue  # someone else wrote the Run first: read it again
            return
        raise CommandError(
            f"the {self.where} kept changing while the signal was appended; send it again"
        )

    async def _patch(self, operations: list[dict[str, Any]]) -> None:
        await _translated(
            self,
            lambda: self.kube.json_patch(RUNS, self.namespace, self.name, operations),
            raced=True,
        )

    async def cancel(self) -> None:
        run = await self.run()
        phase = (run.get("status") or {}).get("phase")
        if phase in FINISHED:
            raise CommandError(f"the {self.where} is {phase}: there is nothing to cancel")
        await _translated(
            self,
            lambda: self.kube.patch(RUNS, self.namespace, self.name, {"spec": {"cancel": True}}),
        )


class _Conflict(Exception):
    """409 or 422: a JSON patch's ``test`` failed (a write raced), or the API server's
    validation refused the change; the message is the server's. Raised only for ``send``'s
    patch, which catches it: it never leaves this module (ADR 0099)."""


def _reason(error: ApiException) -> str:
    """The API server's message (its Status body), else the HTTP reason."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason)


def client_for(kubeconfig: str | None) -> tuple[kubernetes.client.ApiClient, str]:
    """The official client and the namespace its context names (``default`` if none)."""
    if kubeconfig is None and SERVICE_ACCOUNT_NAMESPACE.exists():
        try:
            kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
            return kubernetes.client.ApiClient(), namespace
        except kubernetes.config.ConfigException:
            pass
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
        _, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
    except (kubernetes.config.ConfigException, OSError, TypeError, ValueError) as error:
        where = kubeconfig or "the default kubeconfig (KUBECONFIG, or ~/.kube/config)"
        raise CommandError(
            f"cannot load {where}: {error}; point KUBECONFIG or --kubeconfig at a cluster's "
            "kubeconfig, or drop --kube for a local run"
        ) from error
    namespace = ((active or {}).get("context") or {}).get("namespace") or "default"
    configuration.retries = 1
    return kubernetes.client.ApiClient(configuration), str(namespace)


async def _translated(
    cluster: Cluster, call: Callable[[], Awaitable[T]], *, raced: bool = False
) -> T:
    """``call``, with the client's failures as one-line errors naming the Run; with
    ``raced``, a 409 or 422 is ``_Conflict``, for the caller to read the Run again."""
    try:
        return await call()
    except NotFound as error:
        raise CommandError(f"the {cluster.where} is gone") from error
    except ApiException as error:
        if raced and error.status in (409, 422):
            raise _Conflict(_reason(error)) from error
        if error.status in (401, 403):
            raise CommandError(
                f"the cluster refused access to the {cluster.where} (HTTP {error.status}): "
                "check your credentials and RBAC"
            ) from error
        raise CommandError(
            f"the cluster answered HTTP {error.status} for the {cluster.where}: {_reason(error)}"
        ) from error
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise CommandError(
            f"cannot reach the cluster for the {cluster.where}: {error}; is it up, and is "
            "your kubeconfig's server right?"
        ) from error
