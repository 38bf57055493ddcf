"""Builders of the Kubernetes objects the operator owns: pure functions from specs to dicts.

A Workspace becomes a token Secret, a providers ConfigMap, a PVC, the sandbox Pod and a
NetworkPolicy; a Turn becomes an AgentTurn. Every object carries the kubeturn labels and
an ownerReference, so ``kubectl get -l`` finds them and deleting the owner removes them.
Every name and label value made from a user's names goes through ``kubeturn.k8s.names``,
so that the API server accepts it whatever name the CRDs admit. No IO: the controllers
create what these return.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from kubeturn.api.agentturn import RETAIN_FINALIZER, SWEEP_FINALIZER
from kubeturn.api.common import GROUP, GROUP_VERSION
from kubeturn.api.tracing import SandboxTracing
from kubeturn.api.workspace import Resources, SandboxResources, WorkspaceSpec, quantity
from kubeturn.k8s import clones as clone_containers
from kubeturn.k8s import egress, names, sandboxes
from kubeturn.k8s.sandboxes import HARNESS_CONTAINER, TOOLS_CONTAINER
from kubeturn.orchestrator import ids
from kubeturn.orchestrator.effects import Admit
from kubeturn.orchestrator.ids import InstanceId, TurnId

MANAGED_BY = {"app.kubernetes.io/managed-by": "kubeturn"}
SANDBOX = "sandbox"
HARNESS_PORT = 8080
WORK_ROOT = "/work"
HARNESS_HOME = "/var/lib/kubeturn"
DATA_DIR = f"{HARNESS_HOME}/data"
"""The Harness's conversation logs: a directory it makes (and keeps 0700) on its volume."""
WORK_SUBPATH = "work"
"""The work volume's directory mounted at ``WORK_ROOT``: clones and worktrees."""
PROVIDERS_PATH = "/etc/kubeturn/providers.yaml"
TOOLBOX_DIR = "/run/kubeturn"
"""An ``emptyDir`` the ``harness`` and ``tools`` containers share: the toolbox's socket."""
TOOLBOX_SOCKET = f"{TOOLBOX_DIR}/toolbox.sock"
SCRATCH = "/tmp"
"""The ``tools`` container's ``/tmp`` (an ``emptyDir``): each session's ``HOME``/``TMPDIR``."""
HARNESS_UID = 10001
"""The Harness's user (the image's ``kubeturn``): it alone reads the conversation logs, and
it is the only peer the toolbox serves. Also the Pod's ``fsGroup``."""
TOOL_UID = 10002
"""The Workspace tree's user (the image's ``workspace``): the clone containers and the
``tools`` container, where every Agent's command runs."""
TOOLBOX_COMMAND = [
    "/usr/bin/tini",
    "--",
    "/opt/kubeturn/bin/python",
    "-m",
    "kubeturn_harness.sandbox",
]
"""How the ``tools`` container starts the toolbox from the Harness image: tini as PID 1 of
the container's own PID namespace, holding nothing but the image's environment."""
SANDBOX_GRACE_S = 10
"""The sandbox Pod's ``terminationGracePeriodSeconds``: how long its containers have between
SIGTERM and SIGKILL when it is deleted (ADR 0042). The Harness settles nothing on SIGTERM
(the next Harness settles what it left open, from its log) and only closes its logs, the
toolbox ends its sessions' processes: each takes a second or two. A SIGKILL loses nothing
a Turn needs (a torn last record is dropped on load; settlements are fsynced), and a new
Pod is made only once the old one is gone (ADR 0024): past a few seconds the grace only
keeps the Workspace without a Harness, up to 30 s with Kubernetes' default."""
Object = dict[str, Any]


def container_resources(default: Resources, override: Resources | None) -> Object:
    """A container's ``resources``: ``default``, with ``override``'s requests and limits
    over it key by key. A default limit below a request the override raised goes up to that
    request, so the container stays valid (a request above its limit is refused) and
    bounded."""
    requests = {**(default.requests or {}), **((override and override.requests) or {})}
    limits = {**(default.limits or {}), **((override and override.limits) or {})}
    set_limits = (override and override.limits) or {}
    for name, value in requests.items():
        if name in limits and name not in set_limits and quantity(value) > quantity(limits[name]):
            limits[name] = value
    return {"requests": requests, "limits": limits}


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


WORKSPACE_LABEL = f"{GROUP}/workspace"
"""The Workspace a sandbox Pod serves, as a label value (``names.label_value``)."""
RUN_LABEL = f"{GROUP}/run"
"""The Run an AgentTurn or an owned Workspace belongs to, as a label value."""
AGENT_LABEL = f"{GROUP}/agent"
"""The Agent slot of an AgentTurn, as a label value."""


def workspace_labels(workspace: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kubeturn",
        "app.kubernetes.io/component": SANDBOX,
        WORKSPACE_LABEL: names.label_value(workspace),
    }


def run_labels(run: str) -> dict[str, str]:
    """The labels that find a Run's AgentTurns and its own Workspace."""
    return {RUN_LABEL: names.label_value(run)}


def sandbox_name(workspace: str) -> str:
    """The name of a Workspace's sandbox Pod (a new Pod made again takes it too), and of
    its NetworkPolicy: short enough for a kubelet to run the Pod (``POD_NAME_MAX``)."""
    return names.object_name(workspace, "-kubeturn-sandbox", names.POD_NAME_MAX)


def owned_workspace_name(run: str) -> str:
    """The name of the Workspace a Run makes from its ``spec.workspace.template``."""
    return names.object_name(run, "-workspace")


def providers_name(workspace: str) -> str:
    """The name of a Workspace's providers ConfigMap."""
    return names.object_name(workspace, "-kubeturn-providers")


def workspace_of(run: Mapping[str, Any]) -> str | None:
    """The Workspace a Run works in: the one it names, or the one its template makes."""
    ref = (run.get("spec") or {}).get("workspace")
    if not ref:
        return None
    return str(ref["name"]) if ref.get("name") else owned_workspace_name(run["metadata"]["name"])


TOKENS_SUFFIX = "-kubeturn-tokens"
ROTATE_TOKENS = f"{GROUP}/rotate-tokens"
"""An annotation of a Workspace: each new value has its tokens made anew at once, the old
ones refused; its token Secret carries the value it was made for (ADR 0040)."""


def token_secret_name(workspace: str) -> str:
    """The name of a Workspace's token Secret."""
    return names.object_name(workspace, TOKENS_SUFFIX)


def rotation(body: Mapping[str, Any]) -> str | None:
    """The ``kubeturn.dev/rotate-tokens`` annotation of a Workspace or a token Secret."""
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(ROTATE_TOKENS)
    return None if value is None else str(value)


def tokens_rotated(secret: Mapping[str, Any], workspace: Mapping[str, Any]) -> bool:
    """Whether the Workspace asks for tokens newer than the Secret's: a rotation the
    Secret was not made for. A Workspace that names none (its annotation removed too)
    asks for none."""
    wanted = rotation(workspace)
    return wanted is not None and rotation(secret) != wanted


def controller_name(child: Mapping[str, Any], kind: str) -> str | None:
    """The name of the kubeturn object of ``kind`` that controls ``child`` (its
    controller owner reference): the Workspace of a token Secret or a sandbox Pod, whose
    own names may be shortened forms of it. None for an object no such one controls."""
    references = (child.get("metadata") or {}).get("ownerReferences") or []
    for reference in references:
        if (reference.get("apiVersion"), reference.get("kind")) == (GROUP_VERSION, kind) and (
            reference.get("controller") and reference.get("name")
        ):
            return str(reference["name"])
    return None


def owned_by(child: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Whether ``child`` belongs to this very ``owner`` (its uid), not to an earlier
    object of the same name that the garbage collector has not caught up with."""
    uid = owner["metadata"].get("uid")
    references = (child.get("metadata") or {}).get("ownerReferences") or []
    return any(reference.get("uid") == uid for reference in references)


def token_secret(
    workspace: Mapping[str, Any], harness_token: str, orchestrator_token: str
) -> Object:
    """The Workspace's two tokens: the one its Harness accepts, the one it presents; made
    for the Workspace's rotation, if it names one."""
    meta = workspace["metadata"]
    made_for = rotation(workspace)
    annotations = {"annotations": {ROTATE_TOKENS: made_for}} if made_for is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(token_secret_name(meta["name"]), meta["namespace"], workspace)
        | annotations,
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
        "metadata": _metadata(providers_name(meta["name"]), meta["namespace"], workspace),
        "data": {"providers.yaml": providers_yaml},
    }


def volume_claim(workspace: Mapping[str, Any], spec: WorkspaceSpec) -> Object:
    """The work volume: the clones and the Runs' worktrees, which the Agents fill."""
    return _claim(workspace, "work", spec.storage.size, spec.storage.class_)


def harness_claim(workspace: Mapping[str, Any], spec: WorkspaceSpec) -> Object:
    """The Harness's volume: its conversation logs, on a volume of their own so that an
    Agent that fills the work volume cannot stop the Harness recording (ADR 0037)."""
    return _claim(workspace, "harness", spec.storage.harnessSize, spec.storage.class_)


def claim_name(workspace: str, which: str) -> str:
    return names.object_name(workspace, f"-kubeturn-{which}")


def _claim(workspace: Mapping[str, Any], which: str, size: str, class_: str | None) -> Object:
    meta = workspace["metadata"]
    claim: Object = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(claim_name(meta["name"], which), meta["namespace"], workspace),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
    if class_:
        claim["spec"]["storageClassName"] = class_
    return claim


def sandbox_pod(
    workspace: Mapping[str, Any],
    spec: WorkspaceSpec,
    *,
    image: str,
    orchestrator_url: str,
    providers_yaml: str,
    harness_token_sha256: str,
    require_confinement: bool = False,
    resources: SandboxResources | None = None,
    default_model: str | None = None,
    tracing: SandboxTracing | None = None,
) -> Object:
    """The sandbox: an init container clones each repo slot; the ``harness`` container
    serves Turns; the ``tools`` container runs every Agent's tool (ADR 0035).

    The two long-running containers share no secret: the Harness holds the tokens, the
    provider keys and the conversation logs; the toolbox, in its own PID namespace (the
    Pod does not share one), holds the work tree and nothing else, and serves the
    Harness's uid alone over a socket in an ``emptyDir`` they share. The work volume
    (clones, worktrees) and the Harness's volume (conversation logs) are separate claims
    that outlive the Pod. Every container has requests and limits (``resources``, the
    chart's ``sandbox.resources``; the Workspace's ``spec.resources`` over the tools
    container's, ADR 0053). The Harness runs an Agent that names no model on the
    Workspace's ``spec.defaultModel``, else on ``default_model`` (the chart's; ADR 0060).
    ``restartPolicy: Always``: the kubelet restarts a container
    that exits, inside the same Pod; the Pod itself ends (``Failed``) only when it is
    evicted or its node goes, and then the operator makes a new one
    (``kubeturn.k8s.sandboxes``). A deleted Pod's containers get ``SANDBOX_GRACE_S`` to
    stop.
    """
    meta = workspace["metadata"]
    name = meta["name"]
    tokens = token_secret_name(name)
    image = spec.image or image
    model = spec.defaultModel or default_model
    sized = resources or SandboxResources()
    security = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    as_tools = {**security, "runAsUser": TOOL_UID, "runAsGroup": TOOL_UID}
    work = {"name": "workspace", "mountPath": WORK_ROOT, "subPath": WORK_SUBPATH}
    toolbox = {"name": "toolbox", "mountPath": TOOLBOX_DIR}
    # A slot's credentials are mounted into its own clone container only (ADR 0033).
    clones = [
        clone_containers.container(
            slot,
            repo,
            image=image,
            work=work,
            security=as_tools,
            resources=container_resources(sized.clone, None),
        )
        for slot, repo in spec.repos.items()
    ]
    credentials = [
        found
        for slot, repo in spec.repos.items()
        if (found := clone_containers.volume(slot, repo)) is not None
    ]
    harness = {
        "name": HARNESS_CONTAINER,
        "image": image,
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
            "--toolbox",
            TOOLBOX_SOCKET,
            *([sandboxes.DEFAULT_MODEL_FLAG, model] if model else []),
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
            *(tracing.env(namespace=meta["namespace"], workspace=name) if tracing else []),
            *spec.env,
        ],
        "envFrom": list(spec.envFrom),
        "volumeMounts": [
            {"name": "harness", "mountPath": HARNESS_HOME},
            toolbox,
            {"name": "providers", "mountPath": "/etc/kubeturn", "readOnly": True},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": HARNESS_PORT}},
        "resources": container_resources(sized.harness, None),
        "securityContext": security,
    }
    tools = {
        "name": TOOLS_CONTAINER,
        "image": image,
        "command": TOOLBOX_COMMAND,
        "args": [
            "--socket",
            TOOLBOX_SOCKET,
            "--client-uid",
            str(HARNESS_UID),
            "--scratch-root",
            f"{SCRATCH}/kubeturn",
            *(["--require-confinement"] if require_confinement else []),
        ],
        "volumeMounts": [work, toolbox, {"name": "scratch", "mountPath": SCRATCH}],
        "resources": container_resources(sized.tools, spec.resources),
        "securityContext": as_tools,
    }
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
                "runAsUser": HARNESS_UID,
                "runAsGroup": HARNESS_UID,
                "fsGroup": HARNESS_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": clones,
            "containers": [harness, tools],
            "volumes": [
                {
                    "name": "workspace",
                    "persistentVolumeClaim": {"claimName": claim_name(name, "work")},
                },
                {
                    "name": "harness",
                    "persistentVolumeClaim": {"claimName": claim_name(name, "harness")},
                },
                {"name": "toolbox", "emptyDir": {}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "providers", "configMap": {"name": providers_name(name)}},
                *credentials,
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": SANDBOX_GRACE_S,
        },
    }
    if spec.serviceAccount:
        pod["spec"]["serviceAccountName"] = spec.serviceAccount
    # What it is made from, so a Pod of an older spec is told from a current one (ADR 0032).
    made_from = sandboxes.fingerprint(pod["spec"], providers_yaml, harness_token_sha256)
    pod["metadata"]["annotations"] = made_from.annotations()
    return pod


def network_policy(
    workspace: Mapping[str, Any], operator: egress.Operator, rules: Sequence[Object]
) -> Object:
    """Only the operator may reach the sandbox's Harness; the sandbox reaches only what
    ``rules`` allow (``egress.plan``): with Egress among the policy types, a sandbox with
    no rule reaches nothing."""
    meta = workspace["metadata"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(sandbox_name(meta["name"]), meta["namespace"], workspace),
        "spec": {
            "podSelector": {"matchLabels": workspace_labels(meta["name"])},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [operator.peer()],
                    "ports": [{"port": HARNESS_PORT, "protocol": "TCP"}],
                }
            ],
            "egress": list(rules),
        },
    }


# ----------------------------------------------------------------------------- turns


def turn_name(run: str, turn: TurnId) -> str:
    """``<run>-<turn>``, shortened as ``names.object_name`` shortens it; a Run's dots
    are kept, so that ``a.b`` and ``a-b`` never share an AgentTurn."""
    return names.object_name(run, f"-{turn}")


INSTANCE_LABEL = f"{GROUP}/instance"
"""The conversation an AgentTurn's Submissions land on (``instance_label``)."""
TURN_SEQ_LABEL = f"{GROUP}/turn-seq"
"""The Turn's number in its Run (``t<n>``): orders the Turns of one conversation, which
``creationTimestamp`` (whole seconds) cannot (ADR 0021)."""


def instance_label(instance_id: InstanceId) -> str:
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
    retention: str | None = None,
) -> Object:
    """The AgentTurn of a Turn the Run admits. With a ``retention`` (a duration over
    zero) it carries it and the retain finalizer, from its creation: a finalizer cannot
    be added once it is being deleted (ADR 0106)."""
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
    if retention is not None:
        spec["retention"] = retention
    metadata = _metadata(
        name,
        meta["namespace"],
        run,
        **{
            **run_labels(meta["name"]),
            AGENT_LABEL: names.label_value(effect.agent),
            INSTANCE_LABEL: instance_label(effect.instance_id),
            TURN_SEQ_LABEL: str(ids.turn_seq(effect.turn)),
        },
    )
    metadata["finalizers"] = [SWEEP_FINALIZER, *([RETAIN_FINALIZER] if retention else [])]
    return {"apiVersion": GROUP_VERSION, "kind": "AgentTurn", "metadata": metadata, "spec": spec}
