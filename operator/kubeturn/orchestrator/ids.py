"""Instance IDs, the address of an Agent's conversation on its Harness, and Turn ids.

``continue: true`` gives the structural id ``<namespace>.<run>/root/<agent>`` (plus
``/<epoch>`` once a fault has burnt the conversation): every state that continues the
slot lands on one conversation. Otherwise each Turn gets a fresh id. ``root`` names the
Run's one Machine instance, so nested Machines can later add their own path segments.

A Turn's id is ``t<n>`` for the Run's n-th Turn: its AgentTurn is ``<run>-t<n>``, and
``n`` orders the Turns of one conversation (their aborts before later admissions).

Each kind of id has its type, so one is never passed for another (mypy proves it):
``TurnId`` and ``InstanceId`` here; ``SubmissionId`` and ``DeliveryId`` are the Harness
wire's, where they are sent. An id is typed where it is made or read from outside (a
URL, a resource, a snapshot), and stays typed from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NewType

TurnId = NewType("TurnId", str)
"""A Turn of a Run: ``t<n>``."""
InstanceId = NewType("InstanceId", str)
"""The address of an Agent's conversation on its Harness."""

IdSource = Callable[[], str]
"""Fresh random suffixes; injected so the core stays deterministic under test."""


def structural(namespace: str, run: str, agent: str, epoch: int) -> InstanceId:
    base = f"{namespace}.{run}/root/{agent}"
    return InstanceId(f"{base}/{epoch}" if epoch else base)


def fresh(namespace: str, run: str, agent: str, suffix: str) -> InstanceId:
    return InstanceId(f"{namespace}.{run}/root/{agent}/t-{suffix}")


def turn(seq: int) -> TurnId:
    """The id of the Run's ``seq``-th Turn."""
    return TurnId(f"t{seq}")


def turn_seq(turn_id: str) -> int:
    """The number of a Turn id made by ``turn``; ``ValueError`` for any other text."""
    if not turn_id.startswith("t"):
        raise ValueError(f"not a Turn id: {turn_id!r}")
    return int(turn_id[1:])
