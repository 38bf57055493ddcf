"""The Workspace's spec: a sandbox pod and a volume of git clones, one per repo slot.

A Run either names an existing Workspace or carries one of these as a template; the
Workspace resource's own spec is the same model. Nothing here does IO.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import Field, field_validator

from kubeturn.api.common import API_VERSION, ObjectMeta, Spec, check_slot_names
from kubeturn.api.egress import WorkspaceEgress
from kubeturn.api.status import WorkspaceStatus


class SecretRef(Spec):
    """A Secret in the Workspace's namespace."""

    name: str = Field(min_length=1, description="The Secret's name.")


class Repo(Spec):
    """One git repository, cloned once into the Workspace; each Run works in a worktree."""

    url: str = Field(
        min_length=1,
        description="The clone URL: https (or http), or ssh (ssh://… or user@host:path).",
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


Quantity: TypeAlias = int | str
"""A Kubernetes quantity as manifests write it: ``2``, ``500m``, ``4Gi``. A whole number
may be written bare, as in a Pod's spec (the CRD types it int-or-string)."""


class Resources(Spec):
    """Compute resources of the sandbox container, as in a Pod's container spec."""

    requests: dict[str, Quantity] | None = Field(
        default=None, description="Minimum resources, e.g. {cpu: 1, memory: 2Gi}."
    )
    limits: dict[str, Quantity] | None = Field(
        default=None, description="Maximum resources, e.g. {cpu: 2, memory: 4Gi}."
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


class WorkspaceSpec(Spec):
    """A sandbox: one pod running the Harness, with a volume of git clones."""

    repos: dict[str, Repo] = Field(
        min_length=1,
        description=(
            "Repo slots: slot name to repository. Each Run gets a worktree of every slot at "
            "/work/<slot>/<run-branch>; templates reach it as workspace.repos.<slot>."
        ),
    )
    image: str | None = Field(
        default=None, description="The sandbox image; the operator's default Harness image."
    )
    resources: Resources | None = Field(
        default=None,
        description=(
            "CPU and memory of the tools container, where the Agents' commands run; "
            "by default requests {cpu: 250m, memory: 512Mi}, limits {cpu: 2, memory: 4Gi}."
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


class Workspace(Spec):
    """A sandbox: one pod running the Harness, with a volume holding the repos' clones."""

    apiVersion: Literal["kubeturn.dev/v1alpha1"] = Field(description=f"Always {API_VERSION}.")
    kind: Literal["Workspace"] = Field(description="Always Workspace.")
    metadata: ObjectMeta = Field(description="Its name, namespace, labels.")
    spec: WorkspaceSpec = Field(description="What the sandbox holds and runs.")
    status: WorkspaceStatus | None = Field(default=None, description="Written by the operator.")
