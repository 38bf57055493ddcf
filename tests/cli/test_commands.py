"""The ``kubeturn`` command's own surface: version, help, ``-o``, and ``validate``.

Cases:
- ``kubeturn --version`` and ``kubeturn version`` print the installed version
  (``version -o json`` as an object);
- every argument and flag of every subcommand has help, and every command that prints
  objects takes the same ``-o`` (``table|wide|json|yaml``, default ``table``); ``logs``,
  which prints a stream of entries rather than objects, takes ``text|json`` (ADR 0105),
  and ``graph`` its drawing's format (``mermaid|dot|svg``, default ``mermaid``);
- ``validate`` reads every document of a file (a Workspace and Runs, split by ``---``),
  says which are valid, passes over another API's object (a Secret) saying so, and
  prints every problem of each at once: an Agent's field of the wrong type does not
  hide the machine's unknown target;
- the command starts without the ``cel`` package's own command line (typer, rich,
  prompt_toolkit: 0.4 s of CPU in every kubeturn process), yet evaluates CEL.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

from kubeturn import cli
from tests.cli.support import EXAMPLES, kubeturn


def test_version() -> None:
    installed = importlib.metadata.version("kubeturn")
    for args in (["--version"], ["version"]):
        shown = kubeturn(*args, cwd=EXAMPLES)
        assert (shown.returncode, shown.stdout, shown.stderr) == (0, f"kubeturn {installed}\n", "")
    as_json = kubeturn("version", "-o", "json", cwd=EXAMPLES)
    assert json.loads(as_json.stdout) == {"version": installed}


def test_the_command_loads_cel_without_its_command_line() -> None:
    probe = (
        "import sys, kubeturn.cli\n"
        "from kubeturn.machine import expressions\n"
        "print(expressions.CelExpression('1 + 2').evaluate({}))\n"
        "print(sorted(m for m in ('cel', 'cel.cli', 'typer', 'rich', 'prompt_toolkit')"
        " if m in sys.modules))\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.splitlines() == ["3", "[]"], shown.stdout


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli._parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_every_argument_has_help_and_every_o_is_the_same() -> None:
    with_output = []
    for name, command in _commands().items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"kubeturn {name} {action.option_strings or action.dest}"
            if "--output" in action.option_strings and name == "graph":
                # A drawing, not objects: its own formats.
                assert (action.choices, action.default) == (cli.GRAPH_OUTPUTS, "mermaid")
            elif "--output" in action.option_strings and name == "logs":
                assert (action.option_strings, action.choices, action.default) == (
                    ["-o", "--output"],
                    ("text", "json"),
                    "text",
                )
            elif "--output" in action.option_strings:
                with_output.append(name)
                assert (action.option_strings, action.choices, action.default) == (
                    ["-o", "--output"],
                    cli.OUTPUTS,
                    "table",
                )
    assert sorted(with_output) == ["status", "turns", "version"]
    assert cli.OUTPUTS == ("table", "wide", "json", "yaml")
    shown = kubeturn("status", "--help", cwd=EXAMPLES)
    assert shown.returncode == 0
    assert "{table,wide,json,yaml}" in shown.stdout


RUN_WITH_PROBLEMS = """\
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: mixed}
spec:
  agents:
    coder: {instructions: 5, workspace: everything}
  machine:
    initial: coding
    states:
      coding:
        invoke: {agent: {slot: coder, prompt: Code.}}
        on:
          done: {target: finishd, description: Done.}
      finished: {type: final}
"""


def test_validate_reads_every_document_and_reports_every_problem_at_once(
    tmp_path: Path,
) -> None:
    workspace = (EXAMPLES / "workspace.yaml").read_text()
    hello = (EXAMPLES / "hello.yaml").read_text()
    secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: token}\n"
    (tmp_path / "all.yaml").write_text(
        f"{workspace}\n---\n{hello}\n---\n{secret}---\n{RUN_WITH_PROBLEMS}"
    )
    result = kubeturn("validate", "all.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "all.yaml (document 1): valid",
        "all.yaml (document 2): valid",
        "all.yaml (document 3): a Secret, not a kubeturn resource: not checked",
    ]
    assert result.stderr.splitlines() == [
        "all.yaml (document 4): spec.agents.coder.instructions: input should be a valid "
        "string; got 5",
        "all.yaml (document 4): spec.agents.coder.workspace: input should be 'write', "
        "'read' or 'none'; got 'everything'",
        "all.yaml (document 4): spec.machine.states.coding.on.done.target: no state "
        "'finishd' (did you mean 'finished'?)",
    ]
