"""Delivering a local Run's work: the runner's ``Pusher``, and where the summary says the
work is (ADR 0064).

The Harness commits the Run's worktree and leaves a bundle of its branch in the workdir
(``.deliveries``), as on a cluster. The push is made by the person's own git, so their
credential helpers and ssh agent work as for any push of theirs, from a repository of its
own in a temporary directory: its objects borrow the slot's clone (``alternates``), it
fetches the bundle's branch, and it holds nothing an Agent wrote but that data, so no
hook or setting of the Agents' runs where the credentials are. A slot whose ``url`` is a
path on this machine (``url: .``) gets the branch fetched back into that repository as
``kubeturn/<run>``; any other is pushed to. Neither is ever forced: a branch that moved
there is refused, in one line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from kubeturn.api.status import DeliveryRecord
from kubeturn.local.repos import is_remote, run_git
from kubeturn.orchestrator.delivery import PushRequest, PushResult, refused

OWN = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
"""On the pushing repository (made here, so it holds no hook anyway): nothing runs."""


class LocalPusher:
    """Pushes a delivered branch from the workdir ``work_root`` with the person's git."""

    def __init__(self, work_root: Path) -> None:
        self._work_root = work_root

    async def push(self, request: PushRequest) -> PushResult:
        clone = self._work_root / request.clone
        objects = clone / ".git" / "objects" if (clone / ".git").is_dir() else clone / "objects"
        with tempfile.TemporaryDirectory(prefix="kubeturn-push-") as temporary:
            own = Path(temporary) / "push.git"
            code, said = await run_git("init", "--quiet", "--bare", str(own))
            if code != 0:
                why = f"cannot make a repository to push from: {_last(said)}"
                return refused(request, why)
            (own / "objects" / "info" / "alternates").write_text(f"{objects}\n")
            ref = f"refs/heads/{request.branch}"
            bundle = str(self._work_root / request.bundle)
            code, said = await run_git(
                *OWN, "-C", str(own), "fetch", "--quiet", bundle, f"+{ref}:{ref}"
            )
            if code != 0:
                why = f"the delivered bundle cannot be read: {_last(said)}"
                return refused(request, why)
            code, said = await run_git("-C", str(own), "rev-parse", "--verify", "--quiet", ref)
            if code != 0 or said != request.commit:
                holds = said or "nothing"
                why = f"the bundle holds {request.branch} at {holds}, not at {request.commit}"
                return refused(request, why)
            if is_remote(request.url):
                code, said = await run_git(
                    *OWN, "-C", str(own), "push", "--quiet", "--porcelain", request.url,
                    f"{request.commit}:{ref}",
                )  # fmt: skip
            else:
                # Fetched back from the person's repository: it only gains the branch.
                code, said = await run_git(
                    "-C", request.url, "fetch", "--no-tags", "--no-recurse-submodules",
                    str(own), f"{ref}:{ref}",
                )  # fmt: skip
        if code != 0:
            return refused(request, _why(request, said))
        return PushResult(pushed=True)


def _why(request: PushRequest, said: str) -> str:
    """A refused push in one line: what git said last, or what a rejection means."""
    if "non-fast-forward" in said or "[rejected]" in said or "fetch first" in said:
        return (
            f"{request.branch} there has moved on from what was delivered (not a fast-forward); "
            "kubeturn never forces it: merge it there, or remove that branch"
        )
    return _last(said) or "git did not say why"


def work_lines(
    branch: str,
    worktrees: Mapping[str, str],
    records: Sequence[DeliveryRecord],
) -> list[str]:
    """Where each repo slot's work is: the branch in the repository it was pushed to, or
    its worktree when it was not."""
    lines = []
    for slot, tree in sorted(worktrees.items()):
        pushed = next((r for r in reversed(records) if r.slot == slot and r.pushed), None)
        if pushed is not None and pushed.commit is not None:
            lines.append(f"work: branch {branch} in {pushed.remote} (commit {pushed.commit[:7]})")
        else:
            lines.append(f"work: {tree} (branch {branch}, not delivered)")
    return lines


def _last(said: str) -> str:
    """The last line git said that says something, without its ``fatal:``."""
    lines = [line.strip() for line in said.splitlines()]
    kept = [line for line in lines if line and not line.startswith(("To ", "Done"))]
    last = kept[-1] if kept else ""
    return last.removeprefix("fatal: ").removeprefix("error: ")
