"""Finished Turns kept for kubectl (ADR 0106), without kopf or an API server.

Cases:
- ``retention.retention``: the Run's ``spec.turnRetention``, else the operator's default;
  zero (either) keeps nothing; a Run's bad duration is refused at its path, saying what
  to write;
- ``objects.agent_turn``: an AgentTurn kept carries its retention and the retain
  finalizer from its creation; one not kept carries neither;
- ``retention.release_at``: only a settled AgentTurn held by the retain finalizer alone
  is scheduled, at its ``settledAt`` plus its retention; one a person deleted (no
  ``status.exit``), or with no readable settlement or retention, is let go at once;
- ``turns.earlier``: a settled AgentTurn of an earlier Turn is not waited for;
- ``Releases``: one schedule per held AgentTurn, forgotten when it goes or is not held.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from kubeturn.api.agentturn import RETAIN_FINALIZER, SWEEP_FINALIZER
from kubeturn.api.validation import validate_run
from kubeturn.errors import DefinitionErrors
from kubeturn.k8s import objects, retention
from kubeturn.k8s.kube import Kube
from kubeturn.k8s.turns import earlier
from kubeturn.machine.load import load_run
from kubeturn.orchestrator.effects import Admit

RUN = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Run",
    "metadata": {"name": "r1", "namespace": "dev", "uid": "u-1"},
}
SETTLED_AT = "2026-01-01T10:00:00Z"
AT = datetime(2026, 1, 1, 10, 0, 0, tzinfo=UTC).timestamp()


def admit(turn: str) -> Admit:
    return Admit(
        turn=turn,
        agent="coder",
        state="implementing",
        instance_id="dev.r1/root/coder",
        prompt="Do it.",
        cwd="/work",
        continue_=True,
        model=None,
        thinking_level=None,
        instructions="Code.",
        workspace="write",
        key=f"{turn}.1",
    )


def kept(turn: str = "t1", *, keep: str | None = "1h") -> dict[str, Any]:
    """The AgentTurn of ``turn`` as it stays after its sweep: deleted, settled, its sweep
    finalizer removed by kopf."""
    body = objects.agent_turn(RUN, admit(turn), workspace="ws", menu=[], retention=keep)
    body["metadata"] |= {"deletionTimestamp": SETTLED_AT, "resourceVersion": "7"}
    body["metadata"]["finalizers"].remove(SWEEP_FINALIZER)
    body["status"] = {
        "phase": "Settled",
        "exit": {"cause": "pick", "at": SETTLED_AT},
        "settlement": {"outcome": "ended", "cause": "pick", "settledAt": SETTLED_AT},
    }
    return body


def test_a_runs_retention_else_the_operators() -> None:
    assert retention.retention("30m", 3600.0) == "30m"
    assert retention.retention(None, 3600.0) == "3600s"
    assert retention.retention(None, 1.5) == "1.5s"
    assert retention.retention("0s", 3600.0) is None
    assert retention.retention(None, 0.0) is None
    assert retention.retention("2h", 0.0) == "2h"


def test_a_bad_turn_retention_is_refused_at_its_path() -> None:
    document = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "t", "namespace": "dev"},
        "spec": {
            "agents": {"coder": {"instructions": "Code."}},
            "machine": {"initial": "a", "states": {"a": {"type": "final"}}},
            "turnRetention": "1d",
        },
    }
    with pytest.raises(DefinitionErrors) as caught:
        load_run(document)
    [error] = caught.value.errors
    assert error.path == "spec.turnRetention"
    assert "unknown unit 'd'" in error.message
    assert "for days write 24h" in error.message
    document["spec"]["turnRetention"] = "90m"
    assert validate_run(document).spec.turnRetention == "90m"


def test_a_kept_agent_turn_carries_its_retention_and_finalizer_from_its_creation() -> None:
    body = objects.agent_turn(RUN, admit("t1"), workspace="ws", menu=[], retention="1h")
    assert body["spec"]["retention"] == "1h"
    assert body["metadata"]["finalizers"] == [SWEEP_FINALIZER, RETAIN_FINALIZER]
    plain = objects.agent_turn(RUN, admit("t1"), workspace="ws", menu=[])
    assert "retention" not in plain["spec"]
    assert plain["metadata"]["finalizers"] == [SWEEP_FINALIZER]


def test_a_settled_turn_is_let_go_when_its_retention_passed() -> None:
    assert retention.release_at(kept(keep="1h")) == AT + 3600
    assert retention.release_at(kept(keep="1.5s")) == AT + 1.5


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b["status"].pop("exit"), id="deleted-by-a-person"),
        pytest.param(lambda b: b["status"].pop("settlement"), id="no-settlement"),
        pytest.param(
            lambda b: b["status"]["settlement"].update(settledAt="soon"), id="unreadable-time"
        ),
        pytest.param(lambda b: b["spec"].update(retention="1d"), id="unreadable-retention"),
    ],
)
def test_a_turn_not_ended_by_its_state_or_unreadable_is_let_go_at_once(change: Any) -> None:
    body = kept()
    change(body)
    assert retention.release_at(body) == 0.0


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda b: b["metadata"].pop("deletionTimestamp"), id="not-deleted"),
        pytest.param(
            lambda b: b["metadata"]["finalizers"].append(SWEEP_FINALIZER), id="sweep-not-done"
        ),
        pytest.param(lambda b: b["metadata"].update(finalizers=[]), id="not-held"),
    ],
)
def test_only_a_turn_held_by_the_retain_finalizer_alone_is_scheduled(change: Any) -> None:
    body = kept()
    change(body)
    assert not retention.held(body)
    assert retention.release_at(body) is None


def test_a_settled_earlier_turn_is_not_waited_for() -> None:
    live = objects.agent_turn(RUN, admit("t2"), workspace="ws", menu=[])
    assert earlier([kept("t1"), live], 3) == ["r1-t2"]
    assert earlier([kept("t1")], 2) == []


def test_one_schedule_per_held_turn() -> None:
    releases = retention.Releases(Kube.__new__(Kube))
    releases.saw(("dev", "r1-t1"), kept("t1"))
    releases.saw(("dev", "r1-t1"), kept("t1"))
    releases.saw(("dev", "r1-t2"), kept("t2"))
    assert len(releases) == 2
    releases.gone(("dev", "r1-t2"))
    live = copy.deepcopy(kept("t1"))
    live["metadata"]["finalizers"].append(SWEEP_FINALIZER)
    releases.saw(("dev", "r1-t1"), live)
    assert len(releases) == 0
