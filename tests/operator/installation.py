"""The chart installed into the emulator, as far as the operator's identity goes.

The operator tier runs the operator as the chart's ServiceAccount, in either of the
chart's RBAC shapes (:class:`Shape`: every namespace watched, a ClusterRole; or
``watchNamespaces``, a Role per namespace). :func:`render` renders charts/kubeturn with
``helm template``; :func:`install` stores the rendered ServiceAccount and RBAC objects in
the emulator as they are, so that its RBAC answers 403 to whatever they do not grant,
issues the ServiceAccount a token, and writes the kubeconfig the operator starts with.
What the chart decides of the operator's settings (the namespaces it serves, its own
namespace, its Lease) is read from the rendered Deployment, not restated here.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.operator import emulator, rbac

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubeturn"
RELEASE = "kubeturn"
RELEASE_NAMESPACE = "kubeturn-system"
"""The release's namespace: apart from ``default``, where the scenarios' Runs are, so a
rule granted in the wrong one of the two fails."""
WATCHED = "default"
"""The namespace ``watchNamespaces`` lists in :attr:`Shape.LISTED`: the scenarios'."""
HELM_S = 60.0
"""``helm template`` takes a fraction of a second; a minute means it hangs."""

Body = dict[str, Any]
KINDS = {
    "ServiceAccount": "v1/serviceaccounts",
    **{kind: f"{rbac.GROUP}/v1/{kind.lower()}s" for kind in emulator.RBAC_RESOURCES},
}
"""The rendered kinds that make the operator's identity, and where the emulator keeps them."""


class Shape(enum.Enum):
    """The chart's two RBAC shapes, by the values that choose them."""

    EVERY_NAMESPACE = "every-namespace"
    """``watchNamespaces: []``: a ClusterRole, the operator watching the whole cluster."""
    LISTED = "listed"
    """``watchNamespaces: [default]``: a Role there, the operator watching it alone."""

    @property
    def values(self) -> Mapping[str, Any]:
        return {"watchNamespaces": [WATCHED] if self is Shape.LISTED else []}


def render(helm: Path, shape: Shape) -> list[Body]:
    """The chart's objects as ``helm template`` renders them for ``shape``."""
    settings = [f"--set-json={key}={json.dumps(value)}" for key, value in shape.values.items()]
    command = [str(helm), "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE]
    done = subprocess.run(
        [*command, *settings], capture_output=True, text=True, timeout=HELM_S, check=False
    )
    if done.returncode:
        raise AssertionError(f"helm template failed:\n{done.stderr}")
    return [body for body in yaml.safe_load_all(done.stdout) if body]


@dataclasses.dataclass(frozen=True)
class Installation:
    """The operator's identity and chart-given settings in one emulator."""

    shape: Shape
    user: rbac.User
    kubeconfig: Path
    """The operator's kubeconfig: the emulator, as the ServiceAccount (its token)."""
    namespaces: tuple[str, ...]
    """``KUBETURN_NAMESPACES``: the namespaces served; empty for every namespace."""
    operator_namespace: str
    """The release's namespace, where the operator runs (``KUBETURN_OPERATOR_NAMESPACE``)."""
    lease: str
    """``KUBETURN_LEASE``: the Lease the operator's Role lets it keep."""
    objects: tuple[Body, ...]
    """The rendered ServiceAccount and RBAC objects, as stored."""

    @property
    def policy(self) -> rbac.Policy:
        """What the chart's RBAC objects grant (the cluster's own roles not included)."""
        return rbac.policy_of(self.objects)


def install(
    api: emulator.KubernetesApi, rendered: Iterable[Body], shape: Shape, kubeconfig: Path
) -> Installation:
    """Store the rendered identity objects in ``api`` (the release's namespace made first,
    as ``helm install --create-namespace`` does), issue the ServiceAccount a token and
    write ``kubeconfig`` for it."""
    rendered = list(rendered)
    api.create_object("v1/namespaces", {"metadata": {"name": RELEASE_NAMESPACE}})
    objects = [body for body in rendered if body.get("kind") in KINDS]
    for body in objects:
        api.create_object(KINDS[body["kind"]], body)
    (deployment,) = (body for body in rendered if body.get("kind") == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {item["name"]: item.get("value") for item in container["env"]}
    namespace = deployment["metadata"]["namespace"]
    token = api.issue_token(namespace, pod["serviceAccountName"])
    emulator.write_kubeconfig(kubeconfig, str(api.url), WATCHED, token=token)
    return Installation(
        shape=shape,
        user=rbac.service_account(namespace, pod["serviceAccountName"]),
        kubeconfig=kubeconfig,
        namespaces=tuple(filter(None, (env["KUBETURN_NAMESPACES"] or "").split(","))),
        operator_namespace=namespace,
        lease=str(env["KUBETURN_LEASE"]),
        objects=tuple(objects),
    )


@dataclasses.dataclass
class Usage:
    """What the operator was allowed to ask, as the chart's ServiceAccount, over a session
    of the tier, and whether the session can judge the chart by it: a session given only
    part of the tier, or in which a test failed, may have asked less than the operator does.
    """

    requests: set[rbac.Attributes] = dataclasses.field(default_factory=set)
    policies: dict[Shape, tuple[rbac.Policy, rbac.User]] = dataclasses.field(default_factory=dict)
    partial: str = ""
    """Why the session cannot judge (``""``: it can, unless a test failed)."""
    failed: list[str] = dataclasses.field(default_factory=list)
    """The tier's tests that failed (their node ids)."""

    def record(
        self,
        installation: Installation,
        authorizations: Iterable[tuple[rbac.Attributes, rbac.Decision]],
    ) -> list[rbac.Attributes]:
        """Keep the requests the operator was allowed; answer those it was refused."""
        self.policies[installation.shape] = (installation.policy, installation.user)
        mine = [(a, d) for a, d in authorizations if a.user == installation.user]
        self.requests.update(attributes for attributes, decision in mine if decision.allowed)
        return [attributes for attributes, decision in mine if not decision.allowed]

    def unused(self, shape: Shape) -> list[rbac.Grant]:
        """The chart's grants in ``shape`` that no request of any shape used."""
        policy, user = self.policies[shape]
        return [
            grant
            for grant in rbac.grants(policy, user)
            if not any(grant.allows(attributes) for attributes in self.requests)
        ]


USAGE = pytest.StashKey[Usage]()
"""Where a session keeps its :class:`Usage`."""

IN_BOTH_SHAPES = pytest.mark.parametrize("chart_shape", list(Shape), ids=[s.value for s in Shape])
"""Run a scenario in both of the chart's RBAC shapes (the default is every namespace)."""
