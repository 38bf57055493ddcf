"""The operator's chart-rendered JSON settings (``--sandbox-egress``, ``--sandbox-resources``).

Cases: a valid value is read as its model; a refused one names the flag and every problem
at its path under the chart's value, never a stack trace; with no flag and no environment,
``kubeturn operator``'s settings are ``OperatorSettings()``'s defaults (one source); the
console's certificate and key are read together, one without the other refused; the
namespace cap on live Turns comes from its flag or its environment twin (the chart's).
"""

from __future__ import annotations

import os

import pytest

from kubeturn import cli
from kubeturn.api.egress import SandboxEgress
from kubeturn.api.workspace import SandboxResources
from kubeturn.errors import CommandError
from kubeturn.settings import OperatorSettings


def test_a_valid_value_is_read_as_its_model() -> None:
    read = cli._chart_json("{}", SandboxResources, "sandbox.resources", "--sandbox-resources")
    assert read == SandboxResources()


def test_a_refused_value_names_the_flag_and_the_path() -> None:
    with pytest.raises(CommandError) as refused:
        cli._chart_json(
            '{"harness": {"limits": {"cpu": "lots"}}}',
            SandboxResources,
            "sandbox.resources",
            "--sandbox-resources",
        )
    said = str(refused.value)
    assert said.startswith("--sandbox-resources is refused: sandbox.resources.harness.limits")
    with pytest.raises(CommandError) as refused:
        cli._chart_json("[]", SandboxEgress, "sandbox.egress", "--sandbox-egress")
    assert str(refused.value).startswith("--sandbox-egress is refused: sandbox.egress: ")


def test_the_commands_defaults_are_the_operators(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [v for v in os.environ if v.startswith("KUBETURN_") or v == "KUBECONFIG"]:
        monkeypatch.delenv(variable)
    args = cli._parser().parse_args(["operator"])
    assert cli.operator_settings(args) == OperatorSettings()


def test_sandbox_tracing_is_refused_naming_its_value() -> None:
    from kubeturn.api.tracing import SandboxTracing

    with pytest.raises(CommandError) as refused:
        cli._chart_json(
            '{"endpoint": "collector:4318"}', SandboxTracing, "tracing", "--sandbox-tracing"
        )
    assert str(refused.value).startswith("--sandbox-tracing is refused: tracing.endpoint: ")
    read = cli._chart_json(
        '{"endpoint": "http://c:4318", "headersSecret": {"name": "h"}}',
        SandboxTracing,
        "tracing",
        "--sandbox-tracing",
    )
    assert (read.endpoint, read.headersSecret and read.headersSecret.key) == (
        "http://c:4318",
        "headers",
    )


def test_the_consoles_certificate_and_key_go_together(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [v for v in os.environ if v.startswith("KUBETURN_") or v == "KUBECONFIG"]:
        monkeypatch.delenv(variable)
    both = ["operator", "--console-certificate", "/c/tls.crt", "--console-key", "/c/tls.key"]
    settings = cli.operator_settings(cli._parser().parse_args([*both, "--console-port", "9443"]))
    assert (settings.console_certificate, settings.console_key, settings.console_port) == (
        "/c/tls.crt",
        "/c/tls.key",
        9443,
    )
    with pytest.raises(CommandError, match="--console-certificate and --console-key go together"):
        cli.operator_settings(cli._parser().parse_args(both[:3]))


def test_the_namespace_cap_on_live_turns_is_read_from_its_flag_or_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable in [v for v in os.environ if v.startswith("KUBETURN_") or v == "KUBECONFIG"]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("KUBETURN_NAMESPACE_MAX_LIVE_TURNS", "3")
    settings = cli.operator_settings(cli._parser().parse_args(["operator"]))
    assert settings.namespace_max_live_turns == 3
    flagged = ["operator", "--namespace-max-live-turns", "5"]
    assert cli.operator_settings(cli._parser().parse_args(flagged)).namespace_max_live_turns == 5
