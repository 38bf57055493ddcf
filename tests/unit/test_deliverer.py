"""``Deliverer``, the ``DeliverPort`` both shells use: the sandbox's commit, then, with
push, the ``Pusher`` given the request the seam describes; what each failure says.

Cases: without push, the commit alone (nothing pushed, no remote); with push, one
``PushRequest`` naming the bundle, the clone, the URL and the Secret, and ``pushed``; a
refused push is the delivery's error naming the branch and the URL; no pusher, or a slot
the Workspace lacks, fails saying so; the sandbox's failure is the error as it said it.
"""

from __future__ import annotations

from collections.abc import Mapping

from kubeturn.errors import DeliveryFailed
from kubeturn.orchestrator.delivery import (
    NO_PUSHER,
    Committed,
    Deliverer,
    PushRequest,
    PushResult,
    Remote,
)
from kubeturn.orchestrator.effects import StartDeliver
from kubeturn.orchestrator.invokes import DeliverResult

COMMITTED = Committed("c" * 40, True, ".deliveries/r/target.bundle", ".repos/target")
URL = "https://git.test/target.git"


def effect(push: bool) -> StartDeliver:
    return StartDeliver("s#1", "s", "target", "The work", push, "kubeturn", "k@example.invalid")


class Sandbox:
    def __init__(self, failure: str | None = None) -> None:
        self.failure = failure
        self.asked: list[tuple[str, str, str, tuple[str, str]]] = []

    async def commit(
        self, slot: str, branch: str, message: str, author: tuple[str, str]
    ) -> Committed:
        self.asked.append((slot, branch, message, author))
        if self.failure is not None:
            raise DeliveryFailed(self.failure)
        return COMMITTED


class Pusher:
    def __init__(self, result: PushResult) -> None:
        self.result = result
        self.requests: list[PushRequest] = []

    async def push(self, request: PushRequest) -> PushResult:
        self.requests.append(request)
        return self.result


def deliverer(sandbox: Sandbox, pusher: Pusher | None) -> Deliverer:
    async def remotes() -> Mapping[str, Remote]:
        return {"target": Remote(URL, "target-token")}

    return Deliverer("dev", "r", "ws", "kubeturn/r", sandbox, remotes, pusher)


async def test_without_push_only_the_commit() -> None:
    sandbox, pusher = Sandbox(), Pusher(PushResult(pushed=True))
    result = await deliverer(sandbox, pusher).deliver(effect(push=False))
    assert result == DeliverResult(branch="kubeturn/r", commit="c" * 40, changed=True)
    assert sandbox.asked == [
        ("target", "kubeturn/r", "The work", ("kubeturn", "k@example.invalid"))
    ]
    assert pusher.requests == []


async def test_with_push_one_request_as_the_seam_says() -> None:
    pusher = Pusher(PushResult(pushed=True))
    result = await deliverer(Sandbox(), pusher).deliver(effect(push=True))
    assert result == DeliverResult(
        branch="kubeturn/r", commit="c" * 40, changed=True, pushed=True, remote=URL
    )
    assert pusher.requests == [
        PushRequest(
            namespace="dev",
            run="r",
            workspace="ws",
            slot="target",
            branch="kubeturn/r",
            commit="c" * 40,
            bundle=".deliveries/r/target.bundle",
            clone=".repos/target",
            url=URL,
            secret="target-token",
        )
    ]


async def test_a_refused_push_says_what_where_and_why() -> None:
    said = f"cannot push repo slot 'target' to {URL}: not a fast-forward"
    refused = PushResult(pushed=False, error=said)
    result = await deliverer(Sandbox(), Pusher(refused)).deliver(effect(push=True))
    assert (result.pushed, result.commit, result.remote) == (False, "c" * 40, URL)
    assert result.error == said


async def test_no_pusher_or_no_slot() -> None:
    result = await deliverer(Sandbox(), None).deliver(effect(push=True))
    assert result.error == NO_PUSHER
    other = StartDeliver("s#1", "s", "other", "m", True, "kubeturn", "k@example.invalid")
    result = await deliverer(Sandbox(), Pusher(PushResult(pushed=True))).deliver(other)
    assert result.error == "the Workspace has no repo slot 'other'"


async def test_the_sandboxs_failure_is_the_error() -> None:
    result = await deliverer(Sandbox("nothing to deliver"), None).deliver(effect(push=True))
    assert result == DeliverResult(branch="kubeturn/r", error="nothing to deliver")
