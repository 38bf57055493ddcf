"""The console's source on a cluster: the Runs the operator serves, read from the API
with the operator's own identity, and each Run's transcript from the source the operator
makes for it.

The operator may read every Run it serves; whether the user who asks may see one was
decided before (``kubeturn.k8s.console_server``: a SubjectAccessReview of ``get`` or
``list`` on ``kubeturn.dev`` Runs). Namespaces the operator does not serve hold no Run
here, so the console shows none of theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from aiohttp import web

from kubeturn.console.app import console_app
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import RUNS, Kube
from kubeturn.k8s.transcripts import ClusterTranscripts

Transcripts = TypeVar("Transcripts")


class ClusterConsoleSource(Generic[Transcripts]):
    """Runs from the API; ``transcripts(namespace, name)`` makes a Run's transcript source."""

    def __init__(
        self,
        kube: Kube,
        namespaces: tuple[str, ...],
        transcripts: Callable[[str, str], Transcripts],
    ) -> None:
        self._kube = kube
        self._namespaces = namespaces
        self._transcripts = transcripts

    def _serves(self, namespace: str) -> bool:
        return not self._namespaces or namespace in self._namespaces

    async def runs(self, namespace: str | None) -> list[dict[str, Any]]:
        """The Runs of ``namespace``, or of every namespace served (None)."""
        if namespace is not None:
            return await self._kube.list(RUNS, namespace) if self._serves(namespace) else []
        if not self._namespaces:
            return await self._kube.list(RUNS, None)
        found: list[dict[str, Any]] = []
        for served in self._namespaces:
            found += await self._kube.list(RUNS, served)
        return found

    async def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._kube.get(RUNS, namespace, name) if self._serves(namespace) else None

    def transcripts(self, namespace: str, name: str) -> Transcripts:
        return self._transcripts(namespace, name)


def cluster_console(hub: Hub) -> web.Application:
    """The console of the Runs the operator serves, each Run's transcript read through
    its Workspace's Harness (``ClusterTranscripts``): what ``kubeturn operator`` mounts
    under the aggregated API's prefix."""
    source = ClusterConsoleSource(
        hub.kube,
        hub.settings.namespaces,
        lambda namespace, name: ClusterTranscripts.of(hub, namespace, name),
    )
    return console_app(source)
