"""Clones as a sandbox's volume holds them, for the Harness's worktree tests: a git
repository with one commit and ``ORIGIN`` as its remote, owned by the tools' user, and
git run on it as another user may.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ORIGIN = "https://git.example.invalid/team;a/demo.git#main"
"""The clone's own remote, as its init container leaves it: a URL git quotes."""


def make_clone(clone: Path) -> None:
    """A git repository with one commit and ``ORIGIN`` as its remote, owned by the tools'
    user (as a Pod's volume is)."""
    clone.mkdir(parents=True)
    git = ["git", "-c", "user.name=kubeturn", "-c", "user.email=k@example.invalid"]
    subprocess.run([*git, "init", "-q", str(clone)], check=True)
    (clone / "README.md").write_text("# demo\n")
    subprocess.run([*git, "-C", str(clone), "add", "README.md"], check=True)
    subprocess.run([*git, "-C", str(clone), "commit", "-q", "-m", "one"], check=True)
    subprocess.run([*git, "-C", str(clone), "remote", "add", "origin", ORIGIN], check=True)
    subprocess.run(["chown", "-R", "65534:65534", str(clone.parents[1])], check=True)


def git_lines(repository: Path, *args: str) -> list[str]:
    # The clone belongs to the tools' user: git refuses another owner's repository
    # unless told it is safe.
    answer = subprocess.run(
        ["git", "-c", f"safe.directory={repository}", "-C", str(repository), *args],
        check=True,
        capture_output=True,
        text=True,
    )
    return answer.stdout.splitlines()
