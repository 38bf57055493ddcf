"""How objects end: kube-apiserver's deletion
rules and kube-controller-manager's garbage collector, for :mod:`tests.operator.emulator`.

Deletion (``DELETE`` and the ``DeleteOptions`` it carries, in its body or its query):

- a Pod is deleted *gracefully*: it gets ``deletionTimestamp`` (now plus the grace period)
  and ``deletionGracePeriodSeconds``, and stays until a delete with a grace period of 0
  (the kubelet's, once it has stopped the Pod's containers) removes it. The grace period
  is the request's ``gracePeriodSeconds``, else the Pod's
  ``spec.terminationGracePeriodSeconds``, else 30 s (the API server's default); it is 0,
  so the Pod goes at once, for a Pod no node was given (no ``spec.nodeName``) and for one
  that ended (``Failed``, ``Succeeded``). A later delete may only shorten it, counted from
  the first request; a negative grace period counts as 1 s;
- every other kind is deleted at once, unless it has finalizers: then it gets
  ``deletionTimestamp`` (now) and ``deletionGracePeriodSeconds`` 0 and goes when a write
  removes the last one; starting a deletion bumps ``generation`` where the object has
  one;
- ``propagationPolicy`` (or the older ``orphanDependents``) decides the garbage
  collector's finalizers: ``Foreground`` adds ``foregroundDeletion``, ``Orphan`` adds
  ``orphan``, ``Background`` (the default) neither; without either option the object's
  own such finalizer decides; the answer is 202 rather than 200 only when
  ``orphanDependents: false`` left the object in place.

The garbage collector (:class:`GarbageCollector`) works in the background, from the
changes the emulator publishes, through the API's own writes (so a Pod it deletes is
deleted gracefully, and dependents' finalizers hold them):

- an object none of whose owners exists (by kind, name and uid, in its namespace) is
  deleted, with the policy its own finalizers name (Background by default); one that
  has an owner left loses only its references to the owners that are gone;
- an owner being deleted with ``foregroundDeletion`` has its dependents deleted (those
  with dependents of their own in the foreground too) and keeps the finalizer until no
  dependent whose reference sets ``blockOwnerDeletion`` is left;
- an owner being deleted with ``orphan`` has its references removed from every
  dependent, and then the finalizer.

Not emulated: namespace deletion (its contents are not deleted with it), the garbage
collector's cycle breaking between foreground deletions, owner references to kinds the
emulator does not serve (never resolved, so never collected: a real collector retries
them), the PVC and PV protection finalizers, and the Status body some kinds answer a
delete with (every kind answers with the object). The rules are pure functions; only
:class:`GarbageCollector` keeps state (an index of owners), and it reaches the objects
only through :class:`Cluster`. This module must not import kubeturn.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Protocol

from tests.operator import apimachinery

Body = dict[str, Any]
Key = Hashable
"""How the emulator names a stored object (its resource, namespace and name)."""

DEFAULT_GRACE_S = 30
"""A Pod's ``terminationGracePeriodSeconds`` when its spec gives none (the API server
defaults it to 30 s)."""
ORPHAN = "orphan"
"""The finalizer that makes the garbage collector orphan an owner's dependents."""
FOREGROUND = "foregroundDeletion"
"""The finalizer that holds an owner until its blocking dependents are gone."""
POLICIES = ("Orphan", "Background", "Foreground")
TERMINAL_PHASES = ("Failed", "Succeeded")


# --- Delete options --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DeleteOptions:
    """A delete request's ``DeleteOptions``, validated as kube-apiserver validates them."""

    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    preconditions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dry_run: bool = False

    @classmethod
    def of(cls, params: Mapping[str, str], body: Any) -> DeleteOptions:
        """The options of a request: its query parameters, then its body's fields over them."""
        given: Body = {}
        for name in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents", "dryRun"):
            if name in params:
                given[name] = params[name]
        if isinstance(body, dict):
            given |= {k: v for k, v in body.items() if k not in ("kind", "apiVersion")}
        grace = given.get("gracePeriodSeconds")
        if grace is not None:
            try:
                grace = int(grace)
            except (TypeError, ValueError):
                raise apimachinery.ApiError(400, f"gracePeriodSeconds: {grace!r}") from None
            grace = 1 if grace < 0 else grace  # as rest.BeforeDelete treats negative values
        orphan = given.get("orphanDependents")
        if isinstance(orphan, str):
            orphan = {"true": True, "false": False}.get(orphan, orphan)
        if orphan is not None and not isinstance(orphan, bool):
            raise apimachinery.ApiError(400, f"orphanDependents: {orphan!r}")
        policy = given.get("propagationPolicy")
        if policy is not None and policy not in POLICIES:
            raise apimachinery.ApiError(
                422,
                f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                + ", ".join(f'"{p}"' for p in POLICIES),
            )
        if policy is not None and orphan is not None:
            raise apimachinery.ApiError(
                422,
                "orphanDependents: Invalid value: OrphanDependents and "
                "DeletionPropagation cannot be both set",
            )
        dry_run = given.get("dryRun") or []
        return cls(
            grace_period_seconds=grace,
            propagation_policy=policy,
            orphan_dependents=orphan,
            preconditions=dict(given.get("preconditions") or {}),
            dry_run="All" in ([dry_run] if isinstance(dry_run, str) else dry_run),
        )


def check_preconditions(body: Body, options: DeleteOptions) -> None:
    """409 when the object is not the one (uid) or the version the request names."""
    meta = body["metadata"]
    for field in ("uid", "resourceVersion"):
        wanted = options.preconditions.get(field)
        if wanted is not None and wanted != meta.get(field):
            raise apimachinery.ApiError(
                409,
                f"Precondition failed: {field} in precondition: {wanted}, "
                f"{field} in object meta: {meta.get(field)}",
            )


def collector_finalizers(finalizers: Iterable[str], options: DeleteOptions) -> list[str]:
    """The object's finalizers once the garbage collector's are set by the options (the
    apiserver's ``deletionFinalizersForGarbageCollection``): an explicit
    ``orphanDependents`` or ``propagationPolicy`` decides, else the finalizer there."""
    kept = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    present = [f for f in finalizers if f in (ORPHAN, FOREGROUND)]
    if options.orphan_dependents is not None:
        wanted = [ORPHAN] if options.orphan_dependents else []
    elif options.propagation_policy is not None:
        wanted = {"Orphan": [ORPHAN], "Foreground": [FOREGROUND]}.get(
            options.propagation_policy, []
        )
    else:
        wanted = present[:1]
    return kept + wanted


# --- Deletion --------------------------------------------------------------------------


def pod_grace_period(pod: Body, options: DeleteOptions) -> int:
    """The seconds a Pod is given to stop (the Pod strategy's ``CheckGracefulDelete``)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in TERMINAL_PHASES:
        return 0  # no kubelet runs it, or nothing runs any more
    if options.grace_period_seconds is not None:
        return options.grace_period_seconds
    return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))


@dataclasses.dataclass(frozen=True)
class Deletion:
    """What a delete request does to an object."""

    body: Body
    """The object as the request leaves it (as it was last, when removed)."""
    removed: bool
    changed: bool
    """Stored anew (marked for deletion, its grace shortened or its finalizers set)."""


def delete(
    old: Body, options: DeleteOptions, *, grace: int | None, now: datetime.datetime
) -> Deletion:
    """Apply a delete request to ``old``; ``grace`` is the grace period of a kind deleted
    gracefully (a Pod's, :func:`pod_grace_period`), None for every other kind."""
    meta = old["metadata"]
    new = copy.deepcopy(old)
    new_meta = new["metadata"]
    pending = meta.get("deletionGracePeriodSeconds") or 0
    if "deletionTimestamp" in meta and pending > 0:
        # A graceful deletion is under way: only a shorter grace period changes it.
        wanted = options.grace_period_seconds
        if wanted is None or wanted >= pending:
            return Deletion(old, removed=False, changed=False)
        started = parse_time(meta["deletionTimestamp"]) - datetime.timedelta(seconds=pending)
        new_meta["deletionTimestamp"] = apimachinery.timestamp(
            started + datetime.timedelta(seconds=wanted)
        )
        new_meta["deletionGracePeriodSeconds"] = wanted
        removed = wanted == 0 and not meta.get("finalizers")
        return Deletion(new, removed=removed, changed=True)
    finalizers = collector_finalizers(meta.get("finalizers") or [], options)
    if finalizers:
        new_meta["finalizers"] = finalizers
    else:
        new_meta.pop("finalizers", None)
    if "deletionTimestamp" not in meta:
        if int(meta.get("generation", 0)) > 0:  # the store's markAsDeleting
            new_meta["generation"] = int(meta["generation"]) + 1
        if grace:
            new_meta["deletionTimestamp"] = apimachinery.timestamp(
                now + datetime.timedelta(seconds=grace)
            )
            new_meta["deletionGracePeriodSeconds"] = grace
            return Deletion(new, removed=False, changed=True)
        if not finalizers:
            return Deletion(old, removed=True, changed=False)
        new_meta["deletionTimestamp"] = apimachinery.timestamp(now)
        new_meta["deletionGracePeriodSeconds"] = 0
        return Deletion(new, removed=False, changed=True)
    if not finalizers:
        return Deletion(old, removed=True, changed=False)
    return Deletion(new, removed=False, changed=new != old)


def finished(meta: Mapping[str, Any]) -> bool:
    """Whether an object marked for deletion is to be removed now: no finalizer holds it
    and no grace period runs (a Pod's ends with the kubelet's delete)."""
    return (
        "deletionTimestamp" in meta
        and not meta.get("finalizers")
        and not meta.get("deletionGracePeriodSeconds")
    )


def answer_code(options: DeleteOptions, deletion: Deletion) -> int:
    """The status of a delete's answer: 202 only where ``orphanDependents: false`` left the
    object in place (kube-apiserver keeps 200 everywhere else, for old clients)."""
    return 202 if options.orphan_dependents is False and not deletion.removed else 200


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


# --- The garbage collector -------------------------------------------------------------


class Unresolved:
    """An owner reference the emulator cannot resolve (a kind it does not serve)."""


UNRESOLVED = Unresolved()


class Cluster(Protocol):
    """What the garbage collector needs of the API: reads, and writes as a client's."""

    def current(self, key: Key) -> Body | None:
        """The stored object, or None."""

    def owner(self, dependent: Body, reference: Mapping[str, Any]) -> Body | Unresolved | None:
        """The object a reference of ``dependent`` names by kind and name (its uid may
        differ), None if there is none, ``UNRESOLVED`` if its kind is not served."""

    def delete(self, key: Key, uid: str, policy: str) -> None:
        """Delete the object if it is still the one with ``uid``."""

    def update(self, key: Key, body: Body) -> None:
        """Write the object's new metadata."""


@dataclasses.dataclass
class GarbageCollector:
    """kube-controller-manager's garbage collector, fed the API's changes in order.

    :meth:`observe` indexes a change and queues the work it calls for; :meth:`collect`
    does the queued work through ``cluster``, whose writes come back as changes. The
    index maps owners' uids to their dependents, so no work scans every object.
    """

    cluster: Cluster
    _owners: dict[Key, frozenset[str]] = dataclasses.field(default_factory=dict)
    _dependents: dict[str, set[Key]] = dataclasses.field(default_factory=dict)
    _keys: dict[str, Key] = dataclasses.field(default_factory=dict)
    _queue: collections.deque[tuple[str, Key]] = dataclasses.field(
        default_factory=collections.deque
    )

    def observe(self, key: Key, kind: str, body: Body) -> None:
        """Index a change (``ADDED``, ``MODIFIED`` or ``DELETED``) and queue its work."""
        meta = body["metadata"]
        uid = meta.get("uid", "")
        before = self._owners.get(key, frozenset())
        after = frozenset() if kind == "DELETED" else _owner_uids(body)
        for gone in before - after:
            self._dependents[gone].discard(key)
            if not self._dependents[gone]:
                del self._dependents[gone]
        for added in after - before:
            self._dependents.setdefault(added, set()).add(key)
        if kind == "DELETED":
            self._owners.pop(key, None)
            if self._keys.get(uid) == key:
                del self._keys[uid]
            self._queue.extend(("attempt", dependent) for dependent in self.dependents(uid))
        else:
            self._owners[key] = after
            self._keys[uid] = key
            if "deletionTimestamp" in meta:
                finalizers = meta.get("finalizers") or []
                if FOREGROUND in finalizers:
                    self._queue.append(("foreground", key))
                    self._queue.extend(("attempt", d) for d in self.dependents(uid))
                if ORPHAN in finalizers:
                    self._queue.append(("orphan", key))
            elif after and after != before:
                self._queue.append(("attempt", key))
        for owner in before - after:  # an owner waiting for its dependents may be done
            if (owner_key := self._keys.get(owner)) is not None:
                self._queue.append(("foreground", owner_key))

    def dependents(self, uid: str) -> list[Key]:
        """The objects that name ``uid`` as an owner, as the changes observed so far say."""
        return list(self._dependents.get(uid, ()))

    def collect(self) -> None:
        """Do the queued work, and the work it queues, until none is left."""
        while self._queue:
            work, key = self._queue.popleft()
            body = self.cluster.current(key)
            if body is None:
                continue
            if work == "attempt":
                self._attempt(key, body)
            elif work == "foreground":
                self._foreground(key, body)
            else:
                self._orphan(key, body)

    def _attempt(self, key: Key, body: Body) -> None:
        """Delete an object whose owners are all gone (or deleting theirs in the
        foreground); drop the references to such owners from one that has another."""
        meta = body["metadata"]
        finalizers = meta.get("finalizers") or []
        if "deletionTimestamp" in meta:
            if FOREGROUND in finalizers:
                self._foreground(key, body)
            return
        references = meta.get("ownerReferences") or []
        solid, gone, waiting = [], [], []
        for reference in references:
            owner = self.cluster.owner(body, reference)
            if isinstance(owner, Unresolved):
                solid.append(reference)
            elif owner is None or owner["metadata"].get("uid") != reference.get("uid"):
                gone.append(reference)
            elif "deletionTimestamp" in owner["metadata"] and FOREGROUND in (
                owner["metadata"].get("finalizers") or []
            ):
                waiting.append(reference)
            else:
                solid.append(reference)
        if solid:
            if gone or waiting:
                new = copy.deepcopy(body)
                new["metadata"]["ownerReferences"] = solid
                self.cluster.update(key, new)
            return
        if not references:
            return
        if waiting and self.dependents(meta["uid"]):
            policy = "Foreground"
        elif ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        self.cluster.delete(key, meta["uid"], policy)

    def _foreground(self, key: Key, body: Body) -> None:
        """An owner deleting its dependents first: its finalizer goes once no dependent
        that blocks it is left; until then each such dependent is deleted."""
        meta = body["metadata"]
        if "deletionTimestamp" not in meta or FOREGROUND not in (meta.get("finalizers") or []):
            return
        blocking = []
        for dependent_key in self.dependents(meta["uid"]):
            dependent = self.cluster.current(dependent_key)
            if dependent is not None and any(
                ref.get("uid") == meta["uid"] and ref.get("blockOwnerDeletion")
                for ref in dependent["metadata"].get("ownerReferences") or []
            ):
                blocking.append((dependent_key, dependent))
        if not blocking:
            new = copy.deepcopy(body)
            new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != FOREGROUND]
            self.cluster.update(key, new)
            return
        for dependent_key, dependent in blocking:
            if "deletionTimestamp" not in dependent["metadata"]:
                self._queue.append(("attempt", dependent_key))

    def _orphan(self, key: Key, body: Body) -> None:
        """An owner orphaning its dependents: its references go from each, then its
        finalizer."""
        meta = body["metadata"]
        if "deletionTimestamp" not in meta or ORPHAN not in (meta.get("finalizers") or []):
            return
        for dependent_key in self.dependents(meta["uid"]):
            dependent = self.cluster.current(dependent_key)
            if dependent is None:
                continue
            new = copy.deepcopy(dependent)
            new["metadata"]["ownerReferences"] = [
                ref
                for ref in dependent["metadata"].get("ownerReferences") or []
                if ref.get("uid") != meta["uid"]
            ]
            self.cluster.update(dependent_key, new)
        new = copy.deepcopy(body)
        new["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != ORPHAN]
        self.cluster.update(key, new)


def _owner_uids(body: Body) -> frozenset[str]:
    references = body["metadata"].get("ownerReferences") or []
    return frozenset(str(ref["uid"]) for ref in references if ref.get("uid"))
