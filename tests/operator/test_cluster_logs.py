"""``kubeturn logs -f --kube`` follows a live Turn on a cluster, end to end (ADR 0110): the
real operator (kopf, in a thread of its own) against the API emulator and its aggregation
layer, serving the console ``kubeturn operator`` mounts (``cluster_console``: each Run's
transcript read through its Workspace's Harness, run by the kubelet as a real process);
``kubeturn logs`` a subprocess with a viewer's own kubeconfig, as a user runs it.

One Run, one coder whose model request the scripted model holds:
- ``logs RUN -f --kube -o json`` prints the live Turn's header and prompt while the Turn
  runs (the request still held), and once released (the coder picks ``finish``, the Run
  reaches its final state) the rest of the Turn to its settlement, then exits 0 by
  itself: exactly ``turn, prompt, text, tool-call, pick, receipt, settlement``;
- ``logs RUN --kube`` afterwards prints the same Turn as text;
- a Run deleted while followed ends ``logs -f`` (exit 0), the operator logging no error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.k8s.console_source import cluster_console
from tests.operator import emulator
from tests.operator import installation as installation_
from tests.operator import kubelet as kubelet_
from tests.operator.console_support import kube_logs, place_console, user
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    call,
    fail_on_logged_errors,
    script,
)
from tests.operator.shared import WORKSPACE, shared_workspace
from tests.operator.world import OperatorWorld

Body = dict[str, Any]
RUN = "live"
PROMPT = "Write the live part"
SCRIPT = script({PROMPT: [{"text": "Working on it.", "hold": True, "toolCalls": [call("finish")]}]})
"""The coder says a few words, then its answer is held until released: then it picks
``finish``."""
KINDS = ["turn", "prompt", "text", "tool-call", "pick", "receipt", "settlement"]
LINE_S = 30.0
"""Bound of the wait for one line of ``kubeturn logs``."""


def run() -> Body:
    """A Run in the shared Workspace whose coder picks ``finish`` into the final state."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": RUN, "namespace": NAMESPACE},
        "spec": {
            "workspace": {"name": WORKSPACE},
            "agents": {"coder": {"model": "scripted/any", "instructions": "Work."}},
            "machine": {
                "initial": "working",
                "states": {
                    "working": {
                        "invoke": {"agent": {"slot": "coder", "prompt": PROMPT}},
                        "on": {"finish": {"target": "done", "description": "Done."}},
                    },
                    "done": {"type": "final"},
                },
            },
        },
    }


@pytest.fixture
async def world(
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: installation_.Installation,
    chart: Callable[[installation_.Shape], list[Body]],
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator on the scripted model serving its console behind the aggregated API,
    the shared Workspace Ready; the test fails if the operator or a Harness logged an
    error."""
    place = place_console(
        k8s, chart(installation.shape), installation.operator_namespace, tmp_path / "tls"
    )
    async with shared_workspace(
        k8s,
        k8s_client,
        installation,
        kubelet,
        SCRIPT,
        tmp_path / "git",
        console=cluster_console,
        **place.settings,
    ) as made:
        yield made
    fail_on_logged_errors(caplog, kubelet.started)


async def line(process: asyncio.subprocess.Process) -> Body:
    assert process.stdout is not None
    read = await asyncio.wait_for(process.stdout.readline(), LINE_S)
    assert read, "kubeturn logs ended early"
    entry: Body = json.loads(read)
    return entry


async def held(world: OperatorWorld) -> bool:
    return any(r["held"] and not r["released"] for r in await world.model_requests(PROMPT))


async def viewer_while_held(world: OperatorWorld, tmp_path: Path) -> Path:
    """A viewer's kubeconfig, once the Run is made and its coder's model request held."""
    viewer = user(world.k8s, "viewer", console=True, runs=True)
    config = emulator.write_kubeconfig(tmp_path / "viewer", str(world.k8s.url), token=viewer)
    await world.create(run())
    await world.until(lambda: held(world), "the coder's model request held", run=RUN)
    return config


async def test_logs_follow_a_live_turn_through_the_api_server(
    world: OperatorWorld, tmp_path: Path
) -> None:
    config = await viewer_while_held(world, tmp_path)
    following = await kube_logs(config, RUN, "-f", "-o", "json")
    try:
        live = [await line(following), await line(following)]
        assert [entry["kind"] for entry in live] == ["turn", "prompt"]
        assert (live[0]["turn"], live[0]["state"], live[0]["agent"]) == ("t1", "working", "coder")
        assert live[1]["text"] == PROMPT
        assert following.returncode is None, "logs -f ended while the Turn is live"
        assert await held(world), "the Turn went on before it was released"

        async with world.session.post(f"{world.model}/_release", json={}) as released:
            assert (await released.json())["released"] == 1
        out, err = await asyncio.wait_for(following.communicate(), LINE_S)
        code = await following.wait()
    finally:
        if following.returncode is None:
            following.kill()
            await following.wait()
    assert (code, err) == (0, b"")
    rest = [json.loads(text) for text in out.decode().splitlines()]
    followed = [*live, *rest]
    assert [entry["kind"] for entry in followed] == KINDS
    assert {entry["turn"] for entry in followed} == {"t1"}
    assert world.run(RUN)["phase"] == "Succeeded"
    settlement = followed[-1]["data"]
    assert (settlement["outcome"], settlement["cause"]) == ("ended", "pick")

    shown = await kube_logs(config, RUN, "-o", "json")
    out, err = await asyncio.wait_for(shown.communicate(), LINE_S)
    assert (shown.returncode, err) == (0, b"")
    assert [json.loads(text) for text in out.decode().splitlines()] == followed

    text = await kube_logs(config, RUN)
    out, err = await asyncio.wait_for(text.communicate(), LINE_S)
    assert (text.returncode, err) == (0, b"")
    printed = out.decode().splitlines()
    assert re.sub(r" · \S+Z$", "", printed[0]) == "── t1 · coder · working"
    assert printed[1:-1] == [
        f"  prompt: {PROMPT}",
        "  briefing: 4 lines (use -o json)",
        "  Working on it.",
        "  → finish {}",
        "  ⚑ picked finish",
        "    ← turn-complete: Your pick `finish` was delivered, and the workflow took it. "
        "Your turn is over.",
    ]
    assert re.sub(r"\d+/\d+", "N/N", printed[-1]) == "  ■ ended (cause: pick) · tokens N/N"


async def test_logs_follow_ends_when_the_run_is_deleted(
    world: OperatorWorld, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleted while followed (its live Turn swept), the Run's transcript ends there:
    ``logs -f`` exits 0 by itself, having printed what there was, and the operator's
    console logged no error (it logged a stack trace once)."""
    config = await viewer_while_held(world, tmp_path)
    following = await kube_logs(config, RUN, "-f", "-o", "json")
    try:
        live = [await line(following), await line(following)]
        await world.delete(f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs/{RUN}")
        out, err = await asyncio.wait_for(following.communicate(), LINE_S)
        code = await following.wait()
    finally:
        if following.returncode is None:
            following.kill()
            await following.wait()
    assert (code, err) == (0, b"")
    assert [entry["kind"] for entry in live] == ["turn", "prompt"]
    rest = [json.loads(text) for text in out.decode().splitlines()]
    # The swept Turn's interrupted words show if they were written before the Run went.
    assert [(e["kind"], e["data"].get("status")) for e in rest] in ([], [("text", "interrupted")])
    assert world.read(RUNS, RUN) is None
    errors = [r for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
