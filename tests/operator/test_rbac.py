"""The emulator's RBAC (:mod:`tests.operator.rbac`), rule by rule as the Kubernetes
documentation states it, then as the emulator enforces it over HTTP.

Each rule quotes the documentation it checks ("Using RBAC Authorization" and
"Authorization" on kubernetes.io, 1.35):

- request verbs: POST create; GET and HEAD get for one object, list for a collection,
  watch with ``?watch``; PUT update; PATCH patch; DELETE delete, deletecollection for a
  collection; a non-resource request's verb is its lower-cased HTTP method;
- verbs, API groups and resources match themselves or ``*``; there are no deny rules;
- a subresource is ``resource/subresource``: ``pods`` does not grant ``pods/status``, and
  ``*/status`` grants every resource's status;
- resourceNames restrict get, update, patch and delete to those names; they cannot
  restrict create or deletecollection; a list or watch is allowed only with a
  ``metadata.name`` field selector naming one of them;
- nonResourceURLs match exactly or as a ``*`` suffix glob, through a ClusterRoleBinding;
- a Role grants in its namespace only, a ClusterRoleBinding everywhere and on
  cluster-scoped resources, a RoleBinding of a ClusterRole in the binding's namespace only;
  a request on a Namespace itself is in that namespace;
- subjects: users by name, groups, ServiceAccounts as ``system:serviceaccount:<ns>:<name>``
  in ``system:serviceaccounts``, ``system:serviceaccounts:<ns>`` and
  ``system:authenticated``;
- a binding to a missing role grants nothing, and the refusal says which role; the
  privileged group ``system:masters`` is allowed everything; aggregated ClusterRoles are
  refused (not emulated);
- the default roles: every authenticated user reads discovery; anyone reads ``/version``;
- a refusal's 403 ``Status``: reason ``Forbidden``, kube-apiserver's message, details.

Over HTTP, in the emulator: no token is anonymous (discovery refused, ``/version``
served), a token never issued is 401; a ServiceAccount's token gets what RBAC objects
stored in the emulator grant, a new binding taking effect at once; a watch by a
``metadata.name`` field selector is allowed by a resourceNames rule; the
OwnerReferencesPermissionEnforcement admission: a ``blockOwnerDeletion`` reference needs
``update`` on the owner's ``finalizers``, and changing an object's ownerReferences needs
``delete`` on it; a refused request reaches no reaction and stores nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp
import kmock
import pytest

from tests.operator import emulator, rbac

Body = dict[str, Any]
GROUP = rbac.GROUP
ALICE = rbac.User("alice", ("devs", rbac.AUTHENTICATED))
ROBOT = rbac.service_account("team", "robot")


def role(name: str, *rules: Mapping[str, Any], namespace: str | None = None) -> Body:
    kind = "Role" if namespace else "ClusterRole"
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": meta, "rules": list(rules)}


def binding(
    name: str,
    role_name: str,
    *subjects: Mapping[str, str],
    namespace: str | None = None,
    role_kind: str | None = None,
) -> Body:
    kind = "RoleBinding" if namespace else "ClusterRoleBinding"
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    ref = {"apiGroup": GROUP, "kind": role_kind or ("Role" if namespace else "ClusterRole")}
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": ref | {"name": role_name},
        "subjects": list(subjects),
    }


def user(name: str) -> dict[str, str]:
    return {"kind": "User", "name": name, "apiGroup": GROUP}


def rule(
    verbs: Sequence[str], groups: Sequence[str], resources: Sequence[str], **more: Any
) -> Body:
    return {"verbs": list(verbs), "apiGroups": list(groups), "resources": list(resources)} | more


def alice_with(*rules: Mapping[str, Any]) -> rbac.Policy:
    """alice, bound everywhere to a ClusterRole of ``rules``."""
    return rbac.policy_of([role("r", *rules), binding("b", "r", user("alice"))])


def asks(
    method: str, path: str, query: Mapping[str, str] | None = None, who: rbac.User = ALICE
) -> rbac.Attributes:
    return rbac.attributes_of(who, method, path, query or {})


def allowed(policy: rbac.Policy, attributes: rbac.Attributes) -> bool:
    return rbac.authorize(policy, attributes).allowed


PODS = "/api/v1/namespaces/team/pods"


# --- Request verbs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "verb"),
    [
        ("POST", PODS, {}, "create"),
        ("GET", f"{PODS}/p", {}, "get"),
        ("HEAD", f"{PODS}/p", {}, "get"),
        ("GET", PODS, {}, "list"),
        ("GET", PODS, {"watch": "true"}, "watch"),
        ("GET", PODS, {"watch": "1"}, "watch"),
        ("GET", "/api/v1/watch/namespaces/team/pods", {}, "watch"),
        ("PUT", f"{PODS}/p", {}, "update"),
        ("PATCH", f"{PODS}/p", {}, "patch"),
        ("DELETE", f"{PODS}/p", {}, "delete"),
        ("DELETE", PODS, {}, "deletecollection"),
        ("GET", "/api", {}, "get"),
        ("POST", "/healthz", {}, "post"),
    ],
)
def test_request_verbs_follow_the_http_method_and_what_is_named(
    method: str, path: str, query: dict[str, str], verb: str
) -> None:
    """ "POST create; GET, HEAD get (for individual resources), list (for collections),
    watch (for watching); PUT update; PATCH patch; DELETE delete (for individual
    resources), deletecollection (for collections)"; non-resource requests "use the
    lower-cased HTTP method of the request as the verb"."""
    assert asks(method, path, query).verb == verb


def test_request_attributes_name_group_resource_subresource_namespace() -> None:
    found = asks("PATCH", "/apis/kubeturn.dev/v1alpha1/namespaces/team/runs/r/status")
    assert (found.api_group, found.api_version, found.resource) == (
        "kubeturn.dev",
        "v1alpha1",
        "runs",
    )
    assert (found.subresource, found.namespace, found.name) == ("status", "team", "r")
    assert found.resource_request
    for path in ("/api", "/api/v1", "/apis/kubeturn.dev/v1alpha1", "/version", "/healthz"):
        assert not asks("GET", path).resource_request, path


# --- Verbs, groups, resources ----------------------------------------------------------


def test_a_verb_matches_itself_or_the_wildcard() -> None:
    """ "you can use the wildcard * symbol to refer to all such objects" (verbs)."""
    policy = alice_with(rule(["get"], [""], ["pods"]))
    assert allowed(policy, asks("GET", f"{PODS}/p"))
    assert not allowed(policy, asks("DELETE", f"{PODS}/p"))
    every = alice_with(rule(["*"], [""], ["pods"]))
    assert all(allowed(every, asks(m, f"{PODS}/p")) for m in ("GET", "PUT", "PATCH", "DELETE"))


def test_an_api_group_matches_itself_the_core_group_or_the_wildcard() -> None:
    """The core group is ``""``; ``*`` is every group."""
    core = alice_with(rule(["get"], [""], ["*"]))
    assert allowed(core, asks("GET", f"{PODS}/p"))
    assert not allowed(core, asks("GET", "/apis/apps/v1/namespaces/team/deployments/d"))
    every = alice_with(rule(["get"], ["*"], ["deployments"]))
    assert allowed(every, asks("GET", "/apis/apps/v1/namespaces/team/deployments/d"))


def test_a_resource_matches_itself_or_the_wildcard() -> None:
    policy = alice_with(rule(["get"], [""], ["configmaps"]))
    assert allowed(policy, asks("GET", "/api/v1/namespaces/team/configmaps/c"))
    assert not allowed(policy, asks("GET", "/api/v1/namespaces/team/secrets/s"))
    assert allowed(alice_with(rule(["get"], [""], ["*"])), asks("GET", "/api/v1/namespaces/t/x/y"))


def test_rules_are_additive_and_nothing_is_allowed_by_default() -> None:
    """ "Permissions are purely additive (there are no "deny" rules)." """
    assert not allowed(rbac.policy_of([]), asks("GET", f"{PODS}/p"))
    two = alice_with(rule(["get"], [""], ["pods"]), rule(["delete"], [""], ["pods"]))
    assert allowed(two, asks("GET", f"{PODS}/p"))
    assert allowed(two, asks("DELETE", f"{PODS}/p"))


def test_a_subresource_is_granted_by_its_own_name_or_star_slash_it() -> None:
    """ "use a slash (/) to delimit the resource and subresource ... resources: ["pods",
    "pods/log"]": ``pods`` alone grants no subresource."""
    status = asks("PATCH", f"{PODS}/p/status")
    assert not allowed(alice_with(rule(["patch"], [""], ["pods"])), status)
    assert allowed(alice_with(rule(["patch"], [""], ["pods/status"])), status)
    assert allowed(alice_with(rule(["patch"], [""], ["*/status"])), status)
    assert not allowed(alice_with(rule(["patch"], [""], ["*/scale"])), status)
    assert not allowed(
        alice_with(rule(["patch"], [""], ["pods/status"])), asks("PATCH", f"{PODS}/p")
    )


# --- resourceNames ---------------------------------------------------------------------


def test_resource_names_restrict_requests_that_name_an_object() -> None:
    """ "You can also refer to resources by name for certain requests through the
    resourceNames list." """
    policy = alice_with(
        rule(["get", "update", "patch", "delete"], [""], ["configmaps"], resourceNames=["mine"])
    )
    for method in ("GET", "PUT", "PATCH", "DELETE"):
        assert allowed(policy, asks(method, "/api/v1/namespaces/team/configmaps/mine"))
        assert not allowed(policy, asks(method, "/api/v1/namespaces/team/configmaps/other"))


def test_resource_names_cannot_restrict_create_or_deletecollection() -> None:
    """ "You cannot restrict create or deletecollection requests by their resource name.
    For create, this limitation is because the name of the new object may not be known
    at authorization time." A rule with names grants neither."""
    names = alice_with(
        rule(["create", "deletecollection"], [""], ["configmaps"], resourceNames=["mine"])
    )
    assert not allowed(names, asks("POST", "/api/v1/namespaces/team/configmaps"))
    assert not allowed(names, asks("DELETE", "/api/v1/namespaces/team/configmaps"))
    plain = alice_with(rule(["create"], [""], ["configmaps"]))
    assert allowed(plain, asks("POST", "/api/v1/namespaces/team/configmaps"))


def test_a_list_or_watch_by_name_needs_a_metadata_name_field_selector() -> None:
    """ "If you restrict list or watch by resourceName, clients must include a
    metadata.name field selector in their list or watch request that matches the
    specified resourceName in order to be authorized." """
    policy = alice_with(rule(["list", "watch"], [""], ["configmaps"], resourceNames=["mine"]))
    collection = "/api/v1/namespaces/team/configmaps"
    assert not allowed(policy, asks("GET", collection))
    assert not allowed(policy, asks("GET", collection, {"watch": "true"}))
    assert allowed(policy, asks("GET", collection, {"fieldSelector": "metadata.name=mine"}))
    watch = {"watch": "true", "fieldSelector": "metadata.name==mine"}
    assert allowed(policy, asks("GET", collection, watch))
    assert not allowed(policy, asks("GET", collection, {"fieldSelector": "metadata.name=other"}))
    assert not allowed(policy, asks("GET", collection, {"fieldSelector": "metadata.name!=mine"}))


# --- Non-resource URLs -----------------------------------------------------------------


def test_non_resource_urls_match_exactly_or_by_a_star_suffix() -> None:
    """ "'*' in a nonResourceURL is a suffix glob match"."""
    policy = rbac.policy_of(
        [
            role("health", {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/healthz/*"]}),
            binding("b", "health", user("alice")),
        ]
    )
    assert allowed(policy, asks("GET", "/healthz"))
    assert allowed(policy, asks("GET", "/healthz/etcd"))
    assert not allowed(policy, asks("GET", "/healthzz"))
    assert not allowed(policy, asks("POST", "/healthz"))
    assert not allowed(policy, asks("GET", "/metrics"))


def test_non_resource_urls_are_not_granted_by_a_role_binding() -> None:
    """Non-resource endpoints have no namespace: only a ClusterRoleBinding reaches them."""
    policy = rbac.policy_of(
        [
            role("health", {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}),
            binding("b", "health", user("alice"), namespace="team", role_kind="ClusterRole"),
        ]
    )
    assert not allowed(policy, asks("GET", "/healthz"))


# --- Roles and bindings ----------------------------------------------------------------


def test_a_role_grants_in_its_own_namespace_only() -> None:
    """ "A Role always sets permissions within a particular namespace"."""
    policy = rbac.policy_of(
        [
            role("reader", rule(["get", "list"], [""], ["pods"]), namespace="team"),
            binding("b", "reader", user("alice"), namespace="team"),
        ]
    )
    assert allowed(policy, asks("GET", f"{PODS}/p"))
    assert not allowed(policy, asks("GET", "/api/v1/namespaces/other/pods/p"))
    assert not allowed(policy, asks("GET", "/api/v1/pods"))  # every namespace


def test_a_cluster_role_binding_grants_everywhere_and_cluster_scoped_resources() -> None:
    """ "If you want to bind a ClusterRole to all the namespaces in your cluster, you use
    a ClusterRoleBinding." """
    policy = alice_with(rule(["get", "list"], [""], ["pods", "namespaces"]))
    assert allowed(policy, asks("GET", f"{PODS}/p"))
    assert allowed(policy, asks("GET", "/api/v1/pods"))
    assert allowed(policy, asks("GET", "/api/v1/namespaces"))


def test_a_role_binding_of_a_cluster_role_grants_in_the_bindings_namespace() -> None:
    """ "a RoleBinding can reference a ClusterRole and bind that ClusterRole to the
    namespace of the RoleBinding." """
    policy = rbac.policy_of(
        [
            role("secret-reader", rule(["get"], [""], ["secrets"])),
            binding("b", "secret-reader", user("alice"), namespace="team", role_kind="ClusterRole"),
        ]
    )
    assert allowed(policy, asks("GET", "/api/v1/namespaces/team/secrets/s"))
    assert not allowed(policy, asks("GET", "/api/v1/namespaces/other/secrets/s"))
    assert not allowed(policy, asks("GET", "/api/v1/secrets"))


def test_a_request_on_a_namespace_itself_is_in_that_namespace() -> None:
    """kube-apiserver's RequestInfo: ``/api/v1/namespaces/X`` is in namespace X, so a
    RoleBinding there may grant reading it."""
    policy = rbac.policy_of(
        [
            role("ns", rule(["get"], [""], ["namespaces"]), namespace="team"),
            binding("b", "ns", user("alice"), namespace="team"),
        ]
    )
    assert allowed(policy, asks("GET", "/api/v1/namespaces/team"))
    assert not allowed(policy, asks("GET", "/api/v1/namespaces/other"))
    assert not allowed(policy, asks("GET", "/api/v1/namespaces"))


# --- Subjects --------------------------------------------------------------------------


def test_subjects_are_users_groups_and_service_accounts() -> None:
    """ "ServiceAccounts have names prefixed with system:serviceaccount:, and belong to
    groups that have names prefixed with system:serviceaccounts:"; system:serviceaccounts
    is every ServiceAccount, system:authenticated every authenticated user."""
    assert ROBOT.name == "system:serviceaccount:team:robot"
    assert ROBOT.groups == (
        "system:serviceaccounts",
        "system:serviceaccounts:team",
        "system:authenticated",
    )
    reading = role("reader", rule(["get"], [""], ["pods"]))

    def subject(who: Mapping[str, str], namespace: str | None = None) -> rbac.Policy:
        return rbac.policy_of(
            [reading, binding("b", "reader", who, namespace=namespace, role_kind="ClusterRole")]
        )

    get = asks("GET", f"{PODS}/p", who=ROBOT)
    assert allowed(subject({"kind": "ServiceAccount", "name": "robot", "namespace": "team"}), get)
    assert not allowed(subject({"kind": "ServiceAccount", "name": "robot", "namespace": "x"}), get)
    # A RoleBinding's ServiceAccount without a namespace is one of the binding's namespace.
    assert allowed(subject({"kind": "ServiceAccount", "name": "robot"}, "team"), get)
    assert not allowed(subject({"kind": "ServiceAccount", "name": "robot"}), get)
    for group in ("system:serviceaccounts", "system:serviceaccounts:team", rbac.AUTHENTICATED):
        assert allowed(subject({"kind": "Group", "name": group, "apiGroup": GROUP}), get)
    assert not allowed(subject({"kind": "Group", "name": "system:serviceaccounts:x"}), get)
    assert not allowed(subject(user("system:serviceaccount:team:robot2")), get)
    assert allowed(subject(user("system:serviceaccount:team:robot")), get)


def test_a_binding_to_a_missing_role_grants_nothing_and_says_so() -> None:
    policy = rbac.policy_of([binding("b", "gone", user("alice"))])
    decision = rbac.authorize(policy, asks("GET", f"{PODS}/p"))
    assert decision == rbac.Decision(
        False, 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found'
    )


def test_the_privileged_group_is_allowed_everything() -> None:
    """system:masters: cluster-admin's group, allowed before RBAC is asked."""
    admin = rbac.User("root", (rbac.PRIVILEGED_GROUP,))
    assert allowed(rbac.policy_of([]), asks("DELETE", "/api/v1/namespaces/kube-system", who=admin))


def test_aggregated_cluster_roles_are_refused_not_emulated() -> None:
    aggregated = role("view") | {
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}
    }
    with pytest.raises(ValueError, match="aggregation is not emulated"):
        rbac.policy_of([aggregated])


def test_the_default_roles_let_the_authenticated_discover_and_anyone_read_the_version() -> None:
    """ "system:discovery: Allows read-only access to API discovery endpoints";
    "system:public-info-viewer: Allows read-only access to non-sensitive information about
    the cluster", to system:authenticated and system:unauthenticated."""
    policy = rbac.policy_of(rbac.BOOTSTRAP)
    for path in ("/api", "/api/v1", "/apis", "/apis/kubeturn.dev/v1alpha1", "/version"):
        assert allowed(policy, asks("GET", path, who=ROBOT)), path
    assert allowed(policy, asks("GET", "/version", who=rbac.ANONYMOUS))
    assert not allowed(policy, asks("GET", "/apis", who=rbac.ANONYMOUS))
    assert not allowed(policy, asks("GET", f"{PODS}/p", who=ROBOT))


# --- Refusals --------------------------------------------------------------------------


def test_a_refusal_is_the_api_servers_403_status() -> None:
    named = rbac.forbidden(
        asks("GET", "/apis/kubeturn.dev/v1alpha1/namespaces/team/runs/r", who=ROBOT)
    )
    assert named.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'runs.kubeturn.dev "r" is forbidden: User "system:serviceaccount:team:robot" '
        'cannot get resource "runs" in API group "kubeturn.dev" in the namespace "team"',
        "reason": "Forbidden",
        "details": {"name": "r", "group": "kubeturn.dev", "kind": "runs"},
        "code": 403,
    }
    listed = rbac.forbidden(asks("GET", "/api/v1/secrets", who=ROBOT))
    assert listed.message == (
        'secrets is forbidden: User "system:serviceaccount:team:robot" cannot list resource '
        '"secrets" in API group "" at the cluster scope'
    )
    assert listed.details == {"kind": "secrets"}
    status = rbac.forbidden(asks("PATCH", f"{PODS}/p/status", who=ROBOT), "RBAC: x")
    assert status.message.endswith(
        'cannot patch resource "pods/status" in API group "" in the namespace "team": RBAC: x'
    )
    path = rbac.forbidden(asks("GET", "/metrics", who=rbac.ANONYMOUS))
    assert path.message == 'forbidden: User "system:anonymous" cannot get path "/metrics"'


# --- In the emulator, over HTTP --------------------------------------------------------


@pytest.fixture
async def http(k8s: emulator.KubernetesApi) -> AsyncIterator[aiohttp.ClientSession]:
    """A client with no credentials of its own: each request brings its token."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(str(k8s.url), connector=connector) as session:
        yield session


async def send(
    http: aiohttp.ClientSession, method: str, path: str, token: str | None, body: Any = None
) -> tuple[int, Body]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if body is not None:
        kind = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers["Content-Type"] = kind
    data = json.dumps(body) if body is not None else None
    async with http.request(method, path, headers=headers, data=data) as answer:
        text = await answer.text()
        return answer.status, json.loads(text) if text else {}


def robot(k8s: emulator.KubernetesApi, *objects: Body) -> str:
    """A token of the ServiceAccount team/robot, after storing ``objects``."""
    k8s.create_object("v1/namespaces", {"metadata": {"name": "team"}})
    k8s.create_object("v1/serviceaccounts", {"metadata": {"name": "robot", "namespace": "team"}})
    for body in objects:
        resource = f"{GROUP}/v1/{body['kind'].lower()}s"
        k8s.create_object(resource, body)
    return k8s.issue_token("team", "robot")


def account() -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": "robot", "namespace": "team"}


async def test_no_token_is_anonymous_and_a_token_never_issued_is_unauthorized(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    assert (await send(http, "GET", "/version", None))[0] == 200
    code, body = await send(http, "GET", "/apis", None)
    assert (code, body["message"]) == (
        403,
        'forbidden: User "system:anonymous" cannot get path "/apis"',
    )
    assert (await send(http, "GET", f"{PODS}", None))[0] == 403
    code, body = await send(http, "GET", "/apis", "made-up")
    assert (code, body["reason"], body["message"]) == (401, "Unauthorized", "Unauthorized")
    assert (await send(http, "GET", PODS, k8s.admin_token))[0] == 200


async def test_a_service_account_gets_what_the_stored_rbac_objects_grant(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    token = robot(
        k8s, role("reader", rule(["get", "list"], [""], ["configmaps"]), namespace="team")
    )
    configmaps = "/api/v1/namespaces/team/configmaps"
    k8s.create_object("v1/configmaps", {"metadata": {"name": "c", "namespace": "team"}})
    assert (await send(http, "GET", "/api/v1", token))[0] == 200  # discovery
    code, body = await send(http, "GET", configmaps, token)
    assert code == 403
    assert body["message"] == (
        'configmaps is forbidden: User "system:serviceaccount:team:robot" cannot list '
        'resource "configmaps" in API group "" in the namespace "team"'
    )
    # A binding made now takes effect at once.
    k8s.create_object(
        f"{GROUP}/v1/rolebindings", binding("b", "reader", account(), namespace="team")
    )
    assert (await send(http, "GET", configmaps, token))[0] == 200
    assert (await send(http, "GET", f"{configmaps}/c", token))[0] == 200
    assert (await send(http, "DELETE", f"{configmaps}/c", token))[0] == 403
    assert k8s.read_object("v1/configmaps", "team", "c") is not None
    assert (await send(http, "GET", "/api/v1/namespaces/default/configmaps", token))[0] == 403
    refused = [a for a, d in k8s.authorizations if not d.allowed]
    assert [(a.verb, a.resource, a.namespace) for a in refused] == [
        ("list", "configmaps", "team"),
        ("delete", "configmaps", "team"),
        ("list", "configmaps", "default"),
    ]


async def test_a_watch_by_name_is_allowed_by_a_resource_names_rule(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    names = rule(["get", "list", "watch"], [""], ["configmaps"], resourceNames=["mine"])
    token = robot(
        k8s,
        role("mine", names, namespace="team"),
        binding("b", "mine", account(), namespace="team"),
    )
    path = "/api/v1/namespaces/team/configmaps?watch=true&timeoutSeconds=1"
    assert (await send(http, "GET", path, token))[0] == 403
    assert (await send(http, "GET", f"{path}&fieldSelector=metadata.name%3Dmine", token))[0] == 200


async def test_a_refused_request_reaches_no_reaction_and_stores_nothing(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    token = robot(k8s)
    k8s["post", kmock.resource("v1/configmaps")] << 503
    body = {"metadata": {"name": "c"}}
    assert (await send(http, "POST", "/api/v1/namespaces/team/configmaps", token, body))[0] == 403
    assert k8s.read_object("v1/configmaps", "team", "c") is None


# --- The OwnerReferencesPermissionEnforcement admission ---------------------------------


def owned(name: str, owner: Body, *, block: bool = True) -> Body:
    meta = owner["metadata"]
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": block,
    }
    return {"metadata": {"name": name, "namespace": "team", "ownerReferences": [reference]}}


async def test_blocking_an_owners_deletion_needs_update_on_its_finalizers(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    """ "protects access to metadata.ownerReferences[x].blockOwnerDeletion so that only
    users with update permission to the finalizers subresource of the referenced owner
    can change it." """
    make = rule(["create", "get", "patch"], [""], ["secrets"])
    token = robot(
        k8s,
        role("maker", make, namespace="team"),
        binding("b", "maker", account(), namespace="team"),
    )
    owner = k8s.create_object("v1/configmaps", {"metadata": {"name": "owner", "namespace": "team"}})
    secrets = "/api/v1/namespaces/team/secrets"
    code, body = await send(http, "POST", secrets, token, owned("s", owner))
    assert code == 403
    assert body["message"] == (
        'secrets "s" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers '
        "to a resource you can't set finalizers on: , <nil>"
    )
    assert (await send(http, "POST", secrets, token, owned("s", owner, block=False)))[0] == 201
    finalizers = rule(["update"], [""], ["configmaps/finalizers"], resourceNames=["owner"])
    k8s.create_object(f"{GROUP}/v1/roles", role("finalizer", finalizers, namespace="team"))
    k8s.create_object(
        f"{GROUP}/v1/rolebindings", binding("f", "finalizer", account(), namespace="team")
    )
    assert (await send(http, "POST", secrets, token, owned("t", owner)))[0] == 201


async def test_changing_an_objects_owner_references_needs_delete_on_it(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession
) -> None:
    """ "protects the access to the metadata.ownerReferences of an object so that only
    users with delete permission to the object can change it." """
    token = robot(
        k8s,
        role("maker", rule(["create", "patch"], [""], ["secrets"]), namespace="team"),
        binding("b", "maker", account(), namespace="team"),
    )
    owner = k8s.create_object("v1/configmaps", {"metadata": {"name": "owner", "namespace": "team"}})
    secrets = "/api/v1/namespaces/team/secrets"
    assert (await send(http, "POST", secrets, token, {"metadata": {"name": "s"}}))[0] == 201
    labels = {"metadata": {"labels": {"a": "b"}}}
    assert (await send(http, "PATCH", f"{secrets}/s", token, labels))[0] == 200
    patch = {
        "metadata": {
            "ownerReferences": owned("s", owner, block=False)["metadata"]["ownerReferences"]
        }
    }
    code, body = await send(http, "PATCH", f"{secrets}/s", token, patch)
    assert code == 403
    assert body["message"].startswith(
        'secrets "s" is forbidden: cannot set an ownerRef on a resource you can\'t delete'
    )
    assert "ownerReferences" not in (k8s.read_object("v1/secrets", "team", "s") or {})["metadata"]


def test_the_emulator_serves_the_rbac_kinds() -> None:
    served = emulator.builtin_resources()
    for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings"):
        assert f"{GROUP}/v1/{plural}" in served
    assert "v1/serviceaccounts" in served
