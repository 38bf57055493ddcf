"""What the API emulator served each user: its requests, and the bytes it sent them.

Kept by :class:`~tests.operator.emulator.KubernetesApi` for every request (``api.traffic``,
by user name), so that a benchmark can say what an operator's client parsed and wrote
(bench/operator.py): its requests by verb and resource, the bytes of the answers to them,
and the events and bytes of its watches, by resource. Counting changes nothing the
emulator answers or enforces, and costs a few counter increments per request and per
watch event: the bytes counted are those the emulator serializes anyway.

A resource is its plural, with its subresource after a slash (``runs/status``); a request
on no resource (discovery, ``/version``, ``/openapi/v3``) is counted under ``""``. A verb
is Kubernetes' (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``,
``delete``, ``deletecollection``), or the HTTP method, lowercased, where there is none.
A watch's answer is its events (``events``, ``event_bytes``: every line sent, bookmarks
and errors included); every other answer is one body (``answer_bytes``), refusals too
(not the answer KMock renders for an exception the emulator itself raised: a defect).
"""

from __future__ import annotations

import collections
import dataclasses

WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
"""The verbs that write (POST, PUT, PATCH and DELETE)."""


@dataclasses.dataclass
class Traffic:
    """One user's requests and what was sent back to it."""

    requests: collections.Counter[tuple[str, str]] = dataclasses.field(
        default_factory=collections.Counter
    )
    """(verb, resource) → requests made, counted when each arrives."""
    answer_bytes: collections.Counter[tuple[str, str]] = dataclasses.field(
        default_factory=collections.Counter
    )
    """(verb, resource) → bytes of the answers' bodies (watches excepted)."""
    events: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """resource → watch events sent."""
    event_bytes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """resource → bytes of the watch events sent (each a JSON line, its newline included)."""

    def copy(self) -> Traffic:
        return Traffic(
            collections.Counter(self.requests),
            collections.Counter(self.answer_bytes),
            collections.Counter(self.events),
            collections.Counter(self.event_bytes),
        )

    def since(self, earlier: Traffic) -> Traffic:
        """What was counted after ``earlier`` (a :meth:`copy` taken then)."""
        return Traffic(
            self.requests - earlier.requests,
            self.answer_bytes - earlier.answer_bytes,
            self.events - earlier.events,
            self.event_bytes - earlier.event_bytes,
        )

    def writes(self) -> collections.Counter[tuple[str, str]]:
        """(verb, resource) → the requests that write."""
        return collections.Counter(
            {key: count for key, count in self.requests.items() if key[0] in WRITES}
        )


class Ledger(collections.defaultdict[str, Traffic]):
    """Every user's :class:`Traffic`, by user name (``system:serviceaccount:NS:NAME``)."""

    def __init__(self) -> None:
        super().__init__(Traffic)

    def requested(self, user: str, verb: str, resource: str) -> None:
        self[user].requests[verb, resource] += 1

    def answered(self, user: str, verb: str, resource: str, size: int) -> None:
        self[user].answer_bytes[verb, resource] += size

    def streamed(self, user: str, resource: str, size: int) -> None:
        traffic = self[user]
        traffic.events[resource] += 1
        traffic.event_bytes[resource] += size
