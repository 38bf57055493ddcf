"""The Helm chart (charts/kubeturn): it lints, renders valid objects, and renders what the
operator's deployment needs. Offline: helm and kubectl come from a PyPI wheel
(tests/tools.py), the validators from PyPI.

Two renderings are checked throughout: the defaults (every namespace watched) and
tests/chart/values-custom.yaml (two watched namespaces, providers with an API key Secret,
two replicas and a Lease of their own, a ServiceMonitor, a PrometheusRule with thresholds of
its own, a tighter NetworkPolicy, sandbox egress of its own, the console off).

Cases:
- ``helm lint --strict`` passes for both value sets.
- The rendered objects pass kubernetes-validate's strict schemas of Kubernetes 1.28 (the
  chart's oldest) and 1.35; the only kinds skipped are named: ServiceMonitor and
  PrometheusRule (no bundled schema). A kind outside that list without a schema fails.
- The chart's CRDs validate as CustomResourceDefinitions and equal the generated ones in
  crds/ byte for byte; the chart's crds/ holds nothing else.
- yamllint finds nothing in the rendered output.
- RBAC: defaults give one ClusterRole (+ binding) with the operator's rules; listed
  namespaces give a Role and RoleBinding in each and nothing cluster-wide (kopf scans
  neither Namespaces nor CRDs); both give a Role (+ binding) in the release's namespace
  that creates Leases and gets and updates the operator's Lease only, and one in
  ``default`` that gets the EndpointSlice ``kubernetes`` only (the API server's
  addresses); every binding names the operator's ServiceAccount; no wildcard, no
  pods/exec, pods/log or services, no list or watch of Secrets, no cluster-scoped kind.
  Whether the operator uses each of these rules, and needs no other, the operator tier
  proves (tests/operator/test_chart_rbac.py).
- The console (ADR 0110, 0111): the APIService ``v1alpha1.console.kubeturn.dev`` names the
  console Service (443 → the pod's 8443) with a ``caBundle`` that verifies the Secret's
  serving certificate, which names the Service's DNS names; the Deployment mounts that
  Secret and points KUBETURN_CONSOLE_* at it; the operator may create
  SubjectAccessReviews (``system:auth-delegator``) and read the request-header ConfigMap
  (``extension-apiserver-authentication-reader`` in kube-system); a ClusterRole joins
  view, edit and admin with ``get``/``list`` of the console's ``runs`` and its two
  subresources, and the assets go to every authenticated user; the NetworkPolicy admits
  8443. With ``certificates: cert-manager`` a Certificate (from the chart's self-signed
  Issuer, or ``issuerRef``) and the CA injector's annotation replace the Secret and the
  bundle; ``enabled: false`` renders none of it.
- The Deployment: non-root 10001, read-only root filesystem, no capabilities, seccomp
  RuntimeDefault, no privilege escalation; probes on /healthz and /readyz; the three
  ports; one replica replaced by a RollingUpdate that stops every old pod at once (a new
  pod is never ready while an old one leads); the environment contract (KUBETURN_*,
  POD_NAME) including the Orchestrator URL, which names the Orchestrator Service, and
  the Lease; replicas, resources and scheduling from values; ``defaultModel`` as
  KUBETURN_DEFAULT_MODEL (one naming no provider refused by the schema), and the NOTES
  saying it; ``turnRetention`` as KUBETURN_TURN_RETENTION (a duration the schema checks);
  ``maxLiveTurnsPerNamespace`` as KUBETURN_NAMESPACE_MAX_LIVE_TURNS, only when set.
- The NetworkPolicy admits only sandbox pods (the labels the operator gives them) to the
  Orchestrator port, from the watched namespaces when they are listed (any namespace
  when none is); metrics only from the release's namespace, plus ``metricsFrom``.
- Sandbox egress: KUBETURN_SANDBOX_EGRESS is ``sandbox.egress`` as the operator's own model
  reads it (the defaults: DNS anywhere on 53, the public internet on 443 and 22, no
  rules); the sandbox NetworkPolicy the operator builds from it, for a Workspace with
  every opt-in and an API server address, passes kubernetes-validate --strict for both
  value sets and has Egress among its policy types; the NOTES say what a sandbox
  reaches.
- The providers ConfigMap is accepted by the Harness's own providers model and holds no
  apiKeySecret; the NOTES say how a Workspace gets the key.
- Leader election: the Lease KUBETURN_LEASE names is the one the Role lets the operator
  update; no kopf peering object or rule is left; Recreate renders without
  rollingUpdate. The ServiceMonitor only when asked for.
- Alerts: the PrometheusRule only when asked for and metrics are served; its labels, the
  five alert names (the leader's left out when asked), the alert labels, a severity and
  a summary and description on each, each expression selecting this release's series,
  the thresholds from values; the series and labels they read are those the operator's
  metrics module exposes. Where promtool is installed, ``promtool check rules`` and
  ``promtool test rules`` on the default rules: each alert fires on samples that should
  fire it, with its labels and rendered annotations, and stays quiet on healthy ones
  (skipped, with the reason, without promtool).
- values.yaml: every key has a comment; the chart refuses an unknown top-level key, an
  unknown log format, an apiKeySecret without apiKeyEnv, a fractional lease duration, a
  renew deadline not below the lease duration, a failed-Turns ratio above 1, an alert
  window that is not a duration, no public ports, an egress rule without destinations, a
  peer that is both an ipBlock and selectors, a CIDR without its prefix, an endPort
  without a port and a misspelt metricsFrom peer.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import tools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubeturn"
CUSTOM_VALUES = Path(__file__).with_name("values-custom.yaml")
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
"""The default tag of both images."""
RELEASE = "kt"
NAMESPACE = "kubeturn-system"
FULLNAME = f"{RELEASE}-kubeturn"
WATCHED = ["team-a", "team-b"]
"""The namespaces values-custom.yaml lists."""

KUBERNETES_VERSIONS = ["1.28", "1.35"]
"""The chart's oldest supported release (Chart.yaml kubeVersion) and kubectl's."""

NO_SCHEMA = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
"""Custom resources kubernetes-validate has no schema for; skipped, and only these."""

LEADER_ROLE = f"{FULLNAME}-leader-election"
"""The Role (and RoleBinding) for the operator's Lease, in the release's namespace."""
CLUSTER_NAME = f"{FULLNAME}-{NAMESPACE}"
"""The operator's ClusterRole and ClusterRoleBinding, every namespace watched."""
API_SERVER_ROLE = f"{CLUSTER_NAME}-api-server"
"""The Role (and RoleBinding) in ``default`` for the API server's EndpointSlice."""
AUTHENTICATION_READER = f"{CLUSTER_NAME}-authentication-reader"
"""The console's RoleBinding in kube-system to read the request-header ConfigMap."""

HELM_SECONDS = 60.0
"""helm lint or template takes ~0.1 s; a minute means something hangs."""

YAMLLINT_CONFIG = """
extends: default
rules:
  # Go's YAML encoder (toYaml) writes sequences unindented under their key, the
  # templates indent theirs: both are YAML, neither is wrong.
  indentation: {spaces: 2, indent-sequences: whatever}
  # Hashes, images and label selectors are single tokens; a rendered line is as long
  # as its values make it.
  line-length: disable
"""

Object = dict[str, Any]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def helm() -> str:
    binaries = tools.kube_binaries()
    if isinstance(binaries, tools.Unavailable):
        pytest.skip(f"no helm: {binaries.reason}")
    return str(binaries.helm)


def _helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=HELM_SECONDS, check=False
    )
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result


def _template_args(values: Path | None) -> list[str]:
    extra = ["--values", str(values)] if values is not None else []
    return ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra]


@pytest.fixture(scope="module")
def default_text(helm: str) -> str:
    return _helm(helm, *_template_args(None)).stdout


@pytest.fixture(scope="module")
def custom_text(helm: str) -> str:
    return _helm(helm, *_template_args(CUSTOM_VALUES)).stdout


@pytest.fixture(scope="module")
def default_objects(default_text: str) -> list[Object]:
    return [doc for doc in yaml.safe_load_all(default_text) if doc]


@pytest.fixture(scope="module")
def custom_objects(custom_text: str) -> list[Object]:
    return [doc for doc in yaml.safe_load_all(custom_text) if doc]


def _of_kind(objects: Iterable[Object], kind: str) -> list[Object]:
    return [obj for obj in objects if obj["kind"] == kind]


def _one(objects: Iterable[Object], kind: str, name: str | None = None) -> Object:
    found = [obj for obj in _of_kind(objects, kind) if name in (None, obj["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} named {name!r}"
    return found[0]


def _container(objects: list[Object]) -> Object:
    deployment = _one(objects, "Deployment", FULLNAME)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    container: Object = containers[0]
    return container


def _env(objects: list[Object]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in _container(objects)["env"]}


# --------------------------------------------------------------------------- lint


@pytest.mark.parametrize("values", [None, CUSTOM_VALUES], ids=["defaults", "custom"])
def test_helm_lint_strict(helm: str, values: Path | None) -> None:
    extra = ["--values", str(values)] if values is not None else []
    _helm(helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *extra)


@pytest.mark.parametrize("rendering", ["default_text", "custom_text"])
def test_rendered_output_passes_yamllint(rendering: str, request: pytest.FixtureRequest) -> None:
    try:
        from yamllint import config, linter
    except ImportError:
        pytest.fail("yamllint is not installed; install the dev extras: pip install -e '.[dev]'")
    text: str = request.getfixturevalue(rendering)
    problems = list(linter.run(text, config.YamlLintConfig(YAMLLINT_CONFIG)))
    assert not problems, "\n".join(f"{p.line}:{p.column} {p.desc} ({p.rule})" for p in problems)


def _validate(objects: Iterable[Object]) -> list[str]:
    """kubernetes-validate's strict check (the code behind ``kubernetes-validate
    --strict``) of each object against each version; the problems found."""
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail(
            "kubernetes-validate is not installed; install the dev extras: pip install -e '.[dev]'"
        )
    problems = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in NO_SCHEMA:
            continue
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError as error:
                problems.append(f"{name}: {error.message}")
            except kubernetes_validate.ValidationError as error:
                path = "/".join(map(str, error.path))
                problems.append(f"{name} (Kubernetes {version}) at {path}: {error.message}")
    return problems


@pytest.mark.parametrize("rendering", ["default_objects", "custom_objects"])
def test_rendered_objects_pass_kubernetes_validate_strict(
    rendering: str, request: pytest.FixtureRequest
) -> None:
    objects: list[Object] = request.getfixturevalue(rendering)
    problems = _validate(objects)
    assert not problems, "\n".join(problems)


def test_chart_crds_are_valid_and_match_the_generated_crds() -> None:
    chart_crds = CHART / "crds"
    objects = [
        doc
        for path in sorted(chart_crds.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    assert {o["kind"] for o in objects} == {"CustomResourceDefinition"}
    problems = _validate(objects)
    assert not problems, "\n".join(problems)

    generated = REPO / "crds"
    regenerate = "cp crds/*.yaml charts/kubeturn/crds/"
    assert generated.is_dir(), f"{generated} is missing: generate the CRDs first"
    expected = {path.name: path.read_bytes() for path in generated.glob("*.yaml")}
    assert expected, f"no CRDs in {generated}"
    copied = {path.name: path.read_bytes() for path in chart_crds.iterdir()}
    assert copied == expected, f"charts/kubeturn/crds/ differs from crds/; run: {regenerate}"
    assert {o["spec"]["names"]["kind"] for o in objects} == {"Run", "Workspace", "AgentTurn"}


# --------------------------------------------------------------------------- RBAC


def _rules(role: Object) -> list[tuple[str, str, frozenset[str]]]:
    """(group, resource, verbs) per resource of a role's rules."""
    return [
        (group, resource, frozenset(rule["verbs"]))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    ]


CLUSTER_SCOPED = {"namespaces", "customresourcedefinitions", "nodes", "clusterroles"}


def _assert_least_privilege(role: Object) -> None:
    for group, resource, verbs in _rules(role):
        assert "*" not in (group, resource), role["metadata"]["name"]
        assert "*" not in verbs, role["metadata"]["name"]
        assert resource not in {"pods/exec", "pods/log", "pods/attach", "services"}, resource
        assert not verbs & {"escalate", "bind", "impersonate", "deletecollection"}, resource
        assert resource not in CLUSTER_SCOPED, resource
        if resource == "secrets":
            assert not verbs & {"list", "watch"}, "RBAC cannot narrow them to kubeturn's"


def _namespaced_rules_hold(role: Object) -> None:
    """The operator's rules in a served namespace, as _helpers.tpl explains each."""
    granted = {(g, r): v for g, r, v in _rules(role)}
    assert granted == {
        ("kubeturn.dev", "runs"): {"get", "list", "watch", "patch"},
        ("kubeturn.dev", "workspaces"): {"get", "list", "watch", "create", "patch"},
        ("kubeturn.dev", "agentturns"): {"get", "list", "watch", "create", "patch", "delete"},
        ("kubeturn.dev", "runs/status"): {"patch"},
        ("kubeturn.dev", "workspaces/status"): {"patch"},
        ("kubeturn.dev", "agentturns/status"): {"patch"},
        ("kubeturn.dev", "runs/finalizers"): {"update"},
        ("kubeturn.dev", "workspaces/finalizers"): {"update"},
        ("", "pods"): {"get", "list", "watch", "create", "delete"},
        ("", "secrets"): {"get", "create", "delete"},
        ("", "configmaps"): {"get", "create", "patch"},
        ("networking.k8s.io", "networkpolicies"): {"get", "create", "patch"},
        ("", "persistentvolumeclaims"): {"get", "create"},
        ("", "events"): {"create"},
    }


def _bound_to_operator(binding: Object, custom: bool) -> None:
    account = "kubeturn-operator" if custom else FULLNAME
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    ]


def _namespace_roles(objects: list[Object], kind: str) -> list[Object]:
    """The Roles (or RoleBindings) for watched namespaces: all but the Lease's, the API
    server's and the console's."""
    others = {LEADER_ROLE, API_SERVER_ROLE, AUTHENTICATION_READER}
    return [o for o in _of_kind(objects, kind) if o["metadata"]["name"] not in others]


def test_rbac_is_one_cluster_role_when_every_namespace_is_watched(
    default_objects: list[Object],
) -> None:
    assert not _namespace_roles(default_objects, "Role")
    assert not _namespace_roles(default_objects, "RoleBinding")
    role = _one(default_objects, "ClusterRole", CLUSTER_NAME)
    _assert_least_privilege(role)
    _namespaced_rules_hold(role)
    binding = _one(default_objects, "ClusterRoleBinding", CLUSTER_NAME)
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    _bound_to_operator(binding, custom=False)
    account = _one(default_objects, "ServiceAccount")
    assert account["metadata"] == {**account["metadata"], "name": FULLNAME, "namespace": NAMESPACE}


def test_rbac_is_a_role_per_watched_namespace_when_namespaces_are_listed(
    custom_objects: list[Object],
) -> None:
    roles = _namespace_roles(custom_objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == WATCHED
    for role in roles:
        _assert_least_privilege(role)
        _namespaced_rules_hold(role)
    bindings = _namespace_roles(custom_objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == WATCHED
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": FULLNAME,
        }
        _bound_to_operator(binding, custom=True)
    # Nothing cluster-wide: kopf scans neither Namespaces nor CRDs (ADR 0041).
    assert not _of_kind(custom_objects, "ClusterRole")
    assert not _of_kind(custom_objects, "ClusterRoleBinding")


@pytest.mark.parametrize("rendering", ["default_objects", "custom_objects"])
def test_rbac_lets_the_operator_keep_its_lease_in_its_own_namespace(
    rendering: str, request: pytest.FixtureRequest
) -> None:
    objects: list[Object] = request.getfixturevalue(rendering)
    lease = _env(objects)["KUBETURN_LEASE"]
    role = _one(objects, "Role", LEADER_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    _assert_least_privilege(role)
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease],
            "verbs": ["get", "update"],
        },
    ]
    binding = _one(objects, "RoleBinding", LEADER_ROLE)
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": LEADER_ROLE,
    }
    _bound_to_operator(binding, custom="custom" in rendering)


@pytest.mark.parametrize("rendering", ["default_objects", "custom_objects"])
def test_rbac_lets_the_operator_read_the_api_servers_endpoint_slice_only(
    rendering: str, request: pytest.FixtureRequest
) -> None:
    objects: list[Object] = request.getfixturevalue(rendering)
    role = _one(objects, "Role", API_SERVER_ROLE)
    assert role["metadata"]["namespace"] == "default"
    _assert_least_privilege(role)
    assert role["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "resourceNames": ["kubernetes"],
            "verbs": ["get"],
        }
    ]
    binding = _one(objects, "RoleBinding", API_SERVER_ROLE)
    assert binding["metadata"]["namespace"] == "default"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": API_SERVER_ROLE,
    }
    _bound_to_operator(binding, custom="custom" in rendering)
    # The operator reads that very object.
    from kubeturn.k8s import apiserver

    assert (apiserver.NAMESPACE, apiserver.NAME) == ("default", "kubernetes")


# --------------------------------------------------------------------------- console

CONSOLE = f"{FULLNAME}-console"
APISERVICE = "v1alpha1.console.kubeturn.dev"


def test_console_apiservice_trusts_the_serving_certificate_of_its_service(
    default_objects: list[Object],
) -> None:
    import base64

    from cryptography import x509

    apiservice = _one(default_objects, "APIService", APISERVICE)["spec"]
    assert apiservice["group"] == "console.kubeturn.dev"
    assert apiservice["version"] == "v1alpha1"
    assert apiservice["service"] == {"name": CONSOLE, "namespace": NAMESPACE, "port": 443}
    # Below the custom resources' 1000: ``kubectl get runs`` stays kubeturn.dev's.
    assert apiservice["groupPriorityMinimum"] < 1000
    service = _one(default_objects, "Service", CONSOLE)["spec"]
    assert service["ports"] == [
        {"name": "console", "port": 443, "targetPort": "console", "protocol": "TCP"}
    ]
    assert (
        service["selector"]
        == _one(default_objects, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    )
    secret = _one(default_objects, "Secret", f"{CONSOLE}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert secret["data"]["ca.crt"] == apiservice["caBundle"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(apiservice["caBundle"]))
    served = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{CONSOLE}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    pod = _one(default_objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret")]
    assert volume["secret"] == {"secretName": f"{CONSOLE}-tls"}
    (mount,) = [
        m for m in _container(default_objects)["volumeMounts"] if m["name"] == volume["name"]
    ]
    env = _env(default_objects)
    assert env["KUBETURN_CONSOLE_CERTIFICATE"] == f"{mount['mountPath']}/tls.crt"
    assert env["KUBETURN_CONSOLE_KEY"] == f"{mount['mountPath']}/tls.key"


def test_console_rbac(default_objects: list[Object]) -> None:
    delegator = _one(default_objects, "ClusterRoleBinding", f"{CLUSTER_NAME}-auth-delegator")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    _bound_to_operator(delegator, custom=False)
    reader = _one(default_objects, "RoleBinding", AUTHENTICATION_READER)
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    _bound_to_operator(reader, custom=False)
    view = _one(default_objects, "ClusterRole", f"{CLUSTER_NAME}-console-view")
    labels = view["metadata"]["labels"]
    for role in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
    assert {(g, r): v for g, r, v in _rules(view)} == {
        ("console.kubeturn.dev", resource): {"get", "list"}
        for resource in ("runs", "runs/turns", "runs/transcript")
    }
    assets = _one(default_objects, "ClusterRole", f"{CLUSTER_NAME}-console-assets")
    assert _rules(assets) == [("console.kubeturn.dev", "assets", frozenset({"get"}))]
    binding = _one(default_objects, "ClusterRoleBinding", f"{CLUSTER_NAME}-console-assets")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]


def test_console_with_cert_manager(helm: str) -> None:
    def rendered(*settings: str) -> list[Object]:
        args = [*_template_args(None), "--set", "console.certificates=cert-manager", *settings]
        return [doc for doc in yaml.safe_load_all(_helm(helm, *args).stdout) if doc]

    objects = rendered()
    apiservice = _one(objects, "APIService", APISERVICE)
    assert "caBundle" not in apiservice["spec"]
    assert apiservice["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": f"{NAMESPACE}/{CONSOLE}"
    }
    assert not _of_kind(objects, "Secret")
    certificate = _one(objects, "Certificate", CONSOLE)["spec"]
    assert certificate["secretName"] == f"{CONSOLE}-tls"
    assert f"{CONSOLE}.{NAMESPACE}.svc" in certificate["dnsNames"]
    assert certificate["issuerRef"] == {"name": CONSOLE, "kind": "Issuer"}
    assert _one(objects, "Issuer", CONSOLE)["spec"] == {"selfSigned": {}}
    given = rendered(
        "--set", "console.issuerRef.name=ca", "--set", "console.issuerRef.kind=ClusterIssuer"
    )
    assert _one(given, "Certificate", CONSOLE)["spec"]["issuerRef"] == {
        "name": "ca",
        "kind": "ClusterIssuer",
    }
    assert not _of_kind(given, "Issuer")


def test_console_off_renders_none_of_it(custom_objects: list[Object]) -> None:
    assert not _of_kind(custom_objects, "APIService")
    assert not [o for o in custom_objects if o["metadata"]["name"].startswith(CONSOLE)]
    assert not [k for k in _env(custom_objects) if k.startswith("KUBETURN_CONSOLE")]
    ports = {p["name"] for p in _container(custom_objects)["ports"]}
    assert "console" not in ports


# --------------------------------------------------------------------------- Deployment


@pytest.mark.parametrize("rendering", ["default_objects", "custom_objects"])
def test_deployment_runs_unprivileged(rendering: str, request: pytest.FixtureRequest) -> None:
    objects: list[Object] = request.getfixturevalue(rendering)
    pod = _one(objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert _container(objects)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    mounts = {m["mountPath"]: m for m in _container(objects)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]], "a read-only root needs a /tmp"
    assert pod["serviceAccountName"] == ("kubeturn-operator" if "custom" in rendering else FULLNAME)


def test_deployment_probes_ports_and_strategy(default_objects: list[Object]) -> None:
    deployment = _one(default_objects, "Deployment", FULLNAME)
    assert deployment["metadata"]["namespace"] == NAMESPACE
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "100%", "maxUnavailable": "100%"},
    }
    container = _container(default_objects)
    assert container["image"] == f"ghcr.io/kubeturn/operator:{APP_VERSION}"
    assert container["args"] == ["operator"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"orchestrator": 8081, "metrics": 9090, "health": 8080, "console": 8443}
    probes = {
        kind: (container[kind]["httpGet"]["path"], container[kind]["httpGet"]["port"])
        for kind in ["startupProbe", "livenessProbe", "readinessProbe"]
    }
    assert probes == {
        "startupProbe": ("/healthz", "health"),
        "livenessProbe": ("/healthz", "health"),
        "readinessProbe": ("/readyz", "health"),
    }
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "512Mi"},
    }


def test_deployment_environment_defaults(default_objects: list[Object]) -> None:
    env = _env(default_objects)
    orchestrator = _one(default_objects, "Service", f"{FULLNAME}-orchestrator")
    assert env == {
        "KUBETURN_NAMESPACES": "",
        "KUBETURN_HARNESS_IMAGE": f"ghcr.io/kubeturn/harness:{APP_VERSION}",
        "KUBETURN_ORCHESTRATOR_URL": f"http://{FULLNAME}-orchestrator.{NAMESPACE}.svc:8081",
        "KUBETURN_PROVIDERS": "/etc/kubeturn/providers.yaml",
        "KUBETURN_DEFAULT_MODEL": "",
        "KUBETURN_LEASE": FULLNAME,
        "KUBETURN_LEASE_DURATION": "15",
        "KUBETURN_RENEW_DEADLINE": "10",
        "KUBETURN_RETRY_PERIOD": "2",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "KUBETURN_LOG_FORMAT": "json",
        "KUBETURN_OPERATOR_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "KUBETURN_OPERATOR_LABELS": (
            "app.kubernetes.io/component=operator,"
            f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=kubeturn"
        ),
        "KUBETURN_SANDBOX_EGRESS": env["KUBETURN_SANDBOX_EGRESS"],  # its own test
        "KUBETURN_SANDBOX_RESOURCES": env["KUBETURN_SANDBOX_RESOURCES"],  # its own test
        "KUBETURN_REQUIRE_CONFINEMENT": "false",
        "KUBETURN_TURN_RETENTION": "1h",
        "KUBETURN_CONSOLE_PORT": "8443",
        "KUBETURN_CONSOLE_CERTIFICATE": "/etc/kubeturn/console/tls.crt",
        "KUBETURN_CONSOLE_KEY": "/etc/kubeturn/console/tls.key",
    }
    assert orchestrator["spec"]["ports"] == [
        {"name": "orchestrator", "port": 8081, "targetPort": "orchestrator", "protocol": "TCP"}
    ]
    # KUBETURN_PROVIDERS is the file the providers ConfigMap mounts.
    pod = _one(default_objects, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    mount = next(m for m in _container(default_objects)["volumeMounts"] if m["name"] == "providers")
    volume = next(v for v in pod["volumes"] if v["name"] == "providers")
    config_map = _one(default_objects, "ConfigMap", volume["configMap"]["name"])
    assert env["KUBETURN_PROVIDERS"] == f"{mount['mountPath']}/providers.yaml"
    assert "providers.yaml" in config_map["data"]
    # KUBETURN_OPERATOR_LABELS selects the operator's own pods, and not sandbox pods.
    template = _one(default_objects, "Deployment", FULLNAME)["spec"]["template"]
    selector = dict(pair.split("=") for pair in env["KUBETURN_OPERATOR_LABELS"].split(","))
    assert selector.items() <= template["metadata"]["labels"].items()
    assert not selector.items() <= _sandbox_labels().items()


def test_deployment_takes_values(custom_objects: list[Object]) -> None:
    env = _env(custom_objects)
    assert env["KUBETURN_NAMESPACES"] == "team-a,team-b"
    assert env["KUBETURN_HARNESS_IMAGE"] == "registry.example.com/kubeturn/harness:0.1.0-rc1"
    assert env["KUBETURN_LOG_FORMAT"] == "text"
    assert (
        env["KUBETURN_LEASE"],
        env["KUBETURN_LEASE_DURATION"],
        env["KUBETURN_RENEW_DEADLINE"],
        env["KUBETURN_RETRY_PERIOD"],
    ) == ("kubeturn-prod", "30", "20", "4")
    assert _one(custom_objects, "Deployment", FULLNAME)["spec"]["replicas"] == 2
    container = _container(custom_objects)
    assert container["image"] == "registry.example.com/kubeturn/operator:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"]["limits"] == {"memory": "1Gi"}
    template = _one(custom_objects, "Deployment", FULLNAME)["spec"]["template"]
    assert template["metadata"]["labels"]["example.com/tier"] == "control"
    assert template["metadata"]["annotations"]["example.com/team"] == "platform"
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"


# --------------------------------------------------------------------------- network


def _sandbox_labels() -> dict[str, str]:
    """The labels the operator gives sandbox pods, minus the per-Workspace one."""
    from kubeturn.k8s import objects as k8s_objects

    labels = dict(k8s_objects.workspace_labels("any"))
    labels.pop("kubeturn.dev/workspace")
    return labels


def test_network_policy_admits_only_sandbox_pods_to_the_orchestrator(
    default_objects: list[Object], custom_objects: list[Object]
) -> None:
    for objects, namespaces in [(default_objects, None), (custom_objects, WATCHED)]:
        policy = _one(objects, "NetworkPolicy", FULLNAME)["spec"]
        deployment = _one(objects, "Deployment", FULLNAME)
        assert policy["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        assert policy["policyTypes"] == ["Ingress"]
        orchestrator, metrics, *console = policy["ingress"]
        assert orchestrator["ports"] == [{"port": 8081, "protocol": "TCP"}]
        (peer,) = orchestrator["from"]
        assert peer["podSelector"] == {"matchLabels": _sandbox_labels()}
        if namespaces is None:
            assert peer["namespaceSelector"] == {}
        else:
            assert peer["namespaceSelector"] == {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
                ]
            }
        assert metrics["ports"] == [{"port": 9090, "protocol": "TCP"}]
        # The console: from anywhere (the API server is no pod), on with the defaults only.
        assert console == (
            [{"ports": [{"port": 8443, "protocol": "TCP"}]}] if namespaces is None else []
        )
    # Metrics: from the release's namespace by default, the monitoring namespace too when told.
    default_metrics = _one(default_objects, "NetworkPolicy")["spec"]["ingress"][1]
    assert default_metrics["from"] == [{"podSelector": {}}]
    custom_metrics = _one(custom_objects, "NetworkPolicy")["spec"]["ingress"][1]
    assert custom_metrics["from"] == [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]


def _sandbox_egress(objects: list[Object]) -> Any:
    """``sandbox.egress`` as the operator reads it from its environment."""
    from kubeturn.api.egress import SandboxEgress

    return SandboxEgress.model_validate_json(_env(objects)["KUBETURN_SANDBOX_EGRESS"])


def test_sandbox_egress_reaches_the_operator_as_its_model_reads_it(
    default_objects: list[Object], custom_objects: list[Object]
) -> None:
    from kubeturn.api.egress import SandboxEgress

    assert _sandbox_egress(default_objects) == SandboxEgress()
    custom = _sandbox_egress(custom_objects)
    assert custom.model_dump(mode="json", by_alias=True, exclude_defaults=True) == {
        "dns": {
            "to": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                    },
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ]
        },
        "public": {"ports": [{"port": 443}]},
        "rules": [
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": "models"}
                        },
                        "podSelector": {"matchLabels": {"app": "vllm"}},
                    }
                ],
                "ports": [{"port": 8000}],
            },
            {
                "to": [{"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.99.0/24"]}}],
                "ports": [{"port": 22}],
            },
        ],
    }


def test_sandbox_resources_reach_the_operator_as_its_defaults(
    default_objects: list[Object], helm: str
) -> None:
    from kubeturn.api.workspace import SandboxResources

    sent = _env(default_objects)["KUBETURN_SANDBOX_RESOURCES"]
    assert SandboxResources.model_validate_json(sent) == SandboxResources()
    text = _helm(
        helm, *_template_args(None), "--set", "sandbox.resources.clone.limits.memory=3Gi"
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    changed = SandboxResources.model_validate_json(_env(objects)["KUBETURN_SANDBOX_RESOURCES"])
    assert changed.clone.limits == {"cpu": "1", "memory": "3Gi"}
    assert changed.tools == SandboxResources().tools


def test_default_model_reaches_the_operator_and_a_bad_one_is_refused(helm: str) -> None:
    """``defaultModel`` is KUBETURN_DEFAULT_MODEL (the operator checks its provider at its
    start); the schema refuses one that names no provider; the NOTES say which it is."""
    provider = '{"openai":{"baseUrl":"https://api.openai.com/v1"}}'
    model = ["--set-json", f"providers={provider}", "--set", "defaultModel=openai/gpt-4.1"]
    done = _helm(helm, *_template_args(None), *model)
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert _env(objects)["KUBETURN_DEFAULT_MODEL"] == "openai/gpt-4.1"
    install = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    notes = _helm(helm, *install, *model).stdout
    assert "An Agent that names no model runs on openai/gpt-4.1" in notes
    refused = _helm(helm, *_template_args(None), "--set", "defaultModel=gpt-4.1", check=False)
    assert refused.returncode != 0
    assert "defaultModel" in refused.stderr


TRACING = [
    "--set", "tracing.otlpEndpoint=http://otel-collector.observability:4318",
    "--set", "tracing.sampler=parentbased_traceidratio",
    "--set-string", "tracing.samplerArg=0.5",
    "--set", "tracing.headersSecret.name=otel-headers",
    "--set", "tracing.sandbox.headersSecretName=otel-workspace-headers",
    "--set-json", "tracing.sandbox.egress=[{\"to\": [{\"namespaceSelector\": {\"matchLabels\": "
    "{\"kubernetes.io/metadata.name\": \"observability\"}}}], \"ports\": [{\"port\": 4318}]}]",
]  # fmt: skip


def test_tracing_reaches_the_operator_and_its_sandboxes(
    default_objects: list[Object], helm: str
) -> None:
    """``tracing`` is off by default (no OTEL_* variable, no sandbox tracing); set, the
    operator's container gets the standard OTEL_* variables (its headers from the
    Secret), KUBETURN_SANDBOX_TRACING is what the operator's model reads for the Harnesses,
    and the collector's egress rule joins every sandbox's (ADR 0107)."""
    from kubeturn.api.tracing import HeadersSecret, SandboxTracing

    assert not [name for name in _env(default_objects) if "TRACING" in name or "OTEL" in name]
    objects = [
        d for d in yaml.safe_load_all(_helm(helm, *_template_args(None), *TRACING).stdout) if d
    ]
    env = _env(objects)
    assert {name: value for name, value in env.items() if name.startswith("OTEL_")} == {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4318",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.5",
        "OTEL_EXPORTER_OTLP_HEADERS": {"secretKeyRef": {"name": "otel-headers", "key": "headers"}},
    }
    assert SandboxTracing.model_validate_json(env["KUBETURN_SANDBOX_TRACING"]) == SandboxTracing(
        endpoint="http://otel-collector.observability:4318",
        sampler="parentbased_traceidratio",
        samplerArg="0.5",
        headersSecret=HeadersSecret(name="otel-workspace-headers"),
    )
    rules = _sandbox_egress(objects).model_dump(mode="json", exclude_defaults=True)["rules"]
    observability = {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}
    assert rules == [{"to": [{"namespaceSelector": observability}], "ports": [{"port": 4318}]}]
    harness_off = _helm(
        helm, *_template_args(None), *TRACING, "--set", "tracing.sandbox.enabled=false"
    ).stdout
    env = _env([d for d in yaml.safe_load_all(harness_off) if d])
    assert "KUBETURN_SANDBOX_TRACING" not in env
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in env


@pytest.mark.parametrize("rendering", ["default_objects", "custom_objects"])
def test_sandbox_network_policies_from_the_values_are_valid(
    rendering: str, request: pytest.FixtureRequest
) -> None:
    """The operator's policy for a Workspace of every opt-in, one rule of its own, and an
    API server at a loopback address: what the API server would be sent."""
    from kubeturn.api.egress import WorkspaceEgress
    from kubeturn.k8s import egress, objects

    objects_: list[Object] = request.getfixturevalue(rendering)
    env = _env(objects_)
    operator = egress.Operator(
        tuple(pair.split("=", 1) for pair in env["KUBETURN_OPERATOR_LABELS"].split(",")),
        NAMESPACE,
        8081,
    )
    spec = WorkspaceEgress.model_validate(
        {
            "cloudMetadata": True,
            "apiServer": True,
            "rules": [{"to": [{"podSelector": {"matchLabels": {"app": "git"}}}]}],
        }
    )
    for workspace_egress in (WorkspaceEgress(), spec):
        planned = egress.plan(
            _sandbox_egress(objects_),
            workspace_egress,
            operator,
            egress.ApiServer(("127.0.0.1",), (6443,)),
        )
        assert not planned.withheld
        workspace = {
            "apiVersion": "kubeturn.dev/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": "ws", "namespace": "team-a", "uid": "u-1"},
        }
        policy = objects.network_policy(workspace, operator, planned.rules)
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        problems = _validate([policy])
        assert not problems, "\n".join(problems)


def test_notes_say_what_a_sandbox_reaches(helm: str) -> None:
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    default = _helm(helm, *args, "--set", "metrics.serviceMonitor.enabled=true").stdout
    assert "the public internet on 443/TCP, 22/TCP;" in default
    assert "Metrics (9090) admit only pods of kubeturn-system" in default
    custom = _helm(helm, *args, "--values", str(CUSTOM_VALUES)).stdout
    assert "on 443/TCP and 2 rule(s) of sandbox.egress.rules;" in custom
    assert "Metrics (9090)" not in custom  # metricsFrom names the monitoring namespace


def test_metrics_service_and_service_monitor(
    default_objects: list[Object], custom_objects: list[Object]
) -> None:
    assert not _of_kind(default_objects, "ServiceMonitor")
    for objects in [default_objects, custom_objects]:
        metrics = _one(objects, "Service", f"{FULLNAME}-metrics")
        assert metrics["spec"]["publishNotReadyAddresses"] is True  # standbys are scraped
        assert metrics["spec"]["ports"][0]["port"] == 9090
    monitor = _one(custom_objects, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    metrics = _one(custom_objects, "Service", f"{FULLNAME}-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= metrics["metadata"]["labels"].items()
    orchestrator = _one(custom_objects, "Service", f"{FULLNAME}-orchestrator")
    assert not selector.items() <= orchestrator["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "5s"}
    ]


# --------------------------------------------------------------------------- alerts

ALERTS = [
    "KubeturnOperatorDown",
    "KubeturnOperatorNoLeader",
    "KubeturnReconcileErrors",
    "KubeturnSweepSlow",
    "KubeturnTurnsFailing",
]
SCRAPED = f'job="{FULLNAME}-metrics",namespace="{NAMESPACE}"'
"""The series of the operator's metrics as the chart's ServiceMonitor scrapes them."""
DEPLOYED = f'namespace="{NAMESPACE}",deployment="{FULLNAME}"'
"""kube-state-metrics' series of the operator's Deployment."""
PROMTOOL_SECONDS = 60.0
"""promtool checks and evaluates five rules over an hour of samples in well under 1 s."""


def _alerts(objects: list[Object]) -> dict[str, Object]:
    """The PrometheusRule's alerting rules, by alert name."""
    (group,) = _one(objects, "PrometheusRule", FULLNAME)["spec"]["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def _alert_rendering(helm: str, *settings: str) -> list[Object]:
    args = [*_template_args(None), "--set", "metrics.prometheusRule.enabled=true"]
    for setting in settings:
        args += ["--set", setting]
    return [doc for doc in yaml.safe_load_all(_helm(helm, *args).stdout) if doc]


def test_prometheus_rule_only_when_asked_for(
    helm: str, default_objects: list[Object], custom_objects: list[Object]
) -> None:
    assert not _of_kind(default_objects, "PrometheusRule")
    assert _of_kind(custom_objects, "PrometheusRule")
    # No metrics Service, nothing scraped: the rules would only say the operator is down.
    assert not _of_kind(_alert_rendering(helm, "metrics.enabled=false"), "PrometheusRule")
    without_leader = _alerts(
        _alert_rendering(helm, "metrics.prometheusRule.noLeader.enabled=false")
    )
    assert sorted(without_leader) == sorted(set(ALERTS) - {"KubeturnOperatorNoLeader"})


def test_prometheus_rule_labels_names_and_thresholds(custom_objects: list[Object]) -> None:
    rule = _one(custom_objects, "PrometheusRule", FULLNAME)
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    rules = _alerts(custom_objects)
    assert sorted(rules) == sorted(ALERTS)
    for name, alert in rules.items():
        assert alert["labels"]["team"] == "platform", name
        assert alert["labels"]["severity"] in {"critical", "warning"}, name
        assert sorted(alert["annotations"]) == ["description", "summary"], name
        assert all(alert["annotations"].values()), name
        selects = DEPLOYED if name == "KubeturnOperatorNoLeader" else SCRAPED
        assert selects in alert["expr"], name
    # The thresholds of values-custom.yaml, each where it belongs.
    assert {name: alert["for"] for name, alert in rules.items()} == {
        "KubeturnOperatorDown": "3m",
        "KubeturnOperatorNoLeader": "4m",
        "KubeturnReconcileErrors": "10m",
        "KubeturnSweepSlow": "20m",
        "KubeturnTurnsFailing": "30m",
    }
    assert rules["KubeturnReconcileErrors"]["expr"].endswith("[20m])) > 10")
    assert "[5m]))) > 2.5" in rules["KubeturnSweepSlow"]["expr"]
    assert rules["KubeturnTurnsFailing"]["expr"].count("[1h]") == 2
    assert rules["KubeturnTurnsFailing"]["expr"].endswith("> 0.5")


def _exposed() -> dict[str, set[str]]:
    """The operator's series names as prometheus-client exposes them (a counter with
    ``_total``, a histogram with ``_bucket``, ``_count``, ``_sum``), with their labels."""
    from prometheus_client import Counter, Gauge, Histogram

    from kubeturn.k8s import metrics

    suffixes = {Counter: ["_total"], Gauge: [""], Histogram: ["_bucket", "_count", "_sum"]}
    exposed = {}
    for metric in vars(metrics).values():
        for kind, endings in suffixes.items():
            if isinstance(metric, kind):
                (family,) = metric.describe()
                # prometheus-client keeps a metric's label names in this attribute only.
                labels = set(metric._labelnames)
                exposed.update({family.name + ending: labels for ending in endings})
                if kind is Histogram:
                    exposed[f"{family.name}_bucket"] = labels | {"le"}
    return exposed


def test_prometheus_rule_reads_series_the_operator_exposes(custom_objects: list[Object]) -> None:
    exposed = _exposed()
    selectors = [
        (name, matchers)
        for alert in _alerts(custom_objects).values()
        for name, matchers in re.findall(r"(kubeturn_\w+)\{([^}]*)\}", alert["expr"])
    ]
    assert {name for name, _ in selectors} == {
        "kubeturn_reconcile_errors_total",
        "kubeturn_sweep_to_settled_seconds_bucket",
        "kubeturn_turns_total",
    }
    for name, matchers in selectors:
        assert name in exposed, f"{name} is not a series of kubeturn.k8s.metrics"
        labels = set(re.findall(r"(\w+)=", matchers)) - {"job", "namespace"}
        assert labels <= exposed[name], f"{name}: no label {labels - exposed[name]}"


def _series(name: str, labels: str, values: str) -> Object:
    return {"series": f"{name}{{{labels}}}", "values": values}


def _expected(rule: Object, labels: dict[str, str], rendered: dict[str, str]) -> dict[str, Any]:
    """What promtool must see of one firing alert: its labels, and its annotations with
    each of Prometheus's templates (``{{ ... }}``) replaced as ``rendered`` says."""
    annotations = {}
    for key, text in rule["annotations"].items():
        for template, value in rendered.items():
            text = text.replace(f"{{{{ {template} }}}}", value)
        assert "{{" not in text, f"{rule['alert']}: a template left unrendered in {text!r}"
        annotations[key] = text
    return {"exp_labels": {**rule["labels"], **labels}, "exp_annotations": annotations}


def _promtool_cases(rules: dict[str, Object]) -> list[Object]:
    """promtool unit tests of the default rules: each alert fires on the samples that
    should fire it, with the labels and words it should carry, and stays quiet on
    healthy ones. One sample a minute."""
    scraped = {"job": f"{FULLNAME}-metrics", "namespace": NAMESPACE}

    def case(alert: str, series: list[Object], at: str, *expected: Object) -> Object:
        test = {"eval_time": at, "alertname": alert, "exp_alerts": list(expected)}
        return {"interval": "1m", "input_series": series, "alert_rule_test": [test]}

    def turns(outcome: str, cause: str, values: str) -> Object:
        labels = f'{SCRAPED},outcome="{outcome}",cause="{cause}"'
        return _series("kubeturn_turns_total", labels, values)

    def buckets(fast: int, slow: int) -> list[Object]:
        """``fast`` sweeps a minute under 0.1 s, ``slow`` ones between 5 and 10 s."""
        per_minute = {"0.1": fast, "5.0": fast, "10.0": fast + slow, "+Inf": fast + slow}
        return [
            _series("kubeturn_sweep_to_settled_seconds_bucket", f'{SCRAPED},le="{le}"', f"0+{n}x60")
            for le, n in per_minute.items()
        ]

    down = rules["KubeturnOperatorDown"]
    leader = rules["KubeturnOperatorNoLeader"]
    errors = rules["KubeturnReconcileErrors"]
    slow = rules["KubeturnSweepSlow"]
    failing = rules["KubeturnTurnsFailing"]
    ready = _series("kube_deployment_status_replicas_ready", DEPLOYED, "1 0x20")
    return [
        # The only operator pod stops answering at 2m: pending for 5m, then firing.
        case(down["alert"], [_series("up", f'{SCRAPED},pod="a"', "1 1 0x20")], "6m"),
        case(
            down["alert"],
            [_series("up", f'{SCRAPED},pod="a"', "1 1 0x20")],
            "8m",
            _expected(down, scraped, {}),
        ),
        # Nothing scraped at all (no ServiceMonitor target): the same alert.
        case(
            down["alert"],
            [_series("up", 'job="other",namespace="elsewhere"', "1x20")],
            "8m",
            _expected(down, scraped, {}),
        ),
        # A standby still answers: the operator is not down.
        case(
            down["alert"],
            [
                _series("up", f'{SCRAPED},pod="a"', "1 1 0x20"),
                _series("up", f'{SCRAPED},pod="b"', "1x20"),
            ],
            "10m",
        ),
        # No ready pod from 1m: firing after 5m; scaled to zero on purpose: quiet.
        case(
            leader["alert"],
            [ready, _series("kube_deployment_spec_replicas", DEPLOYED, "1x20")],
            "7m",
            _expected(leader, {"namespace": NAMESPACE, "deployment": FULLNAME}, {}),
        ),
        case(
            leader["alert"],
            [ready, _series("kube_deployment_spec_replicas", DEPLOYED, "1 0x20")],
            "10m",
        ),
        # One handler failing every minute: 15 in 15m, above 5 for 15m; another failed twice.
        case(
            errors["alert"],
            [
                _series(
                    "kubeturn_reconcile_errors_total",
                    f'{SCRAPED},pod="a",resource="runs"',
                    "0+1x40",
                ),
                _series(
                    "kubeturn_reconcile_errors_total",
                    f'{SCRAPED},pod="a",resource="workspaces"',
                    "0 1 2x40",
                ),
            ],
            "31m",
            _expected(
                errors,
                {"namespace": NAMESPACE, "resource": "runs"},
                {"$labels.resource": "runs", "$value | humanize": "15"},
            ),
        ),
        # Every sweep waits 5-10 s: p99 9.95 s; every sweep in milliseconds: quiet.
        case(
            slow["alert"],
            buckets(0, 10),
            "30m",
            _expected(slow, {"namespace": NAMESPACE}, {"$value | humanizeDuration": "9.95s"}),
        ),
        case(slow["alert"], buckets(10, 0), "30m"),
        # Half the Turns failed for the last hour: firing; none failed: quiet.
        case(
            failing["alert"],
            [turns("failed", "", "0+1x60"), turns("ended", "pick", "0+1x60")],
            "50m",
            _expected(failing, {"namespace": NAMESPACE}, {"$value | humanizePercentage": "50%"}),
        ),
        case(
            failing["alert"],
            [turns("failed", "", "0x60"), turns("ended", "pick", "0+1x60")],
            "50m",
        ),
    ]


def test_prometheus_rule_alerts_fire_as_promtool_evaluates_them(helm: str, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "no promtool (Debian's prometheus package has it): the alerts are not evaluated"
        )
    objects = _alert_rendering(helm)
    groups = _one(objects, "PrometheusRule", FULLNAME)["spec"]["groups"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": _promtool_cases(_alerts(objects)),
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    for command in (["check", "rules", "rules.yaml"], ["test", "rules", "tests.yaml"]):
        result = subprocess.run(
            [promtool, *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=PROMTOOL_SECONDS,
            check=False,
        )
        assert result.returncode == 0, (
            f"promtool {' '.join(command)}:\n{result.stdout}{result.stderr}"
        )


# --------------------------------------------------------------------------- providers


def test_providers_config_map_is_what_the_harness_accepts(
    default_objects: list[Object], custom_objects: list[Object]
) -> None:
    from kubeturn_harness.pricing import Price
    from kubeturn_harness.providers import Providers, ProvidersFile

    def providers(objects: list[Object]) -> Any:
        config_map = _one(objects, "ConfigMap", f"{FULLNAME}-providers")
        return yaml.safe_load(config_map["data"]["providers.yaml"])

    assert providers(default_objects) == {}
    parsed = providers(custom_objects)
    assert parsed == {
        "openai": {
            "type": "openai",
            "baseUrl": "https://api.openai.com/v1",
            "apiKeyEnv": "OPENAI_API_KEY",
            "pricing": {"gpt-4.1": {"input": 2.0, "output": 8.0, "cacheRead": 0.5}},
        },
        "local": {
            "type": "openai",
            "baseUrl": "http://vllm.models.svc:8000/v1",
            "retry": {"attempts": 5, "maxRetryAfterSeconds": 60},
            "timeouts": {"idleSeconds": 180},
        },
        "claude": {"type": "anthropic", "baseUrl": "https://api.anthropic.com", "maxTokens": 4096},
    }
    ProvidersFile.model_validate(parsed)  # extra="forbid": no apiKeySecret may leak in
    assert Providers.parse(yaml.safe_dump(parsed), "chart").resolve("openai/gpt-4.1").price == (
        Price(input=Decimal("2"), output=Decimal("8"), cacheRead=Decimal("0.5"))
    )


def test_the_schemas_provider_policy_is_the_harnesss() -> None:
    from kubeturn_harness.providers import RetrySpec, TimeoutSpec

    schema = json.loads((CHART / "values.schema.json").read_text())
    entry = schema["properties"]["providers"]["additionalProperties"]["properties"]
    for key, model in [("retry", RetrySpec), ("timeouts", TimeoutSpec)]:
        harness = model.model_json_schema()["properties"]
        chart = entry[key]["properties"]
        assert set(chart) == set(harness), key
        for name, bounds in chart.items():
            for bound in ("minimum", "exclusiveMinimum", "maximum"):
                assert bounds.get(bound) == harness[name].get(bound), f"{key}.{name} {bound}"


def test_notes_tell_how_a_workspace_gets_the_api_key(helm: str) -> None:
    # `helm install --dry-run` renders NOTES.txt (template does not); no cluster is used.
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    notes = _helm(helm, *args, "--values", str(CUSTOM_VALUES)).stdout.split("NOTES:", 1)[1]
    assert "name: OPENAI_API_KEY" in notes
    assert "name: openai-api-key" in notes
    assert "key: api-key" in notes
    assert f"http://{FULLNAME}-orchestrator.{NAMESPACE}.svc:8081" in notes


# --------------------------------------------------------------------------- election


def test_no_kopf_peering_is_left(
    default_text: str, custom_text: str, default_objects: list[Object]
) -> None:
    for text in [default_text, custom_text]:
        assert "kopf.dev" not in text
        assert "PEERING" not in text
    assert not list((CHART / "templates").glob("peering*"))
    # The env the operator reads the Lease's namespace from is the pod's own namespace.
    env = _env(default_objects)
    assert env["KUBETURN_OPERATOR_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_require_confinement_reaches_the_operator(helm: str) -> None:
    text = _helm(helm, *_template_args(None), "--set", "sandbox.requireConfinement=true").stdout
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    assert _env(objects)["KUBETURN_REQUIRE_CONFINEMENT"] == "true"


def test_turn_retention_reaches_the_operator(helm: str) -> None:
    text = _helm(helm, *_template_args(None), "--set", "turnRetention=24h").stdout
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    assert _env(objects)["KUBETURN_TURN_RETENTION"] == "24h"


def test_a_namespace_cap_on_live_turns_reaches_the_operator_only_when_set(helm: str) -> None:
    text = _helm(helm, *_template_args(None), "--set", "maxLiveTurnsPerNamespace=4").stdout
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    assert _env(objects)["KUBETURN_NAMESPACE_MAX_LIVE_TURNS"] == "4"
    default = [doc for doc in yaml.safe_load_all(_helm(helm, *_template_args(None)).stdout) if doc]
    assert "KUBETURN_NAMESPACE_MAX_LIVE_TURNS" not in _env(default)


def test_recreate_renders_without_rolling_update(helm: str) -> None:
    text = _helm(helm, *_template_args(None), "--set", "strategy.type=Recreate").stdout
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    assert _one(objects, "Deployment", FULLNAME)["spec"]["strategy"] == {"type": "Recreate"}
    assert not _validate([_one(objects, "Deployment", FULLNAME)])


# --------------------------------------------------------------------------- values


_KEY = re.compile(r"^(?P<indent> *)(?:- )?(?P<key>[A-Za-z0-9_.\-/]+):(?: |$)")


def test_every_values_key_has_a_comment() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    uncommented = []
    for number, line in enumerate(lines):
        if _KEY.match(line) is None:
            continue
        previous = next((p for p in reversed(lines[:number]) if p.strip()), "")
        if not previous.lstrip().startswith("#") and " #" not in line:
            uncommented.append(f"values.yaml:{number + 1}: {line.strip()}")
    assert not uncommented, "keys without a comment:\n" + "\n".join(uncommented)


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("unknownKey=1", "additional properties 'unknownKey' not allowed"),
        ("logFormat=xml", "logFormat"),
        (
            "providers.p.baseUrl=http://m:8000/v1,providers.p.apiKeySecret.name=s,"
            "providers.p.apiKeySecret.key=k",
            "apiKeyEnv",
        ),
        ("providers.p.baseUrl=http://m:8000/v1,providers.p.retry.attempts=0", "attempts"),
        ("providers.p.baseUrl=http://m:8000/v1,providers.p.timeouts.idle=5", "idle"),
        ("leaderElection.leaseDurationSeconds=1.5", "leaseDurationSeconds"),
        (
            "leaderElection.renewDeadlineSeconds=15",
            "renewDeadlineSeconds must be below leaseDurationSeconds",
        ),
        (
            "leaderElection.retryPeriodSeconds=9",
            "above 1.2 × retryPeriodSeconds",
        ),
        ("metrics.prometheusRule.failedTurns.ratio=2", "ratio"),
        ("metrics.prometheusRule.sweepLatency.window=ten", "window"),
        ("turnRetention=1d", "/turnRetention"),
        ("sandbox.egress.public.ports=[]", "/sandbox/egress/public/ports"),
        ('sandbox.egress.rules=[{"ports":[{"port":80}]}]', "missing property 'to'"),
        (
            'sandbox.egress.rules=[{"to":[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]}]',
            "/sandbox/egress/rules/0/to/0/podSelector",
        ),
        (
            'sandbox.egress.rules=[{"to":[{"ipBlock":{"cidr":"10.0.0.1"}}]}]',
            "/sandbox/egress/rules/0/to/0/ipBlock/cidr",
        ),
        ('sandbox.egress.public.ports=[{"endPort":90}]', "'port' required"),
        ('networkPolicy.metricsFrom=[{"namespaceSelectr":{}}]', "'namespaceSelectr'"),
        ('sandbox.resources={"toolbox":{}}', "'toolbox'"),
    ],
    ids=[
        "unknown-key",
        "log-format",
        "secret-without-env",
        "no-attempts",
        "unknown-timeout",
        "fractional-lease",
        "renew-deadline-above-lease",
        "retry-period-too-long",
        "failed-ratio-above-one",
        "alert-window-not-a-duration",
        "turn-retention-in-days",
        "no-public-ports",
        "rule-without-destinations",
        "ip-block-and-selector",
        "cidr-without-prefix",
        "end-port-without-port",
        "misspelt-metrics-peer",
        "unknown-sandbox-container",
    ],
)
def test_values_schema_rejects(helm: str, setting: str, complaint: str) -> None:
    flag = "--set-json" if setting.startswith(("sandbox.", "networkPolicy.")) else "--set"
    result = _helm(helm, *_template_args(None), flag, setting, check=False)
    assert result.returncode != 0, f"--set {setting} was accepted"
    assert complaint in result.stderr, result.stderr
