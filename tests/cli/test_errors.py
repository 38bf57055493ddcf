"""What a person reads when something is wrong: every problem of a manifest with its
path, and otherwise one line on stderr (what, where, what to do), never a traceback.

Cases:
- ``kubeturn validate`` on broken manifests prints every problem of each, with the file
  and the manifest path (or the YAML line and column), an Agent's shape problem beside
  the machine's own, a type error in one state beside an unknown target in another,
  says which files are valid, and exits 1; ``--cluster`` also
  refuses a Run that invokes without ``spec.workspace``;
  both refuse a ``metadata.name`` (and a Secret's name) no Kubernetes object could have;
- ``kubeturn run`` refuses with one line, exit 1, and leaves no workdir behind for: a
  missing manifest, malformed YAML, a manifest with problems (one line per problem), a
  repo that cannot be cloned, a model provider missing from the providers file, no model
  provider at all (no flag, no ``KUBETURN_PROVIDERS``, no script beside the manifest), a
  missing or invalid script, an Orchestrator API port in use, a Harness port in use;
- a dirty workdir is refused, and a workdir holding the same run points at ``--resume``;
  ``--resume`` with a manifest other than the one the run started with is refused, and
  ``--resume`` of a run that has ended prints its summary; ``--resume`` of a run whose
  snapshot a newer kubeturn wrote says so, naming the file;
- ``--resume`` of a run that is not there; ``send`` with data that is not a JSON object;
  ``send`` to a run that is not there;
- ``kubeturn run`` of a manifest nested deeper than a Run may be names the path, or the
  file when YAML that deep cannot be read.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeturn.orchestrator.snapshots import VERSION
from tests.cli.support import EXAMPLES, MACHINES, kubeturn, one_line_error

HELLO = EXAMPLES / "hello.yaml"
HELLO_MODEL = f"scripted:{EXAMPLES / 'hello.script.yaml'}"

BROKEN = """\
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: broken}
spec:
  agents:
    coder: {instructions: You code., model: gpt-4}
  machine:
    initial: coding
    states:
      coding:
        invoke:
          agent: {slot: coder, prompt: Code.}
        on:
          done: {target: finishd}
      finished: {type: final}
      orphan: {type: final}
"""


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening.getsockname()[1]


def test_validate_prints_every_problem_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(BROKEN)
    (tmp_path / "bad.yaml").write_text("kind: Run\nspec: [\n")
    result = kubeturn("validate", "broken.yaml", "bad.yaml", "missing.yaml", HELLO, cwd=tmp_path)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == f"{HELLO}: valid\n"
    lines = result.stderr.splitlines()
    # The Agent's shape problem does not hide the machine's own: all at once.
    assert lines[:4] == [
        "broken.yaml: spec.agents.coder.model: a model is written 'provider/model', "
        "e.g. 'openai/gpt-4o'; got 'gpt-4'",
        "broken.yaml: spec.machine.states.coding.on.done.target: no state 'finishd' "
        "(did you mean 'finished'?)",
        "broken.yaml: spec.machine.states.coding.on.done: an event offered to the Agent "
        "'coder' needs a description: add description: saying what the pick means",
        "broken.yaml: spec.machine.states.orphan: no transition leads to the state 'orphan': "
        "target it from another state, or remove it",
    ]
    assert lines[4].startswith("bad.yaml:3:1: not valid YAML: ")
    assert lines[5] == "missing.yaml: cannot read it: No such file or directory"
    assert len(lines) == 6


def test_validate_prints_a_type_error_in_one_state_and_an_unknown_target_in_another(
    tmp_path: Path,
) -> None:
    (tmp_path / "run.yaml").write_text(
        BROKEN.replace("model: gpt-4", "model: openai/gpt-4o").replace(
            "      finished: {type: final}\n",
            "      finished: {type: final}\n      waiting:\n        after: {10m: {guard: 3}}\n",
        )
    )
    result = kubeturn("validate", "run.yaml", cwd=tmp_path)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    # No reachability problem is said once a part is cut: `orphan` is not reported.
    assert result.stderr.splitlines() == [
        "run.yaml: spec.machine.states.waiting.after.10m.guard: input should be a valid "
        "string; got 3",
        "run.yaml: spec.machine.states.coding.on.done.target: no state 'finishd' "
        "(did you mean 'finished'?)",
        "run.yaml: spec.machine.states.coding.on.done: an event offered to the Agent "
        "'coder' needs a description: add description: saying what the pick means",
    ]


def test_validate_cluster_asks_for_a_workspace_where_the_local_runner_does_not(
    tmp_path: Path,
) -> None:
    text = HELLO.read_text()
    start = text.index("  workspace:\n")
    (tmp_path / "bare.yaml").write_text(text[:start] + text[text.index("  agents:\n") :])

    assert kubeturn("validate", "bare.yaml", cwd=tmp_path).returncode == 0
    result = kubeturn("validate", "--cluster", "bare.yaml", cwd=tmp_path)
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith("bare.yaml: spec.workspace: missing, and the state ")


@pytest.mark.parametrize("flags", [(), ("--cluster",)])
def test_validate_refuses_names_no_object_could_have(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    text = HELLO.read_text()
    (tmp_path / "run.yaml").write_text(text.replace("name: hello", "name: Hello_World", 1))
    workspace = (
        "apiVersion: kubeturn.dev/v1alpha1\nkind: Workspace\nmetadata: {name: shared.}\n"
        "spec:\n  repos:\n    app: {url: 'https://git.example/app.git', secretRef: {name: Token}}\n"
    )
    (tmp_path / "workspace.yaml").write_text(workspace)
    result = kubeturn("validate", *flags, "run.yaml", "workspace.yaml", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["run.yaml", "metadata.name"],
        ["workspace.yaml", "metadata.name"],
        ["workspace.yaml", "spec.repos.app.secretRef.name"],
    ]
    assert lines[0].endswith("(a DNS subdomain); got 'Hello_World'")


def test_run_refuses_a_manifest_with_one_line_per_problem(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(BROKEN)
    result = kubeturn("run", "broken.yaml", "--model", HELLO_MODEL, cwd=tmp_path)
    assert (result.returncode, "Traceback" in result.stderr) == (1, False)
    lines = result.stderr.splitlines()
    assert lines[0].startswith("broken.yaml: spec.agents.coder.model: ")
    assert [line.split(": ")[1] for line in lines[1:]] == [
        "spec.machine.states.coding.on.done.target",
        "spec.machine.states.coding.on.done",
        "spec.machine.states.orphan",
    ]
    assert not (tmp_path / ".kubeturn-work").exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["missing.yaml"],
            "kubeturn: cannot read missing.yaml: no such file or directory",
        ),
        (
            ["bad.yaml"],
            "bad.yaml:2:7: not valid YAML: mapping values are not allowed here",
        ),
        (
            [HELLO, "--model", HELLO_MODEL, "--repo", "target=../nowhere"],
            "kubeturn: cannot clone repo slot 'target' from {tmp}/nowhere: fatal: repository "
            "'{tmp}/nowhere' does not exist; check the URL, or give the slot another with "
            "--repo target=URL|PATH",
        ),
        (
            [HELLO, "--providers", "providers.yaml"],
            "kubeturn: spec.agents.greeter.model: unknown model provider 'openai' in "
            "'openai/gpt-4.1': the providers file {project}/providers.yaml has local; add it "
            "there, or run offline with --model scripted:SCRIPT",
        ),
        (
            ["hello.yaml"],
            "kubeturn: no model provider (there is no script beside the manifest: "
            "{project}/hello.script.yaml): pass --model scripted:SCRIPT to run offline on a "
            "scripted model, or --providers FILE (YAML: name → {{type: openai, baseUrl, "
            "apiKeyEnv}})",
        ),
        (
            [HELLO, "--model", "scripted:nowhere.yaml"],
            "kubeturn: cannot read the scripted model's script nowhere.yaml: there is no "
            "file {project}/nowhere.yaml",
        ),
        (
            [HELLO, "--model", "scripted:bad.script.yaml"],
            "kubeturn: {project}/bad.script.yaml: not a valid script: "
            "conversations[0].steps[0].tolCalls: unknown key "
            "(docs/scripted-model.md gives the format)",
        ),
        (
            ["--resume", "nothing"],
            "kubeturn: there is no run 'nothing' to resume in {project}/.kubeturn-work/nothing; "
            "start it with `kubeturn run FILE`, or pass the --workdir it ran in",
        ),
    ],
    ids=[
        "missing-file",
        "bad-yaml",
        "uncloneable-repo",
        "unknown-provider",
        "no-provider",
        "missing-script",
        "bad-script",
        "nothing-to-resume",
    ],
)
def test_run_says_what_is_wrong_in_one_line(
    project: Path, tmp_path: Path, args: list[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBETURN_PROVIDERS", raising=False)
    (project / "bad.yaml").write_text("kind: Run\n  spec: [\n")
    (project / "hello.yaml").write_text(HELLO.read_text())  # no script beside it
    (project / "bad.script.yaml").write_text("conversations: [{match: x, steps: [{tolCalls: []}]}]")
    (project / "providers.yaml").write_text(
        "local: {type: openai, baseUrl: 'http://127.0.0.1:9/v1'}\n"
    )
    result = kubeturn("run", *args, cwd=project)
    assert one_line_error(result) == expected.format(tmp=tmp_path, project=project)
    assert not (project / ".kubeturn-work" / "hello").exists()


@pytest.mark.parametrize("flag", ["--api-port", "--harness-port"])
def test_a_port_in_use_is_one_line(project: Path, busy_port: int, flag: str) -> None:
    result = kubeturn("run", HELLO, "--model", HELLO_MODEL, flag, str(busy_port), cwd=project)
    line = one_line_error(result)
    assert f"127.0.0.1:{busy_port}" in line
    assert "address already in use" in line
    assert line.endswith(f"pass another {flag}, or 0 for a free one")
    assert not (project / ".kubeturn-work" / "hello").exists()


def test_a_dirty_workdir_is_refused(project: Path) -> None:
    workdir = project / "work"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine\n")
    result = kubeturn("run", HELLO, "--model", HELLO_MODEL, "--workdir", "work", cwd=project)
    assert one_line_error(result) == (
        f"kubeturn: the workdir {workdir} is not empty; a new run needs an empty one: "
        "remove it, or pass another --workdir"
    )
    assert (workdir / "notes.txt").read_text() == "mine\n"

    done = kubeturn("run", HELLO, "--model", HELLO_MODEL, cwd=project)
    assert done.returncode == 0, done.stderr
    again = kubeturn("run", HELLO, "--model", HELLO_MODEL, cwd=project)
    assert one_line_error(again) == (
        f"kubeturn: the workdir {project}/.kubeturn-work/hello already holds the run 'hello'; "
        "continue it with `kubeturn run --resume hello`, or remove the directory to start "
        "it afresh"
    )
    other = project / "hello.yaml"
    other.write_text(HELLO.read_text().replace("one-line greeting", "two-line greeting"))
    changed = kubeturn("run", other, "--resume", "hello", cwd=project)
    assert one_line_error(changed) == (
        f"kubeturn: {other} is not the manifest the run 'hello' started with "
        f"({project}/.kubeturn-work/hello/.kubeturn/runs/hello/run.yaml); resume without a "
        "FILE, or start the changed Run in another --workdir"
    )
    ended = kubeturn("run", "--resume", "hello", cwd=project)
    assert (ended.returncode, ended.stderr) == (0, "")
    assert ended.stdout.splitlines() == [
        "kubeturn: the run hello has ended",
        "",
        ended.stdout.splitlines()[2],
        ended.stdout.splitlines()[3],
        "",
        "run hello: Succeeded in state finished",
        'output: "greeted"',
    ]
    assert ended.stdout.splitlines()[3].split()[:5] == [
        "t1",
        "greeter",
        "greeting",
        "ended",
        "pick",
    ]
    saved = project / ".kubeturn-work/hello/.kubeturn/runs/hello/snapshot.json"
    status = json.loads(saved.read_text())
    status["snapshot"]["version"] = 99
    saved.write_text(json.dumps(status))
    newer = kubeturn("run", "--resume", "hello", cwd=project)
    assert one_line_error(newer) == (
        f"kubeturn: the snapshot {saved} cannot be restored (it is version 99, written by a "
        f"newer kubeturn; this one reads versions 0 to {VERSION}: run a kubeturn that reads "
        "it); the "
        "run cannot be resumed: resume it with a kubeturn that reads it, or start it afresh "
        "in another --workdir"
    )


def test_send_says_what_is_wrong_in_one_line(project: Path) -> None:
    result = kubeturn("send", "nothing", "approve", cwd=project)
    assert one_line_error(result) == (
        f"kubeturn: there is no local run 'nothing' in {project}/.kubeturn-work/nothing; "
        "pass the --workdir it runs in (or --kube for a Run on a cluster)"
    )
    result = kubeturn("send", "nothing", "approve", "--data", "[1]", cwd=project)
    assert one_line_error(result) == (
        'kubeturn: --data must be a JSON object, e.g. \'{"notes": "ok"}\''
    )
    result = kubeturn("turns", "retry", "--workdir", MACHINES, cwd=project)
    assert one_line_error(result).startswith("kubeturn: there is no local run 'retry' in ")


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (65, "deep.yaml: spec.input[0][0][0][0][0][0][0][0]…: nested deeper than 64 levels"),
        (1000, "deep.yaml: nested too deep to read: a Run's spec nests at most 256 levels"),
    ],
)
def test_run_refuses_a_manifest_nested_too_deep(tmp_path: Path, depth: int, expected: str) -> None:
    """The local runner reads a manifest as the operator does (ADR 0050)."""
    (tmp_path / "deep.yaml").write_text(
        "apiVersion: kubeturn.dev/v1alpha1\nkind: Run\nmetadata: {name: deep}\nspec:\n"
        "  agents: {}\n  machine: {initial: done, states: {done: {type: final}}}\n"
        f"  input: {'[' * depth}{']' * depth}\n"
    )
    result = kubeturn("run", "deep.yaml", cwd=tmp_path)
    assert one_line_error(result).startswith(expected)
    assert not (tmp_path / ".kubeturn-work").exists()
