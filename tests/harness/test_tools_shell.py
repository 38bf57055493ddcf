"""The ``bash`` tool: output, exit codes, limits, and that no process outlives a call.

Cases:
- stdout and stderr combined, ending with the exit code; runs in cwd with stdin empty;
- a non-zero exit is a failed result; a command killed by a signal says so;
- no output says so;
- the tail of a long output is kept, with the count of dropped bytes;
- timeoutSeconds kills the whole process group (the shell, a background and a
  foreground child) and says it timed out; the context's limit caps timeoutSeconds;
- a background process left running is killed when the command ends, and the call
  returns at once instead of waiting for it;
- cancelling the call (a sweep) kills the process group and re-raises CancelledError
  in well under a second, and none of the processes survive;
- the scrubbed environment: no token, API key or secret of the Harness is visible;
- a NUL in the command is refused; a missing cwd is a failed result.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from kubeturn_harness.tools import ToolContext, ToolResult, run_tool, scrubbed_environment


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(cwd=tmp_path, env=scrubbed_environment(os.environ, home=str(tmp_path)))


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper has stopped running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


async def _all_gone(pids: list[int]) -> bool:
    """SIGKILL is delivered at once but a process takes a moment to die; allow 1 s."""
    deadline = time.monotonic() + 1.0
    while any(map(_alive, pids)):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _written_pids(file: Path) -> list[int]:
    try:
        return [int(pid) for pid in file.read_text().split()]
    except FileNotFoundError:
        return []


async def _pids(file: Path, count: int) -> list[int]:
    """The pids a command writes to ``file``, once it has written ``count`` of them."""
    while len(pids := _written_pids(file)) != count:
        await asyncio.sleep(0.01)
    return pids


SLEEPERS = "echo $$ >> pids; sleep 30 & echo $! >> pids; (echo $BASHPID >> pids; exec sleep 30)"
"""The shell, a background sleep and a foreground sleep, each writing its pid."""


class TestOutput:
    async def test_combined_output_and_exit_code(self, ctx: ToolContext, tmp_path: Path) -> None:
        result = await run_tool("bash", {"command": "pwd; echo err >&2; cat"}, ctx)
        assert result == ToolResult(f"{tmp_path}\nerr\n[Exit code 0.]")

    async def test_non_zero_exit(self, ctx: ToolContext) -> None:
        result = await run_tool("bash", {"command": "echo nope; exit 3"}, ctx)
        assert result == ToolResult("nope\n[Exit code 3.]", is_error=True)

    async def test_killed_by_a_signal(self, ctx: ToolContext) -> None:
        result = await run_tool("bash", {"command": "kill -TERM $$"}, ctx)
        assert result == ToolResult("(no output)\n[Killed by signal 15.]", is_error=True)

    async def test_no_output(self, ctx: ToolContext) -> None:
        result = await run_tool("bash", {"command": "true"}, ctx)
        assert result == ToolResult("(no output)\n[Exit code 0.]")

    async def test_the_tail_is_kept(self, tmp_path: Path) -> None:
        ctx = ToolContext(cwd=tmp_path, env=dict(os.environ), output_limit_bytes=1000)
        command = "head -c 100000 /dev/zero | tr '\\0' a; echo; echo END"
        result = await run_tool("bash", {"command": command}, ctx)
        first, kept, end, code = result.text.split("\n")
        assert first == "[Output cut: the first 99005 bytes were dropped; the last 1000 follow.]"
        assert kept == "a" * 995
        assert (end, code) == ("END", "[Exit code 0.]")
        assert not result.is_error


class TestProcesses:
    async def test_timeout_kills_the_group(self, ctx: ToolContext, tmp_path: Path) -> None:
        started = time.monotonic()
        result = await run_tool("bash", {"command": SLEEPERS, "timeoutSeconds": 0.5}, ctx)
        assert time.monotonic() - started < 5
        assert result == ToolResult(
            "(no output)\n[Timed out after 0.5 s; the command and its processes were killed.]",
            is_error=True,
        )
        assert await _all_gone(await _pids(tmp_path / "pids", 3))

    async def test_the_context_caps_the_timeout(self, tmp_path: Path) -> None:
        ctx = ToolContext(cwd=tmp_path, env=dict(os.environ), bash_timeout_s=0.3)
        result = await run_tool("bash", {"command": "sleep 30", "timeoutSeconds": 60}, ctx)
        assert result.is_error
        assert "Timed out after 0.3 s" in result.text

    async def test_background_processes_end_with_the_command(
        self, ctx: ToolContext, tmp_path: Path
    ) -> None:
        started = time.monotonic()
        result = await run_tool("bash", {"command": "sleep 30 & echo $! > pids; echo go"}, ctx)
        assert time.monotonic() - started < 5
        assert result == ToolResult("go\n[Exit code 0.]")
        assert await _all_gone(await _pids(tmp_path / "pids", 1))

    async def test_cancellation_kills_the_group_quickly(
        self, ctx: ToolContext, tmp_path: Path
    ) -> None:
        call = asyncio.create_task(run_tool("bash", {"command": SLEEPERS}, ctx))
        pids = await _pids(tmp_path / "pids", 3)
        assert all(map(_alive, pids))
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # Not a timing bound: the call ended without waiting for the 30 s sleepers, which
        # were killed (a loaded machine may take a few seconds to say so).
        assert time.monotonic() - started < 10.0
        assert await _all_gone(pids)


class TestIsolation:
    async def test_the_environment_is_scrubbed(self, tmp_path: Path) -> None:
        base = {
            **os.environ,
            "KUBETURN_ORCHESTRATOR_TOKEN": "orchestrator-t0ken",
            "OPENAI_API_KEY": "sk-very-secret",
            "SOME_SECRET": "hush-hush",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=collector-t0ken",  # ADR 0107
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        }
        ctx = ToolContext(cwd=tmp_path, env=scrubbed_environment(base, home=str(tmp_path)))
        result = await run_tool("bash", {"command": "env"}, ctx)
        assert not result.is_error
        for leaked in (
            "KUBETURN_",
            "OPENAI_API_KEY",
            "SOME_SECRET",
            "t0ken",
            "sk-",
            "hush",
            "OTEL_",
        ):
            assert leaked not in result.text
        assert f"HOME={tmp_path}" in result.text.splitlines()
        assert "TERM=dumb" in result.text.splitlines()

    async def test_nul(self, ctx: ToolContext) -> None:
        result = await run_tool("bash", {"command": "echo a\0b"}, ctx)
        assert result.is_error
        assert "NUL character" in result.text

    async def test_missing_cwd(self, tmp_path: Path) -> None:
        ctx = ToolContext(cwd=tmp_path / "gone", env=dict(os.environ))
        result = await run_tool("bash", {"command": "true"}, ctx)
        assert result == ToolResult(f"No such file or directory: {tmp_path / 'gone'}", True)
