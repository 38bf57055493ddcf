"""A Workspace's tokens: one at a time, revoked when rotated (``api.Registry``,
``workspaces.revoke``, ``objects``' token Secret helpers; ADR 0038).

Cases:
- the registry holds one token per Workspace: a token set anew (a Secret made anew, or a
  Workspace made again under its name) replaces the one before, which no longer
  authenticates, while other Workspaces' tokens stay; a token is found whichever
  Workspace holds it; an unknown or empty token is nobody's;
- ``revoke`` takes away the Workspace's token only when it is the one named (a token set
  since, from a Secret made anew, stays); ``forget_token`` takes whatever it has;
- a token Secret's controller is its Workspace, another Secret has none; ``owned_by`` tells a
  Workspace's own Secret from one of an earlier Workspace of the same name (by uid);
- ``workspaces.revoke`` of a deleted token Secret: its Orchestrator token stops
  authenticating and the Harness client made with its Harness token is closed and
  dropped (a call on it is refused, never sent); a client of newer tokens is kept; a
  Secret that cannot be read revokes whatever the Workspace has.
"""

from __future__ import annotations

import base64
import hashlib

import pytest

from kubeturn.k8s import objects, workspaces
from kubeturn.k8s.hub import Hub, OperatorSettings
from kubeturn.orchestrator.api import Registry
from kubeturn.orchestrator.harness_client import HarnessClient, HarnessUnreachable

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

    def test_revoke_takes_the_named_token_only(self) -> None:
        registry = Registry()
        registry.set_token(WORKSPACE, "old")
        registry.set_token(WORKSPACE, "new")
        registry.revoke(WORKSPACE, "old")  # the old Secret's deletion, heard late
        assert registry.workspace_of("new") == WORKSPACE

        registry.revoke(WORKSPACE, "new")
        assert registry.workspace_of("new") is None
        registry.revoke(WORKSPACE, "new")  # a Workspace with no token: nothing to do
        assert registry.tokens == {}

    def test_forget_takes_whatever_the_workspace_has(self) -> None:
        registry = Registry()
        registry.set_token(WORKSPACE, "token")
        registry.set_token(OTHER, "other")
        registry.forget_token(WORKSPACE)
        registry.forget_token(WORKSPACE)
        assert registry.workspace_of("token") is None
        assert registry.workspace_of("other") == OTHER


def workspace_body(uid: str) -> dict[str, object]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "ws", "namespace": "team-a", "uid": uid},
    }


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


def stored(secret: dict[str, object]) -> dict[str, object]:
    """A token Secret as the API answers it: ``stringData`` written into ``data``."""
    plain = secret.pop("stringData")
    assert isinstance(plain, dict)
    secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}
    return secret


class TestRevokeOnDeletion:
    def hub(self) -> Hub:
        return Hub(kube=None, settings=OperatorSettings())  # type: ignore[arg-type]

    async def test_the_deleted_secrets_tokens_are_revoked_both_ways(self) -> None:
        hub = self.hub()
        hub.registry.set_token(WORKSPACE, "orchestrator-1")
        client = HarnessClient("http://127.0.0.1:1", "harness-1")
        key = ("team-a", "ws")
        hub.harnesses[key] = client
        sandbox = workspaces.Sandbox(harness=("pod-uid", "http://127.0.0.1:1", digest("harness-1")))
        secret = stored(
            objects.token_secret(workspace_body("uid-1"), "harness-1", "orchestrator-1")
        )

        await workspaces.revoke(hub, key, sandbox, secret)
        assert hub.registry.workspace_of("orchestrator-1") is None
        assert key not in hub.harnesses
        assert sandbox.harness is None
        with pytest.raises(HarnessUnreachable, match="its client was closed"):
            await client.worktrees("r", "kubeturn/r", ["target"])

    async def test_tokens_read_since_stay(self) -> None:
        hub = self.hub()
        hub.registry.set_token(WORKSPACE, "orchestrator-2")
        client = HarnessClient("http://127.0.0.1:1", "harness-2")
        key = ("team-a", "ws")
        hub.harnesses[key] = client
        made = ("pod-uid", "http://127.0.0.1:1", digest("harness-2"))
        sandbox = workspaces.Sandbox(harness=made)
        earlier = stored(
            objects.token_secret(workspace_body("uid-1"), "harness-1", "orchestrator-1")
        )
        try:
            await workspaces.revoke(hub, key, sandbox, earlier)
            assert hub.registry.workspace_of("orchestrator-2") == WORKSPACE
            assert hub.harnesses[key] is client
            assert sandbox.harness == made
        finally:
            await client.close()

    async def test_a_secret_that_cannot_be_read_revokes_whatever_there_is(self) -> None:
        hub = self.hub()
        hub.registry.set_token(WORKSPACE, "orchestrator-1")
        await workspaces.revoke(hub, ("team-a", "ws"), None, {"data": {}})
        assert hub.registry.tokens == {}
