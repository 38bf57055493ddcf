"""The order of one conversation's Turns on a cluster: the ordered abort
(docs/turn-semantics.md §5) waits for the AgentTurns of earlier Turns, by Turn number.

Cases:
- ``ids``: Turn ids are ``t<n>``, and their number reads back; other text is refused;
- ``objects.agent_turn`` labels the AgentTurn with its conversation and its Turn number;
- ``objects.turn_seq``: the label, else ``spec.turn`` (an AgentTurn made before the
  label), else none;
- ``turns.earlier``: Turns created within one second (equal ``creationTimestamp``) are
  ordered by number: the later one waits for the earlier, never the reverse, and no
  Turn waits for itself; an AgentTurn without a readable number counts as earlier.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.k8s import objects
from kubeturn.k8s.turns import earlier
from kubeturn.orchestrator import ids
from kubeturn.orchestrator.effects import Admit

RUN = {
    "apiVersion": "kubeturn.dev/v1alpha1",
    "kind": "Run",
    "metadata": {"name": "r1", "namespace": "dev", "uid": "u-1"},
}
IID = "dev.r1/root/coder"
SAME_SECOND = "2025-01-01T00:00:00Z"


def admit(turn: str) -> Admit:
    return Admit(
        turn=turn,
        agent="coder",
        state="implementing",
        instance_id=IID,
        prompt="Do it.",
        cwd="/work",
        continue_=True,
        model=None,
        thinking_level=None,
        instructions="Code.",
        workspace="write",
        key=f"{turn}.1",
    )


def agent_turn(turn: str) -> dict[str, Any]:
    """The AgentTurn of ``turn`` as the API server answers it: created in the same second."""
    body = objects.agent_turn(RUN, admit(turn), workspace="ws", menu=[])
    body["metadata"]["creationTimestamp"] = SAME_SECOND
    return body


def test_turn_ids_carry_their_number() -> None:
    assert [ids.turn(n) for n in (1, 2, 10)] == ["t1", "t2", "t10"]
    assert ids.turn_seq("t10") == 10
    with pytest.raises(ValueError, match="not a Turn id: 'd3-n1'"):
        ids.turn_seq("d3-n1")
    with pytest.raises(ValueError, match="invalid literal"):
        ids.turn_seq("tx")


def test_an_agent_turn_is_labelled_with_its_conversation_and_number() -> None:
    labels = agent_turn("t12")["metadata"]["labels"]
    assert labels[objects.INSTANCE_LABEL] == objects.instance_label(IID)
    assert labels[objects.TURN_SEQ_LABEL] == "12"


def test_the_number_is_read_from_the_label_then_spec_turn() -> None:
    body = agent_turn("t4")
    assert objects.turn_seq(body) == 4
    del body["metadata"]["labels"][objects.TURN_SEQ_LABEL]
    assert objects.turn_seq(body) == 4
    body["spec"]["turn"] = "first"
    assert objects.turn_seq(body) is None


def test_turns_created_in_one_second_wait_by_number() -> None:
    listed = [agent_turn("t3"), agent_turn("t2"), agent_turn("t4")]
    assert earlier(listed, 2) == []
    assert earlier(listed, 3) == ["r1-t2"]
    assert earlier(listed, 4) == ["r1-t3", "r1-t2"]


def test_an_agent_turn_without_a_number_counts_as_earlier() -> None:
    unnumbered = agent_turn("t9")
    del unnumbered["metadata"]["labels"][objects.TURN_SEQ_LABEL]
    del unnumbered["spec"]["turn"]
    assert earlier([unnumbered, agent_turn("t2")], 2) == ["r1-t9"]
