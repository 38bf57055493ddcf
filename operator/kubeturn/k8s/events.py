"""Kubernetes Events the operator posts: how each Turn ended, and what happened to each
Workspace's sandbox, where ``kubectl describe`` and ``kubectl get events`` show it. A
message is cut as a status's is (``kubeturn.api.status.bounded``): it may quote a
provider's error.

An Event about a Turn is posted once: its name is derived from the object it is about
(its uid), its reason and the Turn, so posting it again (the operator restarted between
posting it and writing that it did) creates nothing, the API server answering 409
(ADR 0048). Sandbox Events, which may truly happen again, get random names."""

from __future__ import annotations

import hashlib
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
SIGNAL_IGNORED = "SignalIgnored"
"""On a Run (Warning): a signal of ``spec.signals`` that no active state accepted (or whose
data misfit, or that no guard let through) was ignored; the message names the events the
Run accepts. Posted once per signal id."""
NORMAL, WARNING = "Normal", "Warning"


def name(about: Mapping[str, Any], reason: str, once: str | None) -> str:
    """The Event's name: ``<object>.<16 hex>``, derived from the object's uid, ``reason``
    and ``once`` when the Event happens once (so it has one name), else random."""
    meta = about["metadata"]
    if once is None:
        tail = secrets.token_hex(8)
    else:
        key = f"{meta.get('uid', '')}/{reason}/{once}"
        tail = hashlib.sha256(key.encode()).hexdigest()[:16]
    return names.object_name(meta["name"], f".{tail}")


async def post(
    kube: Kube,
    about: Mapping[str, Any],
    reason: str,
    message: str,
    type_: str = NORMAL,
    *,
    once: str | None = None,
) -> None:
    """Post an Event; one with ``once`` (what makes it happen once, e.g. a Turn's name)
    is posted at most once per object, however often this is called."""
    meta = about["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.create_once(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name(about, reason, once),
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
