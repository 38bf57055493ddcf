"""What a Run's daemon does with its spec and its status, without kopf or an API server.

Cases:
- ``Generation``: a generation other than the one read wakes the daemon, the one read
  (a status write) does not, nor one seen before it was read; the wait ends when the
  daemon is to stop;
- ``RunActor.send``: the spec's new signals and its cancel are decided together and saved
  once;
- ``StatusStore``: a save that changes nothing sends nothing; a store made anew (a
  restart) writes its first save; ``Ready`` keeps its ``lastTransitionTime`` until it
  flips;
- ``PhaseCounts``: a Run counts under one phase at a time, moves on a change, and leaves
  its count when deleted; the gauge shows the counts, every phase once the first Run
  counts.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import FlagSetter
from prometheus_client import CollectorRegistry, Gauge

from kubeturn.k8s.generations import Generation
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import Kind
from kubeturn.k8s.metrics import PhaseCounts
from kubeturn.k8s.runs import StatusStore
from kubeturn.orchestrator.actor import RunActor, Signal
from tests.unit.cores import new_core
from tests.unit.ports import Never


def _stopper() -> tuple[FlagSetter[kopf.DaemonStoppingReason], kopf.DaemonStopped]:
    setter: FlagSetter[kopf.DaemonStoppingReason] = FlagSetter()
    return setter, setter.async_waiter


async def _woken(generation: Generation, stopped: kopf.DaemonStopped) -> bool:
    waiting = asyncio.ensure_future(generation.changed(stopped))
    await asyncio.sleep(0.01)
    woken = waiting.done()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    return woken


@pytest.mark.looptime
async def test_only_a_generation_not_read_wakes_the_daemon() -> None:
    _, stopped = _stopper()
    generation = Generation()
    generation.seen(3)  # seen before the daemon read it: the live body has it
    generation.reading(3)
    generation.seen(3)  # a status write
    assert not await _woken(generation, stopped)
    generation.seen(4)
    assert await _woken(generation, stopped)
    assert not generation.newer.is_set()


@pytest.mark.looptime
async def test_the_wait_ends_when_the_daemon_is_to_stop() -> None:
    setter, stopped = _stopper()
    generation = Generation()
    generation.reading(1)
    setter.set(kopf.DaemonStoppingReason.RESOURCE_DELETED)
    assert await _woken(generation, stopped)


class Saves(Never):
    """Ports that never answer, and a store that records each save."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[dict[str, Any]] = []

    async def save(self, snapshot: dict[str, Any]) -> None:
        self.saved.append(snapshot)


async def test_new_signals_and_a_cancel_are_saved_once() -> None:
    ports = Saves()
    core = new_core("gate")
    actor = RunActor(core, turns=ports, execs=ports, store=ports, clock=lambda: 1.0)
    await actor.start()
    await actor.send([Signal("approve", {}, "early"), Signal("finish", {}, "f1")], cancel=True)
    assert len(ports.saved) == 2  # the start's and the three inputs'
    assert (ports.saved[1]["signals"], ports.saved[1]["cancelled"]) == (["early", "f1"], True)
    await actor.close()


class Patches:
    """The Kube facade's status patches, recorded (the API server is out of this test)."""

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []

    async def patch(
        self, kind: Kind, namespace: str, name: str, body: dict[str, Any], *, status: bool = False
    ) -> dict[str, Any]:
        assert (kind.plural, namespace, name, status) == ("runs", "default", "gate", True)
        self.made.append(body)
        return body


class Shell:
    kube: Patches
    phases: PhaseCounts

    def __init__(self) -> None:
        self.kube = Patches()
        self.phases = PhaseCounts(Gauge("runs", "", ["phase"], registry=CollectorRegistry()))

    def run_phase(self, key: str, phase: str) -> None:
        self.phases.put(key, phase)


def store(shell: Shell, core: Any, conditions: list[dict[str, Any]] | None = None) -> StatusStore:
    hub = cast(Hub, shell)
    return StatusStore(hub, "default", "gate", core, lambda: 1, conditions or [])


async def test_a_save_that_changes_nothing_sends_nothing() -> None:
    shell = Shell()
    core = new_core("gate")
    core.start(0.0)
    saving = store(shell, core)
    await saving.save(core.snapshot())
    await saving.save(core.snapshot())
    assert len(shell.kube.made) == 1
    core.signal("finish", {}, 1.0, signal_id="f1")
    await saving.save(core.snapshot())
    await saving.save(core.snapshot())
    assert len(shell.kube.made) == 2
    (first,) = shell.kube.made[0]["status"]["conditions"]
    (second,) = shell.kube.made[1]["status"]["conditions"]
    assert second["lastTransitionTime"] == first["lastTransitionTime"]  # still Ready=True
    assert shell.phases.counts() == {"Running": 1}
    restarted = store(shell, core, [{**second, "lastTransitionTime": "2020-01-01T00:00:00Z"}])
    await restarted.save(core.snapshot())
    assert len(shell.kube.made) == 3
    (kept,) = shell.kube.made[2]["status"]["conditions"]
    assert kept["lastTransitionTime"] == "2020-01-01T00:00:00Z"


def test_a_run_counts_under_one_phase_until_it_is_deleted() -> None:
    registry = CollectorRegistry()
    counts = PhaseCounts(Gauge("runs", "", ["phase"], registry=registry))

    def shown() -> dict[str, float]:
        return {
            sample.labels["phase"]: sample.value
            for metric in registry.collect()
            for sample in metric.samples
        }

    assert shown() == {}
    counts.put("ns/a", "Pending")
    assert shown() == {"Pending": 1, "Running": 0, "Succeeded": 0, "Failed": 0, "Cancelled": 0}
    counts.put("ns/a", "Running")
    counts.put("ns/b", "Running")
    counts.put("ns/b", "Running")
    assert counts.counts() == {"Running": 2}
    counts.put("ns/a", "Succeeded")
    counts.drop("ns/b")
    counts.drop("ns/unknown")
    assert counts.counts() == {"Succeeded": 1}
    assert shown() == {"Pending": 0, "Running": 0, "Succeeded": 1, "Failed": 0, "Cancelled": 0}
