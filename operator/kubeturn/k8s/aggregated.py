"""The rules of kubeturn's aggregated API group, ``console.kubeturn.dev`` (ADR 0110): who
a request proxied by kube-apiserver is, what it must be allowed, and the discovery
documents that make the APIService Available.

kube-apiserver authenticates a user and authorizes the request path with RBAC, then
proxies it here with its front-proxy client certificate and the user in request headers
(``X-Remote-User``, ``X-Remote-Group``, ``X-Remote-Extra-<key>``, by default). Those headers
are believed only on a connection whose client certificate verified against the
request-header CA, and only from a client the ConfigMap allows by name
(:func:`user_of`): anyone else reaching the port could write them. The console then asks
the cluster, by a SubjectAccessReview, whether that user may ``get`` the Run (or ``list``
Runs) in ``kubeturn.dev`` (:func:`review_of`): the console's own RBAC on
``console.kubeturn.dev`` opens the door, the Run's RBAC decides what is seen.

Pure: no IO, no aiohttp, no kubernetes client; ``kubeturn.k8s.console_server`` applies it.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubeturn.api.common import GROUP as RUNS_GROUP
from kubeturn.errors import ConsoleUnavailable

GROUP = "console.kubeturn.dev"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
"""Where kube-apiserver sends this group's requests, and where the console is mounted."""

AUTHENTICATION_NAMESPACE = "kube-system"
AUTHENTICATION_CONFIGMAP = "extension-apiserver-authentication"
"""Where kube-apiserver publishes how it proxies to aggregated servers (its
``--requestheader-*`` flags); readable through the ``extension-apiserver-authentication-reader``
Role."""

DEFAULT_USERNAME_HEADERS = ("X-Remote-User",)
DEFAULT_GROUP_HEADERS = ("X-Remote-Group",)
DEFAULT_EXTRA_PREFIXES = ("X-Remote-Extra-",)


@dataclass(frozen=True)
class RequestHeader:
    """kube-apiserver's request-header authentication, as the ConfigMap says it."""

    client_ca: str
    """PEM: the CA of the front-proxy client certificate (``requestheader-client-ca-file``)."""
    allowed_names: tuple[str, ...] = ()
    """Common names a client certificate may have; empty: any the CA signed."""
    username_headers: tuple[str, ...] = DEFAULT_USERNAME_HEADERS
    group_headers: tuple[str, ...] = DEFAULT_GROUP_HEADERS
    extra_prefixes: tuple[str, ...] = DEFAULT_EXTRA_PREFIXES


def request_header(data: Mapping[str, str]) -> RequestHeader:
    """The request-header settings from the ConfigMap's ``data`` (lists are JSON arrays);
    ``ConsoleUnavailable`` when it names no CA (kube-apiserver was started without
    ``--requestheader-client-ca-file``: it proxies to no aggregated server) or a list
    is not JSON."""
    ca = data.get("requestheader-client-ca-file", "").strip()
    if not ca:
        raise ConsoleUnavailable(
            f"{AUTHENTICATION_NAMESPACE}/{AUTHENTICATION_CONFIGMAP} has no "
            "requestheader-client-ca-file: the API server proxies to no aggregated API"
        )

    def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        text = data.get(key)
        if not text:
            return default
        try:
            listed = json.loads(text)
        except ValueError as error:
            raise ConsoleUnavailable(f"{key} is not a JSON list: {text!r}") from error
        return tuple(str(item) for item in listed or ()) or default

    return RequestHeader(
        client_ca=ca,
        allowed_names=names("requestheader-allowed-names", ()),
        username_headers=names("requestheader-username-headers", DEFAULT_USERNAME_HEADERS),
        group_headers=names("requestheader-group-headers", DEFAULT_GROUP_HEADERS),
        extra_prefixes=names("requestheader-extra-headers-prefix", DEFAULT_EXTRA_PREFIXES),
    )


@dataclass(frozen=True)
class User:
    """The user kube-apiserver authenticated, as its headers name them."""

    name: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    """``X-Remote-Extra-<key>`` values by key (lower-cased, unescaped), sorted: hashable."""


Headers = Sequence[tuple[str, str]]
"""A request's headers in order, repeated names repeated (as on the wire)."""


def user_of(
    settings: RequestHeader, client_common_name: str | None, headers: Headers
) -> User | None:
    """The user of a request, or None (401): ``client_common_name`` is the common name of
    a client certificate that verified against ``settings.client_ca`` (None: no such
    certificate); it must be one of the allowed names when the ConfigMap names some. The
    first username header with a value names the user, as kube-apiserver reads them."""
    if client_common_name is None:
        return None
    if settings.allowed_names and client_common_name not in settings.allowed_names:
        return None
    lowered = [(key.lower(), value) for key, value in headers]
    name = next(
        (
            value
            for wanted in settings.username_headers
            for key, value in lowered
            if key == wanted.lower() and value
        ),
        "",
    )
    if not name:
        return None
    groups = tuple(
        value
        for wanted in settings.group_headers
        for key, value in lowered
        if key == wanted.lower() and value
    )
    extra: dict[str, list[str]] = {}
    for prefix in (p.lower() for p in settings.extra_prefixes):
        for key, value in lowered:
            if key.startswith(prefix) and len(key) > len(prefix):
                extra.setdefault(urllib.parse.unquote(key[len(prefix) :]), []).append(value)
    return User(name, groups, tuple(sorted((k, tuple(v)) for k, v in extra.items())))


@dataclass(frozen=True)
class Review:
    """What a console request needs the user to be allowed on ``kubeturn.dev`` runs."""

    verb: str
    namespace: str = ""
    """``""``: every namespace (a list across the cluster)."""
    name: str = ""


def review_of(path: str) -> Review | None:
    """The access a console path (below :data:`PREFIX`, e.g. ``/namespaces/x/runs/y``)
    needs: ``list`` runs for a list (everywhere for ``/runs``) and its live fragment,
    ``get`` the Run for its pages, Turns and transcript. None for a path that shows no
    Run (the console's assets, which kube-apiserver's RBAC on ``assets`` already let
    through)."""
    parts = [urllib.parse.unquote(part) for part in path.strip("/").split("/")]
    match parts:
        case ["runs"] | ["runs", "fragment"]:
            return Review("list")
        case ["namespaces", namespace, "runs"] | ["namespaces", namespace, "runs", "fragment"]:
            return Review("list", namespace)
        case ["namespaces", namespace, "runs", name, *_]:
            return Review("get", namespace, name)
        case ["assets", *_]:
            return None
    return Review("get")  # anything else: only a user who may get every Run


def subject_access_review(user: User, review: Review) -> dict[str, Any]:
    """The ``SubjectAccessReview`` asking whether ``user`` may do ``review`` on Runs."""
    attributes = {"group": RUNS_GROUP, "resource": "runs", "verb": review.verb}
    if review.namespace:
        attributes["namespace"] = review.namespace
    if review.name:
        attributes["name"] = review.name
    spec: dict[str, Any] = {"user": user.name, "resourceAttributes": attributes}
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def described(user: User, review: Review) -> str:
    """A refusal's words, as kube-apiserver words its own."""
    where = f'in the namespace "{review.namespace}"' if review.namespace else "at the cluster scope"
    named = f' "{review.name}"' if review.name else ""
    return (
        f'runs.{RUNS_GROUP}{named} is forbidden: User "{user.name}" cannot {review.verb} '
        f'resource "runs" in API group "{RUNS_GROUP}" {where}'
    )


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A Kubernetes ``Status`` body, as every refusal of an API server is."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


RESOURCES: tuple[dict[str, Any], ...] = (
    {"name": "runs", "singularName": "run", "namespaced": True, "kind": "Run"},
    {"name": "runs/turns", "singularName": "", "namespaced": True, "kind": "Run"},
    {"name": "runs/transcript", "singularName": "", "namespaced": True, "kind": "Run"},
    {"name": "assets", "singularName": "asset", "namespaced": False, "kind": "Asset"},
)
"""What the group serves, as RBAC names it: a Run's pages (``runs``), its Turn pages
(``runs/turns``) and transcript (``runs/transcript``), the pages' assets."""
VERBS = {"runs": ["get", "list"], "assets": ["get"]}


def resource_list() -> dict[str, Any]:
    """``/apis/console.kubeturn.dev/v1alpha1``: the APIResourceList kube-apiserver's
    availability check and discovery read."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {**resource, "verbs": VERBS.get(resource["name"], ["get"])} for resource in RESOURCES
        ],
    }


def api_group() -> dict[str, Any]:
    """``/apis/console.kubeturn.dev``: the APIGroup."""
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def api_group_list() -> dict[str, Any]:
    """``/apis``: the one group served here (kube-apiserver asks it for discovery)."""
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
