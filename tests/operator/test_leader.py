"""One active operator replica by a Lease (``kubeturn.k8s.leader``), against the emulator.

Electors, one round at a time on a clock the test advances (the Lease is real, in the
emulator, written through the operator's Kube facade):
- the first candidate creates the Lease and leads (holder, duration, times, 0 transitions);
- the leader renews: renewTime moves, acquireTime and transitions stay;
- a standby waits while the Lease is renewed, however long that goes on;
- a standby takes a Lease whose holder stopped renewing, once the lease duration has
  passed on the standby's own clock since it saw the Lease change (not earlier); the
  former leader's next write conflicts and it learns it lost;
- a released Lease (holder cleared) is taken at once;
- two standbys racing for one expired Lease: exactly one wins, one transition;
- a release by a replica that no longer holds the Lease writes nothing; one that meets a
  renewal of its own landing first (a conflict) releases over the version it made.

The loops, on the real clock with short timings:
- ``acquire`` returns once the leader releases;
- ``keep`` raises ``LeadershipLost`` when another replica takes the Lease, and when the
  API refuses every renewal past the renew deadline.

Timings and flags: an election whose renew deadline is not below the lease duration, or
not above 1.2 retry periods, is refused; identities differ per process; ``kubeturn
operator --lease`` refuses to start without the operator's namespace or with such
timings, with one line on stderr.

The electors run as the chart's ServiceAccount (the Lease is the chart's, in the release's
namespace). Two in-process operators (``operator.run``, each in a thread with its own loop,
as in its own pod), sharing one Lease, in both of the chart's RBAC shapes for the first:
- only the leader answers ``/readyz`` 200 and serves the Orchestrator API; the standby
  answers ``/healthz``, ``/readyz`` 503 ``standby``, and does not listen on its API port;
  stopping the leader releases the Lease and the standby leads and serves;
- a leader whose Lease another replica takes stops and fails with ``LeadershipLost``,
  and leaves that replica's Lease alone; a standby that is stopped ends cleanly without
  touching the Lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import kmock
import pytest

from kubeturn import cli
from kubeturn.errors import LeadershipLost
from kubeturn.k8s import leader, operator
from kubeturn.k8s.kube import Kube
from tests.operator import emulator
from tests.operator.installation import IN_BOTH_SHAPES, RELEASE, RELEASE_NAMESPACE, Installation
from tests.operator.operator_support import START_S, eventually, settings

NAMESPACE, LEASE = RELEASE_NAMESPACE, RELEASE
"""Where the operator keeps its Lease, and its name, as the chart names them (the Lease is
the release's full name, which is the release's name here)."""
LEASES = "coordination.k8s.io/v1/leases"

Body = dict[str, Any]


class Clock:
    """A clock that moves only when told: both the monotonic and the wall clock."""

    EPOCH = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)

    def __init__(self) -> None:
        self.seconds = 1000.0

    def monotonic(self) -> float:
        return self.seconds

    def now(self) -> datetime.datetime:
        return self.EPOCH + datetime.timedelta(seconds=self.seconds)

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


@pytest.fixture
def kube(installation: Installation) -> Iterator[Kube]:
    """The operator's Kube facade, as the chart's ServiceAccount: only the chart's Lease."""
    assert (installation.operator_namespace, installation.lease) == (NAMESPACE, LEASE)
    client = operator.kube_client(str(installation.kubeconfig))
    yield Kube(client)
    client.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def elector(
    kube: Kube, name: str, clock: leader.Clock | None = None, **timing: Any
) -> leader.LeaderElector:
    election = leader.Election(namespace=NAMESPACE, name=LEASE, identity=name, **timing)
    return leader.LeaderElector(kube, election, clock)


def lease(k8s: emulator.KubernetesApi) -> Body:
    found = k8s.read_object(LEASES, NAMESPACE, LEASE)
    assert found is not None, "no Lease"
    return found


def spec(k8s: emulator.KubernetesApi) -> Body:
    return dict(lease(k8s)["spec"])


# ----------------------------------------------------------------------------- one round


async def test_the_first_candidate_creates_the_lease_and_leads(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a = elector(kube, "a", clock)
    assert not a.leading
    assert await a.try_acquire_or_renew()
    assert a.leading
    stamp = leader.micro_time(clock.now())
    assert spec(k8s) == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }


async def test_the_leader_renews(k8s: emulator.KubernetesApi, kube: Kube, clock: Clock) -> None:
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    first = lease(k8s)
    clock.advance(2)
    assert await a.try_acquire_or_renew()
    renewed = lease(k8s)
    assert renewed["spec"]["renewTime"] == leader.micro_time(clock.now())
    assert renewed["spec"]["acquireTime"] == first["spec"]["acquireTime"]
    assert renewed["spec"]["leaseTransitions"] == 0
    assert int(renewed["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


async def test_a_standby_waits_while_the_lease_is_renewed(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert await a.try_acquire_or_renew()
    for _ in range(5):  # 70 s in all, far beyond one lease duration
        assert not await b.try_acquire_or_renew()
        assert (b.leading, b.holder) == (False, "a")
        clock.advance(14)
        assert await a.try_acquire_or_renew()
    assert spec(k8s)["holderIdentity"] == "a"


async def test_a_standby_takes_a_lease_that_was_not_renewed(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert await a.try_acquire_or_renew()
    clock.advance(100)  # the Lease is old, but b has not seen it yet: b's clock starts now
    assert not await b.try_acquire_or_renew()
    clock.advance(14.9)
    assert not await b.try_acquire_or_renew()
    clock.advance(0.1)
    assert await b.try_acquire_or_renew()
    stamp = leader.micro_time(clock.now())
    assert spec(k8s) == {
        "holderIdentity": "b",
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 1,
    }
    # The former leader's renewal, written over the version it last saw, conflicts; it
    # reads the Lease and finds that it no longer leads.
    assert a.leading
    assert not await a.try_acquire_or_renew()
    assert (a.leading, a.holder) == (False, "b")
    assert spec(k8s)["holderIdentity"] == "b"


async def test_a_released_lease_is_taken_at_once(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    assert await a.release()
    assert not a.leading
    released = spec(k8s)
    assert (released["holderIdentity"], released["leaseTransitions"]) == ("", 0)
    assert await b.try_acquire_or_renew()  # no time has passed
    assert (spec(k8s)["holderIdentity"], spec(k8s)["leaseTransitions"]) == ("b", 1)
    assert not await a.release()  # not its Lease any more: nothing written
    assert spec(k8s)["holderIdentity"] == "b"


async def test_a_renewal_landing_before_the_release_does_not_stop_it(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    # A renewal of a's that was still in flight when a stopped renewing lands now.
    await write_spec(k8s, renewTime=leader.micro_time(clock.now() + datetime.timedelta(seconds=1)))
    assert await a.release()
    assert (spec(k8s)["holderIdentity"], a.leading) == ("", False)


async def test_two_standbys_racing_for_one_lease_elect_one(
    k8s: emulator.KubernetesApi, kube: Kube, clock: Clock
) -> None:
    a = elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    rivals = [elector(kube, name, clock) for name in ("b", "c")]
    for rival in rivals:
        assert not await rival.try_acquire_or_renew()
    clock.advance(15)
    won = await asyncio.gather(*(rival.try_acquire_or_renew() for rival in rivals))
    assert sorted(won) == [False, True]
    winner = rivals[won.index(True)]
    assert [rival.leading for rival in rivals] == won
    assert spec(k8s)["holderIdentity"] == winner.election.identity
    assert spec(k8s)["leaseTransitions"] == 1  # one takeover, not two


def test_timings_are_checked() -> None:
    with pytest.raises(ValueError, match="must exceed the renew deadline"):
        leader.Election(namespace="n", name="l", identity="i", renew_deadline_s=15)
    with pytest.raises(ValueError, match=r"1\.2 × the retry period"):
        leader.Election(namespace="n", name="l", identity="i", retry_period_s=9)
    assert leader.identity("kubeturn-7d9f") != leader.identity("kubeturn-7d9f")
    assert leader.identity("kubeturn-7d9f").startswith("kubeturn-7d9f_")


def test_the_operator_command_checks_its_election_flags(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBETURN_OPERATOR_NAMESPACE", raising=False)
    assert cli.main(["operator", "--lease", LEASE]) == 2
    assert capsys.readouterr().err == (
        "kubeturn: --lease needs the operator's namespace, where the Lease is: pass "
        "--operator-namespace (or set KUBETURN_OPERATOR_NAMESPACE)\n"
    )
    flags = ["--lease", LEASE, "--operator-namespace", NAMESPACE, "--renew-deadline", "20"]
    assert cli.main(["operator", *flags]) == 2
    error = capsys.readouterr().err
    assert error.startswith("kubeturn: the lease duration (15 s) must exceed the renew deadline")
    assert error.count("\n") == 1


# ----------------------------------------------------------------------------- the loops

FAST = {"lease_duration_s": 1, "renew_deadline_s": 0.5, "retry_period_s": 0.05}
"""Timings that keep the loops' tests well under a second."""
PATIENT = {"lease_duration_s": 5, "renew_deadline_s": 3, "retry_period_s": 0.05}
"""A renew deadline a busy machine cannot miss: the steal is seen at the next retry."""


@contextlib.asynccontextmanager
async def task(coroutine: Any) -> AsyncIterator[asyncio.Task[Any]]:
    """The coroutine as a task, cancelled (if still running) when the block ends."""
    running = asyncio.create_task(coroutine)
    try:
        yield running
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
            await running


async def test_acquire_returns_once_the_leader_releases(
    k8s: emulator.KubernetesApi, kube: Kube
) -> None:
    a, b = elector(kube, "a", **FAST), elector(kube, "b", **FAST)
    await a.acquire()
    async with task(b.acquire()) as acquiring:
        async with task(a.keep()):
            await eventually(lambda: b.holder == "a", "b to see a's Lease")
            assert not acquiring.done()
            assert await a.release()
        await asyncio.wait_for(acquiring, START_S)
    assert b.leading
    assert spec(k8s)["holderIdentity"] == "b"


async def test_keep_raises_when_another_replica_takes_the_lease(
    k8s: emulator.KubernetesApi, kube: Kube
) -> None:
    a = elector(kube, "a", **PATIENT)
    await a.acquire()
    async with task(a.keep()) as keeping:
        await steal(k8s, "intruder")
        with pytest.raises(LeadershipLost, match="held by intruder"):
            await asyncio.wait_for(keeping, START_S)
    assert not a.leading
    assert not await a.release()
    assert spec(k8s)["holderIdentity"] == "intruder"


async def test_keep_raises_past_the_renew_deadline(k8s: emulator.KubernetesApi, kube: Kube) -> None:
    a = elector(kube, "a", **FAST)
    await a.acquire()
    k8s["put", kmock.resource(LEASES)] << 503
    k8s["get", kmock.resource(LEASES)] << 503
    async with task(a.keep()) as keeping:
        with pytest.raises(LeadershipLost, match=r"not renewed for 0\.5 s"):
            await asyncio.wait_for(keeping, START_S)
    assert not a.leading


async def write_spec(k8s: emulator.KubernetesApi, **changes: Any) -> None:
    """Change the Lease's spec as another writer would: a PUT over the version read,
    again when the leader renewed it meanwhile (409)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(
        str(k8s.url), connector=connector, headers=k8s.admin_headers
    ) as session:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"

        async def put() -> bool:
            changed = lease(k8s)
            changed["spec"] = changed["spec"] | changes
            async with session.put(path, json=changed) as response:
                assert response.status in (200, 409), await response.text()
                return response.status == 200

        await eventually(put, f"the Lease to take {changes}")


async def steal(k8s: emulator.KubernetesApi, holder: str) -> None:
    await write_spec(k8s, holderIdentity=holder)


# ----------------------------------------------------------------------------- two operators

OPERATOR_TIMING = {"lease_duration_s": 2, "renew_deadline_s": 1.0, "retry_period_s": 0.1}
"""Short enough for a test of a few seconds, long enough for a loaded 2-core machine."""
PATIENT_TIMING = {"lease_duration_s": 60, "renew_deadline_s": 1.0, "retry_period_s": 0.1}
"""For a standby that must stay one however slow the machine: it waits a minute for an
unrenewed Lease."""


class Replica:
    """``operator.run`` with an election, in a thread with its own loop (as in its pod)."""

    def __init__(self, name: str, installation: Installation, timing: dict[str, Any]) -> None:
        self.settings = settings(installation, providers_yaml="{}\n")
        self.election = leader.Election(
            namespace=installation.operator_namespace,
            name=installation.lease,
            identity=leader.identity(name),
            **timing,
        )
        self._kubeconfig = installation.kubeconfig
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"operator {name}", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self._started.set()
            await operator.run(
                self.settings,
                kubeconfig=str(self._kubeconfig),
                election=self.election,
                stop=self._stop,
            )

        try:
            asyncio.run(main())
        except BaseException as error:  # asserted by the test
            self.error = error
        finally:
            self._started.set()

    async def start(self) -> None:
        self._thread.start()
        await asyncio.to_thread(self._started.wait, START_S)

    async def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # its loop ended already
                self._loop.call_soon_threadsafe(self._stop.set)
        await self.ended()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    async def ended(self) -> None:
        await asyncio.to_thread(self._thread.join, START_S)
        assert not self._thread.is_alive(), f"the operator did not stop within {START_S:g} s"

    def url(self, port: int, path: str) -> str:
        return f"http://{self.settings.api_host}:{port}{path}"


async def answer(session: aiohttp.ClientSession, url: str) -> tuple[int, Any] | None:
    """(status, JSON body) of a GET, or None when nothing listens there."""
    try:
        async with session.get(url) as response:
            return response.status, await response.json(content_type=None)
    except aiohttp.ClientConnectionError:
        return None


async def readiness(session: aiohttp.ClientSession, replica: Replica) -> Any:
    return await answer(session, replica.url(replica.settings.health_port, "/readyz"))


async def orchestrator(session: aiohttp.ClientSession, replica: Replica) -> Any:
    """The Orchestrator API's answer to a Harness call without a token (401 if it serves)."""
    return await answer(session, replica.url(replica.settings.api_port, "/agents/x/surface"))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


@pytest.fixture
async def replicas(installation: Installation) -> AsyncIterator[list[Replica]]:
    """Two replicas, ``a`` and ``b`` (patient), not started; stopped at the end of the test."""
    made = [
        Replica("a", installation, OPERATOR_TIMING),
        Replica("b", installation, PATIENT_TIMING),
    ]
    yield made
    for replica in made:
        if replica.running:
            await replica.stop()


@IN_BOTH_SHAPES
async def test_only_the_leader_is_ready_and_a_stopping_leader_hands_over(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession, replicas: list[Replica]
) -> None:
    a, b = replicas
    await a.start()
    ready = (200, {"status": "ready"})
    await eventually(lambda: _equals(readiness(http, a), ready), "a ready", timeout=START_S)
    await b.start()
    healthy = (200, {"status": "ok"})
    await eventually(
        lambda: _equals(answer(http, b.url(b.settings.health_port, "/healthz")), healthy),
        "b's /healthz",
        timeout=START_S,
    )
    assert await readiness(http, b) == (503, {"status": "standby"})
    assert await orchestrator(http, b) is None  # b does not listen on its API port
    status, _ = await orchestrator(http, a)
    assert status == 401
    assert spec(k8s)["holderIdentity"] == a.election.identity

    await a.stop()
    assert a.error is None
    await eventually(lambda: _equals(readiness(http, b), ready), "b ready", timeout=START_S)
    status, _ = await orchestrator(http, b)
    assert status == 401
    holders = [
        version["spec"]["holderIdentity"]
        for version in k8s.objects[LEASES, NAMESPACE, LEASE].history
        if version is not None
    ]
    # a held it (and renewed it), released it (holder cleared), and b took it.
    changes = [holder for i, holder in enumerate(holders) if holders[i - 1 : i] != [holder]]
    assert changes == [a.election.identity, "", b.election.identity]
    assert spec(k8s)["leaseTransitions"] == 1


async def test_a_leader_whose_lease_is_taken_stops_and_fails(
    k8s: emulator.KubernetesApi, http: aiohttp.ClientSession, replicas: list[Replica]
) -> None:
    a, b = replicas
    await a.start()
    ready = (200, {"status": "ready"})
    await eventually(lambda: _equals(readiness(http, a), ready), "a ready", timeout=START_S)
    await steal(k8s, "intruder")
    await a.ended()
    assert isinstance(a.error, LeadershipLost), a.error
    assert spec(k8s)["holderIdentity"] == "intruder"  # not released: it was not a's

    # A standby that is stopped ends at once, cleanly, and leaves the Lease alone.
    await b.start()
    standby = (503, {"status": "standby"})
    await eventually(lambda: _equals(readiness(http, b), standby), "b standby", timeout=START_S)
    await b.stop()
    assert b.error is None
    assert spec(k8s)["holderIdentity"] == "intruder"


async def _equals(pending: Any, expected: Any) -> bool:
    return bool(await pending == expected)
