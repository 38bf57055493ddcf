"""The cluster's API server as sandboxes must not reach it: its addresses, read from the
``kubernetes`` EndpointSlice in ``default`` (the API server keeps that slice itself, under
that name), at most every ``OperatorSettings.api_server_look_s``, for every Workspace of
the process. The operator may read that one object and no other (the chart's RBAC).

A read that fails keeps the addresses last read; before any read succeeded they are
unknown (None), and sandboxes get no ipBlock egress (``egress.plan``). No such slice
(404) reads as no address: the cluster names none, so none can be kept out, and a warning
says so. Each new failure is logged once, not at every look.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kubeturn.k8s import egress
from kubeturn.k8s.kube import ENDPOINT_SLICES, Kube

NAMESPACE = "default"
NAME = "kubernetes"
"""The EndpointSlice of the ``kubernetes`` Service, which kube-apiserver writes itself."""

log = logging.getLogger(__name__)


class ApiServerAddresses:
    """The API server's addresses, read again once ``every_s`` has passed since the last
    read; concurrent lookers share one read."""

    def __init__(
        self, kube: Kube, every_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._kube = kube
        self._every_s = every_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._read_at: float | None = None
        self._known: egress.ApiServer | None = None
        self._failure: str | None = None

    async def look(self) -> egress.ApiServer | None:
        """The addresses as last read (None: never read)."""
        async with self._lock:
            now = self._clock()
            if self._read_at is not None and now - self._read_at < self._every_s:
                return self._known
            self._read_at = now
            try:
                found = await self._kube.get(ENDPOINT_SLICES, NAMESPACE, NAME)
            except ApiException as error:
                self._failed(f"HTTP {error.status} {error.reason}")
                return self._known
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._failed(f"{type(error).__name__}: {error}")
                return self._known
            if found is None:
                self._failed("there is none", keeps="none of its addresses can be kept out")
            else:
                self._failure = None
            read = egress.api_server_of(found)
            if read != self._known:
                log.info("the API server's addresses: %s", ", ".join(read.addresses) or "none")
            self._known = read
            return read

    def _failed(self, why: str, *, keeps: str | None = None) -> None:
        if why == self._failure:
            return
        self._failure = why
        if keeps is None:
            keeps = (
                "the addresses last read stay"
                if self._known is not None
                else "sandboxes get no ipBlock egress (the public rule among them) until it is"
            )
        log.warning(
            "cannot read the EndpointSlice %s/%s (the API server's addresses): %s; %s",
            NAMESPACE,
            NAME,
            why,
            keeps,
        )
