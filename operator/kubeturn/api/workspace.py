"""The Workspace's spec: a sandbox pod and a volume of git clones, one per repo slot.

A Run either names an existing Workspace or carries one of these as a template; the
Workspace resource's own spec is the same model. Nothing here does IO.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Literal, Self, TypeAlias

from pydantic import Field, field_validator, model_validator

from kubeturn.api.common import (
    GROUP_VERSION,
    GroupVersion,
    ObjectMeta,
    Spec,
    check_model_name,
    check_object_name,
    check_slot_names,
)
from kubeturn.api.egress import WorkspaceEgress
from kubeturn.api.status import WorkspaceStatus

MAX_URL_LENGTH = 2048
"""A clone URL's length: room for any forge's. The API server prices the CEL rule below
before it runs it, by this bound (see ``MAX_REPOS``)."""

MAX_REPOS = 64
"""Repo slots in one Workspace. The API server prices the rule on each slot's ``url`` as
``MAX_REPOS`` runs of it: its two ``matches`` on 2048 characters cost 4.1·10³ units a
run, 2.6·10⁵ in all, under the 10⁶ it allows one rule per request (unbounded, the map and
the string would price it in billions, and the CRD would be refused). Workspaces have a
handful."""

URL_USERINFO = "^[^:/?#]+://[^/?#]*@"
"""A URL whose authority (between ``scheme://`` and the path) holds ``@``: a user, and
perhaps a password or a token, written into the URL."""

SSH_USER = "(?i)^(ssh|git[+]ssh|ssh[+]git)://[^/?#:@]*@[^/?#@]*([/?#]|$)"
"""An ssh URL that names its login user and nothing else (``ssh://git@host/repo.git``):
ssh takes no password from a URL, so the user is not a secret."""

URL_CREDENTIALS = (
    "must not carry credentials: put them in the Secret that secretRef names, whose keys "
    "only the slot's clone container reads; an ssh URL may name its user "
    "(ssh://git@host/repo.git, git@host:repo.git) but no password"
)
"""Why a URL with credentials is refused. It never quotes the URL, which holds them."""

URL_RULE = f"!self.matches('{URL_USERINFO}') || self.matches('{SSH_USER}')"
"""The CRDs' CEL rule on ``url`` (``kubeturn.api.crds``): what :func:`carries_credentials`
says, in the API server. Both regexes are RE2 and Python alike."""


def carries_credentials(url: str) -> bool:
    """Whether ``url`` holds a user or password that is not an ssh login user: such a URL
    lands in the clone's ``.git/config``, the Pod's spec and status messages, all of
    which the Agents or anyone reading the Workspace can see (ADR 0033)."""
    return re.match(URL_USERINFO, url) is not None and re.match(SSH_USER, url) is None


def redacted(text: str) -> str:
    """``text`` with the user and password of a URL that :func:`carries_credentials` put
    as ``***``: what a message may quote of a value written where a URL goes."""
    if not carries_credentials(text):
        return text
    return re.sub("^([^:/?#]+://)[^/?#]*@", r"\1***@", text, count=1)


ENV_NAME = re.compile(r"^[ -<>-~]+$")
"""An environment variable's name as the API server takes it (relaxed in Kubernetes
1.32): printable ASCII characters other than ``=``."""


def _referenced(reference: Any, where: str) -> None:
    """Refuse a reference to a Secret or ConfigMap by a name no object could have."""
    name = reference.get("name") if isinstance(reference, dict) else None
    if not isinstance(name, str):
        raise ValueError(f"{where}: give the name of the object")
    try:
        check_object_name(name)
    except ValueError as error:
        raise ValueError(f"{where}.name: {error}") from None


class SecretRef(Spec):
    """A Secret in the Workspace's namespace."""

    name: str = Field(min_length=1, description="The Secret's name.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_object_name(value)


class Repo(Spec):
    """One git repository, cloned once into the Workspace; each Run works in a worktree."""

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description=(
            "The clone URL: https (or http), or ssh (ssh://… or user@host:path). It carries "
            "no credentials: those go in the Secret that secretRef names."
        ),
    )
    ref: str = Field(
        default="main",
        min_length=1,
        description=(
            "The branch, tag or commit the Runs' worktrees start from. 7 to 64 hex digits "
            "are a commit id, checked out detached; it must be on a branch or tag."
        ),
    )
    secretRef: SecretRef | None = Field(
        default=None,
        description=(
            "A Secret with the credentials to clone: 'username' and 'password' (a token) "
            "for https, or 'ssh-privatekey' (and 'known_hosts' to check the host; without "
            "it the host key is trusted on first use) for ssh. Only the slot's clone "
            "container mounts it; the Harness and the Agents never see it."
        ),
    )

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, url: str) -> str:
        if carries_credentials(url):
            raise ValueError(URL_CREDENTIALS)
        return url


Quantity: TypeAlias = int | str
"""A Kubernetes quantity as manifests write it: ``2``, ``500m``, ``4Gi``. A whole number
may be written bare, as in a Pod's spec (the CRD types it int-or-string)."""

QUANTITY = re.compile(
    r"^(?P<number>[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
"""What the API server parses as a quantity (``resource.ParseQuantity``): a decimal
number, then a binary (``Ki``...``Ei``) or decimal (``n``, ``u``, ``m``, ``k``, ``M``...
``E``) suffix or an exponent. The CRD takes any string; a Pod or a claim with another is
refused, so the operator refuses it first, at its path."""
_SCALES: dict[str, Decimal] = {
    suffix: Decimal(2) ** (10 * power)
    for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)
} | {
    suffix: Decimal(10) ** exponent
    for suffix, exponent in (
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    )
}


def quantity(value: Quantity) -> Decimal:
    """The amount a quantity stands for; ``ValueError`` saying why if it is not one."""
    found = QUANTITY.match(str(value)) if not isinstance(value, bool) else None
    if found is None:
        raise ValueError(
            f"{value!r} is not a quantity: write a number with an optional unit, e.g. 500m, "
            "2, 512Mi or 10Gi"
        )
    number, suffix = Decimal(found["number"]), found["suffix"] or ""
    if suffix[:1] in ("e", "E"):
        return number * Decimal(10) ** int(suffix[1:])
    return number * _SCALES.get(suffix, Decimal(1))


class Resources(Spec):
    """Compute resources of the sandbox container, as in a Pod's container spec."""

    requests: dict[str, Quantity] | None = Field(
        default=None, description="Minimum resources, e.g. {cpu: 1, memory: 2Gi}."
    )
    limits: dict[str, Quantity] | None = Field(
        default=None, description="Maximum resources, e.g. {cpu: 2, memory: 4Gi}."
    )

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, values: dict[str, Quantity] | None) -> dict[str, Quantity] | None:
        for name, value in (values or {}).items():
            if quantity(value) < 0:
                raise ValueError(f"{name}: {value!r} is below zero")
        return values

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Self:
        limits = self.limits or {}
        for name, value in (self.requests or {}).items():
            if name in limits and quantity(value) > quantity(limits[name]):
                raise ValueError(
                    f"requests.{name} ({value}) is above limits.{name} ({limits[name]}): a "
                    "container may not ask for more than its limit"
                )
        return self


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> Resources:
    return Resources(
        requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu_limit, "memory": memory_limit}
    )


class SandboxResources(Spec):
    """The resources the operator gives each container of every sandbox Pod (the chart's
    ``sandbox.resources``), so none is unbounded (ADR 0053). A Workspace's
    ``spec.resources`` overrides the ``tools`` container's, key by key."""

    harness: Resources = Field(
        default_factory=lambda: _resources("50m", "128Mi", "1", "1Gi"),
        description=(
            "The harness container: it waits on model streams and keeps a few hundred "
            "conversations in memory (a thousand live ones fit in 1 GiB); the Agents' work "
            "is the tools container's."
        ),
    )
    tools: Resources = Field(
        default_factory=lambda: _resources("250m", "512Mi", "2", "4Gi"),
        description=(
            "The tools container, where every Agent's command runs: a build or a test suite "
            "fits; a runaway command is throttled at two cores and killed at 4 GiB."
        ),
    )
    clone: Resources = Field(
        default_factory=lambda: _resources("100m", "128Mi", "1", "2Gi"),
        description=(
            "Each repo slot's clone init container: git's pack indexing of a large "
            "repository takes a core and up to a few hundred MiB; 2 GiB leaves room."
        ),
    )


class Storage(Spec):
    """The volumes: one for the clones and worktrees, one for the Harness's records."""

    size: str = Field(
        default="10Gi",
        min_length=1,
        description="Capacity of the work volume (clones and worktrees), e.g. 10Gi.",
    )
    harnessSize: str = Field(
        default="1Gi",
        min_length=1,
        description=(
            "Capacity of the Harness's own volume (conversation logs), apart from the work "
            "volume so that an Agent filling one cannot stop the Harness recording."
        ),
    )
    class_: str | None = Field(
        default=None,
        alias="class",
        description="The StorageClass of both; the cluster's default when absent.",
    )

    @field_validator("class_")
    @classmethod
    def _class(cls, value: str | None) -> str | None:
        return None if value is None else check_object_name(value)

    @field_validator("size", "harnessSize")
    @classmethod
    def _size(cls, value: str) -> str:
        if quantity(value) <= 0:
            raise ValueError(f"{value!r} is no capacity: a volume's size is above zero")
        return value


class WorkspaceSpec(Spec):
    """A sandbox: one pod running the Harness, with a volume of git clones."""

    repos: dict[str, Repo] = Field(
        min_length=1,
        max_length=MAX_REPOS,
        description=(
            "Repo slots: slot name to repository (at most 64). Each Run gets a worktree of "
            "every slot at /work/<slot>/<run-branch>; templates reach it as "
            "workspace.repos.<slot>."
        ),
    )
    image: str | None = Field(
        default=None, description="The sandbox image; the operator's default Harness image."
    )
    resources: Resources | None = Field(
        default=None,
        description=(
            "CPU and memory of the tools container, where the Agents' commands run, over "
            "the operator's defaults key by key (the chart's sandbox.resources.tools: "
            "requests {cpu: 250m, memory: 512Mi}, limits {cpu: 2, memory: 4Gi}); a "
            "request above a default limit raises that limit to it."
        ),
    )
    storage: Storage = Field(
        default_factory=Storage, description="The volume holding clones and worktrees."
    )
    serviceAccount: str | None = Field(
        default=None,
        description="The sandbox pod's ServiceAccount; its token is never mounted.",
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Environment of the Harness (e.g. a model provider's API key from a Secret), "
            "as a container's env list; Agents' tool processes never see it."
        ),
    )
    envFrom: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Environment from ConfigMaps or Secrets, as a container's envFrom list.",
    )
    defaultModel: str | None = Field(
        default=None,
        description=(
            "'provider/model' the Agents of this Workspace's Runs run on when they name no "
            "model, over the operator's default (the chart's defaultModel). Its provider "
            "must be one of the chart's providers."
        ),
    )
    maxLiveTurns: int | None = Field(
        default=None,
        ge=1,
        description=(
            "At most this many Turns of the Workspace's Runs are live at once; the next "
            "wait, Pending with reason WorkspaceFull, and go in the order they started as "
            "live ones end. Absent: no cap but the operator's per namespace."
        ),
    )
    egress: WorkspaceEgress = Field(
        default_factory=WorkspaceEgress,
        description=(
            "What the sandbox may reach besides the Orchestrator: by default DNS and the "
            "public internet on the operator's ports (443 and 22), never the cloud metadata "
            "endpoints or the API server unless asked for here."
        ),
    )

    @field_validator("repos")
    @classmethod
    def _slot_names(cls, repos: dict[str, Repo]) -> dict[str, Repo]:
        check_slot_names("a repo slot", repos)
        return repos

    @field_validator("defaultModel")
    @classmethod
    def _default_model(cls, value: str | None) -> str | None:
        return check_model_name(value)

    @field_validator("serviceAccount")
    @classmethod
    def _service_account(cls, value: str | None) -> str | None:
        return None if value is None else check_object_name(value)

    @field_validator("env")
    @classmethod
    def _env(cls, env: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each variable named as the API server requires, and the Secret or ConfigMap a
        value comes from named as one can be."""
        for position, variable in enumerate(env):
            name = variable.get("name")
            if not isinstance(name, str) or not ENV_NAME.match(name):
                raise ValueError(
                    f"item {position}: {name!r} is no environment variable name: one or more "
                    "printable ASCII characters other than '='"
                )
            source = variable.get("valueFrom") or {}
            for ref in ("secretKeyRef", "configMapKeyRef"):
                if isinstance(source, dict) and ref in source:
                    _referenced(source[ref], f"item {position} ({name}): valueFrom.{ref}")
        return env

    @field_validator("envFrom")
    @classmethod
    def _env_from(cls, sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for position, source in enumerate(sources):
            refs = [ref for ref in ("configMapRef", "secretRef") if ref in source]
            if len(refs) != 1:
                raise ValueError(f"item {position}: give one of configMapRef or secretRef")
            _referenced(source[refs[0]], f"item {position}: {refs[0]}")
        return sources


class Workspace(Spec):
    """A sandbox: one pod running the Harness, with a volume holding the repos' clones."""

    apiVersion: GroupVersion = Field(description=f"Always {GROUP_VERSION}.")
    kind: Literal["Workspace"] = Field(description="Always Workspace.")
    metadata: ObjectMeta = Field(description="Its name, namespace, labels.")
    spec: WorkspaceSpec = Field(description="What the sandbox holds and runs.")
    status: WorkspaceStatus | None = Field(default=None, description="Written by the operator.")
