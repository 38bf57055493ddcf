"""The floor: the least an operator does for a Run, on kubeturn's client stack.

bench/operator.py measures kubeturn against it. For each Run created it creates one
child, an AgentTurn owned by the Run (``blockOwnerDeletion``) and holding a finalizer,
patches the Run's status twice (``Running``, then ``Succeeded``) and deletes the child;
the child's deletion runs a handler that does nothing, after which kopf removes the
finalizer and the child goes. That is 6 writes per Run: the Run's two status patches, the
child's create and delete, the removal of its finalizer, and kopf's record of what it
handled of the Run (its ``last-handled-configuration`` annotation, which its creation
handler needs; of an AgentTurn, as of kubeturn's, kopf keeps none). One child per Run,
whatever ``--turns`` asks.

The stack is kubeturn's: kopf watches Runs and AgentTurns with the settings the operator
gives it (``kubeturn.k8s.operator.kopf_settings``: the finalizer's name, the digest
diff-base, no cluster scanning, posting warnings only), and every write goes through the
``kubeturn.k8s.kube.Kube`` facade (the official client, in worker threads), with the same
login and connection. It runs as the identity its kubeconfig names (bench/operator.py:
the chart's ServiceAccount, under the chart's RBAC) and serves ``/readyz`` as the
operator does.

Run: ``python bench/floor_operator.py KUBECONFIG HEALTH_PORT`` (until SIGTERM).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import kopf
from aiohttp import web

from kubeturn.api.agentturn import SWEEP_FINALIZER
from kubeturn.k8s.diffbase import DigestDiffBaseStorage
from kubeturn.k8s.kube import AGENTTURNS, RUNS, Kube
from kubeturn.k8s.operator import connection_info, health_app, kopf_settings, kube_client

GROUP, VERSION = "kubeturn.dev", "v1alpha1"
CHILD_ONLY = frozenset({"AgentTurn"})


def child(run: kopf.Body) -> dict[str, Any]:
    """The Run's one AgentTurn: the least its CRD admits, owned by the Run."""
    meta = run["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentTurn",
        "metadata": {
            "name": f"{meta['name']}-1",
            "namespace": meta["namespace"],
            "finalizers": [SWEEP_FINALIZER],
            "ownerReferences": [
                {
                    "apiVersion": run["apiVersion"],
                    "kind": run["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "runRef": {"name": meta["name"]},
            "turn": "1",
            "agent": {"slot": "worker", "instructions": "", "workspace": "none"},
            "statePath": "working",
            "instanceId": f"{meta['namespace']}.{meta['name']}/worker",
            "prompt": "",
            "cwd": "/",
        },
    }


def build(kube: Kube, connection: kopf.ConnectionInfo) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        kopf_settings(settings)
        # Its Runs are handled at their creation: kopf keeps its record of them.
        settings.persistence.diffbase_storage = DigestDiffBaseStorage(as_is=CHILD_ONLY)

    @kopf.on.create(GROUP, VERSION, "runs", registry=registry)
    async def created(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
        assert namespace is not None, "Runs are namespaced"
        made = child(body)
        await kube.create(made)
        for phase in ("Running", "Succeeded"):
            await kube.patch(RUNS, namespace, name, {"status": {"phase": phase}}, status=True)
        await kube.delete(AGENTTURNS, namespace, made["metadata"]["name"])

    @kopf.on.delete(GROUP, VERSION, "agentturns", registry=registry)
    async def deleted(**_: Any) -> None:
        """Nothing to do: kopf removes the finalizer after it."""

    return registry


async def main(kubeconfig: str, health_port: int) -> None:
    client = kube_client(kubeconfig)
    kube = Kube(client)
    ready = asyncio.Event()
    runner = web.AppRunner(health_app(ready, lambda: True), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", health_port).start()
    try:
        await kopf.operator(
            registry=build(kube, connection_info(client)),
            clusterwide=True,
            standalone=True,
            ready_flag=ready,
        )
    finally:
        await runner.cleanup()
        kube.close()
        client.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
