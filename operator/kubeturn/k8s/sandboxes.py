"""What a Workspace's sandbox Pod's state means, and what its controller does about it:
leave it, probe its Harness, delete it, or make it (again, after a bounded back-off).

The Pod runs with ``restartPolicy: Always``: a container that exits is restarted in the
same Pod by the kubelet, with the kubelet's own back-off, and the Pod keeps its address.
A Pod ends (``Failed``) only when it is evicted, its node shuts down or it is deleted;
then a new one is made, with the same name and volume, once the old one is gone (so two
Harnesses never share the conversation logs; ADR 0024).

A Pod carries the fingerprint of what it was made from (its spec, the providers file
and its tokens); one whose fingerprint is not the one the Workspace asks for now is made
again, without a back-off step, once no Turn runs on it (ADR 0032), or at once when its
tokens were made anew (ADR 0038). The volume is compared with ``spec.storage`` and only
reported.

It also decides the fate of the Workspace's Harness client, which the hub holds for the
Workspace controller alone to offer and retire (ADR 0100): a client of another Pod,
address or tokens than the Pod's now, or of a Pod being rolled, is retired and closed; a
new one is made only once the Harness answered and none is held. A look that may roll
an idle Pod looks again at what runs while the client is withheld from new callers
(``looks_again``). Pure: no IO, no clock, no kopf.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Any

from kubernetes.utils import quantity

from kubeturn.api.common import GROUP
from kubeturn.api.status import WorkspacePhase
from kubeturn.api.workspace import Storage
from kubeturn.k8s import conditions

BACKOFF_FIRST_S = 10.0
"""The wait before the second new Pod in a row that never got Ready: the kubelet's first
CrashLoopBackOff step, so a sandbox that cannot start costs the cluster what a crashing
container does."""
BACKOFF_MAX_S = 300.0
"""The longest wait between new Pods (5 minutes, the kubelet's cap)."""
STABLE_S = 600.0
"""How long a Harness must have been Ready before its Pod's next end counts as the first
again (10 minutes, as the kubelet resets a container's back-off)."""


DELETED = "the sandbox Pod was deleted"

HASH_ANNOTATION = f"{GROUP}/sandbox-hash"
"""The sha256 of what a sandbox Pod was made from: its spec, the providers file and the
SHA-256 of the token its Harness accepts."""
PARTS_ANNOTATION = f"{GROUP}/sandbox-parts"
"""A short digest of each part of that (JSON), so that what changed can be named."""
PART_DIGEST_CHARS = 12
"""48 bits of a part's sha256: enough to tell one part's versions apart; whether a Pod is
current is decided by the whole hash."""
HARNESS_CONTAINER = "harness"
"""The sandbox Pod's container that serves Turns (as ``objects.sandbox_pod`` names it)."""
TOOLS_CONTAINER = "tools"
"""The sandbox Pod's container where the Agents' tools run (the toolbox)."""
DEFAULT_MODEL_FLAG = "--default-model"
"""The Harness's flag that names the model of an Agent that names none (ADR 0060)."""
UNRECORDED = "unrecorded"
"""What changed, for a Pod that carries no fingerprint (made before Pods carried one)."""
TOKENS = "tokens"
"""The part that is the token Secret's ``harness-token-sha256``: a Pod whose tokens were
made anew (revoked) is made again at once, whatever runs on it (ADR 0038)."""


@dataclass(frozen=True)
class Fingerprint:
    """What a sandbox Pod is made from: one hash of it all, and a digest of each part."""

    digest: str
    parts: Mapping[str, str] = field(default_factory=dict)

    def annotations(self) -> dict[str, str]:
        return {HASH_ANNOTATION: self.digest, PARTS_ANNOTATION: _canonical(dict(self.parts))}


def fingerprint(pod_spec: Mapping[str, Any], providers_yaml: str, tokens: str) -> Fingerprint:
    """The fingerprint of a Pod made from ``pod_spec`` with the providers file and the
    token Secret's ``harness-token-sha256`` (both read once, at the Harness's start: a
    Secret made anew, after someone deleted it, holds tokens the running Harness does not
    know): equal inputs give an equal fingerprint in every process, whatever the order of
    their maps' keys."""
    parts = {**_parts(pod_spec, providers_yaml), TOKENS: tokens}
    return Fingerprint(
        _digest({"spec": pod_spec, "providers": providers_yaml, TOKENS: tokens}),
        {name: _digest(value)[:PART_DIGEST_CHARS] for name, value in parts.items()},
    )


def _parts(pod_spec: Mapping[str, Any], providers_yaml: str) -> dict[str, Any]:
    """The Pod's spec cut along what a person changes: ``image`` (every container's),
    ``env`` and ``envFrom`` (the Harness's), ``defaultModel`` (the Harness's
    ``--default-model``), ``resources`` (the tools'), ``repos`` (the clone init
    containers), ``serviceAccount``, ``providers``, and ``template``: all the rest, which
    the operator's version puts in every sandbox."""
    template = copy.deepcopy(dict(pod_spec))
    containers = [*template.get("initContainers", []), *template.get("containers", [])]
    images = [container.pop("image", None) for container in containers]
    harness = _container(template, HARNESS_CONTAINER)
    parts = {
        "image": images,
        **{key: harness.pop(key, None) for key in ("env", "envFrom")},
        "defaultModel": _pop_flag(harness, DEFAULT_MODEL_FLAG),
        "resources": _container(template, TOOLS_CONTAINER).pop("resources", None),
        "repos": template.pop("initContainers", []),
        "serviceAccount": template.pop("serviceAccountName", None),
        "providers": providers_yaml,
    }
    return {**parts, "template": template}


def _pop_flag(container: dict[str, Any], flag: str) -> str | None:
    """The value of ``flag`` in the container's args, taken out of them (None: absent)."""
    args = list(container.get("args") or [])
    if flag not in args[:-1]:
        return None
    at = args.index(flag)
    value = str(args[at + 1])
    container["args"] = args[:at] + args[at + 2 :]
    return value


def _container(pod_spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        (c for c in pod_spec.get("containers", []) if c.get("name") == name), {}
    )
    return found


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def made_from(pod: Mapping[str, Any]) -> Fingerprint | None:
    """The fingerprint a Pod carries; None for one made before Pods carried one."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    digest = annotations.get(HASH_ANNOTATION)
    if not digest:
        return None
    try:
        parts = json.loads(annotations.get(PARTS_ANNOTATION) or "{}")
    except ValueError:
        parts = {}
    named = {str(k): str(v) for k, v in parts.items()} if isinstance(parts, dict) else {}
    return Fingerprint(str(digest), named)


def changed(made: Fingerprint | None, wanted: Fingerprint) -> tuple[str, ...]:
    """The parts in which a Pod made from ``made`` differs from one made now (sorted);
    none when it is current."""
    if made is None:
        return (UNRECORDED,)
    if made.digest == wanted.digest:
        return ()
    names = tuple(sorted(n for n, d in wanted.parts.items() if made.parts.get(n) != d))
    return names or ("template",)


def _older(changes: Sequence[str]) -> str:
    """What a Pod whose parts ``changes`` differ runs, for a person."""
    if tuple(changes) == (UNRECORDED,):
        return "the sandbox Pod runs a spec it carries no record of (an earlier operator made it)"
    return f"the sandbox Pod runs an older spec ({', '.join(changes)} changed)"


class PodState(Enum):
    MISSING = "missing"
    TERMINATING = "terminating"
    ENDED = "ended"
    """``Failed`` or ``Succeeded``: it will not run again; it is deleted and made anew."""
    STARTING = "starting"
    RUNNING = "running"


@dataclass(frozen=True)
class Pod:
    """The parts of a sandbox Pod its Workspace's controller acts on."""

    state: PodState
    uid: str | None = None
    ip: str | None = None
    said: str = ""
    """What the Pod says, for a person: its phase, why it ended, containers waiting."""
    made_from: Fingerprint | None = None
    """What it was made from (None: it carries no record of it)."""


def read_pod(pod: Mapping[str, Any] | None) -> Pod:
    if pod is None:
        return Pod(PodState.MISSING, said=DELETED)
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    uid = meta.get("uid")
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        return Pod(PodState.TERMINATING, uid, said=DELETED)
    if phase in ("Failed", "Succeeded"):
        why = ": ".join(part for part in (status.get("reason"), status.get("message")) if part)
        said = f"the sandbox Pod {'failed' if phase == 'Failed' else 'exited'}"
        return Pod(PodState.ENDED, uid, said=f"{said}: {why}" if why else said)
    waiting = _waiting(status)
    made = made_from(pod)
    if phase == "Running" and status.get("podIP"):
        return Pod(PodState.RUNNING, uid, status["podIP"], said=waiting, made_from=made)
    said = f"the sandbox Pod is {phase}" + (f" ({waiting})" if waiting else "")
    return Pod(PodState.STARTING, uid, said=said, made_from=made)


LIVE = frozenset({PodState.STARTING, PodState.RUNNING})
"""States of a Pod that is, or is about to be, the Workspace's sandbox."""


def _waiting(status: Mapping[str, Any]) -> str:
    """Containers waiting for something other than their start: ``name: reason: message``.

    A container waiting to restart after it failed is known by the last line of what it
    said as it ended (a clone container's says why it could not clone, ADR 0033), else by
    the wait's own message."""
    found = []
    for container in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in ("ContainerCreating", "PodInitializing"):
            ended = ((container.get("lastState") or {}).get("terminated") or {}).get("message")
            said = ended.strip().splitlines()[-1] if ended and ended.strip() else None
            parts = (container.get("name"), reason, said or waiting.get("message"))
            found.append(": ".join(part for part in parts if part))
    return "; ".join(found)


def backoff_s(made: int) -> float:
    """Seconds between the new Pod ``made`` (1 for the first new one since the Harness was
    last Ready for good) and the next: 10, 20, 40, … up to 300."""
    return min(BACKOFF_FIRST_S * 2.0 ** max(made - 1, 0), BACKOFF_MAX_S)


@dataclass
class Recreation:
    """What the controller remembers between its looks at the Pod (in memory: after an
    operator restart the next new Pod is the first again)."""

    seen: bool = False
    """A Pod of this Workspace was seen: one that is gone now is made *again*."""
    why: str | None = None
    """Why the current recreation began (the old Pod's end), until a Harness is Ready."""
    refusal: str | None = None
    """Why the API refused the last Pod made (a quota, an invalid spec), until one is made."""
    made: int = 0
    """Pods made again since a Harness was last Ready for ``STABLE_S``."""
    next_at: float = 0.0
    """When (monotonic seconds) the next Pod may be made."""
    ready_since: float | None = None
    rolling: bool = False
    """The last Pod was deleted because it ran an older spec: the next one is made at once
    and takes no back-off step (it replaces a Pod that worked; it is no failure)."""

    def making(self, now: float) -> None:
        """A Pod is being made now. The Workspace's first is free, and so is one that
        replaces a Pod of an older spec; each other one made again (or after a refusal)
        moves the next one out by the back-off."""
        if self.rolling:
            self.rolling = False
        elif self.seen or self.refusal:
            self.made += 1
            self.next_at = now + backoff_s(self.made)
        self.refusal = None

    def refused(self, why: str) -> None:
        self.refusal = why

    def ready(self, now: float) -> None:
        """The Harness answers: the recreation is over; once it has answered for
        ``STABLE_S``, the back-off starts over."""
        self.why = None
        if self.ready_since is None:
            self.ready_since = now
        elif now - self.ready_since >= STABLE_S:
            self.made = 0

    def not_ready(self) -> None:
        self.ready_since = None


class Action(Enum):
    NOTHING = "nothing"
    PROBE = "probe"
    """The Pod runs: ask its Harness whether it is ready."""
    DELETE = "delete"
    """The Pod ended: delete it, so a new one can take its name."""
    CREATE = "create"
    """No Pod: make it (and whatever else of the Workspace is missing)."""
    ROLL = "roll"
    """The Pod runs an older spec and no Turn runs on it: delete it, to make it anew."""


class Client(Enum):
    """What becomes of the Workspace's Harness client."""

    KEEP = "keep"
    """The client held (if any) serves on; none is made."""
    RETIRE = "retire"
    """The client held is of another Pod, address or tokens, or its Pod is rolled: no
    caller gets it from now on, and it is closed (its tokens may be revoked)."""
    OPEN = "open"
    """None is held and the Harness answers: a client of it is made and offered."""


Harness = tuple[str | None, str, str | None]
"""Whom a Harness client speaks to: (Pod uid, endpoint, the ``harness-token-sha256`` of
the tokens it presents)."""


@dataclass(frozen=True)
class Said:
    """A condition as the controller writes it: status, reason, message."""

    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    action: Action
    phase: WorkspacePhase
    reason: str
    message: str
    wait_s: float | None = None
    """When to look again at the latest (None: the controller's usual pace)."""
    current: Said | None = None
    """``SandboxCurrent``; None while there is no live Pod to compare (it says what it said)."""
    client: Client = Client.KEEP
    """The Harness client held: kept or retired (``OPEN`` is ``looked``'s to say)."""


def looks_again(changes: Sequence[str], busy: str | None) -> bool:
    """Whether a live Pod of an older spec (``changes``) is idle (``busy``: what runs on
    it), so that it is about to be rolled: what runs is looked at again, with the Harness
    client withheld from new callers, before ``plan`` decides, so a Turn admitted since
    the first look waits for the new sandbox rather than being cut by the roll (ADR 0032).
    A Pod whose tokens changed is rolled busy or not: no second look is needed for it."""
    return bool(changes) and busy is None


def plan(
    pod: Pod,
    memory: Recreation,
    *,
    now: float,
    deleting: bool,
    changes: Sequence[str] = (),
    busy: str | None = None,
    held: Harness | None = None,
    harness: Harness | None = None,
) -> Plan:
    """What to do about the Pod now, and what the Workspace's status says meanwhile.

    ``changes`` are the parts in which a live Pod differs from one made now (``changed``);
    ``busy`` says what runs on the Workspace (a Turn, an exec), None when nothing does. A
    Pod of an older spec is deleted, to be made anew at once, only when nothing runs on
    it; until then it serves on, and ``current`` says why it waits. A Pod whose tokens
    changed does not wait: they were revoked (a leak is answered by making them anew),
    so its Harness can no longer reach the Orchestrator, and the operator no longer
    presents the token it accepts; what runs on it is cut (ADR 0038).

    ``memory`` learns here that a Pod was seen and why a recreation began; the caller
    tells it when it makes a Pod (``making``) and how the Harness answered (``looked``).
    A ``PROBE`` plan's message is what to say before the Harness's own answer.

    ``held`` is whom the Harness client held speaks to (None: none is held), ``harness``
    whom a client of the Pod now would (None: the Pod has no address): the client is
    kept only when they are the same and the Pod is not rolled.
    """
    planned = _plan(pod, memory, now=now, deleting=deleting, changes=changes, busy=busy)
    if held is None or (held == harness and planned.action is not Action.ROLL):
        return planned
    return dataclasses.replace(planned, client=Client.RETIRE)


def _plan(
    pod: Pod,
    memory: Recreation,
    *,
    now: float,
    deleting: bool,
    changes: Sequence[str],
    busy: str | None,
) -> Plan:
    pending = WorkspacePhase.PENDING
    if pod.state is not PodState.MISSING:
        memory.seen = True
    if deleting:
        return Plan(
            Action.NOTHING,
            WorkspacePhase.TERMINATING,
            conditions.TERMINATING,
            "the Workspace is being deleted",
        )
    if pod.state in LIVE:
        current = Said(
            True, conditions.UP_TO_DATE, "the sandbox Pod was made from the Workspace as it is"
        )
        if changes:
            older = _older(changes)
            if busy is None or TOKENS in changes:
                why = "no Turn runs on it" if busy is None else f"its tokens were revoked; {busy}"
                memory.why, memory.rolling = f"{older}; {why}", True
                return Plan(
                    Action.ROLL,
                    pending,
                    conditions.RECREATING,
                    f"{memory.why}: deleting it to make anew",
                    current=Said(False, conditions.SPEC_CHANGED, f"{older}; making it anew"),
                )
            current = Said(
                False,
                conditions.SPEC_CHANGED,
                f"{older}; it is made anew when no Turn runs on it ({busy})",
            )
        action = Action.PROBE if pod.state is PodState.RUNNING else Action.NOTHING
        return Plan(action, pending, _starting(memory), _said(memory, pod.said), current=current)
    if pod.state is PodState.ENDED:
        memory.why = pod.said
        return Plan(
            Action.DELETE, pending, conditions.RECREATING, f"{pod.said}; deleting it to make anew"
        )
    if pod.state is PodState.TERMINATING:
        memory.why = memory.why or pod.said
        return Plan(
            Action.NOTHING,
            pending,
            conditions.RECREATING,
            f"{memory.why}; a new one follows once it is gone",
        )
    if memory.seen:
        memory.why = memory.why or pod.said
    left = memory.next_at - now
    if memory.refusal is not None:
        if left > 0:
            return Plan(
                Action.NOTHING,
                WorkspacePhase.FAILED,
                conditions.FAILED,
                f"{memory.refusal}; trying again after a back-off of {backoff_s(memory.made):g} s",
                wait_s=left,
            )
        return Plan(Action.CREATE, WorkspacePhase.FAILED, conditions.FAILED, memory.refusal)
    if memory.rolling:
        return Plan(Action.CREATE, pending, conditions.RECREATING, f"{memory.why}; making it anew")
    if not memory.seen:
        return Plan(Action.CREATE, pending, conditions.STARTING, "making the sandbox Pod")
    if left > 0:
        return Plan(
            Action.NOTHING,
            pending,
            conditions.RECREATING,
            f"{memory.why}; a new one is made after a back-off of {backoff_s(memory.made):g} s",
            wait_s=left,
        )
    return Plan(Action.CREATE, pending, conditions.RECREATING, f"{memory.why}; making a new one")


@dataclass(frozen=True)
class Probe:
    """How the Harness of a ``PROBE`` plan's Pod answered."""

    ready: bool
    said: str
    tokens_differ: bool = False
    """Its token Secret is gone or made anew, or it refuses the token (made anew)."""


@dataclass(frozen=True)
class Look:
    """How a look at the Workspace ends: what its status says, whether a client of its
    Harness is made, and when to look again."""

    phase: WorkspacePhase
    ready: Said
    """``Ready``."""
    client: Client = Client.KEEP
    """``OPEN``: a client of the Harness that answered is made and offered."""
    resync: bool = False
    """The other objects (the tokens among them) are read again at the next look."""
    wait_s: float | None = None
    """When to look again at the latest (None: the controller's pace for ``phase``)."""


def looked(
    planned: Plan,
    memory: Recreation,
    *,
    now: float,
    probe: Probe | None = None,
    refused: str | None = None,
    waiting: Said | None = None,
    held: bool = False,
    synced: bool = True,
) -> Look:
    """What a look ends with, once ``planned`` was carried out: the Harness's answer to a
    ``PROBE`` (``probe``), or why a ``CREATE`` made nothing: the API refused it
    (``refused``; ``memory`` keeps it for the back-off) or an object in the Workspace's
    way is still going (``waiting``). A Harness that answers ends the recreation; a
    client of it is made when none is ``held`` and the other objects are ``synced`` (not
    while the tokens are to be read again: the Secret went during the probe). ``memory``
    learns here whether the Harness is ready."""
    phase, reason, message = planned.phase, planned.reason, planned.message
    client, resync = Client.KEEP, False
    if refused is not None:
        memory.refused(refused)
        phase, reason, message = WorkspacePhase.FAILED, conditions.FAILED, refused
    elif waiting is not None:
        phase, reason, message = WorkspacePhase.PENDING, waiting.reason, waiting.message
    elif probe is not None and probe.ready:
        memory.ready(now)
        phase, reason, message = WorkspacePhase.READY, conditions.HARNESS_READY, probe.said
        client = Client.OPEN if not held and synced else Client.KEEP
    elif probe is not None:
        message = "; ".join(part for part in (message, probe.said) if part)
        resync = probe.tokens_differ
    ready = phase is WorkspacePhase.READY
    if not ready:
        memory.not_ready()
    said = Said(ready, reason, message)
    return Look(phase, said, client, resync, None if ready else planned.wait_s)


NAMED_AT_MOST = 3
"""How many Turns a Workspace's condition names when it waits for them (and how many more)."""


def what_runs(
    agent_turns: Sequence[Mapping[str, Any]], workspace: str, exec_runs: Sequence[str]
) -> str | None:
    """What runs on the Workspace, for a person: its AgentTurns that have not settled (a
    Turn runs from its state's entry until its sweep settled, docs/turn-semantics.md §1,
    whether or not a Submission of it is at work) and the Runs running an ``exec`` on it;
    None when nothing does."""
    turns = sorted(
        body["metadata"]["name"]
        for body in agent_turns
        if ((body.get("spec") or {}).get("workspaceRef") or {}).get("name") == workspace
        and not (body.get("status") or {}).get("settlement")
    )
    said = []
    if turns:
        named = ", ".join(turns[:NAMED_AT_MOST])
        more = len(turns) - NAMED_AT_MOST
        said.append(f"AgentTurn {named}" + (f" and {more} more" if more > 0 else ""))
    if exec_runs:
        said.append(f"an exec of Run {', '.join(sorted(exec_runs))}")
    return " and ".join(said) + " running" if said else None


def _starting(memory: Recreation) -> str:
    return conditions.RECREATING if memory.why else conditions.STARTING


def _said(memory: Recreation, said: str) -> str:
    """``said``, after why the sandbox is being made again (kept until it is Ready)."""
    return "; ".join(part for part in (memory.why, said) if part)


# ----------------------------------------------------------------------------- other objects

_parse_quantity: Callable[[str], Decimal] = quantity.parse_quantity
"""The official client's parser of quantities (``1Gi`` is ``1024Mi``)."""


def volume_said(claim: Mapping[str, Any], storage: Storage) -> Said:
    """``VolumeCurrent``: whether the work volume's claim has the size and class
    ``storage`` asks for. Only said: a claim is neither resized nor replaced
    (replacing it would lose the clones and worktrees). A class the spec leaves out is
    the cluster's default, whichever that is."""
    spec = claim.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    has_class = spec.get("storageClassName")
    differs = []
    if size is None or not _same_quantity(str(size), storage.size):
        differs.append(f"size {storage.size} (the claim has {size})")
    if storage.class_ and has_class != storage.class_:
        differs.append(f"class {storage.class_} (the claim has {has_class or 'none'})")
    if not differs:
        return Said(True, conditions.UP_TO_DATE, "the volume has the size and class asked for")
    return Said(
        False,
        conditions.STORAGE_CHANGED,
        f"spec.storage asks for {' and '.join(differs)}; kubeturn neither resizes nor "
        "replaces a Workspace's volume",
    )


def _same_quantity(a: str, b: str) -> bool:
    try:
        return _parse_quantity(a) == _parse_quantity(b)
    except ValueError:
        return a == b


def covers(have: Any, want: Any) -> bool:
    """Whether an object read from the API (``have``) holds all of ``want``: the same maps
    may hold more keys (the API server's defaults), lists hold as many items, each
    covering ``want``'s, and other values are equal."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(
            key in have and covers(have[key], value) for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(covers(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)
