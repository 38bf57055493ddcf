"""The Workspace controller: tokens, providers, volume, sandbox Pod and NetworkPolicy; a
daemon per Workspace that keeps the sandbox running and says how it is.

Each Workspace gets two tokens, kept in its Secret: the one its Harness accepts (the
pod sees only its SHA-256) and the one its Harness presents to the Orchestrator API,
which accepts it only for Turns admitted to this Workspace. The Secret is the one truth
about them (ADR 0038): the Orchestrator API holds the token it holds now and no other,
and the operator presents the Harness the one it holds now. A new
``kubeturn.dev/rotate-tokens`` on the Workspace rotates both at once (ADR 0040): the
daemon makes the Secret anew with new tokens, which refuses the old Orchestrator token
and closes the Harness client of the old Harness token, and makes the sandbox anew with
them, whatever runs on it; a Secret deleted by hand is made anew the same way at the
next look (Secrets are read by name, never watched). A Workspace made again under its
name takes none of the tokens of the one before, and a deleted one's token is forgotten.

The daemon makes the sandbox Pod again when it was deleted or ended (``sandboxes``
decides, with a bounded back-off), and when it runs an older spec than the Workspace
asks for now, once no Turn runs on it (ADR 0032); it gives the hub a new Harness
client when the Pod, its address or its tokens change (retiring the old one; the plan
decides, ADR 0100), and writes what
kubectl shows: the phase, the endpoint, ``Ready`` and why (``Invalid``, every problem
with its path, for a spec the operator cannot take), ``SandboxCurrent``,
``VolumeCurrent``, the clones the Harness reports (``repos``, ``repoCount``), and how
many Runs name the Workspace and how many of them are unfinished (``runCount``,
``activeRunCount``: counts, never a list, so its size does not grow with its Runs; kept in
memory from the Run watch's events, ADR 0087). Each Run reports its own worktrees, in its
status. A key an older operator wrote (``worktrees``) is removed at the next write. It
brings the providers ConfigMap and the NetworkPolicy up to date (the policy also when the
API server's addresses change, ``apiserver``). Its Pod's events and a new generation of
it wake it (and, while its Pod waits to be made anew, its AgentTurns' and Runs' changes);
it looks again every few seconds regardless (20 s while Ready: the counts are as of then).
It never deletes, resizes or replaces the volume, nor changes the tokens.

A Workspace whose spec does not validate (a repo ``url`` carrying credentials, which the
CRD refuses too) has nothing made or changed for it: it is ``Failed`` with
``Ready=False``, ``Invalid``, every problem at its path, until its spec changes.

A Workspace made again under the name of one just deleted takes over none of its
objects (ADR 0043): the garbage collector deletes them in the background, and until it
has, the Workspace is ``Pending``, ``EarlierObjectsGoing``, naming what it waits for; so
it is while any object it makes is being deleted (held by a finalizer). The operator
deletes only an earlier (or orphaned) token Secret itself; the earlier providers
ConfigMap, NetworkPolicy and claims it leaves to the collector, which takes them within
moments: it is not granted to delete ConfigMaps or NetworkPolicies (ADR 0039), and never
deletes a volume.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from kubeturn.api import models, validation
from kubeturn.api.common import GROUP, VERSION
from kubeturn.api.status import FINISHED, RepoStatus, WorkspacePhase, WorkspaceStatus
from kubeturn.api.workspace import WorkspaceSpec
from kubeturn.errors import Conflict, DefinitionError, DefinitionErrors, Going, NotFound
from kubeturn.k8s import (
    conditions,
    egress,
    events,
    metrics,
    objects,
    patches,
    pauses,
    sandboxes,
)
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import (
    AGENTTURNS,
    KINDS,
    PODS,
    SECRETS,
    WORKSPACES,
)
from kubeturn.orchestrator import caps
from kubeturn.orchestrator.harness_client import HarnessClient
from kubeturn_harness.wire import ReposResponse

PROBE_S = 2.0
"""How often a Workspace that is not Ready is looked at: pods start in seconds."""
READY_PROBE_S = 20.0
"""How often a Ready one is: its Pod's events wake it at once; this catches a Harness
that stopped answering in a Pod that still runs."""
ANSWERS = "the Harness answers /readyz"
HARNESS_TIMEOUT_S = 5.0
"""One readiness or repos request to the Harness; it answers in milliseconds."""
RESYNC_S = 300.0
"""How often a Workspace's other objects are compared with what it asks for, besides
when its generation changes, the operator starts and a Pod is made: a providers
ConfigMap or NetworkPolicy changed or deleted by hand is put right within 5 minutes, at
four reads per Workspace."""
LEGACY_KEYS = ("worktrees",)
"""Status keys an older operator wrote and this one does not (ADR 0087): removed at the
next write, so an upgraded cluster's Workspaces shrink to the bounded status."""
SANDBOX_LABELS = {
    "app.kubernetes.io/component": objects.SANDBOX,
    **objects.MANAGED_BY,
}
"""The labels of every sandbox Pod: the operator watches only those Pods."""

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass
class Occupancy:
    """The Runs that name one Workspace, as the Run watch last showed them."""

    runs: dict[str, bool] = field(default_factory=dict)
    """Run name → whether it is unfinished (its phase is none of ``FINISHED``)."""

    def counts(self) -> tuple[int, int]:
        """(``runCount``, ``activeRunCount``)."""
        return len(self.runs), sum(self.runs.values())


@dataclass
class Tenants:
    """Which Runs name which Workspace, kept from the events of the Run watch kopf keeps
    anyway (its first listing after a restart included), at O(1) per event: a Workspace's
    counts never take a list of Runs (ADR 0087)."""

    workspaces: dict[Key, Occupancy] = field(default_factory=dict)
    where: dict[Key, Key] = field(default_factory=dict)
    """Run (namespace, name) → the Workspace it is counted in."""

    def of(self, workspace: Key) -> Occupancy:
        """The Workspace's occupancy (the same object from now on)."""
        return self.workspaces.setdefault(workspace, Occupancy())

    def saw(self, namespace: str, run: str, workspace: str | None, unfinished: bool) -> None:
        """Run ``run`` names ``workspace`` (None: none) and is ``unfinished`` or not."""
        self.gone(namespace, run)
        if workspace is not None:
            self.where[namespace, run] = (namespace, workspace)
            self.of((namespace, workspace)).runs[run] = unfinished

    def gone(self, namespace: str, run: str) -> None:
        """Run ``run`` is being deleted or is gone."""
        workspace = self.where.pop((namespace, run), None)
        if workspace is not None:
            self.workspaces[workspace].runs.pop(run, None)


@dataclass(frozen=True)
class Looked:
    """What a Workspace's other objects were made from: its generation and the API
    server's addresses (its NetworkPolicy keeps them out); and when, in monotonic time."""

    generation: int | None
    api_server: egress.ApiServer | None
    at: float


@dataclass
class Sandbox:
    """What a Workspace's daemon keeps between its looks, and across its own restarts."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    memory: sandboxes.Recreation = field(default_factory=sandboxes.Recreation)
    harness: sandboxes.Harness | None = None
    """Whom the Harness client the hub holds for the Workspace speaks to (the plan
    retires one of another Pod, address or tokens)."""
    written: tuple[Any, ...] | None = None
    """The status last written, so an unchanged one is not written again."""
    synced: Looked | None = None
    """What the other objects were last brought up to date from, and when."""
    volume: sandboxes.Said | None = None
    """``VolumeCurrent`` as last found."""
    tokens: str | None = None
    """The token Secret's ``harness-token-sha256`` as last read (and its Orchestrator
    token set in the registry with it)."""
    rotation: str | None = None
    """The Workspace's ``kubeturn.dev/rotate-tokens`` when its tokens were last read: a
    new one is to be read (and the tokens made anew) at once."""
    outdated: bool = False
    """Its Pod runs an older spec and waits for no Turn to run: changes of AgentTurns and
    Runs wake the daemon."""
    occupancy: Occupancy = field(default_factory=Occupancy)
    """The Runs that name the Workspace (``Tenants``), counted in its status."""

    def took(self, synced: Synced, generation: int | None, now: float) -> None:
        """The other objects were brought up to date, from ``generation``, at ``now``."""
        self.volume, self.tokens, self.rotation = synced.volume, synced.tokens, synced.rotation
        self.synced = Looked(generation, synced.api_server, now)


@dataclass(frozen=True)
class Synced:
    volume: sandboxes.Said
    """Whether the volume has what ``spec.storage`` asks for (it is never changed)."""
    tokens: str
    """The token Secret's ``harness-token-sha256``: a sandbox made with other tokens is
    made again."""
    api_server: egress.ApiServer | None
    """The API server's addresses the NetworkPolicy was made with (None: unknown)."""
    rotation: str | None
    """The Workspace's ``kubeturn.dev/rotate-tokens`` the tokens were read for."""


async def ensure_children(hub: Hub, body: dict[str, Any], spec: WorkspaceSpec) -> Synced:
    """Create what the Workspace lacks, its Pod included (a Pod there is left as it is);
    bring the rest up to date (``sync_children``, whose answer this is)."""
    synced = await sync_children(hub, body, spec)
    # A Pod there that went before it was read (the daemon deleted it to make it anew, or
    # the garbage collector took an earlier Workspace's): the daemon makes the next one.
    with contextlib.suppress(NotFound):
        await hub.kube.create(sandbox_pod(hub, body, spec, synced.tokens))
    return synced


async def sync_children(hub: Hub, body: dict[str, Any], spec: WorkspaceSpec) -> Synced:
    """Create what the Workspace lacks but its Pod, and patch the providers ConfigMap's
    data and the NetworkPolicy's spec where they differ from what the operator makes now
    (the policy's egress from ``spec.egress``, the operator's settings and the API
    server's addresses as last read). Creation is idempotent. The Orchestrator API takes
    the token Secret's token as the Workspace's one token from now on. ``Going`` while
    an object of an earlier Workspace of its name, or one being deleted, is in the way."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    stored = await _token_secret(hub, body)
    _, orchestrator_token = _tokens(stored)
    hub.registry.set_token(f"{namespace}/{name}", orchestrator_token)
    providers = objects.providers_config_map(body, hub.settings.providers_yaml)
    await _up_to_date(hub, body, providers, "data")
    api_server = await hub.api_server.look()
    operator = operator_peer(hub)
    planned = egress.plan(hub.settings.sandbox_egress, spec.egress, operator, api_server)
    policy = objects.network_policy(body, operator, planned.rules)
    # Equality, not coverage: a stored rule wider than the one asked for is put right.
    if await _up_to_date(hub, body, policy, "spec", same=egress.same_spec) and planned.withheld:
        log.warning(
            "Workspace %s/%s: its sandbox's egress leaves out: %s",
            namespace,
            name,
            "; ".join(planned.withheld),
        )
    claims = [objects.volume_claim(body, spec), objects.harness_claim(body, spec)]
    found = [await _claim(hub, body, claim) for claim in claims]
    volume = sandboxes.volume_said(found[0], spec.storage)
    return Synced(volume, _token_sha256(stored), api_server, objects.rotation(body))


async def _claim(hub: Hub, body: dict[str, Any], claim: dict[str, Any]) -> dict[str, Any]:
    """The stored claim, made if missing (a claim is never changed once made). An earlier
    Workspace's is waited for, never deleted: the garbage collector takes it."""
    stored = await _own(hub, body, claim, replace=None)
    return stored or _checked(await hub.kube.create(claim), body)


Replace = Callable[[dict[str, Any], dict[str, Any]], bool]
"""Which stored object (first argument) a Workspace (second) deletes to make its own."""


def _earlier(stored: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether ``stored`` is an earlier Workspace's: it names a Workspace of this name as
    its owner, and not this one."""
    name = body["metadata"]["name"]
    references = stored["metadata"].get("ownerReferences") or []
    return not objects.owned_by(stored, body) and any(
        ref.get("kind") == "Workspace" and ref.get("name") == name for ref in references
    )


def _foreign(stored: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether ``stored`` is not this Workspace's (an earlier one's, or orphaned)."""
    return not objects.owned_by(stored, body)


def _outdated(stored: dict[str, Any], body: dict[str, Any]) -> bool:
    """Whether the token Secret ``stored`` is not one to keep: not this Workspace's
    (``_foreign``), or made before the ``kubeturn.dev/rotate-tokens`` it asks for (its
    tokens are to be revoked, ADR 0040)."""
    return _foreign(stored, body) or objects.tokens_rotated(stored, body)


async def _own(
    hub: Hub, body: dict[str, Any], wanted: dict[str, Any], *, replace: Replace | None
) -> dict[str, Any] | None:
    """The stored object of ``wanted``'s kind and name, None if there is none. One that
    ``replace`` says is not to be kept is deleted first (the garbage collector takes an
    earlier Workspace's in its own time, and would take it from this Workspace too), so
    that a Workspace made again takes over none of the one before's objects; ``Going``
    while it, an earlier Workspace's, or any being deleted, is still there."""
    meta = wanted["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    kind = KINDS[(wanted["apiVersion"], wanted["kind"])]
    stored = await hub.kube.get(kind, namespace, name)
    deleting = stored is not None and stored["metadata"].get("deletionTimestamp")
    if stored is not None and not deleting and replace is not None and replace(stored, body):
        if _foreign(stored, body):
            why = "is not its own"
        elif objects.tokens_rotated(stored, body):
            why = f"was made before the {objects.ROTATE_TOKENS} it asks for"
        else:
            why = "is not to be kept"
        log.info(
            "Workspace %s/%s: its %s %s %s; making it anew",
            namespace,
            body["metadata"]["name"],
            wanted["kind"],
            name,
            why,
        )
        with contextlib.suppress(Conflict):  # made anew meanwhile: looked at below
            await hub.kube.delete(kind, namespace, name, uid=stored["metadata"]["uid"])
        stored = await hub.kube.get(kind, namespace, name)
    return None if stored is None else _checked(stored, body, replace)


def _checked(
    stored: dict[str, Any], body: dict[str, Any], replace: Replace | None = None
) -> dict[str, Any]:
    """``stored``, unless it is being deleted, an earlier Workspace's, or one ``replace``
    says is not to be kept (``Going``)."""
    earlier = _earlier(stored, body)
    deleting = bool(stored["metadata"].get("deletionTimestamp"))
    if not earlier and not deleting and not (replace is not None and replace(stored, body)):
        return stored
    what = f"the {stored['kind']} {stored['metadata']['name']}"
    state = "is being deleted" if deleting else "is still there"
    if earlier:
        raise Going(
            f"{what} of an earlier Workspace of this name {state}; this Workspace's is made "
            "once it is gone"
        )
    raise Going(f"{what} {state}; it is made anew once it is gone")


def operator_peer(hub: Hub) -> egress.Operator:
    """The operator's pods as its sandboxes' NetworkPolicy admits and reaches them."""
    settings = hub.settings
    return egress.Operator(settings.operator_labels, settings.operator_namespace, settings.api_port)


async def _token_secret(hub: Hub, body: dict[str, Any]) -> dict[str, Any]:
    """The Workspace's token Secret, made with new tokens when it has none (two makers at
    once both end up with the one stored). One that is not its own (an earlier
    Workspace's of its name, whose children the garbage collector takes in its own time,
    or an orphaned one), and one made before the rotation the Workspace asks for (it holds
    the tokens to be revoked), is deleted and made anew, and waited for while it is being
    deleted (``_own``): a Workspace made again never takes over the tokens of the one
    before, and a rotation gets new ones (the caller sets the new Orchestrator token,
    which refuses the old one)."""
    tokens = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    made = objects.token_secret(body, *tokens)
    stored = await _own(hub, body, made, replace=_outdated)
    return stored or _checked(await hub.kube.create(made), body, _outdated)


async def _up_to_date(
    hub: Hub,
    body: dict[str, Any],
    wanted: dict[str, Any],
    part: str,
    *,
    same: Callable[[Any, Any], bool] = sandboxes.covers,
) -> bool:
    """Create ``wanted``, or patch its ``part`` where the stored one is not the ``same``
    (by default: where it does not hold it; it may hold the API server's defaults
    besides); whether it was written. An earlier Workspace's is waited for, never deleted
    (``Going``, ADR 0043): the garbage collector takes it, and the operator may not delete
    ConfigMaps or NetworkPolicies (ADR 0039); one made by hand (no owner) is kept."""
    meta = wanted["metadata"]
    kind = KINDS[(wanted["apiVersion"], wanted["kind"])]
    stored = await _own(hub, body, wanted, replace=None)
    created = stored is None
    if stored is None:
        stored = _checked(await hub.kube.create(wanted), body)
    if same(stored.get(part), wanted[part]):
        return created
    log.info(
        "%s %s/%s: bringing its %s up to date",
        wanted["kind"],
        meta["namespace"],
        meta["name"],
        part,
    )
    await hub.kube.patch(kind, meta["namespace"], meta["name"], {part: wanted[part]})
    return True


def sandbox_pod(hub: Hub, body: dict[str, Any], spec: WorkspaceSpec, tokens: str) -> dict[str, Any]:
    """The sandbox Pod the Workspace asks for now, with the operator's settings."""
    return objects.sandbox_pod(
        body,
        spec,
        image=hub.settings.harness_image,
        orchestrator_url=hub.settings.orchestrator_url,
        providers_yaml=hub.settings.providers_yaml,
        harness_token_sha256=tokens,
        require_confinement=hub.settings.require_confinement,
        resources=hub.settings.sandbox_resources,
        default_model=hub.settings.default_model,
        tracing=hub.settings.sandbox_tracing,
    )


def _token_sha256(secret: dict[str, Any]) -> str:
    """The Secret's ``harness-token-sha256`` (the API answers ``data`` alone: the
    ``stringData`` the operator writes is folded into it)."""
    data = secret.get("data") or {}
    return base64.b64decode(data.get("harness-token-sha256", "")).decode()


def _tokens(secret: dict[str, Any]) -> tuple[str, str]:
    """The Secret's Harness token and Orchestrator token."""
    data = secret.get("data") or {}
    harness, orchestrator = (data["harness-token"], data["orchestrator-token"])
    return base64.b64decode(harness).decode(), base64.b64decode(orchestrator).decode()


@dataclass(frozen=True)
class Answer:
    """How the Harness answered: ready or not (and why), its token, its clones."""

    ready: bool
    said: str
    token: str = ""
    repos: ReposResponse | None = None
    tokens_differ: bool = False
    """The token Secret is gone or is not the one last read, or the Harness refuses its
    token (it was made anew): the other objects are synced at the next look, and a
    sandbox of other tokens is made anew."""


async def ask_harness(
    hub: Hub, namespace: str, name: str, endpoint: str, tokens: str | None
) -> Answer:
    """``/readyz``, then ``/repos`` once ready (a Harness without it reports no clones),
    with the token Secret's Harness token, as long as it is the one whose SHA-256 is
    ``tokens`` (the one last read): a Secret made anew since is read again first."""
    secret = await hub.kube.get(SECRETS, namespace, objects.token_secret_name(name))
    if secret is None:
        return Answer(False, "the token Secret is missing", tokens_differ=True)
    if _token_sha256(secret) != tokens:
        return Answer(False, "the token Secret was made anew", tokens_differ=True)
    token, _ = _tokens(secret)
    timeout = aiohttp.ClientTimeout(total=HARNESS_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            async with session.get(f"{endpoint}/readyz") as response:
                if response.status != 200:
                    said = f"the Harness is not ready (HTTP {response.status})"
                    return Answer(False, said, tokens_differ=response.status == 401)
            async with session.get(f"{endpoint}/repos") as response:
                raw = await response.read()
                if response.status != 200:
                    return Answer(True, ANSWERS, token)
    except (aiohttp.ClientError, TimeoutError) as error:
        return Answer(False, f"the Harness does not answer yet: {error or type(error).__name__}")
    try:
        repos = ReposResponse.model_validate_json(raw)
    except ValidationError:
        log.warning(
            "Workspace %s/%s: the Harness's /repos answer is not a listing", namespace, name
        )
        repos = None
    return Answer(True, ANSWERS, token, repos)


async def reconcile(hub: Hub, body: dict[str, Any], sandbox: Sandbox) -> float:
    """One look at the Workspace: read what it and its Pod are, ask ``sandboxes`` what to
    do about the Pod, the status and the Harness client, and do it; the seconds until the
    next look."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    key = (namespace, name)
    try:
        spec = _validated(hub, body)
    except DefinitionErrors as errors:
        invalid = sandboxes.Said(False, conditions.INVALID, str(errors))
        await _write(hub, body, sandbox, WorkspacePhase.FAILED, None, invalid, None, None)
        return READY_PROBE_S  # a new generation wakes the daemon at once
    # Before the Harness is offered, so before any Turn of it is admitted (ADR 0116).
    hub.caps.limit(caps.Scope(caps.WORKSPACE, f"{namespace}/{name}"), spec.maxLiveTurns)
    now = time.monotonic()
    deleting = bool(meta.get("deletionTimestamp"))  # what it owns goes with it: no sync
    looking = Looked(meta.get("generation"), await hub.api_server.look(), now)
    if not deleting and _sync_due(sandbox.synced, looking):
        try:
            synced = await sync_children(hub, body, spec)
        except Going as going:
            await _write(
                hub, body, sandbox, WorkspacePhase.PENDING, None, _going(going), None, None
            )
            return PROBE_S
        sandbox.took(synced, looking.generation, now)
    pod = sandboxes.read_pod(await hub.kube.get(PODS, namespace, objects.sandbox_name(name)))
    changes = _changes(hub, body, spec, sandbox, pod) if not deleting else ()
    busy = await _busy(hub, namespace, name) if changes else None
    endpoint = f"http://{pod.ip}:{objects.HARNESS_PORT}" if pod.ip else None
    harness = (pod.uid, endpoint, sandbox.tokens) if endpoint is not None else None
    held = sandbox.harness if hub.harness_of(namespace, name) is not None else None
    again = sandboxes.looks_again(changes, busy)
    with hub.withholding_harness(key) if again else contextlib.nullcontext():
        if again:  # while no new caller gets the Harness (ADR 0032)
            busy = await _busy(hub, namespace, name)
        plan = sandboxes.plan(
            pod,
            sandbox.memory,
            now=now,
            deleting=deleting,
            changes=changes,
            busy=busy,
            held=held,
            harness=harness,
        )
        retired = hub.harness_gone(key) if plan.client is sandboxes.Client.RETIRE else None
    if retired is not None:
        sandbox.harness = None
    sandbox.outdated = bool(changes) and plan.action is not sandboxes.Action.ROLL
    try:
        look, answer = await _carry_out(hub, body, spec, sandbox, plan, pod, now)
    finally:  # a Pod not deleted gets a new client at the next probe
        if retired is not None:
            log.info("Workspace %s/%s: closing the Harness client of its old sandbox", *key)
            await retired.close()
    if look.client is sandboxes.Client.OPEN:
        assert answer is not None, "a client is made for a Harness that answered"
        assert endpoint is not None, "a Harness that answered has an address"
        hub.harness_ready(key, HarnessClient(endpoint, answer.token))
        sandbox.harness = harness
    if look.resync:
        sandbox.synced = None
    ready = look.phase is WorkspacePhase.READY
    repos = answer.repos if answer is not None and ready else None
    await _write(
        hub, body, sandbox, look.phase, endpoint if ready else None, look.ready, plan.current, repos
    )
    if look.wait_s is not None:
        return look.wait_s
    return READY_PROBE_S if ready else PROBE_S


def _changes(
    hub: Hub, body: dict[str, Any], spec: WorkspaceSpec, sandbox: Sandbox, pod: sandboxes.Pod
) -> tuple[str, ...]:
    """The parts in which a live Pod differs from the one the Workspace asks for now."""
    if pod.state not in sandboxes.LIVE:
        return ()
    assert sandbox.tokens is not None, "the first look syncs the other objects"
    wanted = sandboxes.made_from(sandbox_pod(hub, body, spec, sandbox.tokens))
    assert wanted is not None, "the builder annotates every Pod"
    return sandboxes.changed(pod.made_from, wanted)


async def _carry_out(
    hub: Hub,
    body: dict[str, Any],
    spec: WorkspaceSpec,
    sandbox: Sandbox,
    plan: sandboxes.Plan,
    pod: sandboxes.Pod,
    now: float,
) -> tuple[sandboxes.Look, Answer | None]:
    """Do what ``plan`` says about the Pod; how the look ends (``sandboxes.looked``), and
    the Harness's answer to a probe."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    memory = sandbox.memory
    if plan.action is sandboxes.Action.DELETE:
        await hub.kube.delete(PODS, namespace, objects.sandbox_name(name))
        await events.post(hub.kube, body, events.SANDBOX_ENDED, pod.said, events.WARNING)
    elif plan.action is sandboxes.Action.ROLL:
        await hub.kube.delete(PODS, namespace, objects.sandbox_name(name))
        assert plan.current is not None, "a roll says why"
        await events.post(hub.kube, body, events.SANDBOX_UPDATED, plan.current.message)
    elif plan.action is sandboxes.Action.CREATE:
        again, refused_before, rolled = memory.seen, memory.refusal, memory.rolling
        memory.making(now)
        try:
            synced = await ensure_children(hub, body, spec)
        except ApiException as refused:
            said = f"the API refused the sandbox: HTTP {refused.status} {refused.reason}"
            if said != refused_before:  # one Event per refusal, not one per try
                await events.post(hub.kube, body, events.SANDBOX_REFUSED, said, events.WARNING)
            return sandboxes.looked(plan, memory, now=now, refused=said), None
        except Going as going:
            sandbox.synced = None
            return sandboxes.looked(plan, memory, now=now, waiting=_going(going)), None
        sandbox.took(synced, meta.get("generation"), now)
        if again and not rolled:  # a roll said so when it deleted the old Pod
            await events.post(hub.kube, body, events.SANDBOX_RECREATED, plan.message)
    elif plan.action is sandboxes.Action.PROBE and pod.ip:
        endpoint = f"http://{pod.ip}:{objects.HARNESS_PORT}"
        answer = await ask_harness(hub, namespace, name, endpoint, sandbox.tokens)
        probe = sandboxes.Probe(answer.ready, answer.said, answer.tokens_differ)
        held = hub.harness_of(namespace, name) is not None
        current = sandbox.synced is not None
        return sandboxes.looked(
            plan, memory, now=now, probe=probe, held=held, synced=current
        ), answer
    return sandboxes.looked(plan, memory, now=now), None


def _going(going: Going) -> sandboxes.Said:
    """``Ready`` while an object in the Workspace's way is being deleted."""
    return sandboxes.Said(False, conditions.EARLIER_OBJECTS_GOING, str(going))


def _validated(hub: Hub, body: dict[str, Any]) -> WorkspaceSpec:
    """The Workspace's spec; ``DefinitionErrors`` naming each problem's path otherwise,
    among them a ``spec.defaultModel`` whose provider the operator's providers do not
    define (ADR 0060)."""
    meta = body["metadata"]
    document = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": body["spec"],
    }
    spec = validation.validate_workspace(document).spec
    if spec.defaultModel is not None:
        providers = models.provider_names(hub.settings.providers_yaml)
        why = models.unknown_provider(spec.defaultModel, providers)
        if why is not None:
            raise DefinitionErrors([DefinitionError("spec.defaultModel", why)])
    return spec


def _sync_due(synced: Looked | None, now: Looked) -> bool:
    """Whether the other objects are to be compared: first, then on a new generation or
    new API server addresses, and every ``RESYNC_S``."""
    return (
        synced is None
        or (synced.generation, synced.api_server) != (now.generation, now.api_server)
        or now.at - synced.at >= RESYNC_S
    )


async def _busy(hub: Hub, namespace: str, name: str) -> str | None:
    """What runs on the Workspace (``sandboxes.what_runs``): its AgentTurns (they carry no
    label naming it, so the namespace's are listed; only while a roll waits) and the execs
    of the Runs this operator drives in it (in memory: the leader holds every Run's actor)."""
    exec_runs = [run for run, actor in hub.runs_in(f"{namespace}/{name}") if actor.core.execs]
    turns = await hub.kube.list(AGENTTURNS, namespace)
    return sandboxes.what_runs(turns, name, exec_runs)


async def _write(
    hub: Hub,
    body: dict[str, Any],
    sandbox: Sandbox,
    phase: WorkspacePhase,
    endpoint: str | None,
    ready: sandboxes.Said,
    current: sandboxes.Said | None,
    repos: ReposResponse | None,
) -> None:
    """Patch the status when what it says changed (the Runs counted in it included), or
    when it holds a key of an older operator's (``LEGACY_KEYS``, written null);
    ``current`` (``SandboxCurrent``) and ``sandbox.volume`` (``VolumeCurrent``) None, and
    ``repos`` None, keep the last ones."""
    meta = body["metadata"]
    generation = meta.get("generation")
    reported = (
        None if repos is None else {s: c.model_dump() for s, c in sorted(repos.repos.items())}
    )
    runs, active = sandbox.occupancy.counts()
    said = (phase, endpoint, ready, current, sandbox.volume, reported, generation, runs, active)
    legacy = [key for key in LEGACY_KEYS if key in (body.get("status") or {})]
    if said == sandbox.written and not legacy:
        return
    written = conditions.put(
        (body.get("status") or {}).get("conditions", []),
        conditions.READY,
        ready.status,
        ready.reason,
        ready.message,
        generation,
    )
    for type_, condition in (
        (conditions.SANDBOX_CURRENT, current),
        (conditions.VOLUME_CURRENT, sandbox.volume),
    ):
        if condition is not None:
            written = conditions.put(
                written,
                type_,
                condition.status,
                condition.reason,
                condition.message,
                generation,
            )
    status = WorkspaceStatus(
        phase=phase,
        endpoint=endpoint,
        podName=objects.sandbox_name(meta["name"]),
        conditions=written,
        runCount=runs,
        activeRunCount=active,
        observedGeneration=generation,
    )
    gone: set[str] = set()
    if reported is not None:
        # A merge patch merges maps: a slot that went is written null to remove it.
        gone = set((body.get("status") or {}).get("repos") or {}) - set(reported)
        status = status.model_copy(update={"repos": _repos(reported), "repoCount": len(reported)})
    patch = patches.status(status, removed={"repos": sorted(gone)} if gone else None)
    patch["status"].update(dict.fromkeys(legacy))  # a merge patch's null removes the key
    await hub.kube.patch(WORKSPACES, meta["namespace"], meta["name"], patch, status=True)
    sandbox.written = said


def _repos(reported: dict[str, Any]) -> dict[str, RepoStatus]:
    """The clones the Harness reported (slot → its ``/repos`` entry) as the status holds
    them: the fields ``RepoStatus`` has (the path, the commit)."""
    return {
        slot: RepoStatus(path=clone["path"], commit=clone.get("commit"))
        for slot, clone in reported.items()
    }


RunEvents = Callable[[kopf.RawEvent, kopf.Body, str | None, str], None]
"""What the Workspaces take from each event of a Run (the Run controller's one event
handler calls it: one handler invocation per event, not one per controller)."""


def register(hub: Hub, registry: kopf.OperatorRegistry) -> RunEvents:
    """Register the Workspace handlers with kopf; answer what the Run controller's event
    handler calls with each Run's events."""
    kept: dict[Key, Sandbox] = {}
    tenants = Tenants()

    def wake(namespace: str | None, workspace: str | None, *, if_outdated: bool = False) -> None:
        """Wake the Workspace's daemon (``if_outdated``: only while its Pod waits to roll)."""
        sandbox = kept.get((namespace or "", workspace or ""))
        if sandbox is not None and (sandbox.outdated or not if_outdated):
            sandbox.wake.set()

    @kopf.on.startup(registry=registry)
    async def watch_only_sandboxes(settings: kopf.OperatorSettings, **_: Any) -> None:
        """Watch the sandbox Pods alone (a server-side selector), not every Pod. Secrets
        are never listed or watched: RBAC cannot limit those to the labelled ones, so that
        would take reading every Secret (ADR 0040); the token Secrets are read by name."""
        selector = ",".join(f"{k}={v}" for k, v in SANDBOX_LABELS.items())
        settings.watching.label_selectors["v1", "pods"] = selector

    @kopf.on.resume(GROUP, VERSION, "workspaces", registry=registry)
    @kopf.on.create(GROUP, VERSION, "workspaces", registry=registry)
    @metrics.counting_errors("workspaces")
    async def create(body: kopf.Body, **_: Any) -> None:
        try:
            spec = _validated(hub, _plain(body))
        except DefinitionErrors:
            return  # the daemon says what is wrong in the status
        with contextlib.suppress(Going):  # the daemon says what it waits for, and waits
            await ensure_children(hub, _plain(body), spec)

    @kopf.daemon(GROUP, VERSION, "workspaces", cancellation_timeout=5, registry=registry)
    @metrics.counting_errors("workspaces")
    async def keep_sandbox(body: kopf.Body, stopped: kopf.DaemonStopped, **_: Any) -> None:
        key = (str(body["metadata"]["namespace"]), str(body["metadata"]["name"]))
        sandbox = kept.setdefault(key, Sandbox(occupancy=tenants.of(key)))
        try:
            while not stopped:
                seconds = await reconcile(hub, _plain(body), sandbox)
                await pauses.pause_or_wake(stopped, sandbox.wake, seconds)
        finally:
            reason = stopped.reason or kopf.DaemonStoppingReason(0)
            if kopf.DaemonStoppingReason.RESOURCE_DELETED in reason:
                # Before kopf lets the Workspace go (its finalizer): one made again under
                # its name registers its own token after this.
                kept.pop(key, None)
                hub.registry.forget_token(f"{key[0]}/{key[1]}")
                hub.caps.limit(caps.Scope(caps.WORKSPACE, f"{key[0]}/{key[1]}"), None)
                client = hub.harness_gone(key)
                if client is not None:
                    await client.close()

    @kopf.on.event("v1", "pods", labels=SANDBOX_LABELS, registry=registry)
    async def sandbox_changed(namespace: str | None, body: kopf.Body, **_: Any) -> None:
        """A sandbox Pod changed: its Workspace (its controller, whose name the Pod's
        label may carry only shortened) looks at it now."""
        wake(namespace, objects.controller_name(body, "Workspace"))

    @kopf.on.event(GROUP, VERSION, "workspaces", registry=registry)
    async def workspace_changed(
        body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> None:
        """A new generation (its spec changed): its Pod may be of an older spec now. A new
        ``kubeturn.dev/rotate-tokens``: its tokens are made anew now (ADR 0040), which
        revokes the old ones and makes its sandbox anew (ADR 0038)."""
        sandbox = kept.get((namespace or "", name))
        if sandbox is not None and objects.rotation(body) != sandbox.rotation:
            sandbox.synced = None
            sandbox.wake.set()
        generation = body["metadata"].get("generation")
        if generation != (body.get("status") or {}).get("observedGeneration"):
            wake(namespace, name)

    @kopf.on.event(GROUP, VERSION, "agentturns", registry=registry)
    async def turn_changed(spec: kopf.Spec, namespace: str | None, **_: Any) -> None:
        """A Turn settled or went: the Pod of an older spec may be made anew now."""
        wake(namespace, (spec.get("workspaceRef") or {}).get("name"), if_outdated=True)

    def run_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str
    ) -> None:
        """Count the Run in the Workspace it names (``Tenants``; its status says so at the
        Workspace's next look, which this does not hasten). Any change of a Run (an exec
        that ended is written to its status, the Run finished or went) may let a Pod of an
        older spec be made anew."""
        where = namespace or ""
        try:
            workspace = objects.workspace_of(body)
        except (KeyError, TypeError):  # a spec the Run's own controller says is wrong
            workspace = None
        if event.get("type") == "DELETED" or body["metadata"].get("deletionTimestamp"):
            tenants.gone(where, name)
        else:
            phase = (body.get("status") or {}).get("phase")
            tenants.saw(where, name, workspace, phase not in FINISHED)
        wake(namespace, workspace, if_outdated=True)

    return run_changed


def _plain(body: kopf.Body) -> dict[str, Any]:
    """kopf's live body as a plain dict (a copy)."""
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
