"""The Run controller: one actor per Run, its state durable in ``Run.status``.

A kopf daemon per Run loads the manifest (an invalid one gets ``Ready=False, Invalid``
with every problem and its path, and waits for a new generation — never a crash loop;
here a Run that invokes an Agent or a command must name ``spec.workspace``, since nothing
else could run them; a spec over ``MAX_SPEC_BYTES`` gets ``Ready=False, TooLarge`` and
waits likewise, rather than fail its writes once its status grows; one the loader fails
on unforeseen, a bug, gets ``Ready=False, LoadFailed`` and waits likewise; the manifest
is checked and compiled in a thread, off the event loop: ADR 0050; a saved state it
cannot restore, of an unknown version or damaged, gets ``Ready=False,
SnapshotUnreadable`` saying why, and the Run waits, not driven, never retried),
finds or makes its Workspace (``Ready=False, WaitingForWorkspace`` while its Harness is
not known), asks the Harness for the Run's worktrees (ones it cannot make give
``Ready=False, WorktreesFailed`` with its words, and are asked for again after a
back-off) and reports them in its own ``status.worktrees`` (never on the shared
Workspace, whose status stays the same size however many Runs share it: ADR 0087), and
drives the Orchestrator core. The snapshot is written to ``Run.status``
before any effect is applied (``statuses``: the settled Turns' records as
``status.turns``, the rest as ``status.snapshot``, whence a restarted operator resumes),
every status write is built from the ``RunStatus`` model, and one that would write what
was written last is not sent (ADR 0085). The daemon never polls: it reads the spec as the
actor starts and again at each new generation, which kopf's watch announces through an
event handler (``generations``, ADR 0084); in between, running, finished or invalid, it
waits on no timer. ``spec.signals`` are sent once each (their ids live in the snapshot;
one no active state accepts is recorded ignored, with a ``SignalIgnored`` Warning Event,
and stays in the spec: ADR 0067) and ``spec.cancel`` once, the new ones of a generation
in one input. A finished Run's daemon stays, waiting: its actor answers the Orchestrator
API for its Turns and records a late signal ignored. Deleting a Run
deletes its live AgentTurns, whose finalizers sweep them, before the Run goes; then the
Harness of the shared Workspace it worked in forgets it: its worktrees and conversations
(ADR 0030).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import kopf

from kubeturn.api.common import GROUP, GROUP_VERSION, VERSION
from kubeturn.api.status import Condition, RunPhase, RunStatus, WorktreeStatus
from kubeturn.errors import (
    DefinitionErrors,
    DeliveryFailed,
    HarnessRefused,
    HarnessUnreachable,
    NotFound,
    SnapshotUnreadable,
)
from kubeturn.k8s import (
    conditions,
    events,
    harnesses,
    metrics,
    names,
    objects,
    patches,
    pauses,
    retention,
)
from kubeturn.k8s.generations import Generation
from kubeturn.k8s.hub import Hub
from kubeturn.k8s.kube import AGENTTURNS, RUNS, WORKSPACES
from kubeturn.k8s.turns import ClusterTurns
from kubeturn.k8s.workspaces import RunEvents
from kubeturn.machine.load import LoadedRun, load_run
from kubeturn.orchestrator import caps, signals, snapshots, statuses
from kubeturn.orchestrator.actor import RunActor, Signal
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.delivery import Committed, Deliverer, Remote
from kubeturn.orchestrator.effects import MakeWorktrees, StartExec
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.harness_client import HarnessCommitter, one_line
from kubeturn.orchestrator.ids import TurnId
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.turns import TurnRecord
from kubeturn.orchestrator.worktrees import Made
from kubeturn.tracing import RunTrace

DRIVE_BACKOFF_S = 10.0
"""How soon kopf runs a Run's daemon again after it failed unexpectedly (the API server
refused a write, a bug): kopf's default is 60 s. The daemon resumes from ``Run.status``,
so a run again costs one load and one Workspace lookup."""
WORKTREES_RETRY_S = 2.0
"""The first pause before asking a Harness again for worktrees it could not make; each
next one doubles, up to ``WORKTREES_RETRY_MAX_S`` (2, 4, 8, 16, 32, 60, 60, … s)."""
WORKTREES_RETRY_MAX_S = 60.0
"""The longest pause between two asks: what was fixed (a clone, the volume) is picked up
within a minute, at one request a minute to a Harness that keeps refusing."""
MAX_SPEC_BYTES = 128 * 1024
"""The largest spec (bytes of its JSON) the operator drives. A Run carries its spec
twice when applied with ``kubectl apply`` (its last-applied annotation, which the API
server caps with every other annotation at 256 KiB), and its status besides (the history
within 128 KiB, ``kubeturn.orchestrator.history.HISTORY_BYTES``): with this bound the whole
object stays far below etcd's 1.5 MiB, which would refuse the status writes of a larger
one. Every watch event and every look at a Run carries it too. Long documents belong in
the Workspace's repositories, where the Agents read them."""

LEGACY: Mapping[str, Iterable[str]] = {"snapshot": snapshots.LEGACY_KEYS}
"""A merge patch keeps the keys of an older snapshot that the new one lacks: every status
write names them, to remove them."""

log = logging.getLogger(__name__)


class StatusStore:
    """Writes the core's snapshot and what kubectl shows into ``Run.status``: a status the
    same as the one it last wrote is not written again (after a restart, the first save
    writes), and ``Ready`` keeps its ``lastTransitionTime`` until its status flips. The
    Run's worktrees, when its status does not say them yet, go in the first write."""

    def __init__(
        self,
        hub: Hub,
        namespace: str,
        name: str,
        core: RunCore,
        generation: Callable[[], int | None],
        conditions: Sequence[Mapping[str, Any]] = (),
        *,
        worktrees: RunStatus | None = None,
        removed: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        self._hub, self._namespace, self._name = hub, namespace, name
        self._core = core
        self._generation = generation
        """The Run's generation now: a signal or a cancel is a new one, acted on here."""
        self._conditions: Sequence[Mapping[str, Any] | Condition] = conditions
        """The Run's conditions as this store last wrote them (first: as read)."""
        self._written: str | None = None
        """The last patch written, as JSON."""
        self._worktrees = worktrees
        """The Run's worktrees, until a write carried them; ``removed``: their gone slots."""
        self._removed: Mapping[str, Iterable[str]] = {**(removed or {}), **LEGACY}

    async def save(self, snapshot: dict[str, Any]) -> None:
        view = self._core.view()
        phase = view.phase
        finished = phase.finished
        status = statuses.run_status(view, snapshot)
        said = view.message or f"the Run is {phase}"
        if not finished and status.acceptedEvents:
            # kubectl describe shows the condition first: what a person may send now.
            accepted = [item.model_dump(by_alias=True) for item in status.acceptedEvents]
            said += f"; it accepts now: {signals.listing(accepted)}"
        ready = conditions.put(
            [c for c in self._conditions if _type(c) == conditions.READY],
            conditions.READY,
            not finished or phase is RunPhase.SUCCEEDED,
            conditions.FINISHED if finished else conditions.RUNNING,
            said,
            self._generation(),
        )
        update: dict[str, Any] = {"conditions": ready, "observedGeneration": self._generation()}
        if self._worktrees is not None:
            update["worktrees"] = self._worktrees.worktrees
        status = status.model_copy(update=update)
        patch = patches.status(status, removed=self._removed)
        written = json.dumps(patch, sort_keys=True, separators=(",", ":"))
        if written != self._written:
            await self._hub.kube.patch(RUNS, self._namespace, self._name, patch, status=True)
            self._written, self._conditions = written, ready
            self._worktrees, self._removed = None, LEGACY
        self._hub.run_phase(f"{self._namespace}/{self._name}", phase)


def _type(condition: Mapping[str, Any] | Condition) -> Any:
    return condition.type if isinstance(condition, Condition) else condition.get("type")


def register(hub: Hub, registry: kopf.OperatorRegistry, also: RunEvents) -> None:
    """Register the Run handlers with kopf; ``also`` hears every event of a Run too."""
    watched: dict[str, Generation] = {}
    """Run key → the generation its daemon read and waits past."""

    @kopf.on.event(GROUP, VERSION, "runs", registry=registry)
    async def spec_changed(
        event: kopf.RawEvent, body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> None:
        """Any event of a Run (kopf updated its daemon's live body first): a generation
        its daemon has not read wakes it. A Run that went is forgotten."""
        key = f"{namespace}/{name}"
        if event.get("type") == "DELETED":
            watched.pop(key, None)
        elif (generation := watched.get(key)) is not None:
            generation.seen(body["metadata"].get("generation"))
        also(event, body, namespace, name)

    @kopf.daemon(
        GROUP,
        VERSION,
        "runs",
        cancellation_timeout=10,
        backoff=DRIVE_BACKOFF_S,
        registry=registry,
    )
    @metrics.counting_errors("runs")
    async def drive(
        body: kopf.Body,
        namespace: str | None,
        name: str,
        stopped: kopf.DaemonStopped,
        logger: kopf.Logger,
        **_: Any,
    ) -> None:
        assert namespace is not None, "Runs are namespaced"
        key = f"{namespace}/{name}"
        generation = watched[key] = Generation()
        loaded = await _load(hub, body, generation, stopped)
        if loaded is None:
            return
        workspace, made = await _workspace(hub, body, loaded, stopped)
        if stopped:
            return
        worktrees = _worktrees(body, made) if made is not None else None
        status = dict(body.get("status") or {})
        try:
            core = RunCore(
                loaded,
                workspace=WorkspaceView(made, names.branch(name)) if made is not None else None,
                new_id=lambda: secrets.token_hex(4),
                snapshot=statuses.resume_point(status),
            )
        except SnapshotUnreadable as error:
            if worktrees is not None:
                await _report_worktrees(hub, body, worktrees)
            await _unreadable(hub, body, str(error), logger)
            await stopped.wait()
            return
        plain = {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": dict(body["metadata"]),
        }
        store = StatusStore(
            hub,
            namespace,
            name,
            core,
            lambda: body["metadata"].get("generation"),
            list(status.get("conditions") or []),
            worktrees=worktrees,
            removed=_gone_worktrees(body, worktrees) if worktrees is not None else {},
        )
        slots = _slots(hub, namespace, name, workspace, core)
        actor = RunActor(
            core,
            turns=ClusterTurns(hub, plain, loaded, workspace, slots),
            execs=_Execs(hub, namespace, workspace),
            store=store,
            clock=time.time,
            on_record=_recorded(hub, plain),
            deliveries=_deliverer(hub, namespace, name, workspace),
            traces=_traces(hub, body),
            worktrees=_ChildWorktrees(hub, namespace, name, workspace),
            slots=slots,
        )
        hub.run_started(key, actor, f"{namespace}/{workspace}")
        try:
            await actor.start()
            hub.resumed(key)
            _post_recent(hub, plain, core.view().history)
            while not stopped:
                # Read now what was applied while no actor ran (a start, a restart) and each
                # new generation: the spec is the truth, the snapshot says which ids were sent.
                generation.reading(body["metadata"].get("generation"))
                await _send_new(hub, plain, actor, dict(body.get("spec") or {}))
                await generation.changed(stopped)
        finally:
            reason = stopped.reason or kopf.DaemonStoppingReason(0)
            deleted = kopf.DaemonStoppingReason.RESOURCE_DELETED in reason
            if reason & (
                kopf.DaemonStoppingReason.OPERATOR_EXITING
                | kopf.DaemonStoppingReason.OPERATOR_PAUSING
            ):
                # A Turn this process cannot find now may be live in an actor that closed:
                # the API must not say it is over (ADR 0047).
                hub.runs_stopping()
            await actor.close()
            if deleted:
                hub.run_gone(key)
            # Otherwise the closed actor stays: its Turns are answered 503 until the actor
            # that resumes the Run takes its place, or the process ends.

    @kopf.on.delete(GROUP, VERSION, "runs", registry=registry)
    @metrics.counting_errors("runs")
    async def sweep_all(
        body: kopf.Body, namespace: str | None, name: str, logger: kopf.Logger, **_: Any
    ) -> None:
        """Before a Run goes, every Turn it holds is swept (its AgentTurn's finalizer)
        and let go, settled ones kept for kubectl included (ADR 0106), and then the
        shared Workspace it worked in forgets it (ADR 0030)."""
        assert namespace is not None, "Runs are namespaced"
        label = objects.run_labels(name)
        while listed := await hub.kube.list(AGENTTURNS, namespace, labels=label):
            for turn in listed:
                if not turn["metadata"].get("deletionTimestamp"):
                    await hub.kube.delete(AGENTTURNS, namespace, turn["metadata"]["name"])
                elif retention.held(turn):
                    await retention.release(hub.kube, turn)
            await asyncio.sleep(0.2)
        await _forget(hub, namespace, name, dict(body.get("spec") or {}), logger)


async def _send_new(hub: Hub, run: dict[str, Any], actor: RunActor, spec: dict[str, Any]) -> None:
    """Send the actor the spec's signals it has not had (by id) and its cancel, if not
    sent yet: all in one input, so one status write. An ignored signal gets a Warning
    Event (ADR 0067). Nothing new: nothing is sent, and nothing written."""
    metrics.RUN_SPEC_READS.inc()
    view = actor.core.view()
    fresh: dict[str, Signal] = {}
    for item in list(spec.get("signals") or []):
        if item["id"] not in view.signals and item["id"] not in fresh:
            fresh[item["id"]] = Signal(item["event"], dict(item.get("data") or {}), item["id"])
    cancel = bool(spec.get("cancel")) and not view.cancelled
    if not fresh and not cancel:
        return
    await actor.send(list(fresh.values()), cancel=cancel)
    ignored = actor.core.view().ignored
    for signal in fresh.values():
        why = ignored.get(signal.id or "")
        if why is not None:
            _ignored(hub, run, signal.id or "", signal.event, why)


async def _forget(
    hub: Hub, namespace: str, run: str, spec: dict[str, Any], logger: kopf.Logger
) -> None:
    """Have the Harness of the shared Workspace the Run worked in forget it: remove its
    worktrees (their branch stays) and its conversations. A Workspace made from the Run's
    template goes with the Run, and one that is gone or going takes its volume along:
    nothing to ask. All within ``harnesses.WAIT_S``: a Harness not reached by then, or
    one that refuses, leaves them on the volume, and the Run goes anyway."""
    workspace = (spec.get("workspace") or {}).get("name")
    if not workspace:
        return
    found = await hub.kube.get(WORKSPACES, namespace, workspace)
    if found is None or found["metadata"].get("deletionTimestamp"):
        return
    deadline = time.monotonic() + harnesses.WAIT_S
    unanswered: HarnessUnreachable | None = None
    while (harness := await harnesses.wait(hub, namespace, workspace, deadline)) is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            forgot = await harness.forget_run(f"{namespace}.{run}", names.branch(run), seconds=left)
        except HarnessRefused as refused:
            logger.warning(
                f"the Harness of Workspace {workspace} refused to forget the Run, whose "
                f"worktrees and conversations stay on its volume: {refused.said}"
            )
            return
        except HarnessUnreachable as unreached:
            # The sandbox Pod may be being made again: ask the Harness serving then.
            unanswered = unreached
            await asyncio.sleep(harnesses.POLL_S)
            continue
        removed = ", ".join(sorted(tree.path for tree in forgot.worktrees.values())) or "none"
        logger.info(
            f"the Harness of Workspace {workspace} forgot the Run: worktrees removed: "
            f"{removed}; conversations: {forgot.conversations}"
        )
        return
    if time.monotonic() >= deadline:
        why = f": {unanswered}" if unanswered is not None else ""
        logger.warning(
            f"the Harness of Workspace {workspace} was not reached within "
            f"{harnesses.WAIT_S:g} s{why}; the Run's worktrees and conversations stay on "
            "its volume"
        )


async def _load(
    hub: Hub, body: kopf.Body, generation: Generation, stopped: kopf.DaemonStopped
) -> LoadedRun | None:
    """The loaded Run; an invalid or too large one, or one the loader failed on, is
    reported and waited on until a new generation (``generation`` wakes the daemon).

    ``body`` is kopf's live view: ``body["metadata"]`` is read again each time, since a
    dict taken from it once would never see a new generation. The manifest is checked
    and compiled in a thread: a Machine of thousands of states takes a good part of a
    second, which the event loop, serving every Run, must not wait for.
    """
    while not stopped:
        meta = body["metadata"]
        generation.reading(meta.get("generation"))
        metrics.RUN_SPEC_READS.inc()
        document = {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": dict(body["spec"]),
        }
        checked = await asyncio.to_thread(check, document)
        if isinstance(checked, LoadedRun):
            return checked
        reason, said = checked
        current = (body.get("status") or {}).get("conditions", [])
        refused = RunStatus(
            conditions=conditions.put(
                current, conditions.READY, False, reason, said, generation.read
            ),
            observedGeneration=generation.read,
        )
        await hub.kube.patch(
            RUNS, meta["namespace"], meta["name"], patches.status(refused), status=True
        )
        hub.resumed(f"{meta['namespace']}/{meta['name']}")  # no Turn of it runs
        await generation.changed(stopped)
    return None


def check(document: dict[str, Any]) -> LoadedRun | tuple[str, str]:
    """The loaded Run of ``document``, or why it is not driven: the reason of its
    ``Ready=False`` and the message. Never raises: an exception the loader was not meant
    to raise is a bug, reported on the Run (``LoadFailed``) rather than raised into kopf,
    which would run the daemon again and again on the same manifest."""
    try:
        said = too_large(document["spec"])
        if said is not None:
            return conditions.TOO_LARGE, said
        return load_run(document, workspace_required=True)
    except DefinitionErrors as errors:
        return conditions.INVALID, str(errors)
    except Exception as error:  # a bug: the Run says so, the operator goes on
        meta = document["metadata"]
        log.exception("loading the Run %s/%s failed", meta["namespace"], meta["name"])
        return conditions.LOAD_FAILED, (
            f"the operator failed to load this Run ({type(error).__name__}: {error}), which "
            "is a bug in kubeturn: please report it with the Run's manifest. The Run waits "
            "for a new generation"
        )


def too_large(spec: dict[str, Any]) -> str | None:
    """Why the operator does not drive a Run with this spec (it is over
    ``MAX_SPEC_BYTES``), or None."""
    size = len(json.dumps(spec, separators=(",", ":")).encode())
    if size <= MAX_SPEC_BYTES:
        return None
    return (
        f"the spec is {size} bytes of JSON, over the {MAX_SPEC_BYTES} ({MAX_SPEC_BYTES // 1024} "
        "KiB) a Run's spec may be: with kubectl's copy of it and the Run's status, a larger "
        "Run may outgrow what the API server stores. Put long documents (a prompt's "
        "material, input) in the Workspace's repositories and have the prompt name them; "
        "the Run starts once its spec fits"
    )


async def _workspace(
    hub: Hub, body: kopf.Body, loaded: LoadedRun, stopped: kopf.DaemonStopped
) -> tuple[str | None, dict[str, str] | None]:
    ref = loaded.spec.workspace
    if ref is None:
        return None, None
    meta = body["metadata"]
    namespace = meta["namespace"]
    name = ref.name
    if name is None:
        assert ref.template is not None
        name = objects.owned_workspace_name(meta["name"])
        owned = {
            "apiVersion": GROUP_VERSION,
            "kind": "Workspace",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**objects.MANAGED_BY, **objects.run_labels(meta["name"])},
                "ownerReferences": [objects.owner_reference(dict(body))],
            },
            "spec": ref.template.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        await hub.kube.create(owned)
    branch = names.branch(meta["name"])
    made = None
    pause = WORKTREES_RETRY_S
    noted = False
    while not stopped and made is None:
        harness = hub.harness_of(namespace, name)
        if harness is None:
            if not noted:  # a Harness known at once needs no word: no write
                said = f"waiting for Workspace {name} to be Ready"
                await _note(hub, body, conditions.WAITING_FOR_WORKSPACE, said)
                noted = True
            await pauses.pause(stopped, 1.0)
            continue
        workspace = await hub.kube.get(WORKSPACES, namespace, name)
        slots = sorted(((workspace or {}).get("spec") or {}).get("repos", {}))
        try:
            made = await harness.worktrees(meta["name"], branch, slots)
        except HarnessUnreachable as error:
            # The sandbox Pod is being made again (its client may be closed already):
            # the Workspace will know the new Harness.
            said = f"waiting for Workspace {name}: its Harness did not answer ({error})"
            await _note(hub, body, conditions.WAITING_FOR_WORKSPACE, said)
            noted = True
            await pauses.pause(stopped, 1.0)
        except HarnessRefused as refused:
            said = (
                f"the Harness of Workspace {name} could not make the Run's worktrees: "
                f"{refused.said} (asking again in {pause:g} s)"
            )
            await _note(hub, body, conditions.WORKTREES_FAILED, said)
            noted = True
            await pauses.pause(stopped, pause)
            pause = min(2 * pause, WORKTREES_RETRY_MAX_S)
    if made is None:
        return name, None
    return name, made


def _worktrees(body: kopf.Body, made: dict[str, str]) -> RunStatus | None:
    """The Run's worktrees (slot → path and branch) for its own status, taking the place
    of the Workspace-wide entry of before (ADR 0087); None when the status says so
    already (a resumed Run)."""
    branch = names.branch(body["metadata"]["name"])
    worktrees = {slot: WorktreeStatus(path=path, branch=branch) for slot, path in made.items()}
    said = {slot: tree.model_dump() for slot, tree in worktrees.items()}
    before = (body.get("status") or {}).get("worktrees") or {}
    return None if before == said else RunStatus(worktrees=worktrees)


async def _report_worktrees(hub: Hub, body: kopf.Body, worktrees: RunStatus) -> None:
    """Write the Run's worktrees alone (a Run whose saved state is unreadable: no store
    saves its status)."""
    meta = body["metadata"]
    patch = patches.status(worktrees, removed=_gone_worktrees(body, worktrees))
    with contextlib.suppress(NotFound):
        await hub.kube.patch(RUNS, meta["namespace"], meta["name"], patch, status=True)


def _gone_worktrees(body: kopf.Body, worktrees: RunStatus) -> dict[str, list[str]]:
    """A merge patch merges maps: a slot the Workspace no longer has is written null."""
    before = (body.get("status") or {}).get("worktrees") or {}
    return {"worktrees": sorted(set(before) - set(worktrees.worktrees or {}))}


async def _unreadable(hub: Hub, body: kopf.Body, why: str, logger: kopf.Logger) -> None:
    """Say that the Run's saved state cannot be restored, and why; nothing of it runs."""
    message = (
        f"the Run's saved state (status.snapshot) cannot be restored: {why}. The Run is not "
        "driven; delete it, or run a kubeturn that reads it"
    )
    logger.warning(message)
    await _note(hub, body, conditions.SNAPSHOT_UNREADABLE, message)
    meta = body["metadata"]
    hub.resumed(f"{meta['namespace']}/{meta['name']}")  # no Turn of it runs


async def _note(hub: Hub, body: kopf.Body, reason: str, message: str) -> None:
    meta = body["metadata"]
    current = (body.get("status") or {}).get("conditions", [])
    updated = conditions.put(
        current, conditions.READY, False, reason, message, meta.get("generation")
    )
    noted = RunStatus(conditions=updated)
    await hub.kube.patch(RUNS, meta["namespace"], meta["name"], patches.status(noted), status=True)


def _recorded(hub: Hub, run: dict[str, Any], *, count: bool = True) -> Callable[[TurnRecord], None]:
    """Post each recorded Turn as an Event on its Run (in the background), and count it
    unless ``count`` is off (an Event posted again)."""

    def post(record: TurnRecord) -> None:
        if count:
            metrics.TURNS.labels(outcome=record.outcome.value, cause=record.cause or "").inc()
        cause = f", cause {record.cause}" if record.cause else ""
        said = f"{record.name} ({record.agent} in {record.state}): {record.outcome.value}{cause}"
        posting = events.post(hub.kube, run, events.TURN_RECORDED, said, once=record.name)
        task = asyncio.create_task(posting)
        hub.background.add(task)
        task.add_done_callback(_posted(hub))

    return post


def _ignored(hub: Hub, run: dict[str, Any], signal_id: str, event: str, why: str) -> None:
    """Post a Warning Event on the Run for a signal it ignored (in the background, once per
    id); ``status.processedSignals`` keeps why in any case."""
    said = f"signal {signal_id} ({event}) ignored: {why}"
    posting = events.post(
        hub.kube, run, events.SIGNAL_IGNORED, said, events.WARNING, once=signal_id
    )
    task = asyncio.create_task(posting)
    hub.background.add(task)
    task.add_done_callback(_posted(hub))


def _posted(hub: Hub) -> Callable[[asyncio.Task[None]], None]:
    """Forget a background Event post, logging one that failed (the Event is missed; the
    record in ``Run.status.turns`` is what counts)."""

    def done(task: asyncio.Task[None]) -> None:
        hub.background.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.warning("an Event on a Run was not posted: %s", error)

    return done


REPOST_S = 600.0
"""How far back a resumed Run posts its recorded Turns' Events again: each is posted in
the background once its record is written, so an operator that stopped in between never
posted it. Each has one name (``events.post``'s ``once``), so one posted already is not
posted twice. 10 minutes covers a restart with room, and keeps a resume of a long Run
to a few requests."""


def _post_recent(hub: Hub, run: dict[str, Any], history: Iterable[TurnRecord]) -> None:
    """Post (again) the Events of the Turns recorded within ``REPOST_S``."""
    since = time.time() - REPOST_S
    for record in history:
        if record.settledAt >= since:
            _recorded(hub, run, count=False)(record)


def _slots(
    hub: Hub, namespace: str, name: str, workspace: str | None, core: RunCore
) -> caps.RunSlots | None:
    """The Run's slots under the caps on live Turns of its Workspace and its namespace (ADR
    0116), its Turns in line by the start its core recorded."""
    if workspace is None:
        return None

    def started(turn: TurnId) -> float:
        found = core.turns.get(turn)
        return found.startedAt if found is not None else time.time()

    scopes = (
        caps.Scope(caps.WORKSPACE, f"{namespace}/{workspace}"),
        caps.Scope(caps.NAMESPACE, namespace),
    )
    return caps.RunSlots(hub.caps, f"{namespace}/{name}", scopes, started)


def _traces(hub: Hub, run: Mapping[str, Any]) -> RunTrace | None:
    """Where the Run's spans go (ADR 0107): its trace is its uid's, its span begins when
    it was created; None when the operator traces nothing."""
    if hub.tracing is None:
        return None
    metadata = run["metadata"]
    created = metadata.get("creationTimestamp")
    try:
        started = datetime.fromisoformat(created).timestamp() if created else time.time()
    except ValueError:
        started = time.time()
    return hub.tracing.run(
        metadata.get("uid") or f"{metadata['namespace']}/{metadata['name']}",
        namespace=metadata["namespace"],
        name=metadata["name"],
        started=started,
    )


def _deliverer(hub: Hub, namespace: str, run: str, workspace: str | None) -> Deliverer | None:
    """The Run's ``DeliverPort``: its Workspace's Harness commits, ``hub.pusher`` pushes."""
    if not workspace:
        return None

    async def remotes() -> dict[str, Remote]:
        found = await hub.kube.get(WORKSPACES, namespace, workspace)
        repos = ((found or {}).get("spec") or {}).get("repos") or {}
        return {
            slot: Remote(repo["url"], (repo.get("secretRef") or {}).get("name"))
            for slot, repo in repos.items()
        }

    return Deliverer(
        namespace=namespace,
        run=run,
        workspace=workspace,
        branch=names.branch(run),
        committer=_Commits(hub, namespace, workspace, run),
        remotes=remotes,
        pusher=hub.pusher,
    )


class _Commits:
    """A delivery's commit, by the Workspace's Harness: as an exec waits for it (below),
    and, being safe to repeat, sent again to the Harness serving now after any call that
    got no answer, until ``harnesses.WAIT_S`` has passed."""

    def __init__(self, hub: Hub, namespace: str, workspace: str, run: str) -> None:
        self._hub, self._namespace, self._workspace, self._run = hub, namespace, workspace, run

    async def commit(
        self, slot: str, branch: str, message: str, author: tuple[str, str]
    ) -> Committed:
        deadline = time.monotonic() + harnesses.WAIT_S
        while True:
            harness = await harnesses.wait(self._hub, self._namespace, self._workspace, deadline)
            if harness is None:
                raise DeliveryFailed(
                    f"the Harness of Workspace {self._workspace} is not known: the Workspace "
                    f"is gone, or its sandbox was not Ready within {harnesses.WAIT_S:g} s"
                )
            try:
                return await HarnessCommitter(self._run, harness).commit(
                    slot, branch, message, author
                )
            except DeliveryFailed as failed:
                unreached = isinstance(failed.__cause__, HarnessUnreachable)
                if not unreached or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(harnesses.POLL_S)


class _ChildWorktrees:
    """A fan-out child's worktrees (ADR 0113), made by the Workspace's Harness from the
    Run's. Safe to repeat, so sent again to the Harness known then while none answers,
    up to ``harnesses.WAIT_S``; a refusal is the child's invokes' error."""

    def __init__(self, hub: Hub, namespace: str, run: str, workspace: str | None) -> None:
        self._hub, self._namespace, self._run, self._workspace = hub, namespace, run, workspace

    async def make(self, effect: MakeWorktrees) -> Made:
        if not self._workspace:
            return Made(error="the Run has no Workspace to make worktrees in")
        deadline = time.monotonic() + harnesses.WAIT_S
        while True:
            harness = await harnesses.wait(self._hub, self._namespace, self._workspace, deadline)
            if harness is None:
                return Made(
                    error=f"the Harness of Workspace {self._workspace} is not known: the "
                    f"Workspace is gone, or its sandbox was not Ready within "
                    f"{harnesses.WAIT_S:g} s"
                )
            try:
                repos = await harness.worktrees(
                    self._run, effect.branch, list(effect.slots), base=effect.base
                )
            except HarnessRefused as refused:
                return Made(error=one_line(refused.said or str(refused)))
            except HarnessUnreachable as unreached:
                if time.monotonic() > deadline:
                    return Made(error=str(unreached))
            else:
                return Made(repos=repos)
            await asyncio.sleep(harnesses.POLL_S)


class _Execs:
    """``exec`` invokes, run by the Workspace's Harness.

    While the Workspace exists but its Harness is not known (its sandbox Pod is being
    made again), an exec waits for it, up to ``harnesses.WAIT_S``; one whose request
    reached no Harness (no connection was made) is sent again to the one known then. One
    that may have reached a Harness is never sent again: a command may not be safe to
    run twice, so its failure is the exec's error.
    """

    def __init__(self, hub: Hub, namespace: str, workspace: str | None) -> None:
        self._hub, self._namespace, self._workspace = hub, namespace, workspace

    async def run(self, effect: StartExec) -> ExecResult:
        if not self._workspace:
            return ExecResult(None, "", error="the Run has no Workspace to run commands in")
        deadline = time.monotonic() + harnesses.WAIT_S
        while True:
            harness = await harnesses.wait(self._hub, self._namespace, self._workspace, deadline)
            if harness is None:
                return ExecResult(
                    None,
                    "",
                    error=f"the Harness of Workspace {self._workspace} is not known: the "
                    f"Workspace is gone, or its sandbox was not Ready within "
                    f"{harnesses.WAIT_S:g} s",
                )
            try:
                return await harness.send_exec(effect)
            except HarnessRefused as refused:
                return ExecResult(None, "", error=str(refused))
            except HarnessUnreachable as unreached:
                if unreached.sent or time.monotonic() > deadline:
                    return ExecResult(None, "", error=str(unreached))
            await asyncio.sleep(harnesses.POLL_S)
