"""Condition types and reasons the operator writes, each with what it means, and the one
function that sets a condition the Kubernetes way (the transition time moves only when
the status does)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from kubeturn.api.status import Condition

READY = "Ready"
"""Run: the manifest loaded and the Run is being driven. Workspace: the Harness answers."""

INVALID = "Invalid"
"""The Run's manifest, or the Workspace's spec, has problems; the message lists every one
with its path."""
TOO_LARGE = "TooLarge"
"""The Run's spec is larger than the operator takes (``runs.MAX_SPEC_BYTES``); the message
says how large it is. Like ``Invalid``, the Run waits for a new generation."""
SNAPSHOT_UNREADABLE = "SnapshotUnreadable"
"""The Run's saved state (``status.snapshot``) cannot be restored: written by a newer
kubeturn, or damaged; the message says which. The Run is not driven (nothing it would do
could be trusted) and waits for an operator that reads it, or its deletion."""
LOAD_FAILED = "LoadFailed"
"""The operator failed on the Run's manifest in a way it did not foresee (a bug in
kubeturn); the message says what it raised. Like ``Invalid``, the Run waits for a new
generation."""
UNDRIVEN = frozenset({INVALID, TOO_LARGE, LOAD_FAILED, SNAPSHOT_UNREADABLE})
"""Reasons of a Run's ``Ready=False`` that mean no Machine of it runs."""
RUNNING = "Running"
"""The Run's Machine is running."""
FINISHED = "Finished"
"""The Run reached its end (its phase says which)."""
WAITING_FOR_WORKSPACE = "WaitingForWorkspace"
"""The Run's Workspace is not Ready yet."""
WORKTREES_FAILED = "WorktreesFailed"
"""The Harness could not make the Run's worktrees (its words in the message); tried again."""
STARTING = "Starting"
"""The sandbox pod or its Harness is starting."""
HARNESS_READY = "HarnessReady"
"""The sandbox's Harness answers /readyz."""
FAILED = "Failed"
"""The API refused the sandbox pod (a quota, an invalid spec); it is tried again later."""
RECREATING = "Recreating"
"""The sandbox pod was deleted, ended or ran an older spec; a new one is being made (why)."""
TERMINATING = "Terminating"
"""The Workspace is being deleted."""
EARLIER_OBJECTS_GOING = "EarlierObjectsGoing"
"""An object the Workspace makes (its token Secret, a claim…) is still there being deleted,
an earlier Workspace's of its name or its own: its own is made once it is gone."""

SANDBOX_CURRENT = "SandboxCurrent"
"""Workspace: its sandbox Pod was made from its spec, harness image and providers as now."""
VOLUME_CURRENT = "VolumeCurrent"
"""Workspace: its volume's claim has the size and class that ``spec.storage`` asks for."""
UP_TO_DATE = "UpToDate"
"""SandboxCurrent or VolumeCurrent is True: made from what the Workspace asks for now."""
SPEC_CHANGED = "SpecChanged"
"""SandboxCurrent is False: the Pod runs an older spec; it is made again when no Turn runs."""
STORAGE_CHANGED = "StorageChanged"
"""VolumeCurrent is False: ``spec.storage`` changed; kubeturn neither resizes nor replaces it."""


def put(
    current: Sequence[Mapping[str, Any] | Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int | None,
) -> list[Condition]:
    """``current`` (as read, or as ``put`` gave it) with the condition ``type_`` set; its
    message cut to its bound by the model (``kubeturn.api.status.bounded``)."""
    value: Literal["True", "False"] = "True" if status else "False"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = [
        each if isinstance(each, Condition) else Condition.model_validate(each) for each in current
    ]
    at = next((i for i, condition in enumerate(result) if condition.type == type_), len(result))
    before = result[at] if at < len(result) else None
    updated = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        observedGeneration=generation,
        lastTransitionTime=(
            before.lastTransitionTime if before is not None and before.status == value else now
        ),
    )
    result[at : at + 1] = [updated]
    return result
