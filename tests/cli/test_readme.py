"""README.md's shown commands print what README.md shows.

Every ```console block of README.md is run, in a fresh git repository holding a copy of
``examples/`` (the blocks' commands run from a clone of kubeturn, offline, and ``url: .``
is the repository they run in). Each ``$ COMMAND`` line runs in ``bash`` with the
installed ``kubeturn`` first on ``PATH``; the lines after it, up to the next ``$``, are
what it shows. The rules, in this one place (README.md states them under the block):

- what a command shows is the end of what it prints, stdout then stderr: all of it for
  most commands; for ``kubeturn run``, its summary (the lines before it, where it runs
  and the live table, are left out);
- a ``# exit N`` comment means the command exits N; otherwise it exits 0;
- a command ending in ``&`` runs in the background, as in a shell; the commands after it
  are run again (for up to ``WAIT_S``) until they show what is shown, since the Run takes
  a moment to get there; ``$ wait`` shows the background commands' output;
- ``VARIES`` are the parts that change from run to run (durations, token counts, times,
  commit hashes and random ids, and so the columns' widths): a shown line matches an
  actual one when they are equal with those parts and runs of spaces set aside; the
  project's directory is printed relative (``./``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.support import EXAMPLES, REPO, environment, git_repo

README = REPO / "README.md"
WAIT_S = 30.0
VARIES = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"  # an RFC 3339 time
    r"|\b\d+(?:\.\d+)?s\b|\b\d+m\d\ds\b|\b\d+h\d\dm\b"  # a duration
    r"|\b\d+/\d+\b"  # tokens: prompt/completion
    r"|\b[0-9a-f]{7,40}\b"  # a commit hash, a random id
)
EXIT = re.compile(r"#\s*exit (\d+)")


@dataclass
class Command:
    line: str
    shown: list[str] = field(default_factory=list)

    @property
    def shell(self) -> str:
        """The command without its comment."""
        return re.sub(r"\s+#.*$", "", self.line).strip()

    @property
    def background(self) -> bool:
        return self.shell.endswith("&")

    @property
    def exit(self) -> int:
        found = EXIT.search(self.line)
        return int(found.group(1)) if found else 0


def blocks() -> list[list[Command]]:
    """Each console block's commands, with what each shows (trailing blank lines cut)."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", README.read_text(), flags=re.DOTALL):
        commands: list[Command] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append(Command(line[2:]))
            elif commands:
                commands[-1].shown.append(line)
        for command in commands:
            while command.shown and not command.shown[-1].strip():
                command.shown.pop()
        found.append(commands)
    return found


def canonical(line: str) -> str:
    return " ".join(VARIES.sub("~", line).split())


def mismatch(shown: list[str], printed: str) -> str | None:
    """Why ``printed`` does not end with ``shown``; None when it does."""
    lines = printed.rstrip("\n").splitlines()
    if not shown:
        return None
    tail = lines[-len(shown) :] if len(lines) >= len(shown) else lines
    if [canonical(line) for line in tail] == [canonical(line) for line in shown]:
        return None
    return "shown:\n" + "\n".join(shown) + "\n\nprinted:\n" + printed


BLOCKS = blocks()


def test_the_readme_shows_commands() -> None:
    assert BLOCKS, "README.md has no console block"
    assert all(BLOCKS), "a console block of README.md has no command"


@pytest.mark.parametrize("commands", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_a_console_block_prints_what_it_shows(commands: list[Command], tmp_path: Path) -> None:
    project = git_repo(tmp_path / "project")
    shutil.copytree(EXAMPLES, project / "examples")
    env = environment()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    running: list[tuple[Command, subprocess.Popen[str]]] = []
    try:
        for command in commands:
            if command.background:
                process = subprocess.Popen(
                    ["bash", "-c", command.shell.removesuffix("&").strip()],
                    cwd=project,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                running.append((command, process))
                continue
            if command.shell == "wait":
                printed = ""
                for started, process in running:
                    out, _ = process.communicate(timeout=WAIT_S)
                    assert process.returncode == started.exit, (started.line, out)
                    printed += out
                running.clear()
                problem = mismatch(command.shown, printed.replace(f"{project}/", ""))
                assert problem is None, f"$ wait\n{problem}"
                continue
            deadline = time.monotonic() + (WAIT_S if running else 0)
            while True:
                done = subprocess.run(
                    ["bash", "-c", command.shell],
                    cwd=project,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                printed = (done.stdout + done.stderr).replace(f"{project}/", "")
                problem = mismatch(command.shown, printed)
                if done.returncode != command.exit:
                    problem = f"exit {done.returncode}, not {command.exit}\n{printed}"
                if problem is None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert problem is None, f"$ {command.line}\n{problem}"
    finally:
        for _, process in running:
            process.kill()
            process.communicate()
