"""The local runner's files (``kubeturn.local``), in a temporary directory, without
processes.

Cases:
- ``Inbox``: signals appended line by line are read once each, a torn last line waits for
  its end, a line that is not a signal is reported (once) and skipped, and ``cancel`` is
  seen once its file exists;
- ``write_atomic`` replaces the file and leaves no temporary behind;
- ``Workdir.check_fresh``: an absent or empty workdir is fresh; a used one is refused,
  pointing at ``--resume`` when it holds the same run;
- with ``--model scripted:``, every provider the Run names is routed to the scripted
  model; with ``--providers`` (a file), a missing provider is refused naming the
  manifest path (a fan-out child's state's under its fan-out's ``invoke.forEach``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubeturn.errors import CommandError
from kubeturn.local import runner
from kubeturn.local.workdir import Inbox, Workdir, write_atomic
from kubeturn.machine.load import load_run_yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SYSTEM_MACHINES = Path(__file__).resolve().parents[1] / "system" / "machines"


def test_the_inbox_reads_each_signal_once(tmp_path: Path) -> None:
    files = Workdir.at(tmp_path).run("r")
    files.directory.mkdir(parents=True)
    inbox = Inbox(files)
    assert inbox.signals() == []
    files.append_signal({"id": "a", "event": "approve", "data": {}})
    with open(files.signals, "a") as handle:
        handle.write('not json\n{"id": "b", "event": "rej')
    assert inbox.signals() == [{"id": "a", "event": "approve", "data": {}}]
    assert inbox.problems == [
        f"{files.signals}: ignored a line that is not a signal {{id, event, data}}: not json"
    ]
    with open(files.signals, "a") as handle:
        handle.write('ect", "data": {"notes": "x"}}\n')
    assert inbox.signals() == [{"id": "b", "event": "reject", "data": {"notes": "x"}}]
    assert inbox.signals() == []
    assert len(inbox.problems) == 1
    assert not inbox.cancelled()
    files.request_cancel()
    assert inbox.cancelled()


def test_write_atomic_replaces_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "snapshot.json"
    write_atomic(target, "one\n")
    write_atomic(target, "two\n")
    assert target.read_text() == "two\n"
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot.json"]


def test_a_used_workdir_is_not_fresh(tmp_path: Path) -> None:
    workdir = Workdir.at(tmp_path / "w")
    workdir.check_fresh("r")
    workdir.root.mkdir()
    workdir.check_fresh("r")
    (workdir.root / "x").write_text("")
    with pytest.raises(CommandError, match="is not empty; a new run needs an empty one"):
        workdir.check_fresh("r")
    files = workdir.run("r")
    files.directory.mkdir(parents=True)
    files.snapshot.write_text("{}")
    with pytest.raises(CommandError, match=r"continue it with `kubeturn run --resume r`"):
        workdir.check_fresh("r")


def test_providers_for_the_scripted_model_and_a_missing_provider(tmp_path: Path) -> None:
    loaded = load_run_yaml((EXAMPLES / "task-with-review.yaml").read_text())
    routed = runner._scripted_providers(loaded, "http://127.0.0.1:1/v1")
    assert routed == "scripted:\n  baseUrl: http://127.0.0.1:1/v1\n  type: openai\n"
    hello = load_run_yaml((EXAMPLES / "hello.yaml").read_text())
    assert "openai:" in runner._scripted_providers(hello, "u")
    providers = tmp_path / "providers.yaml"
    providers.write_text("local: {baseUrl: 'http://127.0.0.1:1/v1'}\n")
    with pytest.raises(CommandError) as refused:
        runner._check_models(hello, providers, None)
    assert str(refused.value).startswith(
        "spec.agents.greeter.model: unknown model provider 'openai' in 'openai/gpt-4.1'"
    )
    with pytest.raises(CommandError, match="no model, and no default model"):
        runner._check_models(loaded, providers, None)


def test_a_fan_out_childs_missing_provider_is_named_where_it_is_written(tmp_path: Path) -> None:
    document = yaml.safe_load((SYSTEM_MACHINES / "fan-out.yaml").read_text())
    work = document["spec"]["machine"]["states"]["fix"]["invoke"]["forEach"]["machine"]
    work["states"]["work"]["invoke"]["agent"]["model"] = "openai/gpt-4.1"
    loaded = load_run_yaml(yaml.safe_dump(document))
    providers = tmp_path / "providers.yaml"
    providers.write_text("scripted: {baseUrl: 'http://127.0.0.1:1/v1'}\n")
    with pytest.raises(CommandError) as refused:
        runner._check_models(loaded, providers, None)
    assert str(refused.value).startswith(
        "spec.machine.states.fix.invoke.forEach.machine.states.work.invoke.agent.model: "
        "unknown model provider 'openai'"
    )
