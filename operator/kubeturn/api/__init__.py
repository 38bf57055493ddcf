"""pydantic models of kubeturn's resources: the source of truth for ``crds/``.

Only shapes live here (types, unknown fields, one-of rules); what needs a whole Run to
check (targets, Menus, expressions) is ``kubeturn.machine.load``'s. Nothing here does IO.
"""

from kubeturn.api.common import GROUP, GROUP_VERSION, VERSION, ObjectMeta
from kubeturn.api.durations import parse_duration
from kubeturn.api.machine import (
    DEFAULT_AUTHOR_EMAIL,
    DEFAULT_AUTHOR_NAME,
    AgentInvoke,
    AgentRetry,
    Author,
    DeliverInvoke,
    ExecInvoke,
    ForEachInvoke,
    InvokeSpec,
    MachineSpec,
    Outcome,
    StateSpec,
    Transition,
    TransitionSpec,
)
from kubeturn.api.run import AgentSlot, Run, RunSpec, Signal, WorkspaceRef
from kubeturn.api.workspace import Repo, Resources, SecretRef, Storage, WorkspaceSpec

__all__ = [
    "DEFAULT_AUTHOR_EMAIL",
    "DEFAULT_AUTHOR_NAME",
    "GROUP",
    "GROUP_VERSION",
    "VERSION",
    "AgentInvoke",
    "AgentRetry",
    "AgentSlot",
    "Author",
    "DeliverInvoke",
    "ExecInvoke",
    "ForEachInvoke",
    "InvokeSpec",
    "MachineSpec",
    "ObjectMeta",
    "Outcome",
    "Repo",
    "Resources",
    "Run",
    "RunSpec",
    "SecretRef",
    "Signal",
    "StateSpec",
    "Storage",
    "Transition",
    "TransitionSpec",
    "WorkspaceRef",
    "WorkspaceSpec",
    "parse_duration",
]
