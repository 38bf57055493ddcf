"""Where kopf keeps what it last handled of an object: a digest, never a copy of the spec.

kopf tells a change from a repeated event by comparing the object's *essence* (its spec,
labels and annotations) with the one it last handled, which it stores on the object
itself: by default the whole essence as JSON in the annotation
``kopf.zalando.org/last-handled-configuration``. The API server caps all annotations of an
object at 256 KiB together, and ``kubectl apply`` keeps a second copy of the spec in
``kubectl.kubernetes.io/last-applied-configuration``: a Run of a 130 KiB spec applied with
kubectl would have every patch kopf makes refused, its finalizer among them.

kubeturn asks kopf only *whether* an object changed (its handlers are on creation,
resumption and deletion, daemons and event watchers) and never *how*: no ``on.update``
or ``on.field`` handler reads a diff. So the essence is stored as its SHA-256 (77 bytes
of JSON, whatever the spec's size): equal digests are kopf's "nothing changed", and a
changed spec, label or annotation changes the digest (docs/decisions/0046). A handler
that reads ``diff``, ``old`` or ``new`` would see digests: one that needs them needs a
copy stored elsewhere first. Nothing here does IO.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, cast

import kopf

DIGEST = "sha256"
"""The essence's one key: the hex SHA-256 of the essence's canonical JSON."""
AS_IS_KINDS = frozenset({"AgentTurn", "Run"})
"""Kinds kubeturn handles only at their deletion, by daemons and as events, never at their
creation, resumption or update: kopf is told that every version of one was handled as it
is, so it writes no record of it (one patch per object fewer, which raced the operator's
first status write to it) and builds no essence of it at each event."""
AS_IS: dict[str, str] = {DIGEST: "as-is"}
"""The essence of every version of an as-is kind: equal to itself, so never a change."""


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base, holding ``{"sha256": …}`` of the essence.

    The annotation keeps kopf's name (``kopf.zalando.org/last-handled-configuration``), so
    an object an earlier operator handled has its copy replaced by a digest at its next
    change, not kept beside it; that first look sees a change where there was none, which
    costs one patch and runs no handler (none handles an update). ``as_is``: the kinds
    handled as they are (kubeturn's, by default).
    """

    def __init__(self, *, as_is: frozenset[str] = AS_IS_KINDS) -> None:
        super().__init__()
        self._as_is = as_is

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        if body.get("kind") in self._as_is:
            return cast(kopf.BodyEssence, dict(AS_IS))
        return super().fetch(body=body)

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[Any] | None = None,
    ) -> kopf.BodyEssence:
        if body.get("kind") in self._as_is:
            return cast(kopf.BodyEssence, dict(AS_IS))
        essence = super().build(body=body, extra_fields=extra_fields)
        return cast(kopf.BodyEssence, {DIGEST: digest(essence)})


def digest(essence: Any) -> str:
    """The hex SHA-256 of ``essence`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(essence, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
