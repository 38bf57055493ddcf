"""Where the operator's controllers find a Workspace's Harness client: ``hub.harness_of``,
waited on while the Workspace's sandbox is being made (again).

The Workspace controller offers a client there once its Harness is Ready, and replaces it
(closing the old one) when the sandbox Pod changes (ADR 0024, ADR 0100). So a caller asks here for
the client after every wait and after every failure to reach it, and never keeps one
across them. This module only reads the hub and the Workspace: it never makes or closes
a client.
"""

from __future__ import annotations

import asyncio
import time

from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import WORKSPACES
from kubeturn.orchestrator.harness_client import HarnessClient

WAIT_S = 120.0
"""How long a sweep or an exec waits for its Workspace's Harness (and a person's
deletion of a Turn for its Run's actor): far above a sandbox Pod's start, a Workspace's
probe (2 s), a Run's resumption and the first Pod made again (at once, ADR 0024), and
bounded, so a Workspace whose sandbox never comes back holds no deletion for ever."""
POLL_S = 0.5
"""How often a wait looks again: a Harness becomes known within a Workspace probe (2 s)."""
WORKSPACE_LOOK_S = 5.0
"""How often a wait reads the Workspace to see whether it went: the hub is looked at every
``POLL_S`` at no cost, while tens of Turns waiting out a sandbox Pod's recreation should
not each read the API twice a second."""


async def wait(hub: Hub, namespace: str, workspace: str, deadline: float) -> HarnessClient | None:
    """The Workspace's Harness client. While the Workspace exists (and is not being
    deleted) and its Harness is not known, wait, up to ``deadline`` (``time.monotonic``).
    None when there is no Workspace, it is gone or going, or the deadline passed."""
    looked = -WORKSPACE_LOOK_S
    while (harness := hub.harness_of(namespace, workspace)) is None:
        now = time.monotonic()
        if not workspace or now > deadline:
            return None
        if now - looked >= WORKSPACE_LOOK_S:
            looked = now
            found = await hub.kube.get(WORKSPACES, namespace, workspace)
            if found is None or found["metadata"].get("deletionTimestamp"):
                return None
        await asyncio.sleep(POLL_S)
    return harness
