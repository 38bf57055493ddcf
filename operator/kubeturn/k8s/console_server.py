"""The console on a cluster: an HTTPS server in the operator that kube-apiserver proxies
``console.kubeturn.dev`` to (an aggregated API, ADR 0110), so that a user reaches the
console and transcripts with their own credentials and RBAC, through the API server.

Every request must come over a connection whose client certificate verified against
kube-apiserver's request-header CA (read at the start from
``kube-system/extension-apiserver-authentication``); only then are its ``X-Remote-*``
headers believed (:func:`aggregated.user_of`), else 401. The console's paths are then
authorized by a SubjectAccessReview of that user on ``kubeturn.dev`` Runs
(:class:`Reviews`, answers kept a few seconds), else 403; both as Kubernetes ``Status``
bodies. The discovery documents answer any authenticated request: kube-apiserver reads
them to call the APIService Available.

The serving certificate is read from files (the chart mounts a Secret) and read again
when they change (:class:`Certificates`), so a renewed certificate is served without a
restart. The rules live in :mod:`kubeturn.k8s.aggregated`; this module does the IO.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import urllib3.exceptions
from aiohttp import web
from kubernetes.client.exceptions import ApiException

from kubeturn.errors import ConsoleUnavailable
from kubeturn.k8s import aggregated
from kubeturn.k8s.kube import CONFIGMAPS, Kube

log = logging.getLogger(__name__)

REVIEW_TTL_S = 10.0
"""How long a SubjectAccessReview's answer is kept for the same user and question: a
console page and its live fragments ask the same question many times a minute, and a
revoked grant takes effect within these seconds (kube-apiserver's webhook authorizer
keeps allowed answers 5 minutes; a shorter time suits a read of one's own Runs)."""
REVIEW_CACHE_SIZE = 4096
"""Answers kept at most: far above the users times Runs a console serves at once; the
oldest go first."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Clock = Callable[[], float]


class Reviews:
    """Whether a user may do what a console path needs, by SubjectAccessReview, with
    answers kept :data:`REVIEW_TTL_S` (allowed and refused alike)."""

    def __init__(self, kube: Kube, clock: Clock = time.monotonic) -> None:
        self._kube = kube
        self._clock = clock
        self._answers: dict[tuple[aggregated.User, aggregated.Review], tuple[float, bool]] = {}

    async def allowed(self, user: aggregated.User, review: aggregated.Review) -> bool:
        now = self._clock()
        kept = self._answers.get((user, review))
        if kept is not None and kept[0] > now:
            return kept[1]
        answer = await self._kube.review(aggregated.subject_access_review(user, review))
        allowed = bool((answer.get("status") or {}).get("allowed"))
        if len(self._answers) >= REVIEW_CACHE_SIZE:
            self._answers = {k: v for k, v in self._answers.items() if v[0] > now}
            while len(self._answers) >= REVIEW_CACHE_SIZE:
                del self._answers[next(iter(self._answers))]
        self._answers[(user, review)] = (now + REVIEW_TTL_S, allowed)
        return allowed


def _refused(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(aggregated.status(code, reason, message), status=code)


def _common_name(request: web.Request) -> str | None:
    """The common name of the client certificate the TLS handshake verified, if any."""
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


DISCOVERY = {
    "/apis": aggregated.api_group_list,
    f"/apis/{aggregated.GROUP}": aggregated.api_group,
    aggregated.PREFIX: aggregated.resource_list,
}


def server_app(
    header: aggregated.RequestHeader, reviews: Reviews, console: web.Application
) -> web.Application:
    """The aggregated API: discovery, and ``console`` mounted under
    :data:`aggregated.PREFIX`, behind authentication and authorization."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = list(request.headers.items())
        user = aggregated.user_of(header, _common_name(request), headers)
        if user is None:
            return _refused(401, "Unauthorized", "Unauthorized")
        path = request.rel_url.raw_path.rstrip("/")
        if path in DISCOVERY:
            return web.json_response(DISCOVERY[path]())
        if not path.startswith(aggregated.PREFIX + "/"):
            return _refused(404, "NotFound", "the server could not find the requested resource")
        review = aggregated.review_of(path[len(aggregated.PREFIX) :])
        if review is not None:
            try:
                allowed = await reviews.allowed(user, review)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                log.warning("a SubjectAccessReview failed: %s", error)
                return _refused(503, "ServiceUnavailable", "cannot ask the API server now")
            if not allowed:
                return _refused(403, "Forbidden", aggregated.described(user, review))
        return await handler(request)

    app = web.Application(middlewares=[guard])
    app.add_subapp(aggregated.PREFIX, console)
    return app


class Certificates:
    """The serving certificate and key files, and the client CA: an SSL context whose
    handshakes use the files as they are now (read again when their times change)."""

    def __init__(self, certificate: str, key: str, client_ca: str) -> None:
        self._certificate = certificate
        self._key = key
        self._client_ca = client_ca
        self._stamp: tuple[int, int] | None = None
        self._current = self._load()
        self.context = self._load()
        self.context.sni_callback = self._pick

    def _times(self) -> tuple[int, int]:
        return (os.stat(self._certificate).st_mtime_ns, os.stat(self._key).st_mtime_ns)

    def _load(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            self._stamp = self._times()
            context.load_cert_chain(self._certificate, self._key)
            context.load_verify_locations(cadata=self._client_ca)
        except (OSError, ssl.SSLError) as error:
            raise ConsoleUnavailable(f"cannot load the console's certificate: {error}") from error
        # Optional, not required: a client without one is answered 401, as kube-apiserver's
        # own aggregated servers answer it, rather than cut in the handshake.
        context.verify_mode = ssl.CERT_OPTIONAL
        return context

    def _pick(self, connection: ssl.SSLObject | Any, _name: str | None, _: Any) -> None:
        try:
            if self._times() != self._stamp:
                self._current = self._load()
                log.info("the console's serving certificate changed: serving the new one")
        except (OSError, ConsoleUnavailable) as error:
            log.warning("keeping the console's certificate: %s", error)
        connection.context = self._current


async def request_header(kube: Kube) -> aggregated.RequestHeader:
    """kube-apiserver's request-header settings, read once at the start."""
    try:
        found = await kube.get(
            CONFIGMAPS, aggregated.AUTHENTICATION_NAMESPACE, aggregated.AUTHENTICATION_CONFIGMAP
        )
    except (ApiException, urllib3.exceptions.HTTPError) as error:
        raise ConsoleUnavailable(
            f"cannot read {aggregated.AUTHENTICATION_NAMESPACE}/"
            f"{aggregated.AUTHENTICATION_CONFIGMAP}: {error}"
        ) from error
    if found is None:
        raise ConsoleUnavailable(
            f"there is no {aggregated.AUTHENTICATION_NAMESPACE}/"
            f"{aggregated.AUTHENTICATION_CONFIGMAP}: the API server proxies to no aggregated API"
        )
    return aggregated.request_header(found.get("data") or {})


async def prepare(
    kube: Kube, certificate: str, key: str, console: web.Application
) -> tuple[web.Application, ssl.SSLContext]:
    """The aggregated API's app and SSL context; ``ConsoleUnavailable`` saying why not."""
    header = await request_header(kube)
    certificates = await asyncio.to_thread(Certificates, certificate, key, header.client_ca)
    return server_app(header, Reviews(kube), console), certificates.context
