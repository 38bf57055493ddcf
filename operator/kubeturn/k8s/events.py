"""Kubernetes Events the operator posts: how each Turn ended, and what happened to each
Workspace's sandbox, where ``kubectl describe`` and ``kubectl get events`` show it. A
message is cut as a status's is (``kubeturn.api.status.bounded``): it may quote a
provider's error."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubeturn.api.status import bounded
from kubeturn.k8s import names
from kubeturn.k8s.kube import Kube

TURN_SETTLED = "TurnSettled"
"""On an AgentTurn: its sweep came back; the message says the outcome and cause."""
TURN_RECORDED = "TurnRecorded"
"""On a Run: a Turn was recorded in its history."""
SANDBOX_ENDED = "SandboxEnded"
"""On a Workspace (Warning): its sandbox Pod ended (evicted, its node shut down); it is
deleted to be made again."""
SANDBOX_RECREATED = "SandboxRecreated"
"""On a Workspace: a new sandbox Pod is being made in place of one that went; the
message says why the old one went."""
SANDBOX_UPDATED = "SandboxUpdated"
"""On a Workspace: its sandbox Pod ran an older spec and no Turn ran on it, so it is made
again from the current one; the message says what changed."""
SANDBOX_REFUSED = "SandboxRefused"
"""On a Workspace (Warning): the API server refused the sandbox Pod (a quota, a policy)."""
NORMAL, WARNING = "Normal", "Warning"


async def post(
    kube: Kube, about: Mapping[str, Any], reason: str, message: str, type_: str = NORMAL
) -> None:
    meta = about["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": names.object_name(meta["name"], f".{secrets.token_hex(8)}"),
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": about["apiVersion"],
                "kind": about["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": bounded(message),
            "type": type_,
            "source": {"component": "kubeturn"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
    )
