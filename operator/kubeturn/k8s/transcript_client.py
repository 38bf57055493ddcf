"""``kubeturn logs --kube``: a Run's transcript read through the API server, with the
user's own kubeconfig credentials (ADR 0110).

The API server authenticates the user, checks RBAC on ``runs/transcript`` of
``console.kubeturn.dev``, and proxies to the operator, which lets the user read it only
if they may ``get`` the Run. The answer is the console's NDJSON stream (one transcript
entry per line), read as it comes, so a followed transcript prints each entry as the
operator sends it. Uses the official client through its ``ApiClient`` (never kopf); every
refusal becomes one ``CommandError`` line, here.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any, cast

import urllib3.exceptions
from pydantic import ValidationError

from kubeturn.errors import CommandError
from kubeturn.k8s import aggregated, control
from kubeturn.transcripts import Entry, Query, project

TRANSCRIPT = aggregated.PREFIX + "/namespaces/{namespace}/runs/{name}/transcript"
READ_BYTES = 64 * 1024
"""The most read from the stream at once: a read returns what has arrived, up to this."""


class RemoteTranscripts:
    """The transcript of one Run on a cluster, reached with the caller's credentials
    (those of ``control.Cluster``, which reads the Run)."""

    def __init__(self, name: str, namespace: str | None, kubeconfig: str | None) -> None:
        self._cluster = control.Cluster(name, namespace, kubeconfig)
        self._client = self._cluster.client
        self.name, self.namespace = name, self._cluster.namespace

    def close(self) -> None:
        self._cluster.close()

    @property
    def where(self) -> str:
        return self._cluster.where

    async def query(
        self, target: str | None, *, since_turn: int | None = None, follow: bool = False
    ) -> Query:
        """The query of ``kubeturn logs NAME [TURN | AGENT] --kube``: ``target`` resolved
        against the Run as the user may read it (``project.query_for``)."""
        run = await self._cluster.run()
        agents = (run.get("spec") or {}).get("agents") or {}
        return project.query_for(
            target, run.get("status") or {}, agents, since_turn=since_turn, follow=follow
        )

    def path(self, query: Query) -> str:
        """The transcript's path and query, as the console's route reads them."""
        quoted = {
            k: urllib.parse.quote(v, safe="")
            for k, v in (("namespace", self.namespace), ("name", self.name))
        }
        asked = {
            "turn": query.turn,
            "agent": query.agent,
            "sinceTurn": query.since_turn,
            "follow": 1 if query.follow else None,
        }
        given = urllib.parse.urlencode({k: v for k, v in asked.items() if v is not None})
        return TRANSCRIPT.format(**quoted) + (f"?{given}" if given else "")

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        """Each transcript entry as the operator sends it."""
        response = await self._open(self.path(query))
        try:
            pending = b""
            while True:
                chunk = await self._read(response)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._entry(line)
            if pending.strip():
                yield self._entry(pending)
        finally:
            response.release_conn()

    def _entry(self, line: bytes) -> Entry:
        try:
            return Entry.model_validate_json(line)
        except ValidationError as error:
            raise CommandError(
                f"the cluster sent a transcript line of the {self.where} that is not an "
                f"entry: {line[:80]!r}; is the operator kubeturn's?"
            ) from error

    async def _read(self, response: Any) -> bytes:
        try:
            return cast(bytes, await asyncio.to_thread(response.read1, READ_BYTES))
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise CommandError(
                f"the cluster cut the transcript of the {self.where}: {error}"
            ) from error

    async def _open(self, path: str) -> Any:
        def call() -> Any:
            method, url, headers, body, post = self._client.param_serialize(
                method="GET",
                resource_path=path,
                header_params={"Accept": "application/x-ndjson"},
                auth_settings=["BearerToken"],
            )
            return self._client.call_api(
                method, url, headers, body, post, _request_timeout=None
            ).response

        try:
            response = await asyncio.to_thread(call)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise CommandError(
                f"cannot reach the cluster for the {self.where}: {error}; is it up, and is "
                "your kubeconfig's server right?"
            ) from error
        if 200 <= response.status < 300:
            return response
        said = self._said(response)
        response.release_conn()
        raise CommandError(self._refusal(response.status, said))

    def _said(self, response: Any) -> str:
        """The Status message the cluster answered with, if any."""
        try:
            body = json.loads(response.data or b"")
        except (TypeError, ValueError):
            return ""
        return str(body.get("message") or "") if isinstance(body, dict) else ""

    def _refusal(self, status: int, said: str) -> str:
        message = f": {said}" if said else ""
        if status == 401:
            return f"the cluster did not accept your credentials (HTTP 401){message}"
        if status == 403:
            return (
                f"the cluster refused the transcript of the {self.where} (HTTP 403){message}; "
                "reading it needs get on runs.kubeturn.dev and on runs/transcript of "
                "console.kubeturn.dev (the view role has both where the chart's console is on)"
            )
        if status == 404:
            return (
                f"there is no {self.where} on the cluster (HTTP 404){message}; check the name "
                "and --namespace, and that the chart's console is on (console.enabled)"
            )
        if status == 503:
            return (
                f"the console is unavailable (HTTP 503){message}; is kubeturn's operator "
                "running, and its APIService Available (kubectl get apiservice "
                f"v1alpha1.{aggregated.GROUP})?"
            )
        return f"the cluster answered HTTP {status} for the {self.where}{message}"
