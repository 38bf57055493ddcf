"""``kubeturn send|cancel|turns|status --kube`` against a Kubernetes API (the operator
tier's emulator, over HTTP on 127.0.0.1), with a kubeconfig as a user has one.

Cases:
- ``send`` appends ``{id, event, data}`` to ``spec.signals`` with a JSON patch: the first
  makes the list, the next appends, the signals already there stay as they were; the
  namespace is the kubeconfig context's unless ``--namespace`` says otherwise;
- ``cancel`` sets ``spec.cancel``;
- ``status`` and ``turns`` read ``Run.status`` (a table, ``-o wide`` with when each Turn
  started, and ``-o json`` with RFC 3339 times);
- ``send`` refuses, before it patches anything, an event ``status.acceptedEvents`` lacks
  or data that misfits its schema, naming what the Run accepts; ``status`` shows what the
  Run waits for and the signals it ignored;
- one line, exit 1, for: a Run that is not there, a finished Run (no more signals), a
  cluster that cannot be reached.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import environment
from tests.operator import emulator

RUNS = "/apis/kubeturn.dev/v1alpha1/namespaces/{namespace}/runs"
NAMESPACES = "/api/v1/namespaces"


@pytest.fixture
async def cluster() -> AsyncIterator[emulator.KubernetesApi]:
    async with emulator.serve() as api:
        yield api


async def kubeturn(*args: str, config: Path) -> tuple[int, str, str]:
    """``python -m kubeturn ARGS --kube --kubeconfig CONFIG``, without blocking the loop
    the API serves from."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubeturn",
        *args,
        "--kube",
        "--kubeconfig",
        str(config),
        env=environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def call(
    api: emulator.KubernetesApi, method: str, path: str, body: Any = None
) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = (
            "application/merge-patch+json" if method == "PATCH" else "application/json"
        )
    async with api.request(
        method, path, data=json.dumps(body) if body is not None else None, headers=headers
    ) as response:
        assert response.status < 300, await response.text()
        return dict(await response.json())


async def make_run(
    api: emulator.KubernetesApi, name: str, namespace: str = "team", status: Any = None
) -> None:
    runs = RUNS.format(namespace=namespace)
    namespaces = {n["metadata"]["name"] for n in (await call(api, "GET", NAMESPACES))["items"]}
    if namespace not in namespaces:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        await call(api, "POST", NAMESPACES, body)
    await call(
        api,
        "POST",
        runs,
        {
            "apiVersion": "kubeturn.dev/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"agents": {}, "machine": {"initial": "a", "states": {"a": {}}}},
        },
    )
    if status is not None:
        await call(api, "PATCH", f"{runs}/{name}/status", {"status": status})


async def spec_of(api: emulator.KubernetesApi, name: str, namespace: str = "team") -> Any:
    return (await call(api, "GET", f"{RUNS.format(namespace=namespace)}/{name}"))["spec"]


async def test_send_appends_to_spec_signals(
    cluster: emulator.KubernetesApi, tmp_path: Path
) -> None:
    config = emulator.write_kubeconfig(
        tmp_path / "kubeconfig", str(cluster.url), "team", token=cluster.admin_token
    )
    await make_run(cluster, "review", status={"phase": "Running", "state": "humanReview"})

    code, out, err = await kubeturn(
        "send", "review", "approve", "--id", "a-1", "--data", '{"notes": "ok"}', config=config
    )
    assert (code, err) == (0, ""), out
    assert out == "sent approve to Run review (signal a-1)\n"
    code, out, err = await kubeturn("send", "review", "reject", "--id", "r-1", config=config)
    assert (code, err) == (0, "")

    assert (await spec_of(cluster, "review"))["signals"] == [
        {"id": "a-1", "event": "approve", "data": {"notes": "ok"}},
        {"id": "r-1", "event": "reject", "data": {}},
    ]
    code, _, err = await kubeturn("send", "review", "reject", "--id", "r-1", config=config)
    assert code == 1
    assert err == (
        "kubeturn: the Run 'review' in namespace 'team' already has a signal with id 'r-1'; "
        "ids are unique: pass another --id\n"
    )


async def test_namespace_flag_and_cancel(cluster: emulator.KubernetesApi, tmp_path: Path) -> None:
    config = emulator.write_kubeconfig(
        tmp_path / "kubeconfig", str(cluster.url), "team", token=cluster.admin_token
    )
    await make_run(cluster, "job", namespace="other", status={"phase": "Running"})

    code, out, err = await kubeturn("cancel", "job", "-n", "other", config=config)
    assert (code, err) == (0, ""), out
    assert (await spec_of(cluster, "job", "other"))["cancel"] is True

    code, _, err = await kubeturn("cancel", "job", config=config)
    assert code == 1
    assert err.startswith("kubeturn: there is no Run 'job' in namespace 'team' on the cluster")


async def test_status_and_turns_read_run_status(
    cluster: emulator.KubernetesApi, tmp_path: Path
) -> None:
    config = emulator.write_kubeconfig(
        tmp_path / "kubeconfig", str(cluster.url), "team", token=cluster.admin_token
    )
    record = {
        "name": "t1",
        "agent": "coder",
        "state": "implementing",
        "instanceId": "team.done/root/coder",
        "outcome": "ended",
        "cause": "pick",
        "submissions": [{"id": "s1", "outcome": "ended", "admittedAt": 10.0, "settledAt": 12.5}],
        "startedAt": 10.0,
        "settledAt": 12.5,
        "tokens": {"promptTokens": 100, "completionTokens": 7, "cost": "0.0105"},
    }
    used = {"promptTokens": 100, "completionTokens": 7, "cost": "0.0105"}
    usage = {"tokens": 107, "cost": "0.0105", "total": used, "agents": {"coder": used}}
    await make_run(
        cluster,
        "done",
        status={
            "phase": "Succeeded",
            "turnCount": 1,
            "turns": [record],
            "usage": usage,
            "snapshot": {"x": 1},
        },
    )

    code, out, err = await kubeturn("status", "done", config=config)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "run: done",
        "phase: Succeeded",
        "state: -",
        "turns: 1",
        "usage: 100/7 tokens in/out, $0.0105",
        "  coder: 100/7 tokens in/out, $0.0105",
    ]
    code, out, err = await kubeturn("status", "done", "-o", "json", config=config)
    assert "snapshot" not in json.loads(out)
    code, out, err = await kubeturn("turns", "done", "-o", "json", config=config)
    (shown,) = json.loads(out)
    assert (shown["startedAt"], shown["settledAt"]) == (
        "1970-01-01T00:00:10.000Z",
        "1970-01-01T00:00:12.500Z",
    )
    assert shown["submissions"][0]["admittedAt"] == "1970-01-01T00:00:10.000Z"
    code, out, err = await kubeturn("turns", "done", config=config)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "TURN  AGENT  STATE         OUTCOME  CAUSE  TOKENS  COST     DURATION  MESSAGE",
        "t1    coder  implementing  ended    pick   100/7   $0.0105  2.5s      -",
    ]
    code, out, err = await kubeturn("turns", "done", "-o", "wide", config=config)
    assert out.splitlines() == [
        "TURN  AGENT  STATE         OUTCOME  CAUSE  TOKENS  COST     DURATION  MESSAGE  STARTED"
        "                   SUBMISSIONS  INSTANCE",
        "t1    coder  implementing  ended    pick   100/7   $0.0105  2.5s      -        "
        "1970-01-01T00:00:10.000Z  1            team.done/root/coder",
    ]
    code, _, err = await kubeturn("send", "done", "approve", config=config)
    assert code == 1
    assert err == (
        "kubeturn: the Run 'done' in namespace 'team' is Succeeded: it takes no more signals\n"
    )


async def test_send_refuses_what_the_run_does_not_accept(
    cluster: emulator.KubernetesApi, tmp_path: Path
) -> None:
    config = emulator.write_kubeconfig(
        tmp_path / "kubeconfig", str(cluster.url), "team", token=cluster.admin_token
    )
    schema = {"type": "object", "properties": {"reason": {"type": "string", "minLength": 3}}}
    accepted = [
        {"event": "approve", "state": "gate", "description": "Ship it.", "schema": schema},
        {"event": "reject", "state": "gate"},
    ]
    ignored = {"id": "early", "result": "ignored", "message": "no active state accepts go"}
    await make_run(
        cluster,
        "gated",
        status={
            "phase": "Running",
            "state": "gate",
            "acceptedEvents": accepted,
            "waitingFor": "approve,reject",
            "processedSignals": [ignored],
        },
    )
    code, _, err = await kubeturn("send", "gated", "merge", config=config)
    assert (code, err) == (
        1,
        "kubeturn: not sent to run gated: no active state accepts merge; the Run accepts "
        "now: approve (gate), reject (gate)\n",
    )
    code, _, err = await kubeturn(
        "send", "gated", "approve", "--data", '{"reason": 7}', config=config
    )
    assert (code, err) == (
        1,
        "kubeturn: not sent to run gated: the data of approve does not fit its schema: "
        "reason: 7 is not of type 'string'\n",
    )
    assert (await spec_of(cluster, "gated"))["signals"] == []  # the CRD's default, nothing sent
    code, out, err = await kubeturn("status", "gated", config=config)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "run: gated",
        "phase: Running",
        "state: gate",
        "turns: 0",
        "waiting for: approve, reject",
        "  approve (gate): Ship it.",
        "  reject (gate)",
        "ignored signal early: no active state accepts go",
    ]
    code, out, err = await kubeturn("status", "gated", "-o", "wide", config=config)
    assert f"    schema: {json.dumps(schema, sort_keys=True)}" in out.splitlines()
    code, out, err = await kubeturn(
        "send", "gated", "approve", "--id", "a-1", "--data", '{"reason": "fine"}', config=config
    )
    assert (code, err) == (0, ""), out
    assert [s["id"] for s in (await spec_of(cluster, "gated"))["signals"]] == ["a-1"]


async def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = emulator.write_kubeconfig(
        tmp_path / "kubeconfig", f"http://127.0.0.1:{port}", "team", token="unused"
    )
    code, _, err = await kubeturn("status", "any", config=config)
    assert code == 1
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("kubeturn: cannot reach the cluster for the Run 'any' in namespace")
    code, _, err = await kubeturn("status", "any", config=tmp_path / "missing")
    assert code == 1
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"kubeturn: cannot load {tmp_path / 'missing'}: ")
