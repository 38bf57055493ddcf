"""Parts of the cli tier: the ``kubeturn`` command run as a user runs it.

Every command is ``python -m kubeturn ...`` in a subprocess, in a directory of its own
holding a real git repository (so ``url: .`` is that repository), with warnings as
errors in it and in the Harness and scripted model it starts. ``Background`` is a
``kubeturn run`` that runs while the test does other things: its stdout lines are
collected as they come, and a test waits for one. ``ScriptedModel`` is a scripted model
of the test's own (a subprocess), for tests that must see its requests or outlive a
killed ``kubeturn run``. Every wait is bounded and says what it waited for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
MACHINES = Path(__file__).parent / "machines"
WAIT_S = 20.0
"""Far above what any step here takes (a run of an example takes about two seconds)."""


def environment() -> dict[str, str]:
    """The user's environment, with warnings as errors in every Python process started."""
    return {
        **os.environ,
        "PYTHONWARNINGS": "error",
        "GIT_AUTHOR_NAME": "kubeturn tests",
        "GIT_AUTHOR_EMAIL": "tests@kubeturn.invalid",
        "GIT_COMMITTER_NAME": "kubeturn tests",
        "GIT_COMMITTER_EMAIL": "tests@kubeturn.invalid",
    }


def kubeturn(
    *args: str | Path, cwd: Path, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``python -m kubeturn ARGS`` in ``cwd``, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "kubeturn", *map(str, args)],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def git_repo(path: Path) -> Path:
    """A git repository with one commit on ``main``."""
    path.mkdir(parents=True, exist_ok=True)
    for command in (
        ["git", "init", "--quiet", "-b", "main"],
        ["git", "commit", "--quiet", "--allow-empty", "-m", "start"],
    ):
        subprocess.run(command, cwd=path, env=environment(), check=True, capture_output=True)
    (path / "README.md").write_text("# a project\n")
    for command in (["git", "add", "README.md"], ["git", "commit", "--quiet", "-m", "readme"]):
        subprocess.run(command, cwd=path, env=environment(), check=True, capture_output=True)
    return path


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line a failed command printed; fails on a traceback or more lines."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@dataclass
class Background:
    """A ``kubeturn`` command running in the background, its stdout read line by line."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread | None = None

    @classmethod
    def start(cls, *args: str | Path, cwd: Path) -> Background:
        process = subprocess.Popen(
            [sys.executable, "-m", "kubeturn", *map(str, args)],
            cwd=cwd,
            env=environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        running = cls(process)
        running._reader = threading.Thread(target=running._read, daemon=True)
        running._reader.start()
        return running

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_line(self, pattern: str, *, timeout: float = WAIT_S) -> str:
        """Wait for a stdout line that ``pattern`` (a regex) matches anywhere."""
        found = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if found.search(line):
                        return line
                left = deadline - time.monotonic()
                ended = self.process.poll() is not None and not self._reader_alive()
                if left <= 0 or ended:
                    raise AssertionError(
                        f"no line matching {pattern!r} within {timeout:g} s; output so far:\n"
                        + "\n".join(self.lines)
                        + f"\nstderr: {self._stderr()}"
                    )
                self._changed.wait(min(left, 0.1))

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def _stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return "(still running)"
        return self.process.stderr.read()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, *, timeout: float = WAIT_S) -> tuple[int, str, str]:
        """Wait for the end: exit status, stdout, stderr."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"kubeturn did not end within {timeout:g} s; output:\n" + "\n".join(self.lines)
            ) from None
        if self._reader is not None:
            self._reader.join(5)
        assert self.process.stderr is not None
        return code, "\n".join(self.lines), self.process.stderr.read()

    def stop(self) -> None:
        """Kill it if it still runs (a test that failed midway)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


class ScriptedModel:
    """The scripted model in a process of the test's own: its URL and its request record."""

    def __init__(self, script: Path, cwd: Path) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubeturn_harness.scripted",
                "--port",
                "0",
                "--script",
                str(script),
            ],
            cwd=cwd,
            env=environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"listening on (http://\S+)", line)
        assert found, f"the scripted model said {line!r}"
        self.url = found.group(1)
        self.base = self.url.removesuffix("/v1")

    def providers(self, path: Path, *names: str) -> Path:
        """A providers file routing each provider name to this model."""
        path.write_text(
            "".join(f"{name}: {{type: openai, baseUrl: {self.url}}}\n" for name in names)
        )
        return path

    def requests(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.base}/_requests", timeout=5) as response:
            return list(json.load(response))

    def wait_for(self, check: Callable[[list[dict[str, Any]]], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if check(self.requests()):
                return
            time.sleep(0.05)
        raise AssertionError(f"waited {WAIT_S:g} s for {what}; requests: {self.requests()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def status(workdir_of: Path, name: str) -> dict[str, Any]:
    """A local run's ``snapshot.json``."""
    path = workdir_of / ".kubeturn" / "runs" / name / "snapshot.json"
    return dict(json.loads(path.read_text()))


def wait_status(
    workdir: Path, name: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = status(workdir, name)
        except (FileNotFoundError, ValueError):
            last = {}
        if last and check(last):
            return last
        time.sleep(0.05)
    raise AssertionError(f"waited {WAIT_S:g} s for {what}; last status: {last}")


@dataclass(frozen=True)
class Conversation:
    agent: str
    instance_id: str
    events: list[dict[str, Any]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.events if e["type"] == kind]

    @property
    def admission_keys(self) -> list[str]:
        return [e["request"]["key"] for e in self.of("submission-admitted")]

    @property
    def outcomes(self) -> list[str]:
        return [e["outcome"] for e in self.of("submission-settled")]


def conversations(workdir: Path) -> list[Conversation]:
    """What the Harness recorded, read from its data dir (it has stopped by now)."""
    found = []
    for directory in sorted((workdir / ".kubeturn" / "harness" / "conversations").iterdir()):
        meta = json.loads((directory / "conversation.json").read_text())
        events = [
            json.loads(line)
            for line in (directory / "events.jsonl").read_text().splitlines()
            if line.strip()
        ]
        found.append(Conversation(meta["name"], meta["instanceId"], events))
    return found


def summary_rows(output: str) -> list[tuple[str, ...]]:
    """The summary's Turn rows (after the last ``TURN ... CAUSE`` header): (turn, agent,
    state, outcome, cause)."""
    lines = output.splitlines()
    header = max(i for i, line in enumerate(lines) if line.startswith("TURN") and "CAUSE" in line)
    rows = []
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        rows.append(tuple(line.split()[:5]))
    return rows


def last_line(output: str, prefix: str) -> str:
    return [line for line in output.splitlines() if line.startswith(prefix)][-1]
