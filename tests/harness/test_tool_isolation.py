"""Tool isolation (DESIGN.md, "Security model"): the Agent's code cannot reach the
Harness's secrets.

Cases:
- a ``bash`` call sees a scrubbed environment (no Orchestrator token, provider key or
  token hash of the Harness's own) and runs as the unprivileged uid 65534, with a
  ``HOME`` and ``TMPDIR`` of its session's own, outside the Harness's data;
- a ``bash`` call cannot read the Harness process's environment through ``/proc``;
- the file tools run in the toolbox's session, not in the Harness: ``/proc/self`` there
  shows no secret, and the Harness's ``/proc/<pid>/environ`` can be neither read nor
  used as an ``edit`` oracle;
- the data dir (the conversation logs) is the Harness's alone, mode 0700: the tools'
  user cannot list or read it.

The Harness runs in this process, as root here, and its toolbox's sessions run as
nobody; the secrets are set in ``os.environ`` before the World starts.
(tests/hostile attacks the same boundaries as a hostile Agent, as the same uid too.)
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.harness.support import TOKEN, StartWorld, World, script

IID = "iid-1"
PROMPT = "Show me your environment"
NOBODY = 65534
SECRETS = {
    "KUBETURN_ORCHESTRATOR_TOKEN": "orchestrator-secret-4e1f",
    "OPENAI_API_KEY": "sk-provider-secret-77aa",
    "KUBETURN_HARNESS_TOKEN_SHA256": hashlib.sha256(TOKEN.encode()).hexdigest(),
}

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the Harness switches the tools' user only when it runs as root"
)


async def run_calls(
    world: StartWorld, monkeypatch: pytest.MonkeyPatch, *calls: dict[str, Any]
) -> tuple[World, list[str]]:
    """Run one model answer of ``calls`` with the secrets set; answer the tool results."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    w = await world(script(PROMPT, {"toolCalls": list(calls)}, {"text": "Done."}))
    w.orchestrator.surfaces[IID] = {"instanceId": IID, "menu": [], "allowed": []}
    sid = await w.harness.admit(IID, PROMPT)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    return w, [m["content"] for m in await w.harness.tool_results(IID)]


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def assert_no_secret(text: str) -> None:
    for name, value in SECRETS.items():
        assert value not in text, name
    assert "KUBETURN_" not in text
    assert TOKEN not in text


class TestToolIsolation:
    async def test_bash_sees_no_harness_secret_and_runs_as_nobody(
        self, world: StartWorld, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        w, (result,) = await run_calls(world, monkeypatch, bash("env; id -u"))
        assert_no_secret(result)
        lines = result.splitlines()
        assert lines[-2:] == [str(NOBODY), "[Exit code 0.]"]
        assert "TERM=dumb" in lines
        home = next(line.removeprefix("HOME=") for line in lines if line.startswith("HOME="))
        assert f"TMPDIR={home}" in lines
        assert not Path(home).is_relative_to(w.harness.data_dir)

    async def test_bash_cannot_read_the_harness_process_environment(
        self, world: StartWorld, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _, (result,) = await run_calls(
            world, monkeypatch, bash(f"cat /proc/{os.getpid()}/environ | tr '\\0' '\\n'")
        )
        assert_no_secret(result)
        assert "Permission denied" in result

    async def test_the_file_tools_never_reach_the_harness_process_environment(
        self, world: StartWorld, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        harness = f"/proc/{os.getpid()}/environ"
        guess = SECRETS["KUBETURN_ORCHESTRATOR_TOKEN"]
        oracle = {"path": harness, "oldText": f"TOKEN={guess}", "newText": "x"}
        _, results = await run_calls(
            world,
            monkeypatch,
            {"name": "read", "arguments": {"path": "/proc/self/environ"}},
            {"name": "read", "arguments": {"path": harness}},
            {"name": "edit", "arguments": oracle},
        )
        own, read, edit = results
        assert_no_secret(own)  # a session that switched user cannot read even its own
        for result in (read, edit):
            assert result == f"Permission denied: {harness}", result

    async def test_the_data_dir_is_private_to_the_harness(
        self, world: StartWorld, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        w, _ = await run_calls(world, monkeypatch, bash("true"))
        mode = w.harness.data_dir.stat()
        assert stat.S_IMODE(mode.st_mode) == 0o700
        assert mode.st_uid == os.geteuid() != NOBODY
