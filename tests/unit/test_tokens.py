"""A Workspace's tokens: one at a time, revoked when rotated (``api.Registry``,
``objects``' token Secret helpers; ADR 0038 and 0040).

Cases:
- the registry holds one token per Workspace: a token set anew (a Secret made anew, or a
  Workspace made again under its name) replaces the one before, which no longer
  authenticates, while other Workspaces' tokens stay; a token is found whichever
  Workspace holds it; an unknown or empty token is nobody's; ``forget_token`` takes
  whatever the Workspace has;
- a token Secret is named after its Workspace, its controller; ``owned_by`` tells a
  Workspace's own Secret from one of an earlier Workspace of the same name (by uid);
- rotation: a token Secret carries the ``kubeturn.dev/rotate-tokens`` its Workspace had
  when it was made (none when it had none); its tokens are outdated once the Workspace
  names another value, not while it names the same or none.
"""

from __future__ import annotations

import hashlib
from typing import Any

from kubeturn.k8s import objects
from kubeturn.orchestrator.api import Registry

WORKSPACE = "team-a/ws"
OTHER = "team-a/other"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TestRegistry:
    def test_a_token_set_anew_replaces_the_one_before(self) -> None:
        registry = Registry()
        registry.set_token(WORKSPACE, "old")
        registry.set_token(OTHER, "other")
        assert registry.workspace_of("old") == WORKSPACE

        registry.set_token(WORKSPACE, "new")
        assert registry.workspace_of("old") is None
        assert registry.workspace_of("new") == WORKSPACE
        assert registry.workspace_of("other") == OTHER
        assert registry.tokens == {WORKSPACE: digest("new"), OTHER: digest("other")}

    def test_an_unknown_or_empty_token_is_nobodys(self) -> None:
        registry = Registry()
        registry.set_token(WORKSPACE, "token")
        assert registry.workspace_of("") is None
        assert registry.workspace_of("token ") is None

    def test_forget_takes_whatever_the_workspace_has(self) -> None:
        registry = Registry()
        registry.set_token(WORKSPACE, "token")
        registry.set_token(OTHER, "other")
        registry.forget_token(WORKSPACE)
        registry.forget_token(WORKSPACE)
        assert registry.workspace_of("token") is None
        assert registry.workspace_of("other") == OTHER


def workspace_body(uid: str, rotation: str | None = None) -> dict[str, Any]:
    annotations = {objects.ROTATE_TOKENS: rotation} if rotation is not None else {}
    meta = {"name": "ws", "namespace": "team-a", "uid": uid, "annotations": annotations}
    return {"apiVersion": "kubeturn.dev/v1alpha1", "kind": "Workspace", "metadata": meta}


class TestTokenSecret:
    def test_its_controller_is_its_workspace(self) -> None:
        assert objects.token_secret_name("ws") == "ws-kubeturn-tokens"
        secret = objects.token_secret(workspace_body("uid-1"), "h", "o")
        assert objects.controller_name(secret, "Workspace") == "ws"
        assert objects.controller_name(secret, "Run") is None
        assert objects.controller_name({"metadata": {"name": "repo-token"}}, "Workspace") is None

    def test_owned_by_tells_an_earlier_workspaces_secret(self) -> None:
        secret = objects.token_secret(workspace_body("uid-1"), "h", "o")
        assert objects.owned_by(secret, workspace_body("uid-1"))
        assert not objects.owned_by(secret, workspace_body("uid-2"))
        assert not objects.owned_by({"metadata": {}}, workspace_body("uid-1"))


class TestRotation:
    def test_a_secret_carries_the_rotation_it_was_made_for(self) -> None:
        made = objects.token_secret(workspace_body("uid-1", "2030-01-01"), "h", "o")
        assert made["metadata"]["annotations"] == {"kubeturn.dev/rotate-tokens": "2030-01-01"}
        assert objects.rotation(made) == "2030-01-01"
        plain = objects.token_secret(workspace_body("uid-1"), "h", "o")
        assert "annotations" not in plain["metadata"]
        assert objects.rotation(plain) is None

    def test_tokens_are_outdated_once_the_workspace_names_another_rotation(self) -> None:
        plain = objects.token_secret(workspace_body("uid-1"), "h", "o")
        first = objects.token_secret(workspace_body("uid-1", "1"), "h", "o")
        assert not objects.tokens_rotated(plain, workspace_body("uid-1"))
        assert objects.tokens_rotated(plain, workspace_body("uid-1", "1"))
        assert not objects.tokens_rotated(first, workspace_body("uid-1", "1"))
        assert objects.tokens_rotated(first, workspace_body("uid-1", "2"))
        # The annotation removed: no rotation asked for, the tokens stay.
        assert not objects.tokens_rotated(first, workspace_body("uid-1"))
