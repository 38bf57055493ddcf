"""The chart's RBAC, rendered by helm and stored in the emulator, in both of its shapes:
what the operator's ServiceAccount may do, and that it may do nothing the operator does
not use.

Cases:
- in both shapes, the ServiceAccount may read, make and delete a Workspace's token Secret
  by name, but not list or watch Secrets, in any namespace or across them;
- with ``watchNamespaces``, it may do nothing in a namespace not listed (but keep its
  Lease in its own, and read the EndpointSlice ``default/kubernetes``), nor across
  namespaces, and nothing cluster-scoped: no Namespaces, no CRDs;
- in both shapes, its Lease by name only (create cannot be limited to a name), and of
  the EndpointSlices only ``default/kubernetes``, by a get;
- the audit's own check: a request uses the grants that allow it, and no other;
- the audit, run last (``conftest.py`` moves it there): every permission the chart grants,
  in each shape, was used by a request the operator made in the tier's scenarios (those
  of both shapes: the namespaced rules are one list in the chart), but those in
  :data:`UNUSED`, each with the reason it is kept. It needs the whole tier, passed, and
  skips saying why otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.operator import emulator, rbac
from tests.operator import installation as installation_
from tests.operator.installation import RELEASE_NAMESPACE, USAGE, Shape

UNUSED: dict[str, str] = {
    "get console.kubeturn.dev/assets everywhere (ClusterRoleBinding "
    f"{installation_.RELEASE}-{installation_.RELEASE_NAMESPACE}-console-assets)": (
        "the console's static files, granted to every authenticated user (ADR 0110: a "
        "viewer of one namespace has no cluster-scoped grant of its own); the operator is "
        "an authenticated user too, and never asks for them"
    ),
}
"""Grants (as :class:`rbac.Grant` prints them) no scenario uses, and why they stay."""

Chart = Callable[[Shape], list[emulator.Body]]


def operator_asks(
    installed: installation_.Installation, verb: str, path: str, **query: str
) -> bool:
    """Whether the chart lets the operator's ServiceAccount send this request."""
    method = {"list": "GET", "get": "GET", "watch": "GET", "create": "POST"}.get(verb, verb)
    if verb == "watch":
        query["watch"] = "true"
    attributes = rbac.attributes_of(installed.user, method, path, query)
    return rbac.authorize(installed.policy, attributes).allowed


@pytest.fixture(params=list(Shape), ids=[shape.value for shape in Shape])
def installed(
    request: pytest.FixtureRequest, k8s: emulator.KubernetesApi, chart: Chart, tmp_path: Path
) -> installation_.Installation:
    """The chart's identity objects in the emulator, for probing (not recorded: these
    requests are the test's, not the operator's)."""
    shape: Shape = request.param
    return installation_.install(k8s, chart(shape), shape, tmp_path / "operator")


def test_token_secrets_are_read_made_and_deleted_by_name_never_listed(
    installed: installation_.Installation,
) -> None:
    secrets = "/api/v1/namespaces/default/secrets"
    for verb in ("get", "DELETE"):
        assert operator_asks(installed, verb, f"{secrets}/shared-kubeturn-tokens"), verb
    assert operator_asks(installed, "create", secrets)
    for path in (secrets, "/api/v1/secrets"):
        for verb in ("list", "watch"):
            assert not operator_asks(installed, verb, path), (verb, path)


def test_listed_namespaces_bound_what_the_operator_may_do(
    chart: Chart, k8s: emulator.KubernetesApi, tmp_path: Path
) -> None:
    listed = installation_.install(k8s, chart(Shape.LISTED), Shape.LISTED, tmp_path / "op")
    for path in (
        "/apis/kubeturn.dev/v1alpha1/namespaces/other/runs",
        "/api/v1/namespaces/other/pods",
        "/apis/kubeturn.dev/v1alpha1/runs",
        "/api/v1/pods",
        "/api/v1/namespaces",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    ):
        assert not operator_asks(listed, "list", path), path
    assert operator_asks(listed, "list", "/apis/kubeturn.dev/v1alpha1/namespaces/default/runs")


def test_the_lease_and_the_api_servers_endpoint_slice_by_name_only(
    installed: installation_.Installation,
) -> None:
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases"
    assert operator_asks(installed, "get", f"{leases}/{installed.lease}")
    assert operator_asks(installed, "PUT", f"{leases}/{installed.lease}")
    assert operator_asks(installed, "create", leases)
    assert not operator_asks(installed, "get", f"{leases}/another")
    assert not operator_asks(installed, "list", leases)
    assert not operator_asks(
        installed, "create", "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    )
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    assert operator_asks(installed, "get", f"{slices}/kubernetes")
    assert not operator_asks(installed, "get", f"{slices}/another")
    assert not operator_asks(installed, "list", slices)


def test_the_audit_names_each_grant_no_request_used(
    chart: Chart, k8s: emulator.KubernetesApi, tmp_path: Path
) -> None:
    """The audit's own check: one request uses the grants that allow it, and no other."""
    installed = installation_.install(k8s, chart(Shape.LISTED), Shape.LISTED, tmp_path / "op")
    create = rbac.attributes_of(installed.user, "POST", "/api/v1/namespaces/default/events", {})
    usage = installation_.Usage()
    usage.record(installed, [(create, rbac.authorize(installed.policy, create))])
    unused = [str(grant) for grant in usage.unused(Shape.LISTED)]
    everything = [str(grant) for grant in rbac.grants(installed.policy, installed.user)]
    assert [grant for grant in everything if grant not in unused] == [
        "create core/events in default (RoleBinding kubeturn)"
    ]


def test_the_chart_grants_only_what_the_operator_used(request: pytest.FixtureRequest) -> None:
    usage = request.config.stash[USAGE]
    if usage.partial:
        pytest.skip(f"the audit needs every scenario's requests: {usage.partial}")
    if usage.failed:
        pytest.skip(f"the audit needs every scenario's requests; failed: {usage.failed}")
    assert set(usage.policies) == set(Shape), "a shape no scenario ran in"
    unused = {shape: [str(g) for g in usage.unused(shape)] for shape in Shape}
    reasonless = {shape: [g for g in grants if g not in UNUSED] for shape, grants in unused.items()}
    assert reasonless == {shape: [] for shape in Shape}, (
        "the chart grants what no request of the operator used: drop it from "
        "charts/kubeturn/templates, or say in UNUSED why it stays"
    )
    kept = {grant for grants in unused.values() for grant in grants}
    assert kept == set(UNUSED), "UNUSED names grants the chart no longer has, or that are used"
