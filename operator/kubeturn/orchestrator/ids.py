"""Instance IDs, the address of an Agent's conversation on its Harness, and Turn ids.

``continue: true`` gives the structural id ``<namespace>.<run>/root/<agent>`` (plus
``/<epoch>`` once a fault has burnt the conversation): every state that continues the
slot lands on one conversation. Otherwise each Turn gets a fresh id. ``root`` names the
Run's Machine; a fan-out child's states add the child's root (``fix[pkg-a]``, its item's
key in it), so each child has its own conversations.

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


def structural(namespace: str, run: str, agent: str, epoch: int, machine: str = "") -> InstanceId:
    """The conversation of ``agent`` in the Machine instance ``machine`` (the Run's own,
    ``""``, or a fan-out child's root, ``fix[pkg-a]``, whose key is in the id)."""
    base = f"{_root(namespace, run, machine)}/{agent}"
    return InstanceId(f"{base}/{epoch}" if epoch else base)


def fresh(namespace: str, run: str, agent: str, suffix: str, machine: str = "") -> InstanceId:
    return InstanceId(f"{_root(namespace, run, machine)}/{agent}/t-{suffix}")


def conversation(machine: str, agent: str) -> str:
    """What a continued conversation's epoch and notices are kept by: the agent slot in
    the Run's own Machine, ``<child root>/<slot>`` in a fan-out child."""
    return f"{machine}/{agent}" if machine else agent


def _root(namespace: str, run: str, machine: str) -> str:
    return f"{namespace}.{run}/root" + (f"/{machine}" if machine else "")


def turn(seq: int) -> TurnId:
    """The id of the Run's ``seq``-th Turn."""
    return TurnId(f"t{seq}")


def turn_seq(turn_id: str) -> int:
    """The number of a Turn id made by ``turn``; ``ValueError`` for any other text."""
    if not turn_id.startswith("t"):
        raise ValueError(f"not a Turn id: {turn_id!r}")
    return int(turn_id[1:])
