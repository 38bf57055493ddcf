"""A Workspace takes over none of an earlier Workspace's objects of its name
(``workspaces._own``, ``_checked``), against a store that deletes as the API does.

Cases:
- its own object is used as it is;
- an earlier Workspace's token Secret, and an orphaned one, are deleted so that it makes
  its own; held by a finalizer, it is waited for (``Going``, naming it);
- a token Secret made before the rotation its Workspace asks for is deleted so that it
  makes one with new tokens;
- an earlier Workspace's ConfigMap is waited for, never deleted (the garbage collector
  takes it; the operator may not delete ConfigMaps), one made by hand (no owner) is kept;
- an earlier Workspace's claim is never deleted, only waited for, while it is there; its
  own claim being deleted is waited for too, to be made anew once it is gone;
- an object the create answers with (its name taken meanwhile) is checked alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.errors import Going
from kubeturn.k8s import objects, workspaces
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import Kind
from kubeturn.settings import OperatorSettings

Body = dict[str, Any]
NAMESPACE = "team-a"


def workspace(uid: str) -> Body:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "ws", "namespace": NAMESPACE, "uid": uid},
    }


NOW, EARLIER = workspace("uid-now"), workspace("uid-earlier")


class Store:
    """Objects by (plural, name); a delete of one with finalizers marks it instead."""

    def __init__(self, *bodies: Body) -> None:
        plurals = {"Secret": "secrets", "ConfigMap": "configmaps"}
        self.objects = {
            (plurals.get(b["kind"], "persistentvolumeclaims"), b["metadata"]["name"]): b
            for b in bodies
        }
        self.deleted: list[str] = []

    async def get(self, kind: Kind, namespace: str, name: str) -> Body | None:
        return self.objects.get((kind.plural, name))

    async def delete(
        self, kind: Kind, namespace: str, name: str, *, uid: str | None = None
    ) -> None:
        body = self.objects[(kind.plural, name)]
        assert uid == body["metadata"]["uid"]
        self.deleted.append(name)
        if body["metadata"].get("finalizers"):
            body["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
        else:
            del self.objects[(kind.plural, name)]


def hub(store: Store) -> Hub:
    return Hub(kube=store, settings=OperatorSettings())  # type: ignore[arg-type]


def stored(body: Body, *, uid: str = "stored", **meta: Any) -> Body:
    """``body`` as the API would hold it (an owner's own, an earlier one's, …)."""
    body["metadata"] |= {"uid": uid, **meta}
    return body


def secret(owner: Body) -> Body:
    return objects.token_secret(owner, "h", "o")


def configmap(owner: Body) -> Body:
    return objects.providers_config_map(owner, "{}\n")


def claim(owner: Body) -> Body:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": objects.claim_name("ws", "work"),
            "namespace": NAMESPACE,
            "ownerReferences": [objects.owner_reference(owner)],
        },
    }


async def test_its_own_object_is_used() -> None:
    store = Store(stored(secret(NOW)))
    found = await workspaces._own(hub(store), NOW, secret(NOW), replace=workspaces._foreign)
    assert found is not None
    assert store.deleted == []


async def test_an_earlier_or_orphaned_token_secret_is_deleted_to_make_its_own() -> None:
    orphaned = stored(secret(NOW), uid="orphan")
    del orphaned["metadata"]["ownerReferences"]
    for old in (stored(secret(EARLIER)), orphaned):
        store = Store(old)
        assert (
            await workspaces._own(hub(store), NOW, secret(NOW), replace=workspaces._foreign) is None
        )
        assert store.deleted == ["ws-kubeturn-tokens"]


async def test_an_earlier_secret_held_by_a_finalizer_is_waited_for() -> None:
    store = Store(stored(secret(EARLIER), finalizers=["other.example/hold"]))
    with pytest.raises(Going) as going:
        await workspaces._own(hub(store), NOW, secret(NOW), replace=workspaces._foreign)
    assert str(going.value) == (
        "the Secret ws-kubeturn-tokens of an earlier Workspace of this name is being "
        "deleted; this Workspace's is made once it is gone"
    )


async def test_a_token_secret_of_an_older_rotation_is_deleted_to_make_new_tokens() -> None:
    rotated = workspace("uid-now")
    rotated["metadata"]["annotations"] = {objects.ROTATE_TOKENS: "2"}
    store = Store(stored(secret(NOW)))
    outdated = workspaces._outdated
    assert await workspaces._own(hub(store), rotated, secret(rotated), replace=outdated) is None
    assert store.deleted == ["ws-kubeturn-tokens"]
    store = Store(stored(secret(rotated)))
    assert await workspaces._own(hub(store), rotated, secret(rotated), replace=outdated)
    assert store.deleted == []


async def test_an_earlier_configmap_is_waited_for_and_one_made_by_hand_is_kept() -> None:
    store = Store(stored(configmap(EARLIER)))
    with pytest.raises(Going) as going:
        await workspaces._up_to_date(hub(store), NOW, configmap(NOW), "data")
    assert str(going.value) == (
        "the ConfigMap ws-kubeturn-providers of an earlier Workspace of this name is still "
        "there; this Workspace's is made once it is gone"
    )
    assert store.deleted == []
    by_hand = stored(configmap(NOW))
    del by_hand["metadata"]["ownerReferences"]
    store = Store(by_hand)
    assert not await workspaces._up_to_date(hub(store), NOW, configmap(NOW), "data")
    assert store.deleted == []


async def test_claims_are_never_deleted_only_waited_for() -> None:
    store = Store(stored(claim(EARLIER)))
    with pytest.raises(Going, match="of an earlier Workspace of this name is still"):
        await workspaces._own(hub(store), NOW, claim(NOW), replace=None)
    own = stored(claim(NOW), deletionTimestamp="2030-01-01T00:00:00Z")
    store = Store(own)
    with pytest.raises(Going) as going:
        await workspaces._own(hub(store), NOW, claim(NOW), replace=None)
    assert str(going.value) == (
        "the PersistentVolumeClaim ws-kubeturn-work is being deleted; it is made anew "
        "once it is gone"
    )
    assert store.deleted == []


def test_what_a_create_answers_is_checked_alike() -> None:
    with pytest.raises(Going):
        workspaces._checked(stored(secret(EARLIER)), NOW)
    assert workspaces._checked(stored(secret(NOW)), NOW)
