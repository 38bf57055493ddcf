"""Builders of the Kubernetes objects the operator owns: pure functions from specs to dicts.

A Workspace becomes a token Secret, a providers ConfigMap, a PVC, the sandbox Pod and a
NetworkPolicy; a Turn becomes an AgentTurn. Every object carries the kubeturn labels and
an ownerReference, so ``kubectl get -l`` finds them and deleting the owner removes them.
No IO: the controllers create what these return.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from kubeturn.api.agentturn import SWEEP_FINALIZER
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.k8s import clones as clone_containers
from kubeturn.k8s import sandboxes
from kubeturn.orchestrator import ids
from kubeturn.orchestrator.effects import Admit

GROUP_VERSION = "kubeturn.dev/v1alpha1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kubeturn"}
SANDBOX = "sandbox"
HARNESS_PORT = 8080
WORK_ROOT = "/work"
HARNESS_HOME = "/var/lib/kubeturn"
DATA_DIR = f"{HARNESS_HOME}/data"
"""The Harness's conversation logs: a directory it makes (and keeps 0700) in its home."""
WORK_SUBPATH = "work"
"""The volume's directory mounted at ``WORK_ROOT``: clones and worktrees, the Agents' tree."""
HARNESS_SUBPATH = "harness"
"""The volume's directory mounted at ``HARNESS_HOME``: beside ``work``, never under it, so
no path under ``WORK_ROOT`` reaches the conversation logs (ADR 0025)."""
PROVIDERS_PATH = "/etc/kubeturn/providers.yaml"
TOOL_UID = 10001
"""The sandbox's user (the Harness image's); the pod runs non-root, tools as the same uid."""

Object = dict[str, Any]


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _metadata(name: str, namespace: str, owner: Mapping[str, Any], **labels: str) -> Object:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {**MANAGED_BY, **labels},
        "ownerReferences": [owner_reference(owner)],
    }


# ----------------------------------------------------------------------------- workspaces


def workspace_labels(workspace: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kubeturn",
        "app.kubernetes.io/component": SANDBOX,
        "kubeturn.dev/workspace": workspace,
    }


def sandbox_name(workspace: str) -> str:
    """The name of a Workspace's sandbox Pod (a new Pod made again takes it too)."""
    return f"{workspace}-kubeturn-sandbox"


def owned_workspace_name(run: str) -> str:
    """The name of the Workspace a Run makes from its ``spec.workspace.template``."""
    return f"{run}-workspace"


def workspace_of(run: Mapping[str, Any]) -> str | None:
    """The Workspace a Run works in: the one it names, or the one its template makes."""
    ref = (run.get("spec") or {}).get("workspace")
    if not ref:
        return None
    return str(ref["name"]) if ref.get("name") else owned_workspace_name(run["metadata"]["name"])


TOKENS_SUFFIX = "-kubeturn-tokens"


def token_secret_name(workspace: str) -> str:
    """The name of a Workspace's token Secret."""
    return f"{workspace}{TOKENS_SUFFIX}"


def token_secret_workspace(secret: str) -> str | None:
    """The Workspace whose token Secret is named ``secret``; None for another Secret."""
    workspace = secret.removesuffix(TOKENS_SUFFIX)
    return workspace if workspace and workspace != secret else None


def owned_by(child: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``child`` belongs to this very ``owner`` (its uid), not to an earlier
    object of the same name that the garbage collector has not caught up with."""
    uid = owner["metadata"].get("uid")
    references = (child.get("metadata") or {}).get("ownerReferences") or []
    return any(reference.get("uid") == uid for reference in references)


def token_secret(
    workspace: Mapping[str, Any], harness_token: str, orchestrator_token: str
) -> Object:
    """The Workspace's two tokens: the one its Harness accepts, the one it presents."""
    meta = workspace["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(token_secret_name(meta["name"]), meta["namespace"], workspace),
        "type": "Opaque",
        "stringData": {
            "harness-token-sha256": hashlib.sha256(harness_token.encode()).hexdigest(),
            "orchestrator-token": orchestrator_token,
            "harness-token": harness_token,
        },
    }


def providers_config_map(workspace: Mapping[str, Any], providers_yaml: str) -> Object:
    meta = workspace["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(f"{meta['name']}-kubeturn-providers", meta["namespace"], workspace),
        "data": {"providers.yaml": providers_yaml},
    }


def volume_claim(workspace: Mapping[str, Any], spec: WorkspaceSpec) -> Object:
    meta = workspace["metadata"]
    claim: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(f"{meta['name']}-kubeturn-work", meta["namespace"], workspace),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage.size}},
        },
    }
    if spec.storage.class_:
        claim["spec"]["storageClassName"] = spec.storage.class_
    return claim


def sandbox_pod(
    workspace: Mapping[str, Any],
    spec: WorkspaceSpec,
    *,
    image: str,
    orchestrator_url: str,
    providers_yaml: str,
    harness_token_sha256: str,
) -> Object:
    """The sandbox: an init container clones each repo slot; the Harness serves Turns.

    One volume (the Workspace's claim) holds both what outlives a Pod: the clones and
    worktrees (``work``) and the Harness's conversation logs (``harness``), so a Pod the
    operator makes again finds both. ``restartPolicy: Always``: the kubelet restarts a
    container that exits, with its own back-off, inside the same Pod; the Pod itself ends
    (``Failed``) only when it is evicted or its node goes, and then the operator makes a
    new one (``kubeturn.k8s.sandboxes``).
    """
    meta = workspace["metadata"]
    name = meta["name"]
    tokens = token_secret_name(name)
    security = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    work = {"name": "workspace", "mountPath": WORK_ROOT, "subPath": WORK_SUBPATH}
    # A slot's credentials are mounted into its own clone container only (ADR 0033).
    clones = [
        clone_containers.container(
            slot, repo, image=spec.image or image, work=work, security=security
        )
        for slot, repo in spec.repos.items()
    ]
    credentials = [
        found
        for slot, repo in spec.repos.items()
        if (found := clone_containers.volume(slot, repo)) is not None
    ]
    harness = {
        "name": "harness",
        "image": spec.image or image,
        "args": [
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            str(HARNESS_PORT),
            "--data-dir",
            DATA_DIR,
            "--work-root",
            WORK_ROOT,
        ],
        "ports": [{"name": "harness", "containerPort": HARNESS_PORT}],
        "env": [
            {
                "name": "KUBETURN_HARNESS_TOKEN_SHA256",
                "valueFrom": {"secretKeyRef": {"name": tokens, "key": "harness-token-sha256"}},
            },
            {
                "name": "KUBETURN_ORCHESTRATOR_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": tokens, "key": "orchestrator-token"}},
            },
            {"name": "KUBETURN_ORCHESTRATOR_URL", "value": orchestrator_url},
            {"name": "KUBETURN_PROVIDERS", "value": PROVIDERS_PATH},
            *spec.env,
        ],
        "envFrom": list(spec.envFrom),
        "volumeMounts": [
            work,
            {"name": "workspace", "mountPath": HARNESS_HOME, "subPath": HARNESS_SUBPATH},
            {"name": "providers", "mountPath": "/etc/kubeturn", "readOnly": True},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": HARNESS_PORT}},
        "securityContext": security,
    }
    if spec.resources is not None:
        harness["resources"] = spec.resources.model_dump(exclude_none=True)
    pod: Object = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(
            sandbox_name(name), meta["namespace"], workspace, **workspace_labels(name)
        ),
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": TOOL_UID,
                "runAsGroup": TOOL_UID,
                "fsGroup": TOOL_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": clones,
            "containers": [harness],
            "volumes": [
                {
                    "name": "workspace",
                    "persistentVolumeClaim": {"claimName": f"{name}-kubeturn-work"},
                },
                {"name": "providers", "configMap": {"name": f"{name}-kubeturn-providers"}},
                *credentials,
            ],
            "restartPolicy": "Always",
        },
    }
    if spec.serviceAccount:
        pod["spec"]["serviceAccountName"] = spec.serviceAccount
    # What it is made from, so a Pod of an older spec is told from a current one (ADR 0032).
    made_from = sandboxes.fingerprint(pod["spec"], providers_yaml, harness_token_sha256)
    pod["metadata"]["annotations"] = made_from.annotations()
    return pod


def network_policy(
    workspace: Mapping[str, Any],
    operator_labels: Mapping[str, str],
    operator_namespace: str | None = None,
) -> Object:
    """Only the operator may reach the sandbox's Harness."""
    meta = workspace["metadata"]
    namespaces: Object = (
        {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}}
        if operator_namespace
        else {}
    )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(f"{meta['name']}-kubeturn-sandbox", meta["namespace"], workspace),
        "spec": {
            "podSelector": {"matchLabels": workspace_labels(meta["name"])},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": namespaces,
                            "podSelector": {"matchLabels": dict(operator_labels)},
                        }
                    ],
                    "ports": [{"port": HARNESS_PORT, "protocol": "TCP"}],
                }
            ],
        },
    }


# ----------------------------------------------------------------------------- turns

_DNS = re.compile(r"[^a-z0-9-]+")


def turn_name(run: str, turn: str) -> str:
    """``<run>-<turn>``, a valid object name."""
    return _DNS.sub("-", f"{run}-{turn}".lower()).strip("-")[:253]


INSTANCE_LABEL = "kubeturn.dev/instance"
"""The conversation an AgentTurn's Submissions land on (``instance_label``)."""
TURN_SEQ_LABEL = "kubeturn.dev/turn-seq"
"""The Turn's number in its Run (``t<n>``): orders the Turns of one conversation, which
``creationTimestamp`` (whole seconds) cannot (ADR 0021)."""


def instance_label(instance_id: str) -> str:
    """Instance IDs hold '/' and '.': a label value gets their hash."""
    return hashlib.sha256(instance_id.encode()).hexdigest()[:63]


def turn_seq(agent_turn: Mapping[str, Any]) -> int | None:
    """The Turn number an AgentTurn carries: its label, else its ``spec.turn`` (an AgentTurn
    made before the label); None when neither reads as one."""
    value = ((agent_turn.get("metadata") or {}).get("labels") or {}).get(TURN_SEQ_LABEL)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    turn = (agent_turn.get("spec") or {}).get("turn")
    try:
        return ids.turn_seq(turn) if isinstance(turn, str) else None
    except ValueError:
        return None


def agent_turn(
    run: Mapping[str, Any],
    effect: Admit,
    *,
    workspace: str | None,
    menu: list[dict[str, Any]],
) -> Object:
    meta = run["metadata"]
    name = turn_name(meta["name"], effect.turn)
    spec: Object = {
        "runRef": {"name": meta["name"]},
        "turn": effect.turn,
        "agent": {
            "slot": effect.agent,
            "instructions": effect.instructions,
            "workspace": effect.workspace,
        },
        "statePath": effect.state,
        "instanceId": effect.instance_id,
        "prompt": effect.prompt,
        "cwd": effect.cwd,
        "continue": effect.continue_,
        "menu": menu,
    }
    if workspace is not None:
        spec["workspaceRef"] = {"name": workspace}
    if effect.model is not None:
        spec["model"] = effect.model
    if effect.thinking_level is not None:
        spec["thinkingLevel"] = effect.thinking_level
    metadata = _metadata(
        name,
        meta["namespace"],
        run,
        **{
            "kubeturn.dev/run": meta["name"],
            "kubeturn.dev/agent": effect.agent,
            INSTANCE_LABEL: instance_label(effect.instance_id),
            TURN_SEQ_LABEL: str(ids.turn_seq(effect.turn)),
        },
    )
    metadata["finalizers"] = [SWEEP_FINALIZER]
    return {"apiVersion": GROUP_VERSION, "kind": "AgentTurn", "metadata": metadata, "spec": spec}
