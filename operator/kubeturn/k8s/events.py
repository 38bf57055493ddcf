"""Kubernetes Events the operator posts: how each Turn ended, where ``kubectl describe``
and ``kubectl get events`` show it."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubeturn.k8s.kube import Kube

TURN_SETTLED = "TurnSettled"
"""On an AgentTurn: its sweep came back; the message says the outcome and cause."""
TURN_RECORDED = "TurnRecorded"
"""On a Run: a Turn was recorded in its history."""


async def post(kube: Kube, about: Mapping[str, Any], reason: str, message: str) -> None:
    meta = about["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.create(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{secrets.token_hex(8)}",
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
            "message": message,
            "type": "Normal",
            "source": {"component": "kubeturn"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
    )
