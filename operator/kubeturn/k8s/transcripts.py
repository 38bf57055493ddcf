"""The transcripts of a Run on the cluster, read by the operator that drives it: the Run
object (its status: settled Turns in ``turns``, live ones in ``snapshot.turns``) and each
Turn's conversation on its Workspace's Harness, through the hub's client of that Harness
(``HarnessClient.read``: a page of the log at once, or a long-poll while following).

The caller is the transcript endpoint, which has already authorized the user for the Run;
this module reads on the operator's own credentials and tokens, and shows nothing but
the Run's own Turns. A Harness that cannot be reached now (its sandbox is being made
again, or gone with a finished Run's Workspace) shows each Turn's header and settlement
from the status alone (``kubeturn.transcripts.stream``). Imports no kopf.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from kubeturn.errors import HarnessCallFailed, HarnessRefused, NotFound
from kubeturn.k8s import objects
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import RUNS
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.orchestrator.ids import InstanceId
from kubeturn.transcripts import project, stream
from kubeturn.transcripts.model import Entry
from kubeturn.transcripts.source import Query
from kubeturn_harness.wire import StreamEvent

RunReader = Callable[[], Awaitable[Mapping[str, Any] | None]]
"""Reads the Run object as the API stores it; None when there is none."""


class Harnesses(Protocol):
    """Where a Workspace's Harness client is found (the operator's ``Hub``)."""

    def harness_of(self, namespace: str, workspace: str) -> HarnessClient | None: ...


FOLLOW_S = 2.0
"""The longest a follower waits on its Turn's conversation before it reads the Run again:
a new Turn, or a Turn's record, shows within 2 s, while the conversation's own events show
at once (the long-poll answers when one is written). One Run read per follower each 2 s
is well within what the operator's client spends on one Run's status patches."""
UNREACHABLE_S = 1.0
"""A follower's pause while its Turn's Harness cannot be reached (a sandbox Pod made
again is reached within seconds)."""


class ClusterReader:
    """A ``stream.Reader`` for one Run, over the hub's Harness clients."""

    def __init__(self, harnesses: Harnesses, namespace: str, read_run: RunReader) -> None:
        self._harnesses = harnesses
        self._namespace = namespace
        self._read_run = read_run
        self._workspace: str | None = None

    async def status(self) -> Mapping[str, Any]:
        run = await self._read_run()
        if run is None:
            raise NotFound("the Run is gone")
        self._workspace = objects.workspace_of(run)
        return dict(run.get("status") or {})

    def _harness(self) -> HarnessClient | None:
        if self._workspace is None:
            return None
        return self._harnesses.harness_of(self._namespace, self._workspace)

    async def read(
        self, agent: str, instance_id: str, offset: int
    ) -> tuple[list[StreamEvent], int] | None:
        harness = self._harness()
        if harness is None:
            return None
        try:
            return await harness.read(agent, InstanceId(instance_id), offset, live=False)
        except HarnessRefused as refused:
            if refused.status == 404:  # no Submission of it was admitted yet
                return [], offset
            return None
        except HarnessCallFailed:
            return None

    async def wait(self, conversation: stream.Conversation | None, offset: int) -> None:
        harness = self._harness()
        if conversation is None or harness is None:
            await asyncio.sleep(UNREACHABLE_S if harness is None else FOLLOW_S)
            return
        agent, instance_id = conversation
        try:
            async with asyncio.timeout(FOLLOW_S):
                await harness.read(agent, InstanceId(instance_id), offset)
        except TimeoutError:
            return  # nothing new in the conversation: read the Run again
        except HarnessCallFailed:
            await asyncio.sleep(UNREACHABLE_S)  # not at once again


class ClusterTranscripts:
    """The ``TranscriptSource`` of one Run on the cluster, in the operator's process."""

    def __init__(
        self, harnesses: Harnesses, namespace: str, name: str, read_run: RunReader
    ) -> None:
        self.namespace = namespace
        self.name = name
        self._read_run = read_run
        self._reader = ClusterReader(harnesses, namespace, read_run)

    @classmethod
    def of(cls, hub: Hub, namespace: str, name: str) -> ClusterTranscripts:
        """The Run's transcripts, the Run read from the API on the operator's client."""

        async def read_run() -> Mapping[str, Any] | None:
            return await hub.kube.get(RUNS, namespace, name)

        return cls(hub, namespace, name, read_run)

    def entries(self, query: Query) -> AsyncIterator[Entry]:
        """The Run's entries; raises ``NotFound`` when the Run is gone (while following,
        too: its transcripts went with it)."""
        return stream.entries(self._reader, query)

    async def query(
        self, target: str | None, *, since_turn: int | None = None, follow: bool = False
    ) -> Query:
        """The query of ``kubeturn logs NAME [TURN | AGENT]`` for this Run
        (``project.query_for``); raises ``NotFound`` when there is no such Run."""
        run = await self._read_run()
        if run is None:
            raise NotFound(f"no Run {self.name} in namespace {self.namespace}")
        agents = dict((run.get("spec") or {}).get("agents") or {})
        status = dict(run.get("status") or {})
        return project.query_for(target, status, agents, since_turn=since_turn, follow=follow)
