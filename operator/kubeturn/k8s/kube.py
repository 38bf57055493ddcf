"""A small async facade over the official ``kubernetes`` client: get, list, create, patch,
replace, delete any kind by its REST path, with merge patches.

The official client is synchronous; each call runs in a worker thread of the facade's own
pool (``API_THREADS``) so the operator's event loop never blocks. API errors are
translated here, once: 404 → ``None`` or ``NotFound``, 409 on create → the existing object
(creates are idempotent). Patches are merge patches, or JSON patches where a list is
appended to.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kubeturn.api.common import GROUP, GROUP_VERSION, VERSION
from kubeturn.errors import Conflict, NotFound

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
        if sub is not None:
            base += f"/{sub}"
        return base


RUNS = Kind(GROUP, VERSION, "runs")
WORKSPACES = Kind(GROUP, VERSION, "workspaces")
AGENTTURNS = Kind(GROUP, VERSION, "agentturns")
PODS = Kind("", "v1", "pods")
SECRETS = Kind("", "v1", "secrets")
CONFIGMAPS = Kind("", "v1", "configmaps")
CLAIMS = Kind("", "v1", "persistentvolumeclaims")
NETWORK_POLICIES = Kind("networking.k8s.io", "v1", "networkpolicies")
EVENTS = Kind("", "v1", "events")
LEASES = Kind("coordination.k8s.io", "v1", "leases")
ENDPOINT_SLICES = Kind("discovery.k8s.io", "v1", "endpointslices")
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

KINDS = {
    (GROUP_VERSION, "Run"): RUNS,
    (GROUP_VERSION, "Workspace"): WORKSPACES,
    (GROUP_VERSION, "AgentTurn"): AGENTTURNS,
    ("v1", "Pod"): PODS,
    ("v1", "Secret"): SECRETS,
    ("v1", "ConfigMap"): CONFIGMAPS,
    ("v1", "PersistentVolumeClaim"): CLAIMS,
    ("networking.k8s.io/v1", "NetworkPolicy"): NETWORK_POLICIES,
    ("v1", "Event"): EVENTS,
    ("coordination.k8s.io/v1", "Lease"): LEASES,
}


API_THREADS = 16
"""Concurrent API calls: asyncio's default pool has min(32, cores + 4) threads (6 on a
2-core node), which left tens of Runs' status writes and AgentTurn reads queued behind one
another; 16 keeps a burst of Runs moving without hammering the API server (client-go's
default QPS is 5 with a burst of 10; the official client's pool must be as large,
``pool_size``)."""


def pool_size(configuration: kubernetes.client.Configuration) -> None:
    """Let the official client keep as many connections as the facade has threads."""
    configuration.connection_pool_maxsize = API_THREADS


class Kube:
    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self._client = client
        self._pool = concurrent.futures.ThreadPoolExecutor(API_THREADS, "kubeturn-api")

    def close(self) -> None:
        """Let the worker threads go once the calls in flight are done."""
        self._pool.shutdown(wait=False)

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        def call() -> Any:
            method_, url, headers, payload, post = self._client.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(method_, url, headers, payload, post)
            cast(Any, response).read()
            if not 200 <= response.status < 300:
                raise ApiException(http_resp=response)
            return json.loads(response.data) if response.data else {}

        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self._call("GET", kind.path(namespace, name)))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def list(
        self, kind: Kind, namespace: str | None, *, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """The objects in ``namespace`` (every namespace for None) with ``labels``."""
        query = []
        if labels:
            query.append(("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items())))
        answer = await self._call("GET", kind.path(namespace), query=query)
        return list(answer.get("items", []))

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create, or answer the object that already has that name."""
        kind = KINDS[(body["apiVersion"], body["kind"])]
        meta = body["metadata"]
        try:
            return dict(await self._call("POST", kind.path(meta["namespace"]), body))
        except ApiException as error:
            if error.status != 409:
                raise
        existing = await self.get(kind, meta["namespace"], meta["name"])
        if existing is None:
            raise NotFound(f"{body['kind']} {meta['name']} was created and deleted at once")
        return existing

    async def create_once(self, body: dict[str, Any]) -> bool:
        """Create; False when an object of that name exists already (409), which is not
        read (for objects whose name says they were made: Events, which the operator
        may create but not read)."""
        kind = KINDS[(body["apiVersion"], body["kind"])]
        try:
            await self._call("POST", kind.path(body["metadata"]["namespace"]), body)
        except ApiException as error:
            if error.status != 409:
                raise
            return False
        return True

    async def patch(
        self, kind: Kind, namespace: str, name: str, patch: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any]:
        """A merge patch; one that names ``metadata.resourceVersion`` applies only to that
        version (``Conflict`` otherwise)."""
        path = kind.path(namespace, name, "status" if status else None)
        try:
            return dict(await self._call("PATCH", path, patch, content_type=MERGE_PATCH))
        except ApiException as error:
            if error.status == 404:
                raise NotFound(f"{kind.plural}/{name} is gone") from error
            if error.status == 409:
                raise Conflict(f"{kind.plural}/{name} changed meanwhile") from error
            raise

    async def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        """Write the whole object (PUT) over the version its ``metadata.resourceVersion``
        names: ``Conflict`` when it changed since, as optimistic concurrency needs."""
        kind = KINDS[(body["apiVersion"], body["kind"])]
        meta = body["metadata"]
        try:
            return dict(await self._call("PUT", kind.path(meta["namespace"], meta["name"]), body))
        except ApiException as error:
            if error.status == 404:
                raise NotFound(f"{kind.plural}/{meta['name']} is gone") from error
            if error.status == 409:
                raise Conflict(f"{kind.plural}/{meta['name']} changed meanwhile") from error
            raise

    async def json_patch(
        self, kind: Kind, namespace: str, name: str, operations: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Apply a JSON patch (RFC 6902): list appends (``/spec/signals/-``) and ``test``
        preconditions, which a merge patch cannot express."""
        try:
            return dict(
                await self._call(
                    "PATCH",
                    kind.path(namespace, name),
                    [dict(operation) for operation in operations],
                    content_type=JSON_PATCH,
                )
            )
        except ApiException as error:
            if error.status == 404:
                raise NotFound(f"{kind.plural}/{name} is gone") from error
            raise

    async def review(self, body: dict[str, Any]) -> dict[str, Any]:
        """Ask the API server an ``authorization.k8s.io/v1`` SubjectAccessReview (never
        stored): its answer, ``status.allowed`` among it."""
        return dict(await self._call("POST", SUBJECT_ACCESS_REVIEWS, body))

    async def delete(
        self, kind: Kind, namespace: str, name: str, *, uid: str | None = None
    ) -> None:
        """Delete, if there (gone already is done). With ``uid``, only that very object:
        one made anew under its name meanwhile is left (``Conflict``)."""
        options = {"preconditions": {"uid": uid}} if uid is not None else None
        try:
            await self._call("DELETE", kind.path(namespace, name), options)
        except ApiException as error:
            if error.status == 409:
                raise Conflict(f"{kind.plural}/{name} was made anew meanwhile") from error
            if error.status != 404:
                raise
