"""The shared Workspace of the Workspace and Run scenarios: one named Workspace whose Runs
each ask a coder that picks ``finish`` at once and then wait for ``approve``, or (``LONG``)
hold their model request; the operator on the scripted model playing that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    call,
    eventually,
    make_origin,
    script,
    status,
)
from tests.operator.world import OperatorWorld, operator_world

Body = dict[str, Any]

WORKSPACE = "shared"
POD = f"{WORKSPACE}-kubeturn-sandbox"
FIRST, SECOND = "first", "second"
PROMPTS = {FIRST: "Do the first task", SECOND: "Do the second task"}
LONG = "Do the long task"
SCRIPT = script(
    {
        **{prompt: [{"toolCalls": [call("finish")]}] for prompt in PROMPTS.values()},
        LONG: [{"text": "Working on it.", "hold": True}],
    }
)
"""Each Run's coder picks ``finish`` at once; a ``LONG`` Turn's model request is held."""


def workspace(origin: str, name: str = WORKSPACE, **spec: Any) -> Body:
    """A Workspace of one repo slot ``target`` cloned from ``origin``; ``spec`` adds to
    its spec (``maxLiveTurns=1``)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin}}, **spec},
    }


def coder_run(
    name: str, prompt: str, *, workspace: str, then_waits: bool = False, continued: bool = False
) -> Body:
    """A Run in ``workspace`` whose coder, asked ``prompt``, picks ``finish``; then the Run
    ends, or, ``then_waits``, waits for a signal ``approve``. ``continued``: the coder's
    conversation is continued (its Instance ID is ``coder(name)``)."""
    agent: Body = {"slot": "coder", "prompt": prompt}
    if continued:
        agent["continue"] = True
    after = "waiting" if then_waits else "done"
    states: Body = {
        "working": {
            "invoke": {"agent": agent},
            "on": {"finish": {"target": after, "description": "Done."}},
        },
        "done": {"type": "final"},
    }
    if then_waits:
        states["waiting"] = {"on": {"approve": "done"}}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": workspace},
            "agents": {
                "coder": {"model": "scripted/any", "instructions": "Work.", "workspace": "write"}
            },
            "machine": {"initial": "working", "states": states},
        },
    }


def run(name: str) -> Body:
    """A Run in the shared Workspace: its coder picks ``finish``, then it waits for a
    signal ``approve``."""
    return coder_run(name, PROMPTS[name], workspace=WORKSPACE, then_waits=True, continued=True)


def coder(name: str) -> str:
    """The coder's Instance ID in Run ``name`` (a continued conversation's)."""
    return f"{NAMESPACE}.{name}/root/coder"


@asynccontextmanager
async def shared_workspace(
    k8s: emulator.KubernetesApi,
    api: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    script: str,
    git: Path,
    **options: Any,
) -> AsyncIterator[OperatorWorld]:
    """The operator on the scripted model answering ``script``, and the shared Workspace
    (its repo made under ``git``) Ready; ``options`` as ``operator_world``'s."""
    origin = make_origin(git)
    async with operator_world(
        k8s,
        api,
        installation,
        kubelet=kubelet,
        script=script,
        workspace=workspace(origin),
        origin=origin,
        **options,
    ) as made:
        yield made


async def until_waiting(world: OperatorWorld, name: str) -> None:
    """Until Run ``name`` waits for ``approve``, its coder's Turn swept and recorded."""

    def recorded() -> bool:
        current = status(world.k8s, RUNS, name)
        return current.get("state") == "waiting" and current.get("turnCount") == 1

    await eventually(
        recorded, f"Run {name} to wait, its Turn recorded", describe=lambda: world.said(name)
    )
