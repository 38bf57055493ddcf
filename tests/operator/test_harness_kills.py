"""A Harness SIGKILLed mid-Turn ten times, its tool command running: the real operator (in a
thread) against the emulator, the kubelet restarting the ``harness`` container in place
(its back-off shortened to a tenth of a second, as a node's first restart is at once),
the scripted model running a ``bash`` command that never ends by itself.

Cases:
- each of ten Turns runs ``sleep`` through the toolbox (its own container, which lives
  on) when its Harness is killed: the ``sleep`` is gone within seconds, since the
  toolbox session ends every process it started when the Harness that owns the session
  goes (its connection closes); the restarted Harness settles the cut Submission
  ``failed``/``harness_restarted`` once, from its log; the Run's ``onError`` enters the
  state again, and the eleventh Turn picks ``done``: the Run Succeeded with ten Turns
  recorded ``failed`` with the Harness's words and one ``ended``; one ``TurnSettled``
  Event per AgentTurn; no ``sleep`` left.

About 35 s on 2 cores (60 s when busy).
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

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
    WORKSPACES,
    HarnessReader,
    events,
    eventually,
    harness_token,
    make_origin,
    names,
    read,
    scripted_operator,
)

KILLS = 10
WORKSPACE = "killed"
POD = f"{WORKSPACE}-kubeturn-sandbox"
SLEEP = b"sleep\x0086399\x00"
"""The tool command's process, as ``/proc/<pid>/cmdline`` shows it."""
RESTARTED = "the Harness restarted while this Submission ran"
SCRIPT = (
    '{"conversations": ['
    f'{{"match": "Attempt {KILLS} of", "steps": [{{"toolCalls": [{{"name": "done"}}]}}]}},'
    '{"match": "", "steps": [{"toolCalls": [{"name": "bash", "arguments": '
    '{"command": "exec sleep 86399"}}]}]}'
    "]}"
)
"""The last attempt picks ``done``; every other runs ``sleep`` until its Harness goes."""


def attempt(other: str) -> dict[str, object]:
    """A state whose Turn, failed, moves to ``other`` counting one more try."""
    return {
        "invoke": {
            "agent": {"slot": "coder", "prompt": "Attempt {{ context.tries }} of the task."},
            "onError": {"target": other, "assign": {"context.tries": "context.tries + 1"}},
        },
        "on": {"done": {"target": "finished", "description": "The task is done."}},
    }


MACHINE = {
    "initial": "working",
    "context": {"tries": 0},
    "states": {
        "working": attempt("again"),
        "again": attempt("working"),
        "finished": {"type": "final"},
    },
}
"""Two states taking turns, so that each failed Turn's state exits and the next enters."""


def sleeping() -> set[int]:
    """The pids of the tool commands running now."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    if cmdline.read() == SLEEP:
                        found.add(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubelet_, "BACKOFF_FIRST_S", 0.1)
    monkeypatch.setattr(kubelet_, "BACKOFF_MAX_S", 0.2)


@pytest.fixture
async def plain() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as made:
        yield made


async def test_a_harness_killed_mid_turn_ten_times_leaves_no_tool_process(
    k8s: emulator.KubernetesApi,
    installation: Installation,
    quick_restarts: None,
    kubelet: kubelet_.Kubelet,
    plain: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    async with scripted_operator(installation, SCRIPT):
        k8s.create_object(
            WORKSPACES,
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Workspace",
                "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
                "spec": {"repos": {"target": {"url": make_origin(tmp_path / "git")}}},
            },
        )
        await kubelet.running(POD, timeout=60)
        k8s.create_object(
            RUNS,
            {
                "apiVersion": GROUP_VERSION,
                "kind": "Run",
                "metadata": {"name": "cut", "namespace": NAMESPACE},
                "spec": {
                    "workspace": {"name": WORKSPACE},
                    "agents": {
                        "coder": {
                            "model": "scripted/any",
                            "instructions": "Work.",
                            "workspace": "write",
                        }
                    },
                    "machine": MACHINE,
                },
            },
        )

        def describe() -> str:
            run = dict((read(k8s, RUNS, "cut") or {}).get("status") or {})
            run.pop("snapshot", None)
            turns = {
                n: (read(k8s, AGENTTURNS, n) or {}).get("status") for n in names(k8s, AGENTTURNS)
            }
            log = kubelet.sandboxes[(NAMESPACE, POD)].log.read_text()[-3000:]
            log += str([(x.url, x.process.pid, x.process.returncode) for x in kubelet.started])
            pod = (read(k8s, "v1/pods", POD) or {}).get("status", {})
            log += json.dumps(pod.get("containerStatuses"))[:1500] + str(pod.get("podIP"))
            return f"Run {json.dumps(run)}; AgentTurns {json.dumps(turns)}; Harness: {log}"

        seen: set[int] = set()
        for attempt in range(KILLS):
            pids: set[int] = await eventually(
                lambda seen=frozenset(seen): sleeping() - seen,
                f"attempt {attempt}'s tool command",
                timeout=60,
                describe=describe,
            )
            seen |= pids
            sandbox = kubelet.sandboxes[(NAMESPACE, POD)]
            assert sandbox.process.returncode is None
            os.kill(sandbox.process.pid, signal.SIGKILL)
            await eventually(
                lambda pids=frozenset(pids): not (sleeping() & pids),
                f"attempt {attempt}'s tool command to end with its Harness",
                timeout=15,
            )

        def ended() -> bool:
            return ((read(k8s, RUNS, "cut") or {}).get("status") or {}).get("phase") == "Succeeded"

        await eventually(ended, "the Run to succeed", timeout=60)
        await eventually(lambda: not names(k8s, AGENTTURNS), "its AgentTurns gone", timeout=30)
        status = (read(k8s, RUNS, "cut") or {})["status"]
        turns = status["turns"]
        assert [(t["outcome"], t.get("message")) for t in turns] == [
            ("failed", RESTARTED)
        ] * KILLS + [("ended", None)]
        sandbox = await kubelet.running(POD)
        harness = HarnessReader(sandbox.url, harness_token(k8s, WORKSPACE), plain)
        for turn in turns[:KILLS]:
            history = await harness.history("coder", turn["instanceId"])
            assert [(s["outcome"], s["error"]["type"]) for s in history["settlements"]] == [
                ("failed", "harness_restarted")
            ]
        settled = Counter(e["involvedObject"]["name"] for e in events(k8s, "TurnSettled"))
        assert settled == Counter({f"cut-{t['name']}": 1 for t in turns})
        assert sleeping() == set()
