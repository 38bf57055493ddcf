"""``kubeturn validate --cluster``: what runs on one machine but not on a cluster, and the
operator's refusal of a default model whose provider it does not have.

Cases:
- ``examples/cluster/*.yaml`` pass ``validate --cluster`` as written;
- a repo ``url`` that is a local path (``.``, ``./x``, ``../x``, ``/abs``, ``file://``,
  ``~/x``, a bare name) is refused under ``--cluster`` (one validate of them all), at
  ``spec.workspace.template.repos.<slot>.url`` in a Run and ``spec.repos.<slot>.url`` in
  a Workspace, saying to give a clone URL; remote URLs (https, ssh, scp-like) pass; without
  ``--cluster`` the local path passes (the local runner clones it);
- an Agent with no model, when no state that invokes it names one, is refused at
  ``spec.agents.<slot>.model`` saying how to fix it, unless a default is known: from
  ``--default-model``, the inline template's ``defaultModel``, or a Workspace manifest of
  the name the Run gives, validated with it;
- ``kubeturn operator`` with a ``--default-model`` whose provider ``--providers`` does not
  define (the chart's ``defaultModel``) stops at once with one line naming it (exit 2),
  before it reaches any cluster; so does one with a providers file the Harness would
  refuse (a retry policy out of bounds), naming the key; ``--turn-retention`` (the
  chart's ``turnRetention``, 1h when not given) that is no duration is refused, naming it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubeturn import cli
from kubeturn.errors import CommandError
from tests.cli.support import environment, kubeturn

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_EXAMPLES = sorted((ROOT / "examples" / "cluster").glob("*.yaml"))
TASK = ROOT / "examples" / "cluster" / "task-with-review.yaml"


def test_the_cluster_examples_pass_as_written() -> None:
    assert CLUSTER_EXAMPLES, "examples/cluster holds the Runs a cluster runs as written"
    result = kubeturn("validate", "--cluster", *CLUSTER_EXAMPLES, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{path}: valid" for path in CLUSTER_EXAMPLES]


def run_with(
    tmp_path: Path, *, url: str, models: bool = True, name: str = "run", **template: object
) -> Path:
    """The cluster example with the target's ``url``, and its Agents' models or none."""
    manifest = yaml.safe_load(TASK.read_text())
    workspace = manifest["spec"]["workspace"]["template"]
    workspace["repos"]["target"]["url"] = url
    workspace.update(template)
    if not models:
        for agent in manifest["spec"]["agents"].values():
            del agent["model"]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


LOCAL = [".", "./app", "../app", "/srv/app.git", "file:///srv/app.git", "~/app", "app"]
REMOTE = [
    "https://git.example/app.git",
    "http://127.0.0.1:8080/app.git",
    "ssh://git@git.example/app.git",
    "git@git.example:team/app.git",
    "git.example:team/app.git",
]


def test_a_local_path_is_refused_on_a_cluster_and_a_remote_url_passes(tmp_path: Path) -> None:
    local = [run_with(tmp_path, url=url, name=f"local-{n}") for n, url in enumerate(LOCAL)]
    remote = [run_with(tmp_path, url=url, name=f"remote-{n}") for n, url in enumerate(REMOTE)]
    assert kubeturn("validate", *local, cwd=tmp_path).returncode == 0
    result = kubeturn("validate", "--cluster", *local, *remote, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"{run}: spec.workspace.template.repos.target.url: {url!r} is a path on this machine: "
        "the local runner clones it from here, but a sandbox on the cluster has no such path; "
        "give the repository's clone URL (https://… or ssh://…, e.g. the one `git remote "
        "get-url origin` prints)"
        for run, url in zip(local, LOCAL, strict=True)
    ]
    assert result.stdout.splitlines() == [f"{run}: valid" for run in remote]


def test_a_workspace_manifests_local_path_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "apiVersion: kubeturn.dev/v1alpha1\nkind: Workspace\nmetadata: {name: shared}\n"
        "spec:\n  repos:\n    app: {url: ./app}\n    docs: {url: 'https://git.example/d.git'}\n"
    )
    result = kubeturn("validate", "--cluster", workspace, cwd=tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"{workspace}: spec.repos.app.url: './app' is a path on this machine")


def test_an_agent_with_no_model_and_no_default_is_refused(tmp_path: Path) -> None:
    run = run_with(tmp_path, url="https://git.example/app.git", models=False)
    result = kubeturn("validate", "--cluster", run, cwd=tmp_path)
    assert result.returncode == 1
    fix = (
        "the Agent names no model and no default model is known, so its Turns would be refused "
        "on the cluster: name one (e.g. model: openai/gpt-4.1), set "
        "spec.workspace.template.defaultModel, or, when the chart sets defaultModel, say so: "
        "kubeturn validate --cluster --default-model PROVIDER/MODEL"
    )
    assert result.stderr.splitlines() == [
        f"{run}: spec.agents.coder.model: {fix}",
        f"{run}: spec.agents.reviewer.model: {fix}",
    ]
    # Off the cluster the local runner chooses the model: no problem there.
    assert kubeturn("validate", run, cwd=tmp_path).returncode == 0


def test_a_known_default_serves_agents_with_no_model(tmp_path: Path) -> None:
    bare = run_with(tmp_path, url="https://git.example/app.git", models=False)
    flagged = kubeturn(
        "validate", "--cluster", "--default-model", "openai/gpt-4.1", bare, cwd=tmp_path
    )
    assert flagged.returncode == 0, flagged.stderr
    own = run_with(
        tmp_path, url="https://git.example/app.git", models=False, defaultModel="openai/gpt-4.1"
    )
    assert kubeturn("validate", "--cluster", own, cwd=tmp_path).returncode == 0


def test_a_named_workspace_validated_with_the_run_gives_its_default(tmp_path: Path) -> None:
    manifest = yaml.safe_load(run_with(tmp_path, url="https://x/a.git", models=False).read_text())
    manifest["spec"]["workspace"] = {"name": "shared"}
    run = tmp_path / "named.yaml"
    run.write_text(yaml.safe_dump(manifest))
    workspace = tmp_path / "workspace.yaml"
    spec = "spec:\n  repos:\n    target: {url: 'https://git.example/a.git'}\n"
    header = "apiVersion: kubeturn.dev/v1alpha1\nkind: Workspace\nmetadata: {name: shared}\n"
    workspace.write_text(header + spec + "  defaultModel: openai/gpt-4.1\n")
    assert kubeturn("validate", "--cluster", run, workspace, cwd=tmp_path).returncode == 0
    alone = kubeturn("validate", "--cluster", run, cwd=tmp_path)
    assert alone.returncode == 1
    assert "set the Workspace shared's spec.defaultModel (give its manifest too)" in alone.stderr


def test_the_operator_refuses_a_default_model_of_no_provider(tmp_path: Path) -> None:
    providers = tmp_path / "providers.yaml"
    providers.write_text("openai: {type: openai, baseUrl: 'https://api.openai.com/v1'}\n")
    done = subprocess.run(
        [sys.executable, "-m", "kubeturn", "operator", "--providers", str(providers)],
        env={
            **environment(),
            "KUBETURN_DEFAULT_MODEL": "anthropic/claude",
            "KUBECONFIG": "/nowhere",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "kubeturn: --default-model (the chart's defaultModel) is refused: 'anthropic/claude' "
        "names the provider 'anthropic', which the operator's providers do not define "
        "(defined: openai); name a model of one of them, or add the provider to the chart's "
        "providers"
    ]


def test_the_operator_refuses_a_providers_file_the_harness_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In-process: the same settings function `kubeturn operator` starts with, without the
    # seconds a process of its own costs.
    providers = tmp_path / "providers.yaml"
    providers.write_text("local: {baseUrl: 'http://127.0.0.1:8000/v1', retry: {attempts: 0}}\n")
    monkeypatch.delenv("KUBETURN_DEFAULT_MODEL", raising=False)
    args = cli._parser().parse_args(["operator", "--providers", str(providers)])
    with pytest.raises(CommandError) as refused:
        cli.operator_settings(args)
    assert str(refused.value) == (
        "--providers (the chart's providers) is refused: providers file: "
        "local.retry.attempts: Input should be greater than or equal to 1"
    )


def test_the_operator_takes_a_turn_retention_and_refuses_one_that_is_no_duration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBETURN_DEFAULT_MODEL", raising=False)
    monkeypatch.delenv("KUBETURN_TURN_RETENTION", raising=False)
    assert cli.operator_settings(cli._parser().parse_args(["operator"])).turn_retention_s == 3600
    monkeypatch.setenv("KUBETURN_TURN_RETENTION", "30m")
    assert cli.operator_settings(cli._parser().parse_args(["operator"])).turn_retention_s == 1800
    args = cli._parser().parse_args(["operator", "--turn-retention", "1d"])
    with pytest.raises(CommandError) as refused:
        cli.operator_settings(args)
    assert str(refused.value) == (
        "--turn-retention (the chart's turnRetention) is refused: unknown unit 'd' in "
        "duration '1d': the units are ns, us, ms, s, m and h (for days write 24h)"
    )
