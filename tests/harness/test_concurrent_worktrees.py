"""``POST /worktrees`` for many Runs at once, against the real Harness and real git.

Cases:
- 30 Runs ask for their worktree of one clone at the same moment: every answer is 200
  with the Run's own path and branch, every worktree is checked out on its branch at
  the clone's HEAD, its ``origin`` the clone's own remote, and each is a repository of
  its own that borrows the clone's objects (ADR 0036), the clone itself untouched (no
  linked worktree, no Run's branch);
- the same Run asking 10 times at once gets one worktree, the same answer each time;
- a Run forgotten while 12 others ask for their worktrees (ADR 0082): its branch, with
  its Agent's commit, is kept in the clone, its worktree is gone, and the 12 are made
  as above;
- a worktree left half made (``<path>.partial``: a clone with no checkout, as a killed
  toolbox leaves it) is not taken as made: asked for, it is made whole and the
  ``.partial`` is gone;
- 10 Runs' worktrees asked for at once of a toolbox client that opens at most 2 git
  sessions: all 10 made, through 2 sessions in all (each kept for the next request
  that waits), and once the last is answered neither session's process is left;
- the origin's URL is written in a worktree's configuration as ``git config`` writes it,
  for URLs git quotes or escapes;
- a linked worktree an earlier kubeturn made (``git worktree add``) becomes a repository
  of its own on the same branch and commit, its files kept, the clone's record of it
  gone.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kubeturn_harness.sandbox import reaper
from kubeturn_harness.sandbox.client import START_S, Session, Toolbox
from kubeturn_harness.sandbox.clones import config_value
from kubeturn_harness.sandbox.protocol import Kind, Limits
from kubeturn_harness.sandbox.server import peer_of
from kubeturn_harness.wire import WorktreesRequest
from tests.harness.clones import ORIGIN, git_lines, make_clone
from tests.harness.support import StartWorld, World, script

RUNS = 30
"""Enough at once to have git's worktree adds overlap on two cores, every time."""
SLOT = "target"
TEXT_ONLY = script("unused", {"text": "unused"})


def borrowed(tree: Path) -> list[str]:
    """The object directories a Run's worktree borrows from."""
    return (tree / ".git" / "objects" / "info" / "alternates").read_text().splitlines()


def assert_made(tree: Path, run: str, head: str) -> None:
    """``tree`` is a repository of its own, checked out on the Run's branch at ``head``
    (the clone's), its ``origin`` the clone's remote."""
    assert (tree / "README.md").read_text() == "# demo\n"
    assert git_lines(tree, "branch", "--show-current") == [f"kubeturn/{run}"]
    assert git_lines(tree, "rev-parse", "HEAD") == [head]
    assert git_lines(tree, "status", "--porcelain") == []
    assert git_lines(tree, "config", "--get-all", "remote.origin.url") == [ORIGIN]
    assert (tree / ".git").is_dir()
    assert borrowed(tree) == [str(tree.parents[1] / ".repos" / SLOT / ".git" / "objects")]


def assert_clone_untouched(clone: Path) -> None:
    """The clone lists no worktree but itself and holds no Run's branch."""
    listed = git_lines(clone, "worktree", "list", "--porcelain")
    assert [line for line in listed if line.startswith("worktree ")] == [f"worktree {clone}"]
    assert not [b for b in git_lines(clone, "branch", "--list") if "kubeturn/" in b]


@pytest.fixture
def work_root() -> Iterator[Path]:
    """A work root the tools' user can reach (pytest's own temp dirs are private to root),
    holding one clone."""
    root = Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
    root.chmod(0o777)
    make_clone(root / ".repos" / SLOT)
    yield root
    shutil.rmtree(root)


async def ask(w: World, run: str) -> tuple[int, Any]:
    body = {"run": run, "branch": f"kubeturn/{run}", "slots": [SLOT]}
    async with w.harness.session.post(
        f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
    ) as response:
        return response.status, await response.json()


async def test_worktrees_asked_for_at_once_by_many_runs_are_all_made(
    world: StartWorld, work_root: Path
) -> None:
    w = await world(TEXT_ONLY, orchestrated=False, work_root=work_root)
    runs = [f"run-{n:02d}" for n in range(RUNS)]

    answers = await asyncio.gather(*(ask(w, run) for run in runs))

    assert answers == [
        (
            200,
            {
                "worktrees": {
                    SLOT: {
                        "path": str(work_root / SLOT / f"kubeturn-{run}"),
                        "branch": f"kubeturn/{run}",
                    }
                }
            },
        )
        for run in runs
    ]
    head = git_lines(work_root / ".repos" / SLOT, "rev-parse", "HEAD")[0]
    for run in runs:
        assert_made(work_root / SLOT / f"kubeturn-{run}", run, head)
    assert_clone_untouched(work_root / ".repos" / SLOT)
    assert sorted(p.name for p in (work_root / SLOT).iterdir()) == [f"kubeturn-{r}" for r in runs]


async def test_one_run_asking_many_times_at_once_gets_one_worktree(
    world: StartWorld, work_root: Path
) -> None:
    w = await world(TEXT_ONLY, orchestrated=False, work_root=work_root)

    answers = await asyncio.gather(*(ask(w, "review-1") for _ in range(10)))

    path = str(work_root / SLOT / "kubeturn-review-1")
    expected = {"worktrees": {SLOT: {"path": path, "branch": "kubeturn/review-1"}}}
    assert answers == [(200, expected)] * 10
    assert sorted(p.name for p in (work_root / SLOT).iterdir()) == ["kubeturn-review-1"]
    assert git_lines(Path(path), "branch", "--show-current") == ["kubeturn/review-1"]
    assert_clone_untouched(work_root / ".repos" / SLOT)


def make_linked_worktree(clone: Path, tree: Path) -> None:
    """A Run's worktree as an earlier kubeturn made it (``git worktree add``), with a commit
    of its Agent's and a file not committed."""
    git = ["git", "-c", "safe.directory=*", "-c", "user.name=a", "-c", "user.email=a@b.invalid"]
    subprocess.run(
        [*git, "-C", str(clone), "worktree", "add", "-q", "-B", "kubeturn/old", str(tree)],
        check=True,
    )
    (tree / "made.txt").write_text("committed\n")
    subprocess.run([*git, "-C", str(tree), "add", "made.txt"], check=True)
    subprocess.run([*git, "-C", str(tree), "commit", "-q", "-m", "the Agent's"], check=True)
    (tree / "draft.txt").write_text("not committed\n")
    subprocess.run(["chown", "-R", "65534:65534", str(clone.parents[1])], check=True)


async def test_a_linked_worktree_of_an_earlier_kubeturn_becomes_a_repository_of_its_own(
    world: StartWorld, work_root: Path
) -> None:
    clone, tree = work_root / ".repos" / SLOT, work_root / SLOT / "kubeturn-old"
    await asyncio.to_thread(make_linked_worktree, clone, tree)
    w = await world(TEXT_ONLY, orchestrated=False, work_root=work_root)

    assert await ask(w, "old") == (
        200,
        {"worktrees": {SLOT: {"path": str(tree), "branch": "kubeturn/old"}}},
    )

    assert (tree / ".git").is_dir()
    assert borrowed(tree) == [str(clone / ".git" / "objects")]
    assert git_lines(tree, "branch", "--show-current") == ["kubeturn/old"]
    assert git_lines(tree, "log", "-1", "--format=%s") == ["the Agent's"]
    assert git_lines(tree, "status", "--porcelain") == ["?? draft.txt"]
    listed = git_lines(clone, "worktree", "list", "--porcelain")
    assert [line for line in listed if line.startswith("worktree ")] == [f"worktree {clone}"]


async def forget(w: World, run: str) -> tuple[int, Any]:
    async with w.harness.session.delete(
        f"{w.harness.url}/runs/{run}?branch=kubeturn%2F{run}", headers=w.harness.headers()
    ) as response:
        return response.status, await response.json()


async def test_a_run_forgotten_while_others_make_their_worktrees_loses_nothing(
    world: StartWorld, work_root: Path
) -> None:
    clone = work_root / ".repos" / SLOT
    w = await world(TEXT_ONLY, orchestrated=False, work_root=work_root)
    assert (await ask(w, "gone"))[0] == 200
    gone = work_root / SLOT / "kubeturn-gone"
    await asyncio.to_thread(commit_as_agent, gone)
    commit = git_lines(gone, "rev-parse", "HEAD")[0]
    runs = [f"run-{n:02d}" for n in range(12)]

    forgot, *answers = await asyncio.gather(forget(w, "gone"), *(ask(w, run) for run in runs))

    assert forgot[0] == 200
    assert forgot[1]["worktrees"] == {SLOT: {"path": str(gone), "branch": "kubeturn/gone"}}
    assert not gone.exists()
    assert git_lines(clone, "rev-parse", "refs/heads/kubeturn/gone") == [commit]
    assert [status for status, _ in answers] == [200] * len(runs)
    head = git_lines(clone, "rev-parse", "HEAD")[0]
    for run in runs:
        assert_made(work_root / SLOT / f"kubeturn-{run}", run, head)
    assert sorted(p.name for p in (work_root / SLOT).iterdir()) == [f"kubeturn-{r}" for r in runs]


def commit_as_agent(tree: Path) -> None:
    """A commit of the Run's Agent in its worktree, the files the tools' user's."""
    git = ["git", "-c", "safe.directory=*", "-c", "user.name=a", "-c", "user.email=a@b.invalid"]
    (tree / "made.txt").write_text("the Agent's\n")
    subprocess.run([*git, "-C", str(tree), "add", "made.txt"], check=True)
    subprocess.run([*git, "-C", str(tree), "commit", "-q", "-m", "the Agent's"], check=True)
    subprocess.run(["chown", "-R", "65534:65534", str(tree)], check=True)


async def test_a_worktree_left_half_made_is_made_again(world: StartWorld, work_root: Path) -> None:
    clone, tree = work_root / ".repos" / SLOT, work_root / SLOT / "kubeturn-cut"
    await asyncio.to_thread(make_half, clone, tree.with_name("kubeturn-cut.partial"))
    w = await world(TEXT_ONLY, orchestrated=False, work_root=work_root)

    assert await ask(w, "cut") == (
        200,
        {"worktrees": {SLOT: {"path": str(tree), "branch": "kubeturn/cut"}}},
    )

    assert_made(tree, "cut", git_lines(clone, "rev-parse", "HEAD")[0])
    assert sorted(p.name for p in tree.parent.iterdir()) == ["kubeturn-cut"]


def make_half(clone: Path, partial: Path) -> None:
    """What a toolbox killed while it made a worktree leaves: cloned, not checked out."""
    partial.parent.mkdir()
    # The clone is another user's: git's upload-pack for it reads no command-line setting.
    trusting = partial.parent / "gitconfig"
    trusting.write_text("[safe]\n\tdirectory = *\n")
    subprocess.run(
        ["git", "clone", "-q", "--shared", "--no-checkout", str(clone), str(partial)],
        check=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": str(trusting)},
    )
    trusting.unlink()
    subprocess.run(["chown", "-R", "65534:65534", str(partial.parent)], check=True)


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.invalid/team/demo.git",
        "git@git.example.invalid:team/demo.git",
        "https://git.example.invalid/a;b/demo.git",
        "https://git.example.invalid/demo.git#main",
        " /srv/git/leading space",
        "/srv/git/trailing space ",
        '/srv/git/a "quoted" name',
        "C:\\git\\demo",
        "/srv/git/a\ttab",
    ],
)
def test_a_url_is_written_as_git_config_writes_it(url: str, tmp_path: Path) -> None:
    config = tmp_path / "config"
    subprocess.run(["git", "config", "--file", str(config), "remote.origin.url", url], check=True)
    assert config.read_text() == f'[remote "origin"]\n\turl = {config_value(url)}\n'


@dataclass(frozen=True)
class CountingToolbox(Toolbox):
    """A toolbox client that notes each session it opens, by the pid of the toolbox that
    serves it (the process that listens: its sessions are its children)."""

    opened: list[int] = field(default_factory=list)

    async def session(self, kind: Kind, **options: Any) -> Session:
        session = await super().session(kind, **options)
        self.opened.append(peer_of(session.writer.get_extra_info("socket")).pid)
        return session


async def test_worktrees_asked_for_at_once_take_turns_in_a_few_sessions(
    toolbox_socket: Path, work_root: Path
) -> None:
    limits = Limits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8)
    toolbox = CountingToolbox(toolbox_socket, work_root=work_root, limits=limits, git_sessions=2)
    await toolbox.ready(START_S)  # as the Harness waits for it
    toolbox.opened.clear()
    runs = [f"run-{n:02d}" for n in range(10)]

    made = await asyncio.gather(
        *(
            toolbox.worktrees(WorktreesRequest(run=r, branch=f"kubeturn/{r}", slots=[SLOT]))
            for r in runs
        )
    )

    assert [answer.worktrees[SLOT].path for answer in made] == [
        str(work_root / SLOT / f"kubeturn-{run}") for run in runs
    ]
    head = git_lines(work_root / ".repos" / SLOT, "rev-parse", "HEAD")[0]
    for run in runs:
        assert_made(work_root / SLOT / f"kubeturn-{run}", run, head)
    assert len(toolbox.opened) == 2
    served_by = toolbox.opened[0]
    for _ in range(500):
        if not reaper.look(served_by).children.get(served_by):
            break
        await asyncio.sleep(0.01)
    assert reaper.look(served_by).children.get(served_by) is None  # no session left
