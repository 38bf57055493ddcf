"""Delivering the Agents' work on one machine (ADR 0063, 0064): ``examples/deliver.yaml``
run as a user runs it, against a temporary repository, never this one; and the runner's
pusher against git's own ``http-backend`` behind basic auth on 127.0.0.1, the user's
credentials given by a credential helper of theirs (``GIT_CONFIG_GLOBAL``), as for any
push of theirs.

Cases:
- ``url: .``: pick → deliver → onDone → Succeeded; the branch ``kubeturn/deliver`` is in
  the user's repository, one commit on ``main`` by the manifest's author, and the summary
  says where (``work: branch kubeturn/deliver in <repository> (commit abc1234)``);
  ``status.deliveries`` holds one record;
- over http (``--repo target=<server>``): the same Run clones and pushes with the user's
  helper: exactly one push served, the server's ``kubeturn/deliver`` at the delivered
  commit, one record, pushed;
- refused, each in one clear line: wrong credentials (the line names the URL and never
  the password), a branch that moved on the server, a branch that moved in a local
  repository (never forced: the moved branch stays where it was).
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeturn.local.delivery import LocalPusher
from kubeturn.orchestrator.delivery import PushRequest
from tests.cli.support import EXAMPLES, kubeturn, last_line, status
from tests.operator import git_http

USER, PASSWORD = "ada", "s3cret-token-for-tests"
BRANCH = "kubeturn/deliver"
MANIFEST, MODEL = EXAMPLES / "deliver.yaml", f"scripted:{EXAMPLES / 'deliver.script.yaml'}"


def git(repository: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repository), *git_http.IDENTITY, *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[git_http.GitServer]:
    """git's smart HTTP on 127.0.0.1 (a thread of its own), for the user ``USER``."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    held: dict[str, object] = {}

    async def serve() -> None:
        async with git_http.serving(tmp_path / "served", USER, PASSWORD) as server:
            held["server"], held["stop"] = server, asyncio.Event()
            started.set()
            await held["stop"].wait()  # type: ignore[attr-defined]

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(10), "the git server did not start"
    server = held["server"]
    assert isinstance(server, git_http.GitServer)
    yield server
    loop.call_soon_threadsafe(held["stop"].set)  # type: ignore[attr-defined]
    thread.join(10)
    loop.close()


def credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    """The user's git configuration: a credential helper that answers ``password``."""
    answer = tmp_path / "credentials"
    answer.write_text(f"username={USER}\npassword={password}\n")
    helper = tmp_path / "helper.sh"
    helper.write_text(f'#!/bin/sh\n[ "$1" = get ] && cat {answer}\nexit 0\n')
    helper.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f"[credential]\n\thelper = !{helper}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))


def test_the_example_leaves_the_branch_in_the_users_repository(project: Path) -> None:
    main = git(project, "rev-parse", "main")

    result = kubeturn("run", MANIFEST, "--model", MODEL, cwd=project)

    assert result.returncode == 0, result.stdout + result.stderr
    commit = git(project, "rev-parse", BRANCH)
    assert git(project, "rev-list", f"main..{BRANCH}") == commit  # one commit on main
    assert git(project, "rev-parse", f"{BRANCH}^") == main
    assert git(project, "log", "-1", "--format=%an|%s", BRANCH) == (
        "kubeturn example|Say how to propose a change"
    )
    assert git(project, "show", f"{BRANCH}:CONTRIBUTING.md").startswith("# Contributing")
    assert last_line(result.stdout, "run deliver: ").startswith(
        "run deliver: Succeeded in state delivered"
    )
    assert f"work: branch {BRANCH} in {project} (commit {commit[:7]})" in result.stdout
    (record,) = status(project / ".kubeturn-work" / "deliver", "deliver")["deliveries"]
    assert {k: record[k] for k in ("state", "slot", "branch", "commit", "changed", "pushed")} == {
        "state": "delivering",
        "slot": "target",
        "branch": BRANCH,
        "commit": commit,
        "changed": True,
        "pushed": True,
    }


def test_over_http_the_users_helper_gives_the_credentials_and_one_push_is_made(
    project: Path,
    tmp_path: Path,
    git_server: git_http.GitServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    credentials(tmp_path, monkeypatch, PASSWORD)
    (main,) = git_server.bare("project", "start")
    url = f"{git_server.url}/project.git"

    result = kubeturn("run", MANIFEST, "--model", MODEL, "--repo", f"target={url}", cwd=project)

    assert result.returncode == 0, result.stdout + result.stderr
    served = git_server.root / "project.git"
    commit = git(served, "rev-parse", BRANCH)
    assert git(served, "rev-parse", f"{BRANCH}^") == main
    assert git_server.pushes == 1
    assert git_server.exposed == []
    assert f"work: branch {BRANCH} in {url} (commit {commit[:7]})" in result.stdout
    (record,) = status(project / ".kubeturn-work" / "deliver", "deliver")["deliveries"]
    assert (record["commit"], record["pushed"], record["remote"]) == (commit, True, url)


class Delivered:
    """A workdir as the Harness leaves it after a delivery: the slot's clone of
    ``url``, and a bundle of ``kubeturn/deliver`` one commit on top of it."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        clone = root / ".repos" / "target"
        subprocess.run(["git", "clone", "--quiet", url, str(clone)], check=True)
        tree = root / "target" / "kubeturn-deliver"
        subprocess.run(["git", "clone", "--quiet", "--shared", str(clone), str(tree)], check=True)
        git(tree, "checkout", "--quiet", "-b", BRANCH)
        (tree / "CHANGELOG.md").write_text("# Changelog\n")
        git(tree, "add", "-A")
        git(tree, "commit", "--quiet", "-m", "Add a changelog")
        self.commit = git(tree, "rev-parse", "HEAD")
        (root / ".deliveries" / "deliver").mkdir(parents=True)
        bundle = ".deliveries/deliver/target.bundle"
        git(tree, "bundle", "create", "--quiet", str(root / bundle), BRANCH, "--not", "HEAD^")
        self.request = PushRequest(
            namespace="",
            run="deliver",
            workspace="local",
            slot="target",
            branch=BRANCH,
            commit=self.commit,
            bundle=bundle,
            clone=".repos/target",
            url=url,
            secret=None,
        )


async def test_wrong_credentials_are_one_line_without_the_password(
    tmp_path: Path, git_server: git_http.GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_server.bare("project", "start")
    url = f"{git_server.url}/project.git"
    credentials(tmp_path, monkeypatch, PASSWORD)
    delivered = await asyncio.to_thread(Delivered, tmp_path / "work", url)
    credentials(tmp_path, monkeypatch, "wrong-password")

    result = await LocalPusher(delivered.root).push(delivered.request)

    assert not result.pushed
    assert result.error == (
        f"cannot push repo slot 'target' to {url}: Authentication failed for '{url}/'"
    )
    assert git_server.pushes == 0


async def test_a_branch_that_moved_on_the_server_is_refused_in_one_line(
    tmp_path: Path, git_server: git_http.GitServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    git_server.bare("project", "start")
    url = f"{git_server.url}/project.git"
    credentials(tmp_path, monkeypatch, PASSWORD)
    delivered = await asyncio.to_thread(Delivered, tmp_path / "work", url)
    served = git_server.root / "project.git"
    moved = git(served, "commit-tree", "-m", "someone else's", "main^{tree}")
    git(served, "update-ref", f"refs/heads/{BRANCH}", moved)

    result = await LocalPusher(delivered.root).push(delivered.request)

    assert not result.pushed
    assert result.error == (
        f"cannot push repo slot 'target' to {url}: {BRANCH} there has moved on from "
        "what was delivered (not a fast-forward); kubeturn never forces it: merge it there, "
        "or remove that branch"
    )
    assert git(served, "rev-parse", BRANCH) == moved


async def test_a_branch_that_moved_in_a_local_repository_is_never_forced(
    project: Path, tmp_path: Path
) -> None:
    delivered = await asyncio.to_thread(Delivered, tmp_path / "work", str(project))
    moved = git(project, "commit-tree", "-m", "someone else's", "main^{tree}")
    git(project, "branch", BRANCH, moved)

    result = await LocalPusher(delivered.root).push(delivered.request)

    assert not result.pushed
    assert result.error == (
        f"cannot push repo slot 'target' to {project}: {BRANCH} there has moved on from "
        "what was delivered (not a fast-forward); kubeturn never forces it: merge it there, "
        "or remove that branch"
    )
    assert git(project, "rev-parse", BRANCH) == moved
    git(project, "branch", "-D", BRANCH)
    assert (await LocalPusher(delivered.root).push(delivered.request)).pushed
    assert git(project, "rev-parse", BRANCH) == delivered.commit
