"""``POST /deliveries``: a Run's worktree committed on its branch and the branch bundled
(ADR 0063), against the real Harness, its toolbox and real git.

Cases:
- a change is committed on ``kubeturn/<run>`` with the given author and committer, and
  the bundle (under ``.deliveries``, a regular file) holds the branch at that commit and
  needs only the clone's objects; delivered again with nothing changed, it is the same
  commit, ``changed`` false, and a bundle again;
- hostile worktrees: a pre-commit hook and a ``core.hooksPath`` the Agent set never run,
  nor does a ``core.fsmonitor``; a clean filter the Agent configured runs as the tools
  run, confined: it writes neither into ``.deliveries`` nor beside the worktree; a
  symlink planted where the bundle goes is replaced, never written through, and a
  symlink planted for the Run's directory under ``.deliveries`` is refused (409), its
  target untouched;
- two deliveries of one Run's slot at once are made one after the other: one commit;
- refused: a worktree whose HEAD the Agent moved off the branch, and a slot with no
  worktree (409 naming why); bodies that break the schema (400 naming the field); the
  bearer token is needed;
- ``/openapi.json`` documents the route.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.clones import git_lines, make_clone
from tests.harness.support import StartWorld, World, scripts

SLOT = "target"
RUN, BRANCH = "review-1", "kubeturn/review-1"
AUTHOR = {"name": "Ada Lovelace", "email": "ada@example.invalid"}
SCRIPT = scripts({"never": [{"text": "unused"}]})
TOOLS_UID = "65534"
"""The tools' user in this tier (the test runs as root, the sessions as nobody)."""


@pytest.fixture
def work_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
    root.chmod(0o777)
    make_clone(root / ".repos" / SLOT)
    yield root
    shutil.rmtree(root)


async def start(world: StartWorld, work_root: Path) -> tuple[World, Path]:
    w = await world(SCRIPT, orchestrated=False, work_root=work_root)
    body = {"run": RUN, "branch": BRANCH, "slots": [SLOT]}
    async with w.harness.session.post(
        f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
    ) as response:
        assert response.status == 200, await response.text()
        return w, Path((await response.json())["worktrees"][SLOT]["path"])


async def deliver(w: World, token: bool = True, **body: Any) -> tuple[int, Any]:
    sent = {"run": RUN, "branch": BRANCH, "slot": SLOT, "message": "The work", "author": AUTHOR}
    sent.update(body)
    headers = w.harness.headers() if token else {}
    async with w.harness.session.post(
        f"{w.harness.url}/deliveries", json=sent, headers=headers
    ) as response:
        return response.status, await response.json()


def as_tools(path: Path) -> None:
    """Give what the test wrote in a worktree to the tools' user, as an Agent's files are."""
    subprocess.run(["chown", "-R", f"{TOOLS_UID}:{TOOLS_UID}", str(path)], check=True)


def write(tree: Path, name: str, text: str) -> None:
    (tree / name).parent.mkdir(parents=True, exist_ok=True)
    (tree / name).write_text(text)
    as_tools(tree)


def bundle_heads(work_root: Path, bundle: str) -> list[str]:
    clone = work_root / ".repos" / SLOT
    git_lines(clone, "bundle", "verify", "-q", str(work_root / bundle))
    return git_lines(clone, "bundle", "list-heads", str(work_root / bundle))


async def test_a_change_is_committed_and_bundled_and_again_nothing_changes(
    world: StartWorld, work_root: Path
) -> None:
    w, tree = await start(world, work_root)
    write(tree, "fix.txt", "fixed\n")

    status, first = await deliver(w)

    assert status == 200, first
    assert first["changed"] is True
    assert (first["bundle"], first["clone"]) == (
        f".deliveries/{RUN}/{SLOT}.bundle",
        ".repos/target",
    )
    bundle = work_root / first["bundle"]
    assert bundle.is_file()
    assert not bundle.is_symlink()
    assert bundle_heads(work_root, first["bundle"]) == [f"{first['commit']} refs/heads/{BRANCH}"]
    shown = git_lines(tree, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", BRANCH)
    assert shown == [
        "Ada Lovelace <ada@example.invalid>|Ada Lovelace <ada@example.invalid>|The work"
    ]
    assert git_lines(tree, "show", f"{BRANCH}:fix.txt") == ["fixed"]
    assert git_lines(tree, "status", "--porcelain") == []

    status, again = await deliver(w, message="Again")

    assert status == 200, again
    assert (again["commit"], again["changed"]) == (first["commit"], False)
    assert bundle_heads(work_root, again["bundle"]) == [f"{first['commit']} refs/heads/{BRANCH}"]
    assert git_lines(tree, "rev-list", "--count", BRANCH) == ["2"]


@pytest.fixture
def markers() -> Iterator[Path]:
    """Where what should never run would leave a mark: outside every session's reach."""
    directory = Path(tempfile.mkdtemp(prefix="kubeturn-markers-"))
    directory.chmod(0o777)
    yield directory
    shutil.rmtree(directory)


def marks(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_what_an_agent_planted_in_its_repository_runs_confined_or_not_at_all(
    world: StartWorld, work_root: Path, markers: Path
) -> None:
    w, tree = await start(world, work_root)
    # A hook or an fsmonitor would leave its mark in the worktree, which it could reach.
    hook = f"#!/bin/sh\ntouch {tree}/.git/hook-ran {markers}/hook-ran\n"
    write(tree, ".git/hooks/pre-commit", hook)
    write(tree, "hooks/pre-commit", hook)
    write(tree, "monitor.sh", f"#!/bin/sh\ntouch {tree}/.git/fsmonitor-ran\n")
    for script in ("hooks/pre-commit", ".git/hooks/pre-commit", "monitor.sh"):
        (tree / script).chmod(0o755)
    inside = tree / ".git" / "filter-ran"
    escape = f"{inside} {work_root}/.deliveries/planted {work_root}/planted {markers}/filter-ran"
    config = {
        "core.hooksPath": str(tree / "hooks"),
        "core.fsmonitor": str(tree / "monitor.sh"),
        "filter.sneak.clean": f"sh -c 'touch {escape}; cat'",
    }
    for key, value in config.items():
        git_lines(tree, "config", key, value)
    write(tree, ".gitattributes", "*.txt filter=sneak\n")
    write(tree, "fix.txt", "fixed\n")

    status, delivered = await deliver(w)

    assert status == 200, delivered
    assert git_lines(tree, "show", f"{BRANCH}:fix.txt") == ["fixed"]
    assert inside.exists()  # the filter ran, as the tools run
    assert not (tree / ".git" / "hook-ran").exists()
    assert not (tree / ".git" / "fsmonitor-ran").exists()
    assert marks(markers) == []  # the filter was confined
    assert not (work_root / ".deliveries" / "planted").exists()
    assert not (work_root / "planted").exists()


async def test_a_symlink_where_the_bundle_goes_is_replaced_not_followed(
    world: StartWorld, work_root: Path
) -> None:
    w, tree = await start(world, work_root)
    victim = work_root / "victim"
    victim.write_text("keep me\n")
    (work_root / ".deliveries" / RUN).mkdir(parents=True)
    (work_root / ".deliveries" / RUN / f"{SLOT}.bundle").symlink_to(victim)
    as_tools(work_root / ".deliveries")
    write(tree, "fix.txt", "fixed\n")

    status, delivered = await deliver(w)

    assert status == 200, delivered
    bundle = work_root / delivered["bundle"]
    assert bundle.is_file()
    assert not bundle.is_symlink()
    assert victim.read_text() == "keep me\n"


async def test_a_symlink_for_the_runs_directory_is_refused(
    world: StartWorld, work_root: Path
) -> None:
    w, tree = await start(world, work_root)
    elsewhere = work_root / "elsewhere"
    elsewhere.mkdir()
    (work_root / ".deliveries").mkdir()
    (work_root / ".deliveries" / RUN).symlink_to(elsewhere)
    write(tree, "fix.txt", "fixed\n")

    status, refused = await deliver(w)

    assert status == 409
    assert refused["message"].startswith(f"the bundle could not be made at .deliveries/{RUN}/")
    assert list(elsewhere.iterdir()) == []


async def test_a_worktree_moved_off_its_branch_or_missing_is_refused(
    world: StartWorld, work_root: Path
) -> None:
    w, tree = await start(world, work_root)
    git_lines(tree, "checkout", "-q", "-b", "elsewhere")

    status, moved = await deliver(w)
    assert status == 409
    assert f"is on elsewhere, not on the Run's branch {BRANCH}" in moved["message"]

    status, missing = await deliver(w, run="review-2", branch="kubeturn/review-2")
    assert status == 409
    assert "the Run has no worktree at" in missing["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slot": "../x"}, "slot"),
        ({"message": ""}, "message"),
        ({"message": "a\u0000b"}, "message"),
        ({"author": {"name": "A", "email": "nope"}}, "author.email"),
        ({"branch": "-x"}, "branch"),
    ],
)
async def test_a_body_that_breaks_the_schema_is_refused_naming_the_field(
    world: StartWorld, work_root: Path, body: dict[str, Any], field: str
) -> None:
    w, _ = await start(world, work_root)
    status, refused = await deliver(w, **body)
    assert status == 400
    assert refused["field"] == field


async def test_the_token_is_needed_and_the_route_is_documented(
    world: StartWorld, work_root: Path
) -> None:
    w, _ = await start(world, work_root)
    status, _ = await deliver(w, token=False)
    assert status == 401
    async with w.harness.session.get(
        f"{w.harness.url}/openapi.json", headers=w.harness.headers()
    ) as response:
        document = await response.json()
    route = document["paths"]["/deliveries"]["post"]
    assert set(route["responses"]) >= {"200", "409", "503"}


async def test_two_deliveries_at_once_are_made_one_after_the_other(
    world: StartWorld, work_root: Path
) -> None:
    w, tree = await start(world, work_root)
    write(tree, "fix.txt", "fixed\n")

    (first, one), (second, other) = await asyncio.gather(deliver(w), deliver(w, message="Again"))

    assert (first, second) == (200, 200), (one, other)
    assert one["commit"] == other["commit"]
    assert sorted([one["changed"], other["changed"]]) == [False, True]
    assert git_lines(tree, "rev-list", "--count", BRANCH) == ["2"]
