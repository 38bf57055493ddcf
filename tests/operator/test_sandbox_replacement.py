"""Runs live through their sandbox Pod's replacement, and through its Harness's failures:
the real operator (kopf, in a thread of its own) against the API emulator, the kubelet
running each sandbox Pod as a real Harness process, the scripted model holding the model
requests a test needs held.

Cases:
- a Turn running (its model request held) when its sandbox Pod is deleted: the new
  Pod's Harness finds the conversation on the volume and settles the Submission
  ``failed``/``harness_restarted``; the operator's follower reads that at the new
  Harness, the Machine gets the Agent's fault and its ``onError`` moves the Run on to a
  new Turn on a new conversation (the faulted one's epoch bumped), which ends by its
  pick; ``Run.status.turns`` records each Turn once: the cut one ``failed`` with the
  Harness's words (ADR 0015: no Submission ran when its state exited, and its last one
  failed), as its Submission; the cut Turn's AgentTurn and its ``TurnSettled`` Event say
  the same; one admission of it reached a Harness; no effect, handler or Harness logged
  an error;
- a Turn running when its Pod is made again on a volume whose Harness data is gone: the
  new Harness does not know the conversation (404), and past ``LOST_AFTER_S`` the
  follower settles the Submission ``failed`` saying the Harness lost it; the Machine's
  ``onError`` moves on, and the Turn is recorded ``failed`` with those words, in the Run
  and on its AgentTurn alike;
- a Turn whose Harness froze (SIGSTOP: it accepts connections and never answers) when
  its state exits: the finalizer tries the sweep, each try within ``SWEEP_TIMEOUT_S``,
  until its bound (``harnesses.WAIT_S``), then settles the named Submission ``aborted``
  saying the Harness did not answer the sweep within that bound; the Run, which looks
  far more often than that whether the AgentTurn is still there, waits for that report
  and records the Turn as the AgentTurn says (outcome and message);
- an ``exec`` started while the sandbox Pod is being made again (the kubelet holding the
  new Pod back) waits for the new Harness and runs there: the Run's ``onDone`` gets the
  command's output;
- worktrees the Harness cannot make (git fails: a file where the slot's worktrees go)
  give the Run ``Ready=False``, ``WorktreesFailed``, with git's words; once the file is
  gone the Run is asked for again, gets its worktree and runs to ``Succeeded``.

The Workspace is a named one. The emulator's limits are the emulator's; the kubelet's
are in :mod:`tests.operator.kubelet`.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.k8s import harnesses
from kubeturn.orchestrator import harness_client
from tests.operator import emulator
from tests.operator import kubelet as kubelet_
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    AGENTTURNS,
    GROUP_VERSION,
    NAMESPACE,
    call,
    events,
    fail_on_logged_errors,
    make_origin,
    model_requests,
    script,
    status,
)
from tests.operator.world import OperatorWorld, operator_world

WORKSPACE = "replaceable"
POD = f"{WORKSPACE}-kubeturn-sandbox"
LONG = "Do the long task"
AGAIN = "Try the task again"
RESTARTED = "the Harness restarted while this Submission ran"
SCRIPT = script(
    {
        LONG: [{"text": "Working on it.", "hold": True}],
        AGAIN: [{"toolCalls": [call("finish")]}],
    }
)
"""The first Turn's model request is held until its Harness goes; the second picks."""

Body = dict[str, Any]


def workspace(origin: str) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Workspace",
        "metadata": {"name": WORKSPACE, "namespace": NAMESPACE},
        "spec": {"repos": {"target": {"url": origin}}},
    }


def run(name: str, machine: Body, *, agents: bool = True) -> Body:
    spec: Body = {"workspace": {"name": WORKSPACE}, "machine": machine, "agents": {}}
    if agents:
        spec["agents"] = {
            "coder": {"model": "scripted/any", "instructions": "Work.", "workspace": "write"}
        }
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def coder(prompt: str) -> Body:
    return {"agent": {"slot": "coder", "prompt": prompt, "continue": True}}


FINISH = {"finish": {"target": "done", "description": "The task is done."}}


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: Installation,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator on the scripted model, the Workspace Ready; the test fails if the
    operator or a Harness logged an error."""
    origin = make_origin(tmp_path / "git")
    # A Run waiting for a finalizer's report looks often whether its AgentTurn went,
    # so a test shows that it waits for the report past its looks.
    async with operator_world(
        k8s,
        k8s_client,
        installation,
        kubelet=kubelet,
        script=SCRIPT,
        workspace=workspace(origin),
        origin=origin,
        watch_agentturns=True,
        sweep_look_s=0.2,
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


# ----------------------------------------------------------------------------- a Turn cut


RETRY_ON_ERROR = {
    "initial": "working",
    "context": {"why": ""},
    "states": {
        "working": {
            "invoke": {
                **coder(LONG),
                "onError": {"target": "again", "assign": {"context.why": "event.message"}},
            },
            "on": FINISH,
        },
        "again": {"invoke": coder(AGAIN), "on": FINISH},
        "done": {"type": "final", "output": "context.why"},
    },
}
"""The coder's first Turn runs long; its failure routes to a second Turn, whose pick ends
the Run with the failure's words as its output."""


async def start_held_turn(world: OperatorWorld, name: str) -> None:
    """Create the Run ``name`` of ``RETRY_ON_ERROR`` and wait until its first Turn's model
    request is held by the scripted model and its AgentTurn is Running."""
    await world.create(run(name, RETRY_ON_ERROR))

    async def held() -> bool:
        return any(r["held"] for r in await model_requests(world.session, world.model, LONG))

    await world.until(held, "the first Turn's model request held", run=name)
    await world.until(
        lambda: status(world.k8s, AGENTTURNS, f"{name}-t1").get("phase") == "Running",
        "the first AgentTurn Running",
        run=name,
    )


async def test_a_turn_cut_by_its_pods_replacement_settles_failed_and_the_run_moves_on(
    world: OperatorWorld,
) -> None:
    name = "cut"
    first_iid = f"{NAMESPACE}.{name}/root/coder"
    await start_held_turn(world, name)
    old = await world.harness()

    await world.delete_pod()
    await world.until(
        lambda: world.run(name).get("phase") == "Succeeded" and world.run(name)["turnCount"] == 2,
        "the Run to succeed with both Turns recorded",
        run=name,
    )

    # The new Harness settled the cut Submission from the log on the volume.
    new = await world.harness()
    assert new.url != old.url
    assert [s.url for s in world.kubelet.started] == [old.url, new.url]
    history = await new.history("coder", first_iid)
    (settlement,) = history["settlements"]
    assert (settlement["outcome"], settlement["error"]) == (
        "failed",
        {"type": "harness_restarted", "message": RESTARTED},
    )
    cut = settlement["submissionId"]
    admitted = [
        e for e in await new.events("coder", first_iid) if e["type"] == "submission-admitted"
    ]
    assert [(e["data"]["submissionId"], e["data"]["request"]["key"]) for e in admitted] == [
        (cut, "t1.1")
    ]

    # The Machine heard the Agent's fault (the Harness's words) and moved on.
    done = world.run(name)
    assert (done["state"], done["output"]) == ("done", RESTARTED)
    turns = done["turns"]
    assert [(t["name"], t["state"], t["outcome"], t["cause"]) for t in turns] == [
        ("t1", "working", "failed", None),
        ("t2", "again", "ended", "pick"),
    ]
    assert turns[0]["message"] == RESTARTED
    assert [(s["id"], s["outcome"], s["message"]) for s in turns[0]["submissions"]] == [
        (cut, "failed", RESTARTED)
    ]
    assert [t["instanceId"] for t in turns] == [first_iid, f"{first_iid}/1"]
    again = await new.history("coder", f"{first_iid}/1")
    assert [s["outcome"] for s in again["settlements"]] == ["ended"]

    # The cut Turn's AgentTurn recorded its Submission's settlement, then its own.
    await world.until(
        lambda: f"{name}-t1" in world.turns.deleted(), "t1's AgentTurn gone", run=name
    )
    kind, last = world.turns.of(f"{name}-t1")[-1]
    assert kind == "DELETED"
    assert [(s["id"], s["outcome"]) for s in last["status"]["submissions"]] == [(cut, "failed")]
    said = last["status"]["settlement"]
    assert (said["outcome"], said.get("cause"), said["message"]) == ("failed", None, RESTARTED)
    settled = [
        e for e in events(world.k8s, "TurnSettled") if e["involvedObject"]["name"] == f"{name}-t1"
    ]
    assert [e["message"] for e in settled] == [f"coder in working: failed: {RESTARTED}"]


# ----------------------------------------------------------------------------- a lost log


async def test_a_turn_whose_conversation_the_new_harness_lost_is_recorded_failed(
    world: OperatorWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harness_client, "LOST_AFTER_S", 1.0)
    name = "lost"
    first_iid = f"{NAMESPACE}.{name}/root/coder"
    await start_held_turn(world, name)
    old = await world.kubelet.running(POD)

    # The Pod goes, and the Harness's data with it: the next Pod's volume has none.
    world.kubelet.held = True
    await world.delete_pod()
    await world.until(
        lambda: (NAMESPACE, POD) not in world.kubelet.sandboxes,
        "the old Harness gone",
        run=name,
    )
    shutil.rmtree(old.data_dir)
    world.kubelet.held = False
    await world.until(
        lambda: world.run(name).get("phase") == "Succeeded" and world.run(name)["turnCount"] == 2,
        "the Run to succeed with both Turns recorded",
        run=name,
    )

    lost = f"the Harness lost the conversation {first_iid!r}: for 1 s it answered its stream "
    done = world.run(name)
    assert done["output"].startswith(lost)
    assert "HTTP 404" in done["output"]
    turns = done["turns"]
    assert [(t["name"], t["state"], t["outcome"], t["cause"]) for t in turns] == [
        ("t1", "working", "failed", None),
        ("t2", "again", "ended", "pick"),
    ]
    assert turns[0]["message"] == done["output"]
    assert [(s["outcome"], s["message"]) for s in turns[0]["submissions"]] == [
        ("failed", done["output"])
    ]
    await world.until(
        lambda: f"{name}-t1" in world.turns.deleted(), "t1's AgentTurn gone", run=name
    )
    _, last = world.turns.of(f"{name}-t1")[-1]
    said = last["status"]["settlement"]
    assert (said["outcome"], said["message"]) == ("failed", done["output"])


# ----------------------------------------------------------------------------- a frozen Harness


async def test_a_sweep_its_frozen_harness_never_answers_is_recorded_aborted_at_the_bound(
    world: OperatorWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(harnesses, "WAIT_S", 3.0)
    monkeypatch.setattr(harness_client, "SWEEP_TIMEOUT_S", 1.0)
    name = "frozen"
    machine = {
        "initial": "working",
        "states": {
            "working": {"invoke": coder(LONG), "on": FINISH},
            "done": {"type": "final"},
        },
        "on": {"stop": "done"},
    }
    await world.create(run(name, machine))

    async def held() -> bool:
        return any(r["held"] for r in await model_requests(world.session, world.model, LONG))

    await world.until(held, "the Turn's model request held", run=name)
    await world.until(
        lambda: status(world.k8s, AGENTTURNS, f"{name}-t1").get("phase") == "Running",
        "the AgentTurn Running",
        run=name,
    )
    sandbox = await world.kubelet.running(POD)
    os.kill(sandbox.process.pid, signal.SIGSTOP)
    try:
        await world.signal(name, "stop")
        await world.until(
            lambda: f"{name}-t1" in world.turns.deleted(),
            "the AgentTurn's finalizer to give up and let it go",
            run=name,
        )
        await world.until(lambda: world.run(name).get("turnCount") == 1, "the record", run=name)
    finally:
        os.kill(sandbox.process.pid, signal.SIGCONT)

    _, last = world.turns.of(f"{name}-t1")[-1]
    said = last["status"]["settlement"]
    assert said["outcome"] == "aborted"
    assert said["message"].startswith(
        f"the Harness of Workspace {WORKSPACE!r} did not answer the sweep within 3 s: "
    )
    (turn,) = world.run(name)["turns"]
    assert (turn["outcome"], turn.get("cause"), turn["message"]) == (
        "aborted",
        None,
        said["message"],
    )
    assert [(s["outcome"], s["message"]) for s in turn["submissions"]] == [
        ("aborted", said["message"])
    ]
    settled = [
        e for e in events(world.k8s, "TurnSettled") if e["involvedObject"]["name"] == f"{name}-t1"
    ]
    assert [e["message"] for e in settled] == [f"coder in working: aborted: {said['message']}"]


# ----------------------------------------------------------------------------- an exec


async def test_an_exec_started_while_the_pod_is_made_again_runs_at_the_new_harness(
    world: OperatorWorld,
) -> None:
    name = "checker"
    machine = {
        "initial": "waiting",
        "context": {"out": "", "why": ""},
        "states": {
            "waiting": {"on": {"check": "checking"}},
            "checking": {
                "invoke": {
                    "exec": {"command": "echo checked"},
                    "onDone": {"target": "done", "assign": {"context.out": "event.output.output"}},
                    "onError": {"target": "broken", "assign": {"context.why": "event.message"}},
                }
            },
            "done": {"type": "final", "output": "context.out"},
            "broken": {"type": "final", "outcome": "failed", "output": "context.why"},
        },
    }
    await world.create(run(name, machine, agents=False))
    await world.until(
        lambda: world.run(name).get("state") == "waiting", "the Run waiting", run=name
    )
    old = await world.harness()

    world.kubelet.held = True
    await world.delete_pod()
    await world.until(
        lambda: world.workspace_status().get("phase") == "Pending",
        "the Workspace Pending",
        run=name,
    )
    await world.signal(name, "check")
    await world.until(
        lambda: world.run(name).get("state") == "checking", "the exec to start", run=name
    )
    world.kubelet.held = False

    await world.until(lambda: world.run(name).get("phase") == "Succeeded", "the Run done", run=name)
    assert world.run(name)["output"] == "checked"  # the exec result's output, stripped
    new = await world.harness()
    assert [s.url for s in world.kubelet.started] == [old.url, new.url]


# ----------------------------------------------------------------------------- worktrees


async def test_worktrees_the_harness_cannot_make_are_said_and_asked_for_again(
    world: OperatorWorld,
) -> None:
    name = "blocked"
    sandbox = await world.kubelet.running(POD)
    blocker = sandbox.work_root / "target"
    blocker.write_text("not a directory\n")
    await world.create(
        run(
            name,
            {
                "initial": "working",
                "states": {
                    "working": {"invoke": coder(AGAIN), "on": FINISH},
                    "done": {"type": "final"},
                },
            },
        )
    )

    failing = await world.until(
        lambda: (
            world.run_condition(name, "Ready").get("reason") == "WorktreesFailed"
            and world.run_condition(name, "Ready")
        ),
        "Ready=False, WorktreesFailed",
        run=name,
    )
    assert failing["status"] == "False"
    message = failing["message"]
    assert message.startswith(
        f"the Harness of Workspace {WORKSPACE} could not make the Run's worktrees: "
        "git could not make the worktree of 'target': "
    )
    assert message.endswith("(asking again in 2 s)")
    # Its Machine has not started: no state, and the phase the CRD defaults to.
    assert (world.run(name).get("phase"), world.run(name).get("state")) == ("Pending", None)

    blocker.unlink()
    await world.until(
        lambda: world.run(name).get("phase") == "Succeeded" and world.run(name)["turnCount"] == 1,
        "the Run to succeed, its Turn recorded",
        run=name,
    )
    done = world.run(name)
    assert [(t["state"], t["outcome"]) for t in done["turns"]] == [("working", "ended")]
    assert (
        world.run_condition(name, "Ready")["status"],
        world.run_condition(name, "Ready")["reason"],
    ) == ("True", "Finished")
    assert (sandbox.work_root / "target" / f"kubeturn-{name}" / "README.md").is_file()
