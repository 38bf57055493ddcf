"""The requests the operator makes for one Turn's AgentTurn, counted at the API emulator:
the real operator (kopf, in a thread of its own), the kubelet running the sandbox Pod as
a real Harness process, the scripted model.

Cases:
- a single-Turn Run (its Agent picks ``done``, then the Run ends) in a Ready Workspace
  runs to ``Succeeded``; from its creation on, the operator's requests addressing its
  AgentTurn (watches excepted: one stream serves every AgentTurn) are exactly 6, by verb
  and subresource: one create; three status patches (the Submission admitted, the exit,
  and the finalizer's settlement with the Submission's outcome, which kopf writes before
  it removes the finalizer); one delete; one patch removing the finalizer; no read and
  no list (ADR 0091, 0092). Before, the finalizer wrote its settlement itself, and kopf's
  removal of the finalizer, made against the version before that write, was refused and
  sent again: 7. The old figure, for the same Turn: 14, or 17 when the settled
  Submission's write met the sweep's: 1 create, 4 reads (one before each of 3 status
  patches and one before the sweep; 5), 1 list (the wait for earlier Turns), 4 status
  patches (5: one met a conflict), kopf's record of the version it handled and 2
  finalizer removals (3), 1 delete. The AgentTurn still shows what it showed:
  ``Settled``, its settlement ``ended`` with cause ``pick``, its Submission ``ended``,
  read from the last version the test's watch saw.
- the same Run's requests addressing it are 5: kopf's finalizer, and 4 status writes
  (its worktrees with the admitting Turn, the Submission admitted, the exit, the Turn
  recorded); no read, no record of kopf's (ADR 0093, 0094). Before: 8 (kopf's record,
  the worktrees alone, the settlement heard during the sweep).
- kept for kubectl after it settled (the Run's ``turnRetention``, ADR 0106), the
  AgentTurn takes one request more, the patch removing the retain finalizer when its
  retention passed: 7, still no read and no list; the Run's are the same 5.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    AgentTurnWatch,
    call,
    eventually,
    fail_on_logged_errors,
    names,
    read,
    script,
)
from tests.operator.shared import WORKSPACE, shared_workspace
from tests.operator.world import OperatorWorld

PROMPT = "Say you are done."
RUN = "single"
TURN = f"{RUN}-t1"

Body = dict[str, Any]


def single_turn_run(**spec: Any) -> Body:
    """The benchmark's Run: one agent state whose Agent picks ``done`` once → final; with
    ``spec``'s fields too."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": RUN, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {
                "worker": {"model": "scripted/any", "instructions": "Work.", "workspace": "read"}
            },
            "machine": {
                "initial": "working",
                "states": {
                    "working": {
                        "invoke": {"agent": {"slot": "worker", "prompt": PROMPT}},
                        "on": {"done": {"target": "finished", "description": "Done."}},
                    },
                    "finished": {"type": "final"},
                },
            },
            **spec,
        },
    }


def requests_on(
    k8s: emulator.KubernetesApi, since: int, plural: str, name: str
) -> Counter[tuple[str, str]]:
    """(method, subresource) → how many requests the operator (anyone but the test) made,
    from the ``since``-th request the API served on, addressing the object ``name`` of
    ``plural``: by its name, or a list of its kind (watches excepted); a list is
    ``LIST``."""
    counted: Counter[tuple[str, str]] = Counter()
    for request in list(k8s)[since:]:
        if request.resource is None or request.resource.plural != plural:
            continue
        if request.params.get("watch") in ("true", "1"):
            continue
        if request.headers.get("Authorization") == k8s.admin_headers["Authorization"]:
            continue
        if request.name not in (None, name):
            continue
        listed = request.name is None and request.method.value == "GET"
        verb = "LIST" if listed else request.method.value
        counted[(verb, request.subresource or "")] += 1
    return counted


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The Workspace Ready under the operator, whose model picks ``done`` at once; the
    test fails if the operator logged an error."""
    picks = script({PROMPT: [{"toolCalls": [call("done")]}]})
    async with shared_workspace(
        k8s, k8s_client, installation, kubelet, picks, tmp_path / "git"
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


async def test_one_turn_takes_six_requests_on_its_agentturn_and_five_on_its_run(
    world: OperatorWorld,
) -> None:
    made = world
    watch = AgentTurnWatch(made.api)
    await watch.open()
    since = len(list(made.k8s))
    try:
        await made.create(single_turn_run())
        await eventually(
            lambda: (read(made.k8s, RUNS, RUN) or {}).get("status", {}).get("phase") == "Succeeded",
            "the Run to succeed",
        )
        await eventually(lambda: not names(made.k8s, AGENTTURNS), "its AgentTurn to go")
    finally:
        await watch.close()

    counted = requests_on(made.k8s, since, "agentturns", TURN)
    assert dict(counted) == {
        ("POST", ""): 1,
        ("PATCH", "status"): 3,
        ("DELETE", ""): 1,
        ("PATCH", ""): 1,
    }
    assert dict(requests_on(made.k8s, since, "runs", RUN)) == {
        ("PATCH", ""): 1,
        ("PATCH", "status"): 4,
    }
    last = watch.of(TURN)[-1][1]["status"]
    assert (last["phase"], last["settlement"]["outcome"], last["settlement"]["cause"]) == (
        "Settled",
        "ended",
        "pick",
    )
    assert [s["outcome"] for s in last["submissions"]] == ["ended"]


async def test_a_turn_kept_for_kubectl_takes_one_request_more(world: OperatorWorld) -> None:
    made = world
    since = len(list(made.k8s))
    await made.create(single_turn_run(turnRetention="1s"))
    await eventually(
        lambda: (read(made.k8s, RUNS, RUN) or {}).get("status", {}).get("phase") == "Succeeded",
        "the Run to succeed",
    )
    await eventually(lambda: not names(made.k8s, AGENTTURNS), "its AgentTurn to go, kept 1s")

    assert dict(requests_on(made.k8s, since, "agentturns", TURN)) == {
        ("POST", ""): 1,
        ("PATCH", "status"): 3,
        ("DELETE", ""): 1,
        ("PATCH", ""): 2,
    }
    assert dict(requests_on(made.k8s, since, "runs", RUN)) == {
        ("PATCH", ""): 1,
        ("PATCH", "status"): 4,
    }
