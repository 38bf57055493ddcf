"""Kubernetes authentication results and RBAC authorization as pure functions.

kube-apiserver authenticates a request (a bearer token names a :class:`User`), describes
what it asks (:func:`attributes_of`, as its ``RequestInfoFactory`` does: the verb, the API
group, resource and subresource, the namespace and the name), and asks its authorizers in
turn: members of ``system:masters`` are allowed everything before RBAC is asked; RBAC
(:func:`authorize`) allows a request when one rule of one role bound to the user matches
it, and has no opinion otherwise (nothing else is asked here, so that is a 403). The rules,
as ``k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go`` evaluates them:

- a verb matches itself or ``*``; an API group itself or ``*`` (``""`` is the core group);
- a resource matches itself or ``*``; a subresource request (``pods/status``) matches
  ``pods/status``, ``*/status`` or ``*``, never ``pods`` alone;
- a rule with ``resourceNames`` matches only requests that name one of them: a list or
  watch names an object only through a ``metadata.name=`` field selector, and a create or
  a deletecollection never names one, so such a rule never grants them;
- a non-resource URL (``/version``, ``/apis``) matches itself, ``*``, or a pattern ending
  in ``*`` that prefixes it; only ClusterRoleBindings grant them (the request has no
  namespace);
- a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its Role,
  or a ClusterRole it refers to, in its own namespace only; a request on the Namespace
  ``X`` itself (``/api/v1/namespaces/X``) is a request in namespace ``X``;
- a subject is a User (by name), a Group (the user is in it) or a ServiceAccount (the user
  ``system:serviceaccount:<namespace>:<name>``; a RoleBinding's subject without a
  namespace means the binding's); there are no deny rules; a binding to a role that
  does not exist grants nothing, and the refusal's reason says which.

:func:`forbidden` shapes a refusal as kube-apiserver's 403 ``Status``. Aggregated
ClusterRoles (``aggregationRule``) are refused by :func:`policy_of`: the controller that
fills their rules is not emulated, and the chart has none. No IO and no state here; the
emulator (:mod:`tests.operator.emulator`) applies these to its stored RBAC objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tests.operator import apimachinery

Body = dict[str, Any]

GROUP = "rbac.authorization.k8s.io"
PRIVILEGED_GROUP = "system:masters"
"""Allowed everything before RBAC is asked (kube-apiserver's privileged-group authorizer)."""
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
NAMESPACE_SUBRESOURCES = ("status", "finalize")
"""Parts after ``/namespaces/NAME`` that are the Namespace's own subresources."""
TRUE = ("1", "t", "T", "TRUE", "true", "True")
"""What Go's ``strconv.ParseBool`` reads as true (``?watch=``)."""
ALL = "*"


@dataclasses.dataclass(frozen=True)
class User:
    """Who an authenticated request is (``user.Info``)."""

    name: str
    groups: tuple[str, ...] = ()


ANONYMOUS = User("system:anonymous", (UNAUTHENTICATED,))
"""A request without credentials, where anonymous requests are enabled (the default)."""


def service_account(namespace: str, name: str) -> User:
    """The user a ServiceAccount's token authenticates as, with the groups every
    ServiceAccount is in."""
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


# --- What a request asks ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Attributes:
    """What a request asks (``authorizer.Attributes``): a resource request has a group,
    resource and maybe a subresource, namespace and name; any other request has a path."""

    user: User
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        """``resource/subresource`` (or the resource alone), as rules name it."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def attributes_of(user: User, method: str, path: str, query: Mapping[str, str]) -> Attributes:
    """What a request asks, as kube-apiserver's ``RequestInfoFactory`` reads its method,
    path and query (``/api/v1/...`` and ``/apis/GROUP/VERSION/...`` are resource
    requests, every other path not; ``/watch/`` and ``/proxy/`` prefixes are verbs)."""
    parts = path.strip("/").split("/") if path.strip("/") else []
    plain = Attributes(user, method.lower(), resource_request=False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return plain
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in ("watch", "proxy"):
        verb, parts = parts[0], parts[1:]
    else:
        verbs = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update"}
        verbs |= {"PATCH": "patch", "DELETE": "delete"}
        verb = verbs.get(method.upper(), "")
    namespace = ""
    if parts and parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0] if parts else ""
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in TRUE else "list"
        name = _named_by_field_selector(query.get("fieldSelector", ""))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(
        user,
        verb,
        resource_request=True,
        path=path,
        api_group=group,
        api_version=version,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )


def _named_by_field_selector(text: str) -> str:
    """The name a list or watch asks for by ``metadata.name=X`` (``RequiresExactMatch``),
    if it is a valid path segment; else ``""``."""
    for term in filter(None, text.split(",")):
        key, operator, value = term.partition("==") if "==" in term else term.partition("=")
        if operator and not key.endswith("!") and key.strip() == "metadata.name":
            value = value.strip()
            valid = value not in (".", "..") and not any(c in value for c in "/%")
            return value if valid else ""
    return ""


# --- Rules, roles and bindings ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PolicyRule:
    """One rule of a Role or ClusterRole."""

    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> PolicyRule:
        def field(key: str) -> tuple[str, ...]:
            return tuple(body.get(key) or ())

        return cls(
            verbs=field("verbs"),
            api_groups=field("apiGroups"),
            resources=field("resources"),
            resource_names=field("resourceNames"),
            non_resource_urls=field("nonResourceURLs"),
        )

    def atoms(self) -> Iterator[PolicyRule]:
        """The rule as single-verb, single-group, single-resource (or single-URL) rules:
        what it grants, one permission at a time."""
        for verb in self.verbs:
            for url in self.non_resource_urls:
                yield PolicyRule((verb,), non_resource_urls=(url,))
            for group in self.api_groups:
                for resource in self.resources:
                    yield PolicyRule((verb,), (group,), (resource,), self.resource_names)


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return ALL in rule.verbs or verb in rule.verbs


def api_group_matches(rule: PolicyRule, group: str) -> bool:
    return ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: PolicyRule, combined: str, subresource: str) -> bool:
    """``*``, the exact ``resource[/subresource]``, or ``*/subresource``."""
    for granted in rule.resources:
        if granted in (ALL, combined):
            return True
        if subresource and granted == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: PolicyRule, name: str) -> bool:
    """No names: any object. Names: only a request naming one of them (``""`` never does)."""
    return not rule.resource_names or name in rule.resource_names


def non_resource_url_matches(rule: PolicyRule, path: str) -> bool:
    for granted in rule.non_resource_urls:
        if granted in (ALL, path):
            return True
        if granted.endswith("*") and path.startswith(granted.rstrip("*")):
            return True
    return False


def rule_allows(attributes: Attributes, rule: PolicyRule) -> bool:
    """Whether ``rule`` matches the request (``RuleAllows``)."""
    if attributes.resource_request:
        return (
            verb_matches(rule, attributes.verb)
            and api_group_matches(rule, attributes.api_group)
            and resource_matches(rule, attributes.combined_resource, attributes.subresource)
            and resource_name_matches(rule, attributes.name)
        )
    return verb_matches(rule, attributes.verb) and non_resource_url_matches(rule, attributes.path)


@dataclasses.dataclass(frozen=True)
class Subject:
    kind: str  # User, Group, ServiceAccount
    name: str
    namespace: str = ""


@dataclasses.dataclass(frozen=True)
class Binding:
    """A RoleBinding (``namespace`` set) or ClusterRoleBinding (``namespace`` ``""``)."""

    name: str
    namespace: str
    role_kind: str  # Role, ClusterRole
    role_name: str
    subjects: tuple[Subject, ...]

    @property
    def kind(self) -> str:
        return "RoleBinding" if self.namespace else "ClusterRoleBinding"

    def applies_to(self, user: User) -> bool:
        return any(applies_to_user(user, subject, self.namespace) for subject in self.subjects)


def applies_to_user(user: User, subject: Subject, namespace: str) -> bool:
    """Whether ``subject`` of a binding in ``namespace`` (``""``: a ClusterRoleBinding) is
    ``user`` (``appliesToUser``)."""
    match subject.kind:
        case "User":
            return user.name == subject.name
        case "Group":
            return subject.name in user.groups
        case "ServiceAccount":
            account_namespace = subject.namespace or namespace
            return bool(account_namespace) and (
                user.name == service_account(account_namespace, subject.name).name
            )
        case _:
            return False


@dataclasses.dataclass(frozen=True)
class Policy:
    """The RBAC objects of a cluster, indexed as the authorizer looks them up."""

    cluster_roles: Mapping[str, tuple[PolicyRule, ...]]
    roles: Mapping[tuple[str, str], tuple[PolicyRule, ...]]
    """(namespace, name) → rules."""
    cluster_role_bindings: tuple[Binding, ...]
    role_bindings: Mapping[str, tuple[Binding, ...]]
    """namespace → its RoleBindings."""

    def rules_of(self, binding: Binding) -> tuple[PolicyRule, ...] | None:
        """The rules ``binding`` grants; None when its role does not exist."""
        if binding.role_kind == "ClusterRole":
            return self.cluster_roles.get(binding.role_name)
        if binding.role_kind == "Role" and binding.namespace:
            return self.roles.get((binding.namespace, binding.role_name))
        return None

    def bindings_for(self, namespace: str) -> Iterator[Binding]:
        """The bindings consulted for a request in ``namespace`` (``""``: none), in
        kube-apiserver's order: ClusterRoleBindings, then the namespace's RoleBindings."""
        yield from self.cluster_role_bindings
        if namespace:
            yield from self.role_bindings.get(namespace, ())


def policy_of(objects: Iterable[Mapping[str, Any]]) -> Policy:
    """The policy of the RBAC objects among ``objects`` (other kinds are ignored).

    Raises ValueError for an aggregated ClusterRole: its rules are what the aggregation
    controller gathers, which is not emulated, so it would grant less than on a cluster.
    """
    cluster_roles: dict[str, tuple[PolicyRule, ...]] = {}
    roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
    cluster_bindings: list[Binding] = []
    role_bindings: dict[str, list[Binding]] = {}
    for body in objects:
        if not str(body.get("apiVersion", "")).startswith(f"{GROUP}/"):
            continue
        meta = body.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "")
        rules = tuple(PolicyRule.of(rule) for rule in body.get("rules") or ())
        match body.get("kind"):
            case "ClusterRole":
                if body.get("aggregationRule"):
                    raise ValueError(f"ClusterRole {name}: aggregation is not emulated")
                cluster_roles[name] = rules
            case "Role":
                roles[(namespace, name)] = rules
            case "ClusterRoleBinding":
                cluster_bindings.append(_binding(body, ""))
            case "RoleBinding":
                role_bindings.setdefault(namespace, []).append(_binding(body, namespace))
    return Policy(
        cluster_roles,
        roles,
        tuple(cluster_bindings),
        {namespace: tuple(bindings) for namespace, bindings in role_bindings.items()},
    )


def _binding(body: Mapping[str, Any], namespace: str) -> Binding:
    ref = body.get("roleRef") or {}
    subjects = tuple(
        Subject(str(s.get("kind", "")), str(s.get("name", "")), str(s.get("namespace") or ""))
        for s in body.get("subjects") or ()
    )
    name = str((body.get("metadata") or {}).get("name", ""))
    return Binding(name, namespace, str(ref.get("kind", "")), str(ref.get("name", "")), subjects)


# --- Decisions -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Decision:
    """RBAC's answer: allowed, by which binding's rule; or not, and why (``""``: no rule
    matched, which kube-apiserver does not explain)."""

    allowed: bool
    reason: str = ""
    binding: Binding | None = None
    rule: PolicyRule | None = None


def authorize(policy: Policy, attributes: Attributes) -> Decision:
    """Allowed when the user is privileged or one rule of a role bound to it matches."""
    if PRIVILEGED_GROUP in attributes.user.groups:
        return Decision(True, "the privileged group system:masters")
    errors: list[str] = []
    for binding in policy.bindings_for(attributes.namespace):
        if not binding.applies_to(attributes.user):
            continue
        rules = policy.rules_of(binding)
        if rules is None:
            kind = binding.role_kind.lower()
            errors.append(f'{kind}.{GROUP} "{binding.role_name}" not found')
            continue
        for rule in rules:
            if rule_allows(attributes, rule):
                return Decision(True, binding=binding, rule=rule)
    # utilerrors.NewAggregate: one error as it is, several as a list.
    listed = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
    return Decision(False, f"RBAC: {listed}" if errors else "")


@dataclasses.dataclass(frozen=True)
class Grant:
    """One permission a policy gives a user: a single-verb rule, and where it holds (a
    binding's namespace, ``""`` everywhere)."""

    binding: Binding
    rule: PolicyRule

    def allows(self, attributes: Attributes) -> bool:
        in_scope = not self.binding.namespace or attributes.namespace == self.binding.namespace
        return in_scope and rule_allows(attributes, self.rule)

    def __str__(self) -> str:
        rule = self.rule
        names = f" {list(rule.resource_names)}" if rule.resource_names else ""
        where = f"in {self.binding.namespace}" if self.binding.namespace else "everywhere"
        what = (
            f"{rule.api_groups[0] or 'core'}/{rule.resources[0]}{names}"
            if rule.resources
            else rule.non_resource_urls[0]
        )
        return f"{rule.verbs[0]} {what} {where} ({self.binding.kind} {self.binding.name})"


def grants(policy: Policy, user: User) -> list[Grant]:
    """Every permission ``policy`` gives ``user`` through its bindings, one at a time."""
    found: list[Grant] = []
    bindings = [
        *policy.cluster_role_bindings,
        *(b for n in policy.role_bindings.values() for b in n),
    ]
    for binding in bindings:
        if binding.applies_to(user):
            for rule in policy.rules_of(binding) or ():
                found += [Grant(binding, atom) for atom in rule.atoms()]
    return found


def forbidden(attributes: Attributes, reason: str = "") -> apimachinery.ApiError:
    """kube-apiserver's 403 for a request no authorizer allowed (``responsewriters.
    Forbidden``): ``<resource>[.<group>] ["<name>"] is forbidden: User "<user>" cannot
    <verb> resource "<resource>[/<subresource>]" in API group "<group>" in the namespace
    "<namespace>"`` (or ``at the cluster scope``; ``cannot <verb> path "<path>"`` for a
    non-resource request), then ``: <reason>`` if the authorizer gave one."""
    user, verb = attributes.user.name, attributes.verb
    if not attributes.resource_request:
        said = f'User "{user}" cannot {verb} path "{attributes.path}"'
    elif attributes.namespace:
        said = (
            f'User "{user}" cannot {verb} resource "{attributes.combined_resource}" in API '
            f'group "{attributes.api_group}" in the namespace "{attributes.namespace}"'
        )
    else:
        said = (
            f'User "{user}" cannot {verb} resource "{attributes.combined_resource}" in API '
            f'group "{attributes.api_group}" at the cluster scope'
        )
    if reason:
        said = f"{said}: {reason}"
    return refusal(attributes, said)


def refusal(attributes: Attributes, said: str) -> apimachinery.ApiError:
    """A 403 ``Status`` about the request's resource (``errors.NewForbidden``)."""
    group, resource, name = attributes.api_group, attributes.resource, attributes.name
    if not attributes.resource_request:
        return apimachinery.ApiError(403, f"forbidden: {said}", reason="Forbidden")
    qualified = f"{resource}.{group}" if group else resource
    subject = f'{qualified} "{name}"' if name else qualified
    details = {"name": name, "group": group, "kind": resource}
    return apimachinery.ApiError(
        403,
        f"{subject} is forbidden: {said}",
        reason="Forbidden",
        **{key: value for key, value in details.items() if value},
    )


def unauthorized() -> apimachinery.ApiError:
    """kube-apiserver's answer to credentials it does not accept (a token it never issued)."""
    return apimachinery.ApiError(401, "Unauthorized", reason="Unauthorized")


# --- The cluster's own policy ----------------------------------------------------------


BOOTSTRAPPING = {"kubernetes.io/bootstrapping": "rbac-defaults"}


def _bootstrap_role(name: str, urls: tuple[str, ...], *groups: str) -> list[Body]:
    """A ClusterRole granting ``get`` on ``urls``, and its ClusterRoleBinding to ``groups``."""
    meta = {"name": name, "labels": BOOTSTRAPPING}
    role = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": [{"verbs": ["get"], "nonResourceURLs": list(urls)}],
    }
    binding = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": group} for group in groups],
    }
    return [role, binding]


HEALTH_AND_VERSION = ("/livez", "/readyz", "/healthz", "/version", "/version/")
BOOTSTRAP: tuple[Body, ...] = (
    *_bootstrap_role(
        "system:discovery",
        (*HEALTH_AND_VERSION, "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
        AUTHENTICATED,
    ),
    *_bootstrap_role(
        "system:public-info-viewer", HEALTH_AND_VERSION, AUTHENTICATED, UNAUTHENTICATED
    ),
    {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "system:auth-delegator", "labels": BOOTSTRAPPING},
        "rules": [
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["tokenreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["subjectaccessreviews"],
                "verbs": ["create"],
            },
        ],
    },
    {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Role",
        "metadata": {
            "name": "extension-apiserver-authentication-reader",
            "namespace": "kube-system",
            "labels": BOOTSTRAPPING,
        },
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["extension-apiserver-authentication"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    },
)
"""The RBAC objects kube-apiserver makes at its start that every client relies on
(``bootstrappolicy``): any authenticated user may read discovery, anyone health and the
version; and the two an aggregated API server is bound to, ``system:auth-delegator``
(token and access reviews) and ``kube-system/extension-apiserver-authentication-reader``
(how kube-apiserver proxies to it). Its other defaults (controllers' roles,
``cluster-admin`` for ``system:masters``, which its privileged-group authorizer allows
anyway) no request here needs."""
