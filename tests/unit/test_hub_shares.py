"""What the operator's controllers share through the hub, each thing written by one of
them (``Hub.harness_of`` and the Workspace controller's ``harness_ready``,
``withholding_harness`` and ``harness_gone``; the Run controller's ``run_started``,
``run_phase``, ``run_gone`` and ``runs_stopping``), ADR 0100.

Cases:
- a Workspace has no Harness client until it is offered; the one offered is the one
  asked for; another Workspace's is not;
- while withheld, no caller gets it, and it is offered again after, also when the
  withholding ends in an error; one retired meanwhile is not offered again;
- a retired client is answered once (its retirer closes it);
- the hub closes the clients it holds when the operator stops;
- a Run started is found by its key and in its Workspace, with its phase counted; a Run
  gone is found nowhere and counted nowhere; ``runs_stopping`` tells the Orchestrator
  API so.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from prometheus_client import CollectorRegistry, Gauge

from kubeturn.k8s.hub import Hub
from kubeturn.k8s.metrics import PhaseCounts
from kubeturn.orchestrator.actor import RunActor
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn.settings import OperatorSettings

KEY = ("team", "shared")


def make_hub() -> Hub:
    hub = Hub(kube=None, settings=OperatorSettings())  # type: ignore[arg-type]
    hub.phases = PhaseCounts(Gauge("runs", "", ["phase"], registry=CollectorRegistry()))
    return hub


def stand_in_actor() -> RunActor:
    """An actor as the hub and the Orchestrator API's index see it: its core's Turns hold
    no Instance ID."""
    core = SimpleNamespace(on_instance=None, instance_ids=list)
    return cast(RunActor, SimpleNamespace(core=core))


async def test_a_client_offered_is_the_one_asked_for() -> None:
    hub = make_hub()
    assert hub.harness_of(*KEY) is None
    client = HarnessClient("http://127.0.0.1:1", "token")
    hub.harness_ready(KEY, client)
    assert hub.harness_of(*KEY) is client
    assert hub.harness_of("team", "other") is None
    await hub.close()


async def test_a_withheld_client_is_offered_again_after() -> None:
    hub = make_hub()
    client = HarnessClient("http://127.0.0.1:1", "token")
    hub.harness_ready(KEY, client)
    with hub.withholding_harness(KEY):
        assert hub.harness_of(*KEY) is None
    assert hub.harness_of(*KEY) is client
    with pytest.raises(RuntimeError), hub.withholding_harness(KEY):
        raise RuntimeError("the second look failed")
    assert hub.harness_of(*KEY) is client
    await hub.close()


async def test_a_client_retired_while_withheld_is_not_offered_again() -> None:
    hub = make_hub()
    client = HarnessClient("http://127.0.0.1:1", "token")
    hub.harness_ready(KEY, client)
    with hub.withholding_harness(KEY):
        assert hub.harness_gone(KEY) is client
    assert hub.harness_of(*KEY) is None
    assert hub.harness_gone(KEY) is None
    await client.close()


async def test_the_hub_closes_the_clients_it_holds() -> None:
    hub = make_hub()
    client = HarnessClient("http://127.0.0.1:1", "token")
    hub.harness_ready(KEY, client)
    await hub.close()
    assert hub.harness_of(*KEY) is None
    assert client._session.closed


def test_a_run_started_is_found_and_counted_until_it_is_gone() -> None:
    hub = make_hub()
    actor, other = stand_in_actor(), stand_in_actor()
    hub.run_started("team/a", actor, "team/shared")
    hub.run_started("team/b", other, "team/elsewhere")
    hub.run_phase("team/a", "Running")
    assert hub.actor_of("team/a") is actor
    assert hub.runs_in("team/shared") == [("team/a", actor)]
    assert hub.phases.counts() == {"Running": 1}
    hub.run_gone("team/a")
    assert hub.actor_of("team/a") is None
    assert hub.runs_in("team/shared") == []
    assert hub.phases.counts() == {}
    assert hub.actor_of("team/b") is other
    assert not hub.registry.stopping
    hub.runs_stopping()
    assert hub.registry.stopping
