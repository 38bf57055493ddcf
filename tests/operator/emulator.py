"""A Kubernetes API for the operator tests: KMock's emulator, made faithful enough for kopf.

:class:`KubernetesApi` subclasses ``kmock.KubernetesEmulator`` (kmock 0.8, pinned: one
method of it is mirrored here) and serves the Kubernetes API over real HTTP on 127.0.0.1
inside pytest's event loop; :func:`serve` starts and stops it. It keeps KMock's server,
request log, reactions (``api["patch", kmock.resource(...)] << 503`` still overrides an
answer, and a write so overridden is not stored), discovery and object store
(``api.objects[resource, namespace, name]``, every version kept), and replaces KMock's
object handling, which kopf, kubectl and the official client cannot use as it is (it
sets no resourceVersion, answers 200 to a create, ignores selectors...). It must be as
strict as kube-apiserver wherever the operator could differ, since it is the only API
server the operator meets before a user's cluster. The rules themselves are pure
functions, one module per concern — :mod:`~tests.operator.apimachinery` (paths,
selectors, patches, metadata, Tables), :mod:`~tests.operator.names` (names, labels,
``ObjectMeta``), :mod:`~tests.operator.limits` (sizes), :mod:`~tests.operator.schemas`
and :mod:`~tests.operator.celrules` (custom resources by their CRDs),
:mod:`~tests.operator.builtin_kinds` (the built-in kinds), with
:mod:`~tests.operator.fielderrors` wording refusals, :mod:`~tests.operator.lifecycle`
(deletion and the garbage collector) and :mod:`~tests.operator.rbac` (authorization);
this module applies them, and :mod:`~tests.operator.kubelet` runs the Pods:

- paths ``/api/v1/namespaces[/NAME[/status]]``; core groupVersion ``v1`` in discovery;
- the custom resources are the repository's ``crds/`` (:data:`CRDS`): their names,
  scope, subresources and printer columns, and every write of one is decoded as the API
  server decodes it (unknown fields pruned silently, non-nullable nulls dropped,
  every ``default`` applied) and validated by its schema, its list types and its
  ``x-kubernetes-validations`` CEL rules (transition rules against the old object):
  create, update, patch and ``/status`` alike; a PUT of one without
  ``metadata.resourceVersion`` is 422;
- built-in kinds decode as their typed servers do (unknown fields dropped, wrong types,
  bad quantities or base64 400, a Secret's ``stringData`` folded into ``data``) and are
  validated where the operator could get them wrong (:mod:`~tests.operator.builtin_kinds`
  lists what, for Pods, Secrets, ConfigMaps, claims, NetworkPolicies, Events, Leases);
- every object's metadata: names by the resource's rule (DNS-1123 subdomains; labels
  for Namespaces, DNS-1035 labels for Services, path segments for RBAC's roles and
  bindings), ``generateName`` (cut to 58 characters),
  the namespace, label keys and values, annotation keys and 256 KiB of annotations,
  owner references, finalizers; refusals are 422 ``Invalid`` with the API server's
  ``details.causes`` and message;
- sizes: a body over 3 MiB is 413; an object over 1.5 MiB is refused as etcd refuses it
  (500 "etcdserver: request is too large");
- metadata: ``uid``, ``creationTimestamp``, a ``resourceVersion`` rising across all
  objects; ``generation`` for custom resources (bumped by changes outside metadata and
  status) and for Pods and NetworkPolicies (by their spec), none for other built-ins, and
  bumped when deletion begins; ``generateName``; a write that changes nothing is not
  stored and makes no event;
- 201 on create, 409 on an existing name or a stale ``resourceVersion`` (PUT, PATCH,
  delete preconditions), 422 on a failed JSON-patch ``test``; merge, JSON and strategic
  merge (as merge) patches; ``dryRun=All`` answered and never stored;
- the ``status`` subresource: ``/status`` changes only ``.status``, and the main
  resource ignores ``.status``, for every resource served with one;
- the lifecycle of objects (:mod:`tests.operator.lifecycle`): a Pod is deleted
  gracefully (``deletionTimestamp``, ``deletionGracePeriodSeconds``) until the kubelet's
  delete with no grace, at once when no node was given it (``pods/binding``) or it ended;
  other kinds at once; an object with finalizers goes (DELETED) when a write removes the
  last one, and none may be added meanwhile; ``DeleteOptions`` in the body or the query;
  a garbage collector (:meth:`KubernetesApi.collect_garbage`, run by :func:`serve`)
  deletes in the background what its owners no longer hold (Background, Foreground and
  Orphan propagation); a Secret's ``stringData`` is folded into ``data``;
- lists and watches with equality label selectors (keys and values checked: 400 as
  the API server's parser answers) and ``metadata.name`` / ``metadata.namespace`` field
  selectors; Table answers for ``kubectl get`` from printer columns given per kind (the
  CRDs' own, :data:`KUBETURN_PRINTER_COLUMNS`, by default);
- watches (:class:`ChangeLog`) subscribe before taking their snapshot, so no write is
  missed; ``?resourceVersion=N`` replays the retained changes after N, or ERROR 410 Gone
  when they are no longer retained; ``sendInitialEvents`` with its closing bookmark;
  ``timeoutSeconds``; newline-delimited JSON as ``application/json``;
- authentication by bearer token: :attr:`KubernetesApi.admin_token` (the tests' own,
  in ``system:masters``), tokens :meth:`KubernetesApi.issue_token` gives ServiceAccounts,
  none (``system:anonymous``); a token never issued is 401;
- RBAC (:mod:`tests.operator.rbac`) over the stored Roles, ClusterRoles and their
  bindings, and kube-apiserver's bootstrap discovery roles, before any reaction sees the
  request: a refusal is kube-apiserver's 403 ``Status``; each decision about a request
  that is not the admin's is kept in ``authorizations``;
- the aggregation layer (:mod:`~tests.operator.aggregation`): APIServices stored; a request
  under an APIService's group and version authenticated and authorized by RBAC as any
  other, then proxied over HTTPS to its Service's server (``api.aggregator.endpoints``
  maps the Service to a port on 127.0.0.1) with the front-proxy client certificate and
  ``X-Remote-User``/``X-Remote-Group``, the caller's credentials and ``X-Remote-*`` removed,
  the answer streamed back; ``kube-system/extension-apiserver-authentication`` with the
  request-header CA; ``/apis/<group>`` of such a group; SubjectAccessReviews (create)
  answered by RBAC, and the two bootstrap roles aggregated servers are bound to;
- the OwnerReferencesPermissionEnforcement admission plugin (off by default in
  kube-apiserver, on in OpenShift; always on here): changing an object's
  ownerReferences needs ``delete`` on it, a ``blockOwnerDeletion`` reference ``update``
  on the owner's ``finalizers``;
- accounting (:mod:`~tests.operator.traffic`, always on, answering nothing differently):
  ``api.traffic[user]`` counts each user's requests by verb and resource, the bytes of
  the answers, and the events and bytes of its watches, for the benchmarks;
- :func:`admin_proxy`, a plain-HTTP front that adds the admin token, for kubectl and helm
  (which send no credentials to a plain-HTTP server);
- what ``helm install`` needs (tests/operator/test_readme_walkthrough.py runs it): the
  CRDs' own resource (a new CRD is ``Established`` at once, as the API server's controllers
  make it within moments), Deployments, a first server-side apply (helm 4 applies every
  object so), protobuf Secrets (its release storage), and ``/openapi/v3``.

Limits, accepted, that tests must not rely on: admission plugins and webhooks (none
but the one above: no quota, no LimitRange, no Pod Security admission), and built-in
defaulting (a Pod's protocol, pull policy... are stored as written); validation of
built-in kinds beyond what :mod:`~tests.operator.builtin_kinds` lists (Services past
their names, security contexts, affinity...); ``fieldValidation=Strict`` of built-in
kinds (their unknown fields are dropped silently; a custom resource's are refused, 400,
as the API server refuses them); validation ratcheting, CRD conversion, CEL cost
budgets and the CEL libraries no CRD here uses (a rule calling one refuses its CRD at
load); immutability of ``uid`` and ``creationTimestamp`` on update (the stored ones are
kept, as for ``generation``); no ``managedFields``; no deletion of a namespace's
objects with it (nor the other limits :mod:`tests.operator.lifecycle` lists); nothing
runs a Pod but the operator tier's kubelet (:mod:`tests.operator.kubelet`), so a Pod
bound to a node and deleted stays ``Terminating`` without it, as on a node that is
gone; no TLS of its own (plain HTTP; TLS only towards an APIService's server), client
certificates, TokenRequest or ServiceAccount token Secrets, no Node authorizer,
impersonation or aggregated ClusterRoles (refused), no APIService ``status`` (nothing
checks availability), no aggregated discovery (``/apis`` lists no APIService's group),
no TokenReviews, no RBAC escalation
checks (only the admin writes RBAC objects); server-side apply only as far as a first
apply goes (no field ownership: no conflicts, no removal of fields a manager stops
applying; ``+cbor`` refused); protobuf bodies only of Secrets and ConfigMaps
(:mod:`~tests.operator.protobuf`: ``kubectl create secret|configmap`` and helm's release
storage send them; others 415); OpenAPI v3 documents (:mod:`~tests.operator.openapi`) that
say every resource takes ``fieldValidation``, so kubectl and helm leave validation to the
server (``Strict`` is enforced for custom resources only); no OpenAPI v2 (a client that
validates itself fails); CustomResourceDefinitions are stored and ``Established`` at once,
but the resources served stay :data:`CRDS`'; Deployments are stored and run by nothing;
strategic merge patches replace lists;
no set-based selectors (400); no pagination; Tables on list, get and watch (only Name and
Age for built-in kinds); no subresource but ``status`` and
``pods/binding``. It must not import kubeturn: it stands for the cluster, not for the
operator.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import copy
import dataclasses
import datetime
import functools
import gzip
import importlib.resources
import json
import pathlib
import secrets
import string
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import aiohttp.web
import attrs
import kmock
import yaml
from kmock._internal import dsl, rendering  # for the mirrored RawHandler methods

from tests.operator import (
    aggregation,
    apimachinery,
    builtin_kinds,
    fielderrors,
    lifecycle,
    limits,
    names,
    openapi,
    protobuf,
    rbac,
    schemas,
    traffic,
)

Body = apimachinery.Body
Column = apimachinery.Column

CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"
"""The repository's CRDs: the custom resources served, and the rules they are held to."""
CUSTOM_RESOURCES = tuple(schemas.load(CRDS))
AGE: Column = ("Age", ".metadata.creationTimestamp")
KUBETURN_PRINTER_COLUMNS: Mapping[str, Sequence[Column]] = {
    resource.kind: resource.printer_columns for resource in CUSTOM_RESOURCES
}
"""Printer columns per kind: the CRDs' own."""
GENERATION_TRACKED = frozenset(
    kmock.resource(key) for key in ("v1/pods", "networking.k8s.io/v1/networkpolicies")
)
"""Built-in resources that keep ``metadata.generation`` (1, then one more per change of
their spec): Pods since Kubernetes 1.33 (KEP-5067), NetworkPolicies. Others have none;
custom resources all do."""

BUILTIN_RESOURCES = (
    "v1/pods",
    "v1/services",
    "v1/secrets",
    "v1/configmaps",
    "v1/persistentvolumeclaims",
    "v1/events",
    "v1/namespaces",
    "events.k8s.io/v1/events",
    "coordination.k8s.io/v1/leases",
    "networking.k8s.io/v1/networkpolicies",
    "discovery.k8s.io/v1/endpointslices",
    "v1/serviceaccounts",
    "apps/v1/deployments",
    "apiextensions.k8s.io/v1/customresourcedefinitions",
    "rbac.authorization.k8s.io/v1/roles",
    "rbac.authorization.k8s.io/v1/rolebindings",
    "rbac.authorization.k8s.io/v1/clusterroles",
    "rbac.authorization.k8s.io/v1/clusterrolebindings",
    "apiregistration.k8s.io/v1/apiservices",
    "authorization.k8s.io/v1/subjectaccessreviews",
)
"""Built-in resources served, described as KMock's bundled discovery data describes them."""

SEEDED_NAMESPACES = ("default", "kube-system")
NAMESPACES = kmock.resource(group="", version="v1", plural="namespaces")
SERVICE_ACCOUNTS = kmock.resource(group="", version="v1", plural="serviceaccounts")
CONFIG_MAPS = kmock.resource(group="", version="v1", plural="configmaps")
API_SERVICES = kmock.resource(group="apiregistration.k8s.io", version="v1", plural="apiservices")
RBAC_RESOURCES = {
    kind: kmock.resource(group=rbac.GROUP, version="v1", plural=f"{kind.lower()}s")
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
}
ADMIN = rbac.User("kubeturn-tests-admin", (rbac.PRIVILEGED_GROUP, rbac.AUTHENTICATED))
"""Whom :attr:`KubernetesApi.admin_token` authenticates: the tests themselves (setting
objects up, kubectl, the kubelet), allowed everything as a cluster's admin is."""
PODS = kmock.resource(group="", version="v1", plural="pods")
SECRETS = kmock.resource(group="", version="v1", plural="secrets")
CRD_RESOURCE = kmock.resource(
    group="apiextensions.k8s.io", version="v1", plural="customresourcedefinitions"
)
CRUD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
HISTORY_LIMIT = 1000
"""Changes retained for ``?resourceVersion=`` watches: more than any one test makes, so
only a test that shrinks it sees 410 Gone (Kubernetes keeps about five minutes' worth)."""

WATCH_POLL_SECONDS = 0.5
"""How often an idle watch checks its deadline and whether its client has gone."""

READ_LIMIT = 16 * limits.MAX_REQUEST_BODY_BYTES
"""The largest body read before answering: well above the API server's 3 MiB, so that a
body over that is refused as the API server refuses it."""

JSON_HEADERS = {"Content-Type": "application/json"}
OPENAPI_V3 = "/openapi/v3"
APPLY_PATCH = "application/apply-patch+"
FIELD_VALIDATION: contextvars.ContextVar[str] = contextvars.ContextVar(
    "FIELD_VALIDATION", default=""
)
"""The request's ``fieldValidation``, for the decoding of the object it writes."""
"""Server-side apply's PATCH types (``+yaml``; ``+cbor`` is refused: not decoded)."""
ACTIONS = {
    "list": kmock.action.LIST,
    "watch": kmock.action.WATCH,
    "get": kmock.action.FETCH,
    "create": kmock.action.CREATE,
    "update": kmock.action.UPDATE,
    "patch": kmock.action.UPDATE,
    "delete": kmock.action.DELETE,
}


MAX_JSON_DEPTH = 10_000
"""The deepest JSON kube-apiserver decodes (Go's ``encoding/json`` and sigs.k8s.io/json
stop at 10,000 levels); a deeper body is refused 400. Where a CRD's schema keeps unknown
fields, an object that deep is stored and served."""
TOO_DEEP: Any = object()
"""A request's data when its body nests deeper than ``MAX_JSON_DEPTH``."""
RECURSION_LIMIT = 30_000
"""Python's recursion limit while the emulator serves: its own recursive code (decoding,
copies, schemas, watch events) reads an object ``MAX_JSON_DEPTH`` deep with room to spare."""


def json_depth(value: Any) -> int:
    """The nesting of ``value``'s arrays and objects (``[]`` is 1), walked without recursion."""
    deepest = 0
    todo = [(value, 1)] if isinstance(value, dict | list) else []
    while todo:
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node
        todo.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


async def parse_request(raw: aiohttp.web.BaseRequest, *, id: int) -> kmock.Request:
    """KMock's request record, with the paths parsed by apimachinery.parse_route."""
    body = await raw.read()
    try:
        if protobuf.CONTENT_TYPE in raw.headers.get("Content-Type", ""):
            data = protobuf.decode(body)
        else:
            data = json.loads(body) if body else None
    except ValueError:  # protobuf of other kinds, YAML: refused later with 415 where it matters
        data = None
    except RecursionError:  # deeper than the limit: refused at once, as below
        data = TOO_DEEP
    if data is not None and data is not TOO_DEEP and json_depth(data) > MAX_JSON_DEPTH:
        data = TOO_DEEP
    route = apimachinery.parse_route(raw.path)
    params = dict(raw.query)
    verb = apimachinery.verb_of(raw.method, route, params) if route and route.plural else None
    return kmock.Request(
        id=id,
        raw_request=raw,
        url=raw.url,
        method=raw.method,
        params=params,
        headers=dict(raw.headers),
        cookies=dict(raw.cookies),
        body=body,
        text=body.decode("utf-8", errors="replace"),
        data=data,
        action=ACTIONS.get(verb or ""),
        resource=None
        if route is None
        else kmock.resource(group=route.group, version=route.version, plural=route.plural),
        namespace=route.namespace if route else None,
        name=route.name if route else None,
        subresource=route.subresource if route else None,
    )


def _selection(route: apimachinery.Route, params: Mapping[str, str]) -> apimachinery.Selection:
    """What a list or watch selects; 400 for a label selector term the API server would
    not parse (a key that is not a qualified name, a value that is not a label value)."""
    selection = apimachinery.Selection.of(route, params)
    for term in selection.labels:
        problems = [
            f"key: Invalid value: {term.key!r}: {m}" for m in names.is_qualified_name(term.key)
        ]
        if term.operator in ("=", "!="):
            problems += [
                f"values[0][{term.key}]: Invalid value: {term.value!r}: {m}"
                for m in names.is_label_value(term.value)
            ]
        if problems:
            raise apimachinery.ApiError(400, f"unable to parse requirement: {'; '.join(problems)}")
    return selection


def header(request: kmock.Request, name: str) -> str:
    """A request header by its case-insensitive name ('' when absent)."""
    return next((v for k, v in request.headers.items() if k.lower() == name.lower()), "")


# --- Changes and watches ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Change:
    """One stored write, as watches see it; ``previous`` is the object before it."""

    revision: int
    resource: kmock.resource
    type: str  # ADDED, MODIFIED, DELETED
    object: Body
    previous: Body | None

    def event_for(self, selection: apimachinery.Selection) -> Body | None:
        """The watch event this change makes for a selection, if any.

        An object that enters a selection is ADDED to it and one that leaves it is DELETED
        from it, as kube-apiserver's watch cache does for selectors.
        """
        now, before = selection.matches(self.object), selection.matches(self.previous)
        if self.type == "DELETED":
            kind = "DELETED" if now else None
        elif now:
            kind = "MODIFIED" if before else "ADDED"
        else:
            kind = "DELETED" if before else None
        return None if kind is None else {"type": kind, "object": copy.deepcopy(self.object)}


class ChangeLog:
    """The rising resourceVersion, the recent changes, and the live watches' queues.

    Everything here is synchronous, so a write and its publication, or a subscription and
    the snapshot after it, happen in one step of the event loop: nothing can fall between.
    """

    def __init__(self, limit: int) -> None:
        self.revision = 0
        self._retained: collections.deque[Change] = collections.deque(maxlen=limit)
        self._forgotten = 0  # the revision of the newest change no longer retained
        self._queues: set[asyncio.Queue[Change | None]] = set()

    def next_revision(self) -> int:
        self.revision += 1
        return self.revision

    def publish(self, change: Change) -> None:
        if len(self._retained) == self._retained.maxlen:
            self._forgotten = self._retained[0].revision
        self._retained.append(change)
        for queue in self._queues:
            queue.put_nowait(change)

    def since(self, revision: int) -> list[Change] | None:
        """The retained changes after ``revision``; None if some were forgotten (410 Gone)."""
        if revision < self._forgotten:
            return None
        return [change for change in self._retained if change.revision > revision]

    @contextlib.contextmanager
    def subscription(self) -> Iterator[asyncio.Queue[Change | None]]:
        queue: asyncio.Queue[Change | None] = asyncio.Queue()
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    def close(self) -> None:
        """End every live watch (before the server stops, so that it need not wait)."""
        for queue in self._queues:
            queue.put_nowait(None)


def gone(revision: int, current: int) -> Body:
    status = apimachinery.ApiError(410, f"too old resource version: {revision} ({current})")
    return {"type": "ERROR", "object": status.status()}


# --- The API ---------------------------------------------------------------------------


def custom_resource(
    kind: str,
    shortnames: Iterable[str] = (),
    *,
    namespaced: bool = True,
    categories: Iterable[str] = (),
    subresources: Iterable[str] = (),
) -> kmock.ResourceInfo:
    """Discovery information of a custom resource, as kube-apiserver derives it from a CRD."""
    return kmock.ResourceInfo(
        kind=kind,
        singular=kind.lower(),
        namespaced=namespaced,
        verbs=CRUD_VERBS,
        shortnames=shortnames,
        categories=categories,
        subresources=subresources,
    )


def kubeturn_resources() -> dict[str, kmock.ResourceInfo]:
    """The custom resources of :data:`CRDS`, as discovery describes them."""
    return {
        resource.key: custom_resource(
            resource.kind,
            resource.short_names,
            namespaced=resource.namespaced,
            categories=resource.categories,
            subresources=resource.subresources,
        )
        for resource in CUSTOM_RESOURCES
    }


def builtin_resources() -> dict[str, kmock.ResourceInfo]:
    """:data:`BUILTIN_RESOURCES` as KMock's bundled discovery data of a real cluster has them."""
    bundled = kmock.ResourcesArray()
    bundled.load_data(_bundled_discovery())
    return {key: bundled[key] for key in BUILTIN_RESOURCES}


@functools.cache
def _bundled_discovery() -> bytes:
    # ResourcesArray.load_bundled() reads this file with importlib.resources.read_binary,
    # deprecated since Python 3.11: a DeprecationWarning, an error under this suite.
    packed = importlib.resources.files("kmock._internal").joinpath("resources.json.gz")
    return gzip.decompress(packed.read_bytes())


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _is_resource_request(request: kmock.Request) -> bool:
    return request.resource is not None and request.resource.plural is not None


def _is_openapi_request(request: kmock.Request) -> bool:
    return request.url.path.startswith(OPENAPI_V3)


def _respond(status: int, payload: Any) -> kmock.Response:
    # Every answer sets the same header, because KMock 0.8 merges a fallback's headers
    # into the reaction it shares across requests.
    return kmock.Response(status=status, headers=JSON_HEADERS, payload=payload)


Key = tuple[kmock.resource, str | None, str]


@attrs.define(kw_only=True)
class KubernetesApi(kmock.KubernetesEmulator):
    """KMock's Kubernetes emulator with the semantics kopf, kubectl and clients rely on.

    ``printer_columns`` maps a kind to its printer columns for Table responses (kinds
    not in it get an Age column, as a CRD without columns does); ``history_limit`` is how
    many changes ``?resourceVersion=`` watches can replay; ``clock`` gives timestamps.
    Every request presents :attr:`admin_token` (allowed everything), a token of
    :meth:`issue_token` (a ServiceAccount, allowed what the stored RBAC objects grant it)
    or none (anonymous: discovery is refused too); ``authorizations`` records each
    decision about a request that is not the admin's.
    """

    printer_columns: Mapping[str, Sequence[Column]] = KUBETURN_PRINTER_COLUMNS
    history_limit: int = HISTORY_LIMIT
    clock: Callable[[], datetime.datetime] = utc_now
    admin_token: str = attrs.field(factory=lambda: secrets.token_urlsafe(32))
    authorizations: list[tuple[rbac.Attributes, rbac.Decision]] = attrs.field(
        init=False, factory=list
    )
    _changes: ChangeLog = attrs.field(init=False)
    _tokens: dict[str, rbac.User] = attrs.field(init=False, factory=dict)
    _policy: rbac.Policy | None = attrs.field(init=False, default=None)
    _custom: dict[kmock.resource, schemas.CustomResource] = attrs.field(init=False)
    _builtin: dict[kmock.resource, builtin_kinds.BuiltinKind] = attrs.field(init=False)
    _own_groups: frozenset[str] = attrs.field(init=False)
    traffic: traffic.Ledger = attrs.field(init=False, factory=traffic.Ledger)
    """Each user's requests and the bytes answered and streamed to it (always counted)."""
    aggregator: aggregation.Aggregation = attrs.field(init=False, factory=aggregation.Aggregation)
    """The aggregation layer: the front proxy, and the port of each APIService's Service
    (``api.aggregator.endpoints[namespace, name] = port``)."""

    def __attrs_post_init__(self) -> None:
        # KMock's discovery, but not KMock's own object handlers: this class's replace them.
        super(kmock.KubernetesEmulator, self).__attrs_post_init__()
        self.fallback[_is_resource_request] << self._serve_resource
        self.fallback[_is_openapi_request] << self._serve_openapi
        self._changes = ChangeLog(self.history_limit)
        self._custom = {kmock.resource(r.key): r for r in CUSTOM_RESOURCES}
        self._builtin = {kmock.resource(k): kind for k, kind in builtin_kinds.KINDS.items()}
        for key, info in (builtin_resources() | kubeturn_resources()).items():
            self.resources[key] = info
        self._own_groups = frozenset(resource.group or "" for resource in self.resources)
        for name in SEEDED_NAMESPACES:
            self.create_object(NAMESPACES, {"metadata": {"name": name}})
        for body in rbac.BOOTSTRAP:
            self.create_object(RBAC_RESOURCES[body["kind"]], body)
        front_proxy = self.aggregator.front_proxy
        self.create_object(CONFIG_MAPS, aggregation.authentication_config_map(front_proxy))
        self._tokens[self.admin_token] = ADMIN

    # --- Public helpers for tests (no HTTP) ---

    def read_object(self, resource: Any, namespace: str | None, name: str) -> Body | None:
        """A copy of a stored object, or None if there is none."""
        return self._current((kmock.resource(resource), namespace, name))

    def create_object(self, resource: Any, body: Body) -> Body:
        """Create an object as a POST would (stamped, with an ADDED event)."""
        resource = kmock.resource(resource)
        namespace = body.get("metadata", {}).get("namespace")
        route = apimachinery.Route(
            resource.group or "", resource.version, resource.plural, namespace
        )
        return self._create(resource, route, copy.deepcopy(body), dry_run=False)

    def delete_object(
        self, resource: Any, namespace: str | None, name: str, options: Body | None = None
    ) -> Body:
        """Delete an object as a DELETE with ``options`` (``DeleteOptions``) would."""
        resource = kmock.resource(resource)
        deleting = lifecycle.DeleteOptions.of({}, options or {})
        key = (resource, namespace, name)
        return self._delete(resource, key, deleting, dry_run=False).body

    def store_undecoded(self, resource: Any, body: Body) -> Body:
        """Store ``body`` over the live object as it is, not decoded by the CRD's schema: an
        object written under an older CRD, as an API server whose stored CRD still has the
        older fields serves it (``helm upgrade`` leaves a chart's CRDs as they were). Stamped
        and told to the watches as any write is."""
        resource = kmock.resource(resource)
        meta = body["metadata"]
        key = (resource, meta.get("namespace"), meta["name"])
        old = self._existing(resource, key)
        return self._commit(resource, key, old, copy.deepcopy(body), dry_run=False)

    async def collect_garbage(self) -> None:
        """Run the garbage collector (:class:`lifecycle.GarbageCollector`) on every change
        until the watches are closed: :func:`serve` runs it for as long as it serves."""
        collector = lifecycle.GarbageCollector(_Cluster(self))
        with self._changes.subscription() as queue:  # before the snapshot: nothing is missed
            for key, body in self._stored():
                collector.observe(key, "ADDED", body)
            while True:
                collector.collect()
                change = await queue.get()
                if change is None:
                    return
                meta = change.object["metadata"]
                key = (change.resource, meta.get("namespace"), meta["name"])
                collector.observe(key, change.type, change.object)

    def close_watches(self) -> None:
        """End all live watch streams, as a server going away does."""
        self._changes.close()

    def issue_token(self, namespace: str, name: str) -> str:
        """A new bearer token of the ServiceAccount ``namespace/name``, which must exist
        (as a TokenRequest gives one): its requests are allowed what RBAC grants it."""
        if self._current((SERVICE_ACCOUNTS, namespace, name)) is None:
            raise LookupError(f"no ServiceAccount {namespace}/{name}")
        token = secrets.token_urlsafe(32)
        self._tokens[token] = rbac.service_account(namespace, name)
        return token

    @property
    def admin_headers(self) -> dict[str, str]:
        """The ``Authorization`` header of the tests' own requests."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    # --- Authentication, authorization and the admission that asks it ---

    def _user_of(self, request: kmock.Request) -> rbac.User | None:
        """Who sent the request: its bearer token's user, anonymous without credentials,
        None for credentials no one issued (401)."""
        given = header(request, "Authorization")
        if not given:
            return rbac.ANONYMOUS
        scheme, _, token = given.partition(" ")
        return self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None

    def _policy_now(self) -> rbac.Policy:
        """The stored RBAC objects' policy (made again after each write of one of them)."""
        if self._policy is None:
            stored = (body for key, body in self._stored() if key[0].group == rbac.GROUP)
            self._policy = rbac.policy_of(stored)
        return self._policy

    def _authorize(self, attributes: rbac.Attributes) -> rbac.Decision:
        decision = rbac.authorize(self._policy_now(), attributes)
        if rbac.PRIVILEGED_GROUP not in attributes.user.groups:
            self.authorizations.append((attributes, decision))
        return decision

    def _refusal(self, request: kmock.Request) -> apimachinery.ApiError | None:
        """401 or 403 for a request that may not go on (before any reaction sees it)."""
        user = self._user_of(request)
        if user is None:
            return rbac.unauthorized()
        method = request.method.value
        attributes = rbac.attributes_of(user, method, request.url.path, request.params)
        decision = self._authorize(attributes)
        return None if decision.allowed else rbac.forbidden(attributes, decision.reason)

    def _admit_owner_references(
        self,
        request: kmock.Request,
        resource: kmock.resource,
        route: apimachinery.Route,
        old: Body | None,
        new: Any,
    ) -> None:
        """The OwnerReferencesPermissionEnforcement admission plugin (on where clusters
        turn it on, e.g. OpenShift; always on here, the stricter): whoever changes an
        object's ownerReferences must be allowed to delete it (a create excepted), and
        whoever makes a reference ``blockOwnerDeletion`` must be allowed to ``update`` the
        owner's ``finalizers`` subresource. Its refusals are 403s of its own words."""
        user = self._user_of(request)
        if user is None or not isinstance(new, dict):
            return
        after = (new.get("metadata") or {}).get("ownerReferences") or []
        before = ((old or {}).get("metadata") or {}).get("ownerReferences") or []
        if (old is None and not after) or after == before:
            return
        meta = new.get("metadata") or {}
        namespace, name = route.namespace or meta.get("namespace"), str(meta.get("name") or "")
        group, version = resource.group or "", str(resource.version)
        asked = functools.partial(
            rbac.Attributes,
            user,
            resource_request=True,
            api_group=group,
            api_version=version,
            resource=str(resource.plural),
            namespace=namespace or "",
            name=name,
        )
        if old is not None:
            decision = self._authorize(asked(verb="delete"))
            if not decision.allowed:
                said = f"cannot set an ownerRef on a resource you can't delete: {decision.reason}"
                raise rbac.refusal(asked(verb="delete"), f"{said}, <nil>")
        earlier = {ref.get("uid"): ref for ref in before}
        blocking = [
            ref
            for ref in after
            if ref.get("blockOwnerDeletion")
            and not (earlier.get(ref.get("uid")) or {}).get("blockOwnerDeletion")
        ]
        anything = rbac.Attributes(
            user, "update", True, api_group="*", resource="*", subresource="finalizers"
        )
        # A probe, not a refusal of the request: asked without being recorded.
        if not blocking or rbac.authorize(self._policy_now(), anything).allowed:
            return
        for ref in blocking:
            owner_group, _, owner_version = str(ref.get("apiVersion", "")).rpartition("/")
            owners = [
                known
                for known, info in self.resources.items()
                if (known.group or "", known.version) == (owner_group, owner_version)
                and info.kind == ref.get("kind")
            ]
            if not owners:
                said = (
                    "cannot set blockOwnerDeletion in this case because cannot find "
                    f"RESTMapping for APIVersion {ref.get('apiVersion')} Kind {ref.get('kind')}"
                )
                raise rbac.refusal(asked(verb="update"), said)
            for owner in owners:
                finalizers = rbac.Attributes(
                    user,
                    "update",
                    True,
                    api_group=owner_group,
                    api_version=owner_version,
                    resource=str(owner.plural),
                    subresource="finalizers",
                    namespace=namespace or "",
                    name=str(ref.get("name", "")),
                )
                decision = self._authorize(finalizers)
                if not decision.allowed:
                    said = (
                        "cannot set blockOwnerDeletion if an ownerReference refers to a "
                        f"resource you can't set finalizers on: {decision.reason}, <nil>"
                    )
                    raise rbac.refusal(asked(verb="update"), said)

    # --- HTTP plumbing ---

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """Serve one request: kmock 0.8's ``RawHandler.__call__`` with :func:`parse_request`,
        reading bodies up to :data:`READ_LIMIT` (aiohttp's own limit is 1 MiB) so that the
        API server's own limit (``limits.check_body``) decides."""
        raw_request = raw_request.clone(client_max_size=READ_LIMIT)
        await raw_request.read()
        raw_response: aiohttp.web.StreamResponse | None = None
        try:
            if self.limit is not None and len(self._requests) >= self.limit:
                raise kmock.KMockError("Too many requests have been served so far.")
            request = await parse_request(raw_request, id=len(self._requests))
            self._requests.append(request)
            try:
                return await self._handle(request)
            except rendering.StreamingError as error:
                raw_response = error.args[0]
                raise error.__cause__ or error from None
        except Exception as error:
            if not self._errors:
                raise
            self._errors[-1].append(error)
            if raw_response is None or not raw_response.prepared:
                return await self._render_error(error)
            await self._stream_error(error, raw_response)
            await raw_response.write_eof()
            return raw_response

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """Answer the request (:meth:`_react`), counting it and its answer in ``traffic``
        (a watch's events are counted as :meth:`_stream` sends them)."""
        user, verb, resource = self._counted_as(request)
        self.traffic.requested(user, verb, resource)
        response = await self._react(request)
        if isinstance(response, aiohttp.web.Response):
            body = response.body
            size = len(body) if isinstance(body, bytes) else response.content_length or 0
            self.traffic.answered(user, verb, resource, size)
        return response

    def _counted_as(self, request: kmock.Request) -> tuple[str, str, str]:
        """The request's user name (``""`` for a token no one issued), verb and resource
        as :mod:`~tests.operator.traffic` counts them."""
        user = self._user_of(request)
        plural = request.resource.plural if request.resource is not None else None
        if plural is None:
            return (user.name if user else "", request.method.value.lower(), "")
        route = apimachinery.Route("", None, plural, None, request.name, request.subresource)
        verb = apimachinery.verb_of(request.method.value, route, request.params)
        resource = f"{plural}/{request.subresource}" if request.subresource else plural
        return (user.name if user else "", verb or request.method.value.lower(), resource)

    async def _react(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """kmock 0.8's ``RawHandler._handle`` (KubernetesEmulator's is skipped: it stores
        writes before any reaction runs), with each reaction's filters applied to this one
        request: kmock decides whether a reaction sees a request by filtering the whole
        request log again, which made every request cost O(requests served) — minutes for
        a benchmark's tens of thousands of calls. Chains other than plain filters (slices,
        exclusions, groups) keep kmock's exact way. Authentication and authorization come
        first, as in kube-apiserver: a refused request reaches no reaction."""
        refused = self._refusal(request)
        if refused is not None:
            return await _respond(refused.code, refused.status())(request)
        aggregated = await self._aggregated(request)
        if aggregated is not None:
            return aggregated
        FIELD_VALIDATION.set(request.params.get("fieldValidation", ""))
        ordered = sorted(self._payloads, key=_precedence)
        for payload in ordered:
            sees = _sees(payload._source, request)
            if sees is None:
                sees = request in payload._source
            if sees and not payload._disabled.is_set():
                try:
                    return await payload(request)
                except rendering.ReactionMismatchError:  # mismatched or depleted
                    payload._disabled.set()
                except NotImplementedError:  # matched, with nothing to answer
                    pass
        raise NotImplementedError("no reaction matches the request")

    async def _aggregated(self, request: kmock.Request) -> aiohttp.web.StreamResponse | None:
        """What the aggregation layer answers (:mod:`~tests.operator.aggregation`): a
        SubjectAccessReview; the APIGroup of a group an APIService hands on; any request
        under such a group and version, proxied. None for every other request."""
        parts = request.url.path.strip("/").split("/")
        if parts[0] != "apis" or len(parts) < 2:
            return None
        group, version = parts[1], parts[2] if len(parts) > 2 else ""
        review_path = [aggregation.REVIEW_GROUP, "v1", "subjectaccessreviews"]
        if parts[1:] == review_path and request.method.value == "POST":
            try:
                answer = aggregation.review(self._policy_now(), request.data)
            except apimachinery.ApiError as error:
                return await _respond(error.code, error.status())(request)
            return await _respond(201, answer)(request)
        if group in self._own_groups:
            return None
        apiservices = [body for _, body in self._stored(API_SERVICES)]
        if len(parts) == 2:
            served = [
                a for a in apiservices if aggregation.served_by([a], group, a["spec"]["version"])
            ]
            if not served:
                return None
            versions = [
                {"groupVersion": f"{group}/{a['spec']['version']}", "version": a["spec"]["version"]}
                for a in served
            ]
            body = {
                "kind": "APIGroup",
                "apiVersion": "v1",
                "name": group,
                "versions": versions,
                "preferredVersion": versions[0],
            }
            return await _respond(200, body)(request)
        apiservice = aggregation.served_by(apiservices, group, version)
        if apiservice is None:
            return None
        user = self._user_of(request)
        assert user is not None  # refused before, with 401
        return await self.aggregator.proxy(request._raw_request, request.body, apiservice, user)

    async def _serve_openapi(self, request: kmock.Request) -> kmock.Response:
        """``/openapi/v3`` and its documents, of the group-versions served (OpenAPI v2 is
        not served: clients fall back to it only when v3 is missing)."""
        served: dict[tuple[str, str], list[tuple[str, str, bool]]] = {}
        for resource, info in self.resources.items():
            kind = (resource.plural or "", info.kind or "", info.namespaced is not False)
            served.setdefault((resource.group or "", resource.version or ""), []).append(kind)
        documents = {gv: tuple(sorted(kinds)) for gv, kinds in served.items()}
        path = request.url.path.removeprefix(OPENAPI_V3).strip("/")
        if not path:
            return _respond(200, openapi.index(documents))
        for (group, version), kinds in documents.items():
            if openapi.path_of(group, version) == path:
                return _respond(200, openapi.document(group, version, kinds))
        missing = apimachinery.ApiError(404, "the server could not find the requested resource")
        return _respond(404, missing.status())

    async def _serve_server_version(self, request: kmock.Request) -> Body:
        return {
            "major": "1",
            "minor": "35",
            "gitVersion": "v1.35.0-kubeturn-emulator",
            "platform": "linux/amd64",
        }

    async def _serve_version(self, request: kmock.Request) -> Body:
        """An APIResourceList, with ``v1`` (not ``/v1``) as the core groupVersion."""
        assert request.resource is not None
        group, version = request.resource.group, request.resource.version
        entries = []
        for resource in sorted(self.resources, key=lambda resource: resource.plural or ""):
            if (resource.group, resource.version) != (group, version):
                continue
            info = self.resources[resource]
            entry = {
                "name": resource.plural,
                "singularName": info.singular or "",
                "namespaced": info.namespaced is not False,
                "kind": info.kind,
                "verbs": sorted(info.verbs),
            }
            entries.append(
                entry
                | {"shortNames": sorted(info.shortnames), "categories": sorted(info.categories)}
            )
            for sub in sorted(info.subresources):
                verbs = ["get", "patch", "update"] if sub == "status" else ["get"]
                entries.append(entry | {"name": f"{resource.plural}/{sub}", "verbs": verbs})
        if not entries and group:
            raise kmock.KubernetesResourceNotFoundError()
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }

    async def _serve_resource(self, request: kmock.Request) -> kmock.Response:
        """Serve any request on a resource path; refusals become ``Status`` answers."""
        assert request.resource is not None
        route = apimachinery.parse_route(request.url.path)
        assert route is not None
        verb = apimachinery.verb_of(request.method.value, route, request.params)
        try:
            if request.resource not in self.resources:
                raise apimachinery.ApiError(404, "the server could not find the requested resource")
            if "protobuf" in header(request, "Content-Type") and request.data is None:
                raise apimachinery.ApiError(415, "protobuf bodies of this kind are not emulated")
            if (request.resource, route.subresource, verb) == (PODS, "binding", "create"):
                key: Key = (PODS, route.namespace, route.name or "")
                return _respond(201, self._bind(key, self._body(request)))
            if route.subresource not in (None, "status") or (
                route.subresource and verb not in ("get", "update", "patch")
            ):
                raise apimachinery.ApiError(405, f"{verb} on {route.subresource} is not emulated")
            limits.check_body(request.body)
            return await self._serve_verb(verb, request, request.resource, route)
        except apimachinery.ApiError as error:
            return _respond(error.code, error.status())

    async def _serve_verb(
        self,
        verb: str | None,
        request: kmock.Request,
        resource: kmock.resource,
        route: apimachinery.Route,
    ) -> kmock.Response:
        params = request.params
        dry_run = params.get("dryRun") == "All"
        key: Key = (resource, route.namespace, route.name or "")
        match verb:
            case "list":
                return _respond(200, self._list(request, resource, route))
            case "watch":
                return self._watch(request, resource, route)
            case "get":
                return _respond(200, self._get(request, resource, key))
            case "create":
                body = self._body(request)
                self._admit_owner_references(request, resource, route, None, body)
                return _respond(201, self._create(resource, route, body, dry_run))
            case "update":
                body = self._body(request)
                self._check_conditional(resource, route, body)
                if route.subresource is None:
                    old = self._existing(resource, key)
                    self._admit_owner_references(request, resource, route, old, body)
                return _respond(200, self._update(resource, key, route, body, dry_run))
            case "patch" if header(request, "Content-Type").startswith(APPLY_PATCH):
                return self._apply(request, resource, route, key, dry_run)
            case "patch":
                patch = apimachinery.patcher(header(request, "Content-Type").split(";")[0].strip())
                old = self._existing(resource, key)
                patched = patch(old, request.data)
                if route.subresource is None:
                    self._admit_owner_references(request, resource, route, old, patched)
                return _respond(200, self._update(resource, key, route, patched, dry_run))
            case "delete":
                options = lifecycle.DeleteOptions.of(params, request.data)
                deletion = self._delete(resource, key, options, dry_run or options.dry_run)
                return _respond(lifecycle.answer_code(options, deletion), deletion.body)
            case "deletecollection":
                options = lifecycle.DeleteOptions.of(params, request.data)
                selection = _selection(route, params)
                keys = [k for k, _ in self._stored(resource, selection)]
                deleted = [
                    self._delete(resource, k, options, dry_run or options.dry_run).body
                    for k in keys
                ]
                return _respond(200, self._as_list(resource, deleted))
            case _:
                raise apimachinery.ApiError(405, f"{request.method.value} is not allowed here")

    def _apply(
        self,
        request: kmock.Request,
        resource: kmock.resource,
        route: apimachinery.Route,
        key: Key,
        dry_run: bool,
    ) -> kmock.Response:
        """Server-side apply (``application/apply-patch+yaml``), as far as a first apply
        goes: the object is created from the applied configuration when there is none
        (201), and otherwise takes every field the configuration sets (200). Field
        ownership is not kept (no ``managedFields``): an apply never conflicts, and a field
        a manager stops applying is not removed. The ``fieldManager`` is required, as the
        API server requires it."""
        if not request.params.get("fieldManager"):
            raise apimachinery.ApiError(
                400, "PATCH of type application/apply-patch+yaml requires a fieldManager"
            )
        try:
            applied = yaml.safe_load(request.body)
        except yaml.YAMLError as error:
            raise apimachinery.ApiError(
                400, f"the applied configuration is no YAML: {error}"
            ) from error
        if not isinstance(applied, dict):
            raise apimachinery.ApiError(400, "the applied configuration must be an object")
        name = (applied.get("metadata") or {}).get("name")
        if name != route.name:
            raise apimachinery.ApiError(
                400, f"the name of the object ({name}) does not match the name on the URL"
            )
        old = self._current(key)
        if old is None:
            if route.subresource is not None:
                raise apimachinery.ApiError(404, f'{resource.plural} "{route.name}" not found')
            collection = dataclasses.replace(route, name=None)
            self._admit_owner_references(request, resource, collection, None, applied)
            return _respond(201, self._create(resource, collection, applied, dry_run))
        patched = apimachinery.merge_patch(old, applied)
        if route.subresource is None:
            self._admit_owner_references(request, resource, route, old, patched)
        return _respond(200, self._update(resource, key, route, patched, dry_run))

    # --- Reads ---

    def _list(
        self, request: kmock.Request, resource: kmock.resource, route: apimachinery.Route
    ) -> Body:
        selection = _selection(route, request.params)
        bodies = [body for _, body in self._stored(resource, selection)]
        if "as=Table" in header(request, "Accept"):
            return self._table(request, resource, bodies)
        return self._as_list(resource, bodies)

    def _get(self, request: kmock.Request, resource: kmock.resource, key: Key) -> Body:
        body = self._existing(resource, key)
        if "as=Table" in header(request, "Accept"):
            return self._table(request, resource, [body])
        return body

    def _table(self, request: kmock.Request, resource: kmock.resource, bodies: list[Body]) -> Body:
        kind = self.resources[resource].kind or ""
        columns = self.printer_columns.get(kind, (AGE,))
        include = request.params.get("includeObject", "Metadata")
        revision = self._changes.revision
        return apimachinery.table(
            bodies, columns, revision=revision, include=include, now=self.clock()
        )

    def _as_list(self, resource: kmock.resource, bodies: list[Body]) -> Body:
        return {
            "apiVersion": self._api_version(resource),
            "kind": f"{self.resources[resource].kind}List",
            "metadata": {"resourceVersion": str(self._changes.revision)},
            "items": bodies,
        }

    def _watch(
        self, request: kmock.Request, resource: kmock.resource, route: apimachinery.Route
    ) -> kmock.Response:
        """Validate a watch request, then answer with its stream."""
        params = request.params
        selection = _selection(route, params)
        since = params.get("resourceVersion") or "0"
        initial = params.get("sendInitialEvents") == "true"
        timeout = params.get("timeoutSeconds") or "0"
        if not (since.isdigit() and timeout.isdigit()):
            raise apimachinery.ApiError(400, f"invalid resourceVersion or timeoutSeconds: {params}")
        seconds = int(timeout) or float("inf")  # 0: no timeout
        stream = self._stream(request, resource, selection, int(since), initial, seconds)
        return _respond(200, stream)

    async def _stream(
        self,
        request: kmock.Request,
        resource: kmock.resource,
        selection: apimachinery.Selection,
        since: int,
        initial: bool,
        timeout: float,
    ) -> AsyncIterator[bytes]:
        """A watch's events: the snapshot or backlog first, then live changes until ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        user, _, counted = self._counted_as(request)

        def sent(event: Body) -> bytes:
            # Serialized here as KMock would (json.dumps, a newline), to count the bytes.
            line = json.dumps(self._shown(request, resource, event)).encode() + b"\n"
            self.traffic.streamed(user, counted, len(line))
            return line

        with self._changes.subscription() as queue:  # before the snapshot: no write is missed
            if initial or since == 0:
                bodies = [body for _, body in self._stored(resource, selection)]
                events = [{"type": "ADDED", "object": body} for body in bodies]
                if initial:
                    events.append(self._initial_events_end(resource))
            elif (backlog := self._changes.since(since)) is not None:
                events = [
                    e for c in backlog if c.resource == resource and (e := c.event_for(selection))
                ]
            else:
                events = [gone(since, self._changes.revision)]
            yield b""  # send the headers now: clients wait for them before reading events
            for event in events:
                yield sent(event)
            if events and events[-1]["type"] == "ERROR":
                return
            while True:
                try:
                    async with asyncio.timeout(min(WATCH_POLL_SECONDS, deadline - loop.time())):
                        change = await queue.get()
                except TimeoutError:
                    transport = request._raw_request.transport if request._raw_request else None
                    if loop.time() >= deadline or transport is None or transport.is_closing():
                        return
                    continue
                if change is None:
                    return
                if change.resource == resource and (event := change.event_for(selection)):
                    yield sent(event)

    def _shown(self, request: kmock.Request, resource: kmock.resource, event: Body) -> Body:
        """The event as the watch asked for it: its object a one-row Table when the watch
        accepts ``as=Table`` (``kubectl get -w``), as kube-apiserver converts each."""
        if "as=Table" not in header(request, "Accept") or event["type"] in ("BOOKMARK", "ERROR"):
            return event
        return {**event, "object": self._table(request, resource, [event["object"]])}

    def _initial_events_end(self, resource: kmock.resource) -> Body:
        meta = {
            "resourceVersion": str(self._changes.revision),
            "annotations": {"k8s.io/initial-events-end": "true"},
        }
        kind = self.resources[resource].kind
        body = {"apiVersion": self._api_version(resource), "kind": kind, "metadata": meta}
        return {"type": "BOOKMARK", "object": body}

    # --- Writes ---

    def _create(
        self, resource: kmock.resource, route: apimachinery.Route, body: Any, dry_run: bool
    ) -> Body:
        """A create, in the API server's order: decode, stamp, validate, then store."""
        if route.name is not None or not isinstance(body, dict):
            raise apimachinery.ApiError(400, "POST a JSON object to the collection")
        info = self.resources[resource]
        body = self._decoded(resource, body)
        meta = body["metadata"]
        namespace = self._namespace_for(resource, route, meta)
        if not meta.get("name") and meta.get("generateName"):
            alphabet = string.ascii_lowercase + string.digits
            # As the API server's SimpleNameGenerator: the prefix cut to leave 5 characters.
            meta["name"] = meta["generateName"][: names.DNS1123_LABEL_MAX - 5] + "".join(
                secrets.choice(alphabet) for _ in range(5)
            )
        for field in apimachinery.SERVER_MANAGED:
            meta.pop(field, None)
        if "status" in info.subresources:
            body.pop("status", None)
        meta |= {
            "uid": str(uuid.uuid4()),
            "creationTimestamp": apimachinery.timestamp(self.clock()),
        }
        if self._tracks_generation(resource):
            meta["generation"] = 1
        body |= {"apiVersion": self._api_version(resource), "kind": info.kind}
        if namespace is not None:
            meta["namespace"] = namespace
        self._validate(resource, body, None)
        key: Key = (resource, namespace, meta["name"])
        if self._current(key) is not None:
            raise apimachinery.ApiError(
                409,
                reason="AlreadyExists",
                message=f'{resource.plural} "{meta["name"]}" already exists',
                name=meta["name"],
                kind=resource.plural,
            )
        made = self._commit(resource, key, None, apimachinery.tidy(body), dry_run)
        if resource == CRD_RESOURCE and not dry_run:
            self._establish(key, made)
        return made

    def _establish(self, key: Key, crd: Body) -> None:
        """What kube-apiserver's naming and establishing controllers write of a new CRD, at
        once: its names accepted, ``Established``, its storage version stored. The
        resources served are :data:`CRDS`' whatever the CRD says (no conversion, no new
        kinds served)."""
        now = apimachinery.timestamp(self.clock())
        status = {
            "acceptedNames": crd["spec"]["names"],
            "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")],
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": now,
                }
                for kind, reason, message in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
        }
        self._commit(
            CRD_RESOURCE, key, crd, {**copy.deepcopy(crd), "status": status}, dry_run=False
        )

    def _update(
        self, resource: kmock.resource, key: Key, route: apimachinery.Route, new: Any, dry_run: bool
    ) -> Body:
        """PUT or PATCH: ``new`` is the whole intended object (a PATCH's already applied)."""
        old = self._existing(resource, key)
        if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
            raise apimachinery.ApiError(400, "the object must be a JSON object")
        apimachinery.check_update(old, new)
        new = self._decoded(resource, new)
        has_status = "status" in self.resources[resource].subresources
        if route.subresource == "status":
            result = apimachinery.with_status_of(old, new)
        else:
            result = apimachinery.with_status_of(new, old) if has_status else new
        result = apimachinery.keep_server_fields(result, old)
        apimachinery.check_finalizers(old, result)
        if self._tracks_generation(resource) and self._spec_of(resource, result) != self._spec_of(
            resource, old
        ):
            result["metadata"]["generation"] = old["metadata"].get("generation", 0) + 1
        self._validate(resource, result, old)
        if apimachinery.tidy(result) == old:
            return old  # nothing changed: no new resourceVersion, no event
        return self._commit(resource, key, old, result, dry_run)

    def _delete(
        self,
        resource: kmock.resource,
        key: Key,
        options: lifecycle.DeleteOptions,
        dry_run: bool,
    ) -> lifecycle.Deletion:
        """A delete request, as :mod:`lifecycle` rules (a Pod gracefully)."""
        old = self._existing(resource, key)
        lifecycle.check_preconditions(old, options)
        grace = lifecycle.pod_grace_period(old, options) if resource == PODS else None
        deletion = lifecycle.delete(old, options, grace=grace, now=self.clock())
        if deletion.removed:
            body = self._commit(resource, key, old, copy.deepcopy(deletion.body), dry_run, True)
            return dataclasses.replace(deletion, body=body)
        if deletion.changed:
            body = self._commit(resource, key, old, deletion.body, dry_run)
            return dataclasses.replace(deletion, body=body)
        return deletion

    def _bind(self, key: Key, binding: Any) -> Body:
        """``pods/binding``: the scheduler's assignment of a Pod to a node (``spec.nodeName``,
        ``PodScheduled``); a Pod already assigned or being deleted is a conflict."""
        pod = self._existing(PODS, key)
        target = (binding.get("target") or {}) if isinstance(binding, dict) else {}
        if target.get("kind", "Node") != "Node" or not target.get("name"):
            raise apimachinery.ApiError(400, "a Binding's target must name a Node")
        name, node = key[2], pod["spec"].get("nodeName")
        if node:
            raise apimachinery.ApiError(409, f'pod {name} is already assigned to node "{node}"')
        if "deletionTimestamp" in pod["metadata"]:
            raise apimachinery.ApiError(
                409, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = target["name"]
        scheduled = {
            "type": "PodScheduled",
            "status": "True",
            "lastTransitionTime": apimachinery.timestamp(self.clock()),
        }
        status = new.setdefault("status", {})
        status["conditions"] = [
            c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"
        ] + [scheduled]
        self._commit(PODS, key, pod, new, dry_run=False)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # --- What the API server checks of a write ---

    def _decoded(self, resource: kmock.resource, body: Body) -> Body:
        """The body as the API server decodes it: pruned, defaulted (custom resources),
        typed (built-ins); a copy."""
        body = copy.deepcopy(body)
        if resource in self._custom:
            unknown = self._custom[resource].unknown(body)
            if unknown and FIELD_VALIDATION.get() == "Strict":
                fields = ", ".join(f'unknown field "{path}"' for path in unknown)
                raise apimachinery.ApiError(400, f"strict decoding error: {fields}")
            body = self._custom[resource].prepare(body)
        elif resource in self._builtin:
            body = self._builtin[resource].prepare(body)
        body.setdefault("metadata", {})
        return body

    def _validate(self, resource: kmock.resource, body: Body, old: Body | None) -> None:
        """422 with every problem of an object about to be stored: its metadata (names by
        the resource's rule, labels, annotations...), then its kind's own rules."""
        info = self.resources[resource]
        meta = body["metadata"]
        rule = (
            names.is_dns1123_subdomain
            if resource in self._custom
            else builtin_kinds.name_rule(resource.plural or "")
        )
        errors = names.validate_object_meta(
            meta, namespaced=info.namespaced is not False, rule=rule
        )
        if resource in self._custom:
            errors += self._custom[resource].validate(body, old)
        elif resource in self._builtin:
            errors += self._builtin[resource].validate(body, old)
        if errors:
            name = str(meta.get("name") or meta.get("generateName") or "")
            raise fielderrors.invalid_status(resource.group or "", info.kind or "", name, errors)

    def _check_conditional(
        self, resource: kmock.resource, route: apimachinery.Route, body: Any
    ) -> None:
        """A custom resource is replaced (PUT) only at a named resourceVersion: its store
        does not allow unconditional updates (422, as the generic registry answers it,
        naming the resource rather than the kind)."""
        meta = body.get("metadata") if isinstance(body, dict) else None
        if resource in self._custom and not (
            isinstance(meta, dict) and meta.get("resourceVersion")
        ):
            error = fielderrors.invalid(
                "metadata.resourceVersion",
                fielderrors.GoSyntax("0x0"),
                "must be specified for an update",
            )
            plural = resource.plural or ""
            raise fielderrors.invalid_status(
                resource.group or "", plural, route.name or "", [error]
            )

    def _tracks_generation(self, resource: kmock.resource) -> bool:
        return resource in self._custom or resource in GENERATION_TRACKED

    def _spec_of(self, resource: kmock.resource, body: Body) -> Any:
        """What ``generation`` counts: a custom resource's everything but its metadata (and
        status, with a status subresource); a built-in's spec."""
        if resource in self._custom:
            has_status = "status" in self.resources[resource].subresources
            return apimachinery.content(body, has_status=has_status)
        return body.get("spec")

    def _commit(
        self,
        resource: kmock.resource,
        key: Key,
        old: Body | None,
        new: Body,
        dry_run: bool,
        remove: bool = False,
    ) -> Body:
        """Store a write, give it the next resourceVersion, and tell the watches.

        An object marked for deletion that nothing holds any more (:func:`lifecycle.finished`:
        no finalizer, no grace period) is removed instead.
        A dry run is answered as the write would be, but neither stored nor counted.
        """
        remove = remove or lifecycle.finished(new["metadata"])
        if dry_run:
            return new
        if not remove:
            limits.check_stored(new)
        new["metadata"]["resourceVersion"] = str(self._changes.next_revision())
        if resource.group == rbac.GROUP:
            self._policy = None
        if old is None and key not in self.objects:
            self.objects[key] = copy.deepcopy(new)
        elif remove:
            self.objects[key].history.append(copy.deepcopy(new))
            self.objects[key].delete()
        else:
            self.objects[key].history.append(copy.deepcopy(new))
        kind = "DELETED" if remove else "ADDED" if old is None else "MODIFIED"
        self._changes.publish(
            Change(self._changes.revision, resource, kind, copy.deepcopy(new), old)
        )
        return new

    # --- Store access ---

    def _stored(
        self,
        resource: kmock.resource | None = None,
        selection: apimachinery.Selection | None = None,
    ) -> Iterator[tuple[Key, Body]]:
        """Copies of the live objects (of one resource, those ``selection`` matches), in
        namespace and name order. Only those are copied: a list by label of a few objects
        among thousands, deleted ones included, copies a few."""
        keys = [key for key in self.objects if resource is None or key[0] == resource]
        keys.sort(key=lambda key: (key[1] or "", key[2]))
        for key in keys:
            stored = self.objects[key]
            if stored.deleted or (selection is not None and not selection.matches(stored.raw)):
                continue
            yield key, copy.deepcopy(stored.raw)

    def _current(self, key: Key) -> Body | None:
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _existing(self, resource: kmock.resource, key: Key) -> Body:
        body = self._current(key)
        if body is None:
            raise apimachinery.ApiError(
                404,
                f'{resource.plural} "{key[2]}" not found',
                name=key[2],
                kind=resource.plural,
            )
        return body

    def _body(self, request: kmock.Request) -> Any:
        if request.data is TOO_DEEP:
            raise apimachinery.ApiError(
                400, f"the body nests deeper than {MAX_JSON_DEPTH} levels: exceeded max depth"
            )
        if request.data is None:
            raise apimachinery.ApiError(415, "the body must be JSON")
        return copy.deepcopy(request.data)

    def _namespace_for(
        self, resource: kmock.resource, route: apimachinery.Route, meta: Body
    ) -> str | None:
        """The namespace of a new object: the URL's, which must exist, for a namespaced one."""
        if self.resources[resource].namespaced is False:
            meta.pop("namespace", None)
            return None
        namespace = route.namespace or meta.get("namespace")
        if not namespace:
            raise apimachinery.ApiError(400, "a namespaced object needs a namespace")
        if meta.get("namespace", namespace) != namespace:
            raise apimachinery.ApiError(
                400,
                "the namespace of the provided object does not "
                "match the namespace sent on the request",
            )
        if self._current((NAMESPACES, None, namespace)) is None:
            raise apimachinery.ApiError(
                404,
                f'namespaces "{namespace}" not found',
                name=namespace,
                kind="namespaces",
            )
        return namespace

    def _api_version(self, resource: kmock.resource) -> str:
        return f"{resource.group}/{resource.version}" if resource.group else str(resource.version)


class _Cluster:
    """The emulator as the garbage collector reaches it (:class:`lifecycle.Cluster`): its
    writes go through the API's own rules, as a controller's requests would."""

    def __init__(self, api: KubernetesApi) -> None:
        self._api = api
        self._kinds: dict[tuple[str, str], kmock.resource] = {}
        for key in api.resources:
            resource, info = kmock.resource(key), api.resources[key]
            if resource.plural and "/" not in resource.plural:
                self._kinds[api._api_version(resource), str(info.kind)] = resource

    def current(self, key: lifecycle.Key) -> Body | None:
        return self._api._current(cast(Key, key))

    def owner(
        self, dependent: Body, reference: Mapping[str, Any]
    ) -> Body | lifecycle.Unresolved | None:
        wanted = (str(reference.get("apiVersion")), str(reference.get("kind")))
        resource, name = self._kinds.get(wanted), reference.get("name")
        if resource is None or not name:
            return lifecycle.UNRESOLVED
        if self._api.resources[resource].namespaced is False:
            return self._api._current((resource, None, name))
        namespace = dependent["metadata"].get("namespace")
        if namespace is None:  # a namespaced owner cannot own a cluster-scoped object
            return None
        return self._api._current((resource, namespace, name))

    def delete(self, key: lifecycle.Key, uid: str, policy: str) -> None:
        stored = cast(Key, key)
        options = lifecycle.DeleteOptions(propagation_policy=policy, preconditions={"uid": uid})
        with contextlib.suppress(apimachinery.ApiError):  # gone, or made anew, meanwhile
            self._api._delete(stored[0], stored, options, dry_run=False)

    def update(self, key: lifecycle.Key, body: Body) -> None:
        resource, namespace, name = cast(Key, key)
        route = apimachinery.Route(
            resource.group or "", resource.version, resource.plural, namespace, name
        )
        with contextlib.suppress(apimachinery.ApiError):  # gone meanwhile
            self._api._update(resource, (resource, namespace, name), route, body, dry_run=False)


def _precedence(payload: dsl.Reaction) -> tuple[float, ...]:
    """kmock's order of reactions: higher priorities first, priorities of mixed depth
    padded with zeroes (a longer (100, -1) below (100, 0)); 8 levels is deeper than any
    chain of ``**`` here."""
    return tuple(-p for p in payload.priorities) + (0.0,) * (8 - len(payload.priorities))


def _sees(view: dsl.View, request: kmock.Request) -> bool | None:
    """Whether a chain of plain filters lets ``request`` through, by its criteria alone;
    None for a chain whose answer depends on other requests (kmock then decides)."""
    node = view
    while True:
        if isinstance(node, dsl.Root):  # the handler: it receives every request
            return True
        if type(node) is dsl.Filter:
            if not node.criteria(request):
                return False
        elif type(node) is not dsl.Priority:
            return None
        node = node._source


def write_kubeconfig(
    path: pathlib.Path, server: str, namespace: str = "default", *, token: str | None
) -> pathlib.Path:
    """A kubeconfig file at ``path`` whose current context is ``server`` (plain HTTP),
    ``namespace`` and the user of the bearer ``token`` (None: no credentials, for an
    :func:`admin_proxy`): what kubectl, kopf and the official client read."""
    context = {"cluster": "emulator", "user": "tester", "namespace": namespace}
    user = {"token": token} if token is not None else {}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server.rstrip("/")}}],
        "users": [{"name": "tester", "user": user}],
        "contexts": [{"name": "emulator", "context": context}],
        "current-context": "emulator",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.asynccontextmanager
async def serve(api: KubernetesApi | None = None) -> AsyncIterator[KubernetesApi]:
    """Run ``api`` (a new one by default) over HTTP on 127.0.0.1, on a free port, with
    its garbage collector.

    KMock's own client (``api.get(...)``) presents the admin token. Watches (and the
    collector) are ended before the server stops, so stopping does not wait for them.
    """
    api = api if api is not None else KubernetesApi()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    async with api, kmock.Server(api, host="127.0.0.1") as server:
        server.client.headers.update(api.admin_headers)
        collector = asyncio.create_task(api.collect_garbage(), name="garbage collector")
        try:
            yield api
        finally:
            api.close_watches()
            await collector


PROXIED_HEADERS = ("content-type", "content-encoding")
"""What the admin proxy passes back of an answer's headers (the length it sets itself)."""


@contextlib.asynccontextmanager
async def admin_proxy(api: KubernetesApi) -> AsyncIterator[str]:
    """A plain-HTTP front of ``api`` on 127.0.0.1 that adds the admin token to each request,
    as ``kubectl proxy`` adds its user's credentials; its URL.

    For kubectl: client-go reads a kubeconfig's user only for a TLS server, so kubectl
    sends the emulator (plain HTTP) no token, and an anonymous request is refused. Answers
    are streamed through, watches too.
    """
    target = str(api.url).rstrip("/")
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout()
    async with aiohttp.ClientSession(
        connector=connector, headers=api.admin_headers, auto_decompress=False, timeout=timeout
    ) as session:

        async def forward(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
            headers = {
                key: value
                for key, value in request.headers.items()
                if key.lower() not in ("host", "authorization", "content-length")
            }
            async with session.request(
                request.method, target + request.path_qs, headers=headers, data=await request.read()
            ) as upstream:
                passed = {k: v for k, v in upstream.headers.items() if k.lower() in PROXIED_HEADERS}
                response = aiohttp.web.StreamResponse(status=upstream.status, headers=passed)
                await response.prepare(request)

                async def pump() -> None:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)

                # A watch's client may go while nothing flows: the proxy notices, and ends
                # its own watch, as kube-apiserver ends a watch whose client went.
                copying = asyncio.ensure_future(pump())
                # What it raises once its client went is nobody's: retrieved, not logged.
                copying.add_done_callback(lambda done: done.cancelled() or done.exception())
                try:
                    while not copying.done():
                        await asyncio.wait([copying], timeout=WATCH_POLL_SECONDS)
                        if request.transport is None or request.transport.is_closing():
                            return response
                    await copying
                finally:
                    copying.cancel()
                await response.write_eof()
                return response

        app = aiohttp.web.Application()
        app.router.add_route("*", "/{path:.*}", forward)
        runner = aiohttp.web.AppRunner(app, access_log=None)
        await runner.setup()
        await aiohttp.web.TCPSite(runner, "127.0.0.1", 0).start()
        try:
            yield f"http://127.0.0.1:{runner.addresses[0][1]}"
        finally:
            await runner.cleanup()
