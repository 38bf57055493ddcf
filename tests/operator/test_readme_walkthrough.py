"""README.md's "Installing on a cluster" walkthrough, run as written: its commands are read
from the README's code blocks and run by bash, with the real ``helm`` and ``kubectl``,
against the API emulator, the kubelet (each sandbox Pod's containers as processes) and the
scripted model.

The only changes to what a user runs, each asserted present in the README (or the
example) first, so that a change there fails this test rather than passing unseen:
- the chart ``oci://ghcr.io/kubeturn/charts/kubeturn --version 0.5.0`` is the repository's
  ``charts/kubeturn`` (no registry here);
- the provider's ``baseUrl`` ``https://api.openai.com/v1`` is the scripted model on
  127.0.0.1;
- the example's repository ``https://github.com/octocat/Hello-World.git`` is a copy served
  by git's smart HTTP on 127.0.0.1 (the copy of ``examples/cluster/`` the commands read
  names it);
- ``kubectl get agentturns -w`` runs in the background until the Run is over, then stops.

The "Building your own images" alternative is not run: it needs a Docker registry.

The operator is started as the chart's Deployment, as ``helm install`` stored it in the
emulator, runs it: its environment (``kubeturn operator`` reads nothing else) with the
providers ConfigMap's file and the console's certificate Secret where the Deployment
mounts them, as the chart's ServiceAccount
(a token issued for it; its RBAC, as helm stored it, enforced), with loopback ports; no
Lease election (one replica).

Cases (one scenario): ``helm install`` stores the CRDs, the release Secret and the
chart's objects; the Secret the README makes holds the key; the Run applied waits at
``humanReview`` with two Turns, each ``ended`` by its own pick (coder ``implementing``,
reviewer ``reviewing``), on the models the example names; ``kubectl get runs`` shows it
so; the README's patch approves it and it ``Succeeded`` with the example's output;
``kubectl describe run`` shows the Turns' Events; the watch showed both AgentTurns, and
both stay, ``Settled`` with outcome and cause, for the chart's ``turnRetention``.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn import cli
from kubeturn_harness.scripted import parse_script, serve
from tests import tools
from tests.operator import emulator, git_http
from tests.operator import kubelet as kubelet_
from tests.operator.operator_support import (
    AGENTTURN_COLUMNS,
    AGENTTURNS,
    RUNS,
    OperatorThread,
    call,
    eventually,
    fail_on_logged_errors,
    free_port,
    kubectl_table,
    model_requests,
    names,
    script,
    status,
)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHART = ROOT / "charts" / "kubeturn"
EXAMPLE = "examples/cluster/task-with-review.yaml"
SECTION = "## Installing on a cluster"
ALTERNATIVE = "**Building your own images.**"
"""A paragraph of the section whose commands build and push images: not run here (no
registry); the published chart stands for what they would make."""
CHART_REF = "oci://ghcr.io/kubeturn/charts/kubeturn --version 0.5.0"
BASE_URL = "https://api.openai.com/v1"
REPOSITORY = "https://github.com/octocat/Hello-World.git"
WATCH = "kubectl get agentturns -w"
RUN = "task-with-review"
KEY = "sk-test-key"
COMMAND_S = 60.0
"""One command: helm install takes a few seconds; a minute means it hangs."""
RUN_S = 90.0
"""The Run to reach a state: a sandbox's start and two Turns take seconds here."""

Body = dict[str, Any]

CODER = "Add a CONTRIBUTING.md"
REVIEWER = "Review the change in"
SCRIPT = script(
    {
        CODER: [
            {"toolCalls": [call("write", path="CONTRIBUTING.md", content="Open a PR.\n")]},
            {"toolCalls": [call("submit", summary="added CONTRIBUTING.md")]},
        ],
        REVIEWER: [{"toolCalls": [call("review_verdict", verdict="approve")]}],
    }
)


def walkthrough() -> list[str]:
    """The commands of the walkthrough's code blocks (the section's ``sh`` blocks before
    the Workspace's, but the "Building your own images" alternative's), continuation lines
    joined, in order."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("A Workspace shows its sandbox")]
    if ALTERNATIVE in section:
        start = section.index(ALTERNATIVE)
        opened = section.index("```sh\n", start)
        closed = section.index("```", opened + len("```sh\n")) + len("```")
        section = section[:start] + section[closed:]
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", section, flags=re.S):
        joined = block.replace("\\\n", " ")
        commands += [line.strip() for line in joined.splitlines() if line.strip()]
    return commands


def substituted(command: str, old: str, new: str) -> str:
    assert old in command, f"the README's command no longer holds {old!r}: {command}"
    return command.replace(old, new)


@dataclasses.dataclass
class Shell:
    """bash in the user's checkout, with kubectl and helm on its PATH and their
    kubeconfig the emulator's admin's (through its proxy)."""

    cwd: Path
    env: dict[str, str]

    async def start(self, command: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.cwd,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def __call__(self, command: str) -> str:

        process = await self.start(command)
        async with asyncio.timeout(COMMAND_S):
            out, err = await process.communicate()
        assert process.returncode == 0, f"{command}\nexited {process.returncode}:\n{err.decode()}"
        return out.decode()


@pytest.fixture
async def shell(
    k8s: emulator.KubernetesApi, kube_binaries: tools.Binaries, tmp_path: Path
) -> AsyncIterator[Shell]:
    home = tmp_path / "home"
    home.mkdir()
    checkout = tmp_path / "checkout"
    (checkout / "examples" / "cluster").mkdir(parents=True)
    async with emulator.admin_proxy(k8s) as url:
        config = emulator.write_kubeconfig(tmp_path / "admin", url, token=None)
        binaries = f"{kube_binaries.kubectl.parent}:{kube_binaries.helm.parent}"
        env = {
            "HOME": str(home),
            "PATH": f"{binaries}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "KUBECONFIG": str(config),
            "OPENAI_API_KEY": KEY,
        }
        yield Shell(checkout, env)


async def operator_as_deployed(
    k8s: emulator.KubernetesApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> OperatorThread:
    """The operator as the Deployment helm stored runs it (see the module's docstring)."""
    deployment = k8s.read_object("apps/v1/deployments", "kubeturn-system", "kubeturn")
    assert deployment is not None
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["operator"]
    namespace = deployment["metadata"]["namespace"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    files = tmp_path / "mounted"
    for name, path in mounts.items():
        source = volumes[name].get("configMap")
        if source is not None:
            stored = k8s.read_object("v1/configmaps", namespace, source["name"])
            assert stored is not None
            target = files / path.lstrip("/")
            target.mkdir(parents=True)
            for file, content in stored["data"].items():
                (target / file).write_text(content)
        secret = volumes[name].get("secret")
        if secret is not None:
            stored = k8s.read_object("v1/secrets", namespace, secret["secretName"])
            assert stored is not None
            target = files / path.lstrip("/")
            target.mkdir(parents=True)
            for file, content in stored["data"].items():
                (target / file).write_bytes(base64.b64decode(content))
    fields = {"metadata.namespace": namespace, "metadata.name": "kubeturn-0"}
    for variable in container["env"]:
        if "value" in variable:
            value = variable["value"]
        else:
            value = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
        if isinstance(value, str) and value.startswith("/etc/"):
            value = str(files / value.lstrip("/"))
        monkeypatch.setenv(variable["name"], value)
    args = cli._parser().parse_args(["operator"])
    chart_settings = cli.operator_settings(args)
    api_port = free_port()
    local = dataclasses.replace(
        chart_settings,
        orchestrator_url=f"http://127.0.0.1:{api_port}",
        api_host="127.0.0.1",
        api_port=api_port,
        health_port=free_port(),
        metrics_port=free_port(),
        console_port=free_port(),
    )
    token = k8s.issue_token(namespace, pod["serviceAccountName"])
    kubeconfig = emulator.write_kubeconfig(tmp_path / "operator", str(k8s.url), token=token)
    return OperatorThread(local, kubeconfig)


async def test_the_readme_walkthrough_runs_as_written(
    k8s: emulator.KubernetesApi,
    shell: Shell,
    kubelet: kubelet_.Kubelet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    commands = walkthrough()
    assert [command.split(" ")[:3] for command in commands] == [
        ["helm", "install", "kubeturn"],
        ["kubectl", "create", "secret"],
        ["kubectl", "apply", "-f"],
        ["kubectl", "get", "agentturns"],
        ["kubectl", "get", "runs"],
        ["kubectl", "patch", "run"],
        ["kubectl", "describe", "run"],
    ]
    install, secret, apply, watch, get_runs, approve, describe = commands
    model, model_url = await serve(parse_script(SCRIPT))
    operator: OperatorThread | None = None
    watching: asyncio.subprocess.Process | None = None
    async with git_http.serving(tmp_path / "srv", "", "") as git:
        git_http.bare(git.root / "Hello-World.git", "Initial commit", branch="master")
        example = (ROOT / EXAMPLE).read_text(encoding="utf-8")
        served = substituted(example, REPOSITORY, f"{git.url}/Hello-World.git")
        (shell.cwd / EXAMPLE).write_text(served)
        try:
            # helm install, the chart and the provider local.
            local = substituted(install, CHART_REF, str(CHART))
            await shell(substituted(local, BASE_URL, model_url))
            release = k8s.read_object(
                "v1/secrets", "kubeturn-system", "sh.helm.release.v1.kubeturn.v1"
            )
            assert release is not None
            assert release["type"] == "helm.sh/release.v1"
            assert release["metadata"]["labels"]["status"] == "deployed"
            operator = await operator_as_deployed(k8s, tmp_path, monkeypatch)
            assert operator.settings.default_model == "openai/gpt-4.1"

            await operator.start()

            await shell(secret)
            stored = k8s.read_object("v1/secrets", "default", "openai-api-key")
            assert stored is not None
            assert base64.b64decode(stored["data"]["api-key"]).decode() == KEY
            assert "examples/cluster/" in apply
            await shell(apply)
            assert watch.startswith(WATCH)
            watching = await shell.start(watch)

            def at_review() -> bool:
                found = status(k8s, RUNS, RUN)
                return found.get("state") == "humanReview" and found.get("turnCount") == 2

            await eventually(at_review, "the Run to wait at humanReview", timeout=RUN_S)
            # The chart keeps each settled AgentTurn an hour (turnRetention): kubectl
            # lists the finished Turns too.
            await eventually(
                lambda: (
                    names(k8s, AGENTTURNS) == [f"{RUN}-t1", f"{RUN}-t2"]
                    and all(
                        status(k8s, AGENTTURNS, n).get("settlement") for n in names(k8s, AGENTTURNS)
                    )
                ),
                "both AgentTurns settled, kept",
            )
            shown = kubectl_table(await shell(get_runs))
            assert shown[0][:4] == ["NAME", "STATE", "PHASE", "TURNS"]
            assert [row[:4] for row in shown[1:]] == [[RUN, "humanReview", "Running", "2"]]

            await shell(approve)
            await eventually(
                lambda: status(k8s, RUNS, RUN).get("phase") == "Succeeded",
                "the Run to succeed",
                timeout=RUN_S,
            )
            done = status(k8s, RUNS, RUN)
            assert [(t["agent"], t["state"], t["outcome"], t["cause"]) for t in done["turns"]] == [
                ("coder", "implementing", "ended", "pick"),
                ("reviewer", "reviewing", "ended", "pick"),
            ]
            assert done["output"] == {"rounds": 0, "summary": "added CONTRIBUTING.md"}
            assert done["processedSignals"] == [{"id": "approve-1", "result": "handled"}]
            described = await shell(describe)
            assert "Succeeded" in described
            # Events of one second are listed in no particular order.
            events = [
                line.split(None, 4) for line in described.splitlines() if "TurnRecorded" in line
            ]
            assert sorted((e[0], e[1], e[4]) for e in events) == [
                ("Normal", "TurnRecorded", "t1 (coder in implementing): ended, cause pick"),
                ("Normal", "TurnRecorded", "t2 (reviewer in reviewing): ended, cause pick"),
            ], described

            watching.terminate()
            out, _ = await watching.communicate()
            # kubectl aligns each watched row on its own: cells by whitespace (an empty
            # PHASE or OUTCOME is no cell).
            header, *lines = out.decode().splitlines()
            assert header.split() == AGENTTURN_COLUMNS
            rows = [line.split() for line in lines]
            assert {tuple(row[:4]) for row in rows} == {
                (f"{RUN}-t1", RUN, "coder", "implementing"),
                (f"{RUN}-t2", RUN, "reviewer", "reviewing"),
            }
            last = {row[0]: row[:7] for row in rows}
            assert last == {
                f"{RUN}-t1": [
                    f"{RUN}-t1",
                    RUN,
                    "coder",
                    "implementing",
                    "Settled",
                    "ended",
                    "pick",
                ],
                f"{RUN}-t2": [
                    f"{RUN}-t2",
                    RUN,
                    "reviewer",
                    "reviewing",
                    "Settled",
                    "ended",
                    "pick",
                ],
            }

            requests = await model_requests_of(model_url)
            assert [r["body"]["model"] for r in requests] == ["gpt-4.1", "gpt-4.1", "gpt-4.1-mini"]
        finally:
            if watching is not None and watching.returncode is None:
                watching.kill()
                await watching.communicate()
            if operator is not None:
                await operator.stop()
            await model.cleanup()
    fail_on_logged_errors(caplog, kubelet.started)


async def model_requests_of(model_url: str) -> list[Body]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        return await model_requests(session, model_url.removesuffix("/v1"))
