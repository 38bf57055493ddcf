"""The one world of the operator tier's scenarios: the API emulator (read in process, written
over HTTP as kubectl would), and, as a scenario needs them, the operator in a thread, the
scripted model, the kubelet running each sandbox Pod as a real Harness, a named Workspace
made Ready, and watches that keep every version the API served.

``operator_world`` builds one; the options are where scenarios genuinely differ (the
model's script and providers, the operator's settings, objects that must exist before it
starts, whether the Workspace must be Ready first). A part a world was made without
fails the test when asked for, naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any
from urllib.parse import quote

import aiohttp

from kubeturn.k8s.operator import ConsoleApp
from kubeturn.tracing import Tracing
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    WAIT_S,
    WORKSPACES,
    AgentTurnWatch,
    HarnessReader,
    OperatorThread,
    Writes,
    events,
    eventually,
    harness_token,
    model_requests,
    names,
    read,
    scripted_operator,
    settings,
    status,
)

Body = dict[str, Any]
NO_PROVIDERS = "{}\n"
"""The providers file of an operator that runs no Turn."""


class OperatorWorld(Writes):
    """What a scenario acts on and reads. ``api`` is the emulator over HTTP with no idle
    connection kept (see ``k8s_client``); ``session`` reaches the Harnesses and the
    scripted model (``model``, its base URL, where its control routes live)."""

    def __init__(
        self,
        k8s: emulator.KubernetesApi,
        api: aiohttp.ClientSession,
        *,
        workspace: str = "",
        origin: str = "",
        kubelet: kubelet_.Kubelet | None = None,
        operator: OperatorThread | None = None,
        session: aiohttp.ClientSession | None = None,
        model: str = "",
        turns: AgentTurnWatch | None = None,
        versions: list[Body] | None = None,
    ) -> None:
        self.k8s, self.api = k8s, api
        self.workspace = workspace
        """The name of the scenario's Workspace, the one ``workspace_status`` reads."""
        self.origin = origin
        """The ``file://`` URL of the scenario's git origin."""
        self.model = model
        self._kubelet, self._operator, self._session = kubelet, operator, session
        self._turns, self._versions = turns, versions

    # ------------------------------------------------------------------------- its parts

    @property
    def kubelet(self) -> kubelet_.Kubelet:
        assert self._kubelet is not None, "this world runs no kubelet"
        return self._kubelet

    @property
    def operator(self) -> OperatorThread:
        assert self._operator is not None, "this world runs no operator"
        return self._operator

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "this world has no session for Harnesses or a model"
        return self._session

    @property
    def turns(self) -> AgentTurnWatch:
        """Every AgentTurn version the API served on a watch, in order."""
        assert self._turns is not None, "this world watches no AgentTurn"
        return self._turns

    @property
    def versions(self) -> list[Body]:
        """Every version of the Workspaces the API served on a watch, in order."""
        assert self._versions is not None, "this world watches no Workspace"
        return self._versions

    @property
    def orchestrator(self) -> str:
        """The Orchestrator API's base URL."""
        return f"http://127.0.0.1:{self.operator.settings.api_port}"

    @property
    def pod(self) -> str:
        """The name of the Workspace's sandbox Pod."""
        return f"{self.workspace}-kubeturn-sandbox"

    # ------------------------------------------------------------------------- reads

    def read(self, resource: str, name: str) -> Body | None:
        return read(self.k8s, resource, name)

    def stored(self, resource: str, name: str) -> Body:
        """The object, which must be there."""
        found = read(self.k8s, resource, name)
        assert found is not None, f"no {resource} {name}"
        return found

    def names(self, resource: str) -> list[str]:
        return names(self.k8s, resource)

    def events(self, reason: str) -> list[Body]:
        return events(self.k8s, reason)

    def run(self, name: str) -> Body:
        """The status of Run ``name``."""
        return status(self.k8s, RUNS, name)

    def workspace_status(self) -> Body:
        return status(self.k8s, WORKSPACES, self.workspace)

    def condition(self, type_: str) -> Body:
        """The Workspace's condition ``type_``, or ``{}``."""
        found = [c for c in self.workspace_status().get("conditions", []) if c["type"] == type_]
        return found[0] if found else {}

    def ready(self) -> Body:
        return self.condition("Ready")

    def run_condition(self, run: str, type_: str) -> Body:
        """Run ``run``'s condition ``type_``, or ``{}``."""
        found = [c for c in self.run(run).get("conditions", []) if c["type"] == type_]
        return found[0] if found else {}

    def said(self, run: str | None = None) -> str:
        """What a failed wait shows: Run ``run``'s status (but its snapshot), and the
        Workspace's."""
        said = f"Workspace {json.dumps(self.workspace_status())}"
        if run is None:
            return said
        current = self.run(run)
        current.pop("snapshot", None)
        return f"Run {json.dumps(current)}; {said}"

    async def until(
        self,
        check: Callable[[], Any],
        what: str,
        *,
        run: str | None = None,
        timeout: float = WAIT_S,
    ) -> Any:
        """``eventually``, showing the Workspace (and Run ``run``) when it fails."""
        return await eventually(check, what, timeout=timeout, describe=lambda: self.said(run))

    async def harness(self) -> HarnessReader:
        """The Workspace's Harness, read with its token."""
        sandbox = await self.kubelet.running(self.pod)
        return HarnessReader(sandbox.url, harness_token(self.k8s, self.workspace), self.session)

    async def model_requests(self, match: str | None = None) -> list[Body]:
        """The scripted model's request records, of the conversation ``match`` or all."""
        return await model_requests(self.session, self.model, match)

    async def surface(self, iid: str, token: str) -> int:
        """The status the Orchestrator API answers a surface read of ``iid`` with ``token``."""
        url = f"{self.orchestrator}/agents/{quote(iid, safe='')}/surface"
        headers = {"Authorization": f"Bearer {token}"}
        async with self.session.get(url, headers=headers) as answer:
            return answer.status

    async def readyz(self, harness: str, token: str) -> int:
        """The status a Harness answers ``/readyz`` with ``token``."""
        headers = {"Authorization": f"Bearer {token}"}
        async with self.session.get(f"{harness}/readyz", headers=headers) as answer:
            return answer.status

    # ------------------------------------------------------------------------- writes

    async def patch(self, path: str, patch: Body) -> None:
        """A merge patch, as ``kubectl patch --type=merge``."""
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.api.patch(path, data=json.dumps(patch), headers=headers) as answer:
            assert answer.status == 200, await answer.text()

    async def delete_pod(self) -> None:
        """Delete the Workspace's sandbox Pod."""
        await self.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{self.pod}")


async def _watch_workspaces(
    api: aiohttp.ClientSession, into: list[Body], opened: asyncio.Event
) -> None:
    path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/workspaces?watch=true"
    async with api.get(path, timeout=aiohttp.ClientTimeout()) as response:
        assert response.status == 200
        opened.set()
        async for line in response.content:
            if line.strip():
                into.append(json.loads(line)["object"])


@contextlib.asynccontextmanager
async def watching_workspaces(api: aiohttp.ClientSession) -> AsyncIterator[list[Body]]:
    """Every version of the Workspaces the API serves on a watch from now, in order."""
    versions: list[Body] = []
    opened = asyncio.Event()
    watch = asyncio.create_task(_watch_workspaces(api, versions, opened))
    try:
        await eventually(opened.is_set, "the Workspace watch to open", timeout=5)
        yield versions
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch


@contextlib.asynccontextmanager
async def watching_agentturns(api: aiohttp.ClientSession) -> AsyncIterator[AgentTurnWatch]:
    watch = AgentTurnWatch(api)
    try:
        await watch.open()
        yield watch
    finally:
        await watch.close()


@contextlib.asynccontextmanager
async def operator_world(
    k8s: emulator.KubernetesApi,
    api: aiohttp.ClientSession,
    installation: Installation,
    *,
    kubelet: kubelet_.Kubelet | None = None,
    script: str | None = None,
    providers: str | None = None,
    workspace: Body | None = None,
    ready: bool = True,
    origin: str = "",
    first: Iterable[Body] = (),
    watch_agentturns: bool = False,
    watch_workspaces: bool = False,
    tracing: Tracing | None = None,
    console: ConsoleApp | None = None,
    **changes: Any,
) -> AsyncIterator[OperatorWorld]:
    """The operator (its settings from ``settings``, with ``changes``) started as the chart
    ``installation`` made it, and stopped after.

    With ``script``, the scripted model serves it, and ``providers`` (a template whose
    ``{url}`` is the model's ``/v1`` URL) names it; without, the operator has ``providers``
    or none. The objects ``first`` are made before the operator starts; ``workspace`` once
    it runs, and then awaited ``Ready`` unless ``ready`` is False. The watches start before
    any of it. ``console`` is the console app the operator mounts (served where the
    settings say)."""
    async with contextlib.AsyncExitStack() as stack:
        turns = (
            await stack.enter_async_context(watching_agentturns(api)) if watch_agentturns else None
        )
        versions = (
            await stack.enter_async_context(watching_workspaces(api)) if watch_workspaces else None
        )
        made = OperatorWorld(
            k8s,
            api,
            workspace=workspace["metadata"]["name"] if workspace is not None else "",
            origin=origin,
            kubelet=kubelet,
            turns=turns,
            versions=versions,
        )
        for body in first:
            await made.create(body)
        if script is not None:
            extra = {} if providers is None else {"providers": providers}
            scripted = await stack.enter_async_context(
                scripted_operator(
                    installation, script, **extra, tracing=tracing, console=console, **changes
                )
            )
            made._operator, made._session, made.model = (
                scripted.operator,
                scripted.session,
                scripted.model,
            )
        else:
            operating = dataclasses.replace(
                settings(installation, providers_yaml=providers or NO_PROVIDERS), **changes
            )
            operator = OperatorThread(operating, installation.kubeconfig, console, tracing=tracing)
            made._operator = operator
            stack.push_async_callback(operator.stop)
            await operator.start()
        if workspace is not None:
            await made.create(workspace)
            if ready:
                await made.until(
                    lambda: made.workspace_status().get("phase") == "Ready", "the Workspace Ready"
                )
        yield made
