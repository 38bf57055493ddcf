"""``DELETE /runs/{run}``: the Harness forgets a deleted Run (ADR 0030), against the real
Harness, real git and the scripted model.

Run ``default.review-1`` has a worktree on branch ``kubeturn/review-1``, in which its
Agent made a commit, and two conversations (a continued one, dropped from memory, and a
fresh one); Run ``default.review-10`` (whose id extends the first's) has its own.

Cases:
- without the bearer token the route answers 401 and removes nothing;
- it removes the Run's worktree (a repository of its own, ADR 0036): the directory is
  gone, and the branch ``kubeturn/review-1`` stays in the clone with the Agent's commit;
  the answer names the worktree and counts the conversations;
- it forgets the Run's conversations, the one in memory and the one dropped from it:
  their history answers 404, their log directories are gone, and a Harness started again
  on the data dir does not bring them back;
- the other Run's worktree and conversation are left as they were;
- while a Submission of the Run is running it refuses 409 naming the conversation and the
  Submission, and removes nothing; once the Submission is swept it forgets the Run;
- asked again, it answers 200 with nothing removed; asked three times at once, the
  worktree and each conversation are removed once among the answers;
- a Run id that is no id (a ``/`` in it), or no ``branch``, is refused 400 naming it;
- a fan-out child's worktree (``POST /worktrees`` with ``base``, ADR 0113) starts from
  the Run's branch's commit, and goes with the Run, its branch kept in the clone; one
  whose base has no worktree is refused naming ``base``, one whose branch does not begin
  with its Run's and ``_`` (a Run's branch holding ``_``) naming ``branch``, as the
  sandbox reaches a Run's children by that name;
- ``/openapi.json`` documents the route, its parameters and its answer.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from kubeturn_harness.service import Harness
from kubeturn_harness.store import conversation_id
from tests.harness.clones import git_lines, make_clone
from tests.harness.support import (
    AGENT,
    HarnessClient,
    StartWorld,
    SteppedClock,
    World,
    agent_url,
    scripts,
    start_harness,
)

SLOT = "target"
RUN, OTHER = "default.review-1", "default.review-10"
BRANCH, OTHER_BRANCH = "kubeturn/review-1", "kubeturn/review-10"
CONTINUED = f"{RUN}/root/{AGENT}"
FRESH = f"{RUN}/root/{AGENT}/t-5eed"
OTHERS = f"{OTHER}/root/{AGENT}"
COMMIT_MESSAGE = "The Agent's change"
COMMIT = (
    "echo change > change.txt && git add change.txt && "
    f'git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "{COMMIT_MESSAGE}"'
)
SCRIPT = scripts(
    {
        "Make the change": [
            {"toolCalls": [{"name": "bash", "arguments": {"command": COMMIT}}]},
            {"text": "Committed."},
        ],
        "Review it": [{"text": "Looks right."}],
        "Review the other": [{"text": "Fine."}],
        "Think for long": [{"text": "Thinking", "hold": True}],
    }
)
LONG_AFTER = 600.0
"""Far past the idle period (60 s): a settled conversation is dropped from memory."""


@pytest.fixture
def work_root() -> Iterator[Path]:
    """A work root the tools' user can reach (pytest's temp dirs are private to root),
    holding one clone."""
    root = Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
    root.chmod(0o777)
    make_clone(root / ".repos" / SLOT)
    yield root
    shutil.rmtree(root)


async def forget(
    w: World, run: str = RUN, *, branch: str | None = BRANCH, token: bool = True
) -> tuple[int, Any]:
    query = f"?branch={quote(branch, safe='')}" if branch is not None else ""
    headers = w.harness.headers() if token else {}
    async with w.harness.session.delete(
        f"{w.harness.url}/runs/{quote(run, safe='')}{query}", headers=headers
    ) as response:
        return response.status, await response.json()


async def make_worktree(w: World, run: str, branch: str) -> Path:
    body = {"run": run.partition(".")[2], "branch": branch, "slots": [SLOT]}
    async with w.harness.session.post(
        f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
    ) as response:
        assert response.status == 200, await response.text()
        return Path((await response.json())["worktrees"][SLOT]["path"])


async def history_status(client: HarnessClient, iid: str) -> int:
    async with client.session.get(
        agent_url(client.url, AGENT, iid) + "?view=history", headers=client.headers()
    ) as response:
        return response.status


def in_process(w: World) -> Harness:
    assert w.harness.harness is not None
    return w.harness.harness


def log_dir(w: World, iid: str) -> Path:
    return w.harness.data_dir / "conversations" / conversation_id(AGENT, iid)


def listed(work_root: Path) -> list[str]:
    """The Runs' worktrees of the slot that are there."""
    return sorted(str(path) for path in (work_root / SLOT).iterdir())


class TwoRuns:
    """Both Runs' worktrees and conversations, the first Run's Agent's commit made."""

    def __init__(self, w: World, work_root: Path, clock: SteppedClock) -> None:
        self.w, self.work_root, self.clock = w, work_root, clock
        self.tree = self.other_tree = Path()

    async def make(self) -> TwoRuns:
        w = self.w
        self.tree = await make_worktree(w, RUN, BRANCH)
        self.other_tree = await make_worktree(w, OTHER, OTHER_BRANCH)
        sid = await w.harness.admit(CONTINUED, "Make the change", cwd=str(self.tree))
        assert (await w.harness.settlement(CONTINUED, sid))["outcome"] == "completed"
        self.clock.advance(LONG_AFTER)
        assert in_process(w).evict_idle() == 1  # the continued one leaves memory
        for iid, prompt, cwd in (
            (FRESH, "Review it", self.tree),
            (OTHERS, "Review the other", self.other_tree),
        ):
            sid = await w.harness.admit(iid, prompt, cwd=str(cwd))
            assert (await w.harness.settlement(iid, sid))["outcome"] == "completed"
        return self


Make = Callable[[], Awaitable[TwoRuns]]


@pytest.fixture
def two_runs(world: StartWorld, work_root: Path) -> Make:
    async def make() -> TwoRuns:
        clock = SteppedClock()
        w = await world(SCRIPT, orchestrated=False, work_root=work_root, clock=clock)
        return await TwoRuns(w, work_root, clock).make()

    return make


async def test_without_the_token_nothing_is_removed(two_runs: Make) -> None:
    runs = await two_runs()

    status, answer = await forget(runs.w, token=False)

    assert (status, answer["error"]) == (401, "unauthorized")
    assert (runs.tree / "change.txt").is_file()
    assert await history_status(runs.w.harness, CONTINUED) == 200
    assert await history_status(runs.w.harness, FRESH) == 200


async def test_the_runs_worktree_goes_and_its_branch_stays_with_the_agents_commit(
    two_runs: Make,
) -> None:
    runs = await two_runs()

    status, answer = await forget(runs.w)

    assert status == 200
    assert answer == {
        "run": RUN,
        "worktrees": {SLOT: {"path": str(runs.tree), "branch": BRANCH}},
        "conversations": 2,
    }
    assert not runs.tree.exists()
    clone = runs.work_root / ".repos" / SLOT
    assert listed(runs.work_root) == [str(runs.other_tree)]
    assert git_lines(clone, "log", "-1", "--format=%s", BRANCH) == [COMMIT_MESSAGE]
    assert git_lines(clone, "show", f"{BRANCH}:change.txt") == ["change"]


async def test_the_runs_conversations_are_forgotten_for_good(two_runs: Make) -> None:
    runs = await two_runs()
    w = runs.w

    status, answer = await forget(w)

    assert (status, answer["conversations"]) == (200, 2)
    for iid in (CONTINUED, FRESH):
        assert await history_status(w.harness, iid) == 404
        assert not log_dir(w, iid).exists()
    await in_process(w).close()
    cleanups: list[Callable[[], Awaitable[Any]]] = []
    try:
        harness, url = await start_harness(
            in_process(w).settings, cleanups, toolbox=in_process(w).toolbox.socket, clock=runs.clock
        )
        again = HarnessClient(
            url, w.harness.session, harness, w.harness.data_dir, w.harness.workdir
        )
        for iid in (CONTINUED, FRESH):
            assert await history_status(again, iid) == 404
        assert await history_status(again, OTHERS) == 200
    finally:
        for cleanup in reversed(cleanups):
            await cleanup()


async def test_another_runs_worktree_and_conversation_are_left_alone(two_runs: Make) -> None:
    runs = await two_runs()
    w = runs.w
    before = await w.harness.history(OTHERS)

    assert (await forget(w))[0] == 200

    assert await w.harness.history(OTHERS) == before
    assert log_dir(w, OTHERS).is_dir()
    assert (runs.other_tree / "README.md").is_file()
    assert git_lines(runs.other_tree, "branch", "--show-current") == [OTHER_BRANCH]


async def test_a_running_submission_is_refused_409_then_forgotten_once_swept(
    two_runs: Make,
) -> None:
    runs = await two_runs()
    w = runs.w
    running = await w.harness.admit(FRESH, "Think for long", cwd=str(runs.tree))
    await w.model.wait_requests(1, held=True)

    status, answer = await forget(w)

    assert (status, answer["field"]) == (409, "run")
    assert FRESH in answer["message"]
    assert running in answer["message"]
    assert (runs.tree / "change.txt").is_file()
    assert await history_status(w.harness, CONTINUED) == 200
    assert log_dir(w, CONTINUED).is_dir()

    assert (await w.harness.abort(FRESH))["aborted"] is True
    assert (await w.harness.settlement(FRESH, running))["outcome"] == "aborted"
    status, answer = await forget(w)
    assert (status, answer["conversations"]) == (200, 2)
    assert not runs.tree.exists()
    assert await history_status(w.harness, FRESH) == 404


async def test_asked_again_it_answers_200_having_nothing_to_remove(two_runs: Make) -> None:
    runs = await two_runs()

    first, second = await forget(runs.w), await forget(runs.w)

    assert first[0] == 200
    assert second == (200, {"run": RUN, "worktrees": {}, "conversations": 0})
    assert listed(runs.work_root) == [str(runs.other_tree)]


@pytest.mark.parametrize(
    ("run", "branch", "field"),
    [("default/review-1", BRANCH, "run"), (RUN, None, "branch")],
    ids=["a slash in the run", "no branch"],
)
async def test_a_bad_run_or_branch_is_refused_naming_it(
    world: StartWorld, work_root: Path, run: str, branch: str | None, field: str
) -> None:
    w = await world(SCRIPT, orchestrated=False, work_root=work_root)

    status, answer = await forget(w, run, branch=branch)

    assert (status, answer["field"]) == (400, field)


async def test_several_calls_at_once_remove_each_thing_once(two_runs: Make) -> None:
    runs = await two_runs()

    answers = await asyncio.gather(*(forget(runs.w) for _ in range(3)))

    assert [status for status, _ in answers] == [200] * 3
    assert sorted(len(answer["worktrees"]) for _, answer in answers) == [0, 0, 1]
    assert sum(answer["conversations"] for _, answer in answers) == 2
    assert not runs.tree.exists()


async def test_openapi_documents_the_route(world: StartWorld) -> None:
    w = await world(SCRIPT, orchestrated=False)
    async with w.harness.session.get(
        f"{w.harness.url}/openapi.json", headers=w.harness.headers()
    ) as response:
        document = await response.json()

    route = document["paths"]["/runs/{run}"]["delete"]
    assert [(p["name"], p["in"]) for p in route["parameters"]] == [
        ("run", "path"),
        ("branch", "query"),
    ]
    answer = route["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert answer.endswith("/RunForgotten")
    assert set(route["responses"]) == {"200", "400", "401", "409", "503"}


async def make_child(w: World, branch: str, base: str) -> tuple[int, Any]:
    body = {"run": "review-1", "branch": branch, "slots": [SLOT], "base": base}
    async with w.harness.session.post(
        f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
    ) as response:
        return response.status, await response.json()


async def test_a_childs_worktree_starts_from_the_runs_and_goes_with_the_run(
    two_runs: Make,
) -> None:
    """A fan-out child's worktree (ADR 0113) is made from the Run's branch's commit, and
    forgetting the Run removes it too, its branch kept in the clone; the other Run's
    worktree, whose name extends the first's, stays."""
    runs = await two_runs()
    child = f"{BRANCH}_fix.a"

    status, answer = await make_child(runs.w, child, BRANCH)

    assert status == 200, answer
    tree = Path(answer["worktrees"][SLOT]["path"])
    assert tree == runs.work_root / SLOT / "kubeturn-review-1_fix.a"
    assert git_lines(tree, "rev-parse", "--abbrev-ref", "HEAD") == [child]
    assert git_lines(tree, "log", "-1", "--format=%s") == [COMMIT_MESSAGE]
    assert (tree / "change.txt").is_file()
    assert git_lines(tree, "for-each-ref", "--format=%(refname)", "refs/kubeturn") == []
    assert await make_child(runs.w, child, BRANCH) == (status, answer)  # found, not made

    status, forgot = await forget(runs.w)

    assert status == 200
    assert forgot["worktrees"] == {SLOT: {"path": str(runs.tree), "branch": BRANCH}}
    assert listed(runs.work_root) == [str(runs.other_tree)]
    clone = runs.work_root / ".repos" / SLOT
    assert git_lines(clone, "log", "-1", "--format=%s", child) == [COMMIT_MESSAGE]


async def test_a_child_of_a_run_without_a_worktree_is_refused(two_runs: Make) -> None:
    runs = await two_runs()

    status, answer = await make_child(runs.w, "kubeturn/gone_fix.a", "kubeturn/gone")

    assert status >= 400, answer
    assert (answer["field"], answer["message"]) == (
        "base",
        "no worktree of 'target' on 'kubeturn/gone'",
    )
    assert listed(runs.work_root) == sorted([str(runs.tree), str(runs.other_tree)])


async def test_a_worktree_on_a_branch_that_misnames_its_owner_is_refused(
    two_runs: Make,
) -> None:
    """A child's branch not begun by its Run's whole branch and ``_`` (as a long-named
    Run's was once cut), or a Run's holding ``_``, would read as another Run's child."""
    runs = await two_runs()
    cut = BRANCH[:-2] + "_fix.a"

    status, answer = await make_child(runs.w, cut, BRANCH)

    assert (status, answer["field"]) == (400, "branch"), answer
    body = {"run": "review-1", "branch": f"{BRANCH}_fix.a", "slots": [SLOT]}
    async with runs.w.harness.session.post(
        f"{runs.w.harness.url}/worktrees", json=body, headers=runs.w.harness.headers()
    ) as response:
        assert (response.status, (await response.json())["field"]) == (400, "branch")
    assert listed(runs.work_root) == sorted([str(runs.tree), str(runs.other_tree)])
