"""``kubeturn run``: one Run driven to its end on this machine, through the same core as
on a cluster.

The composition: the Run's repo slots cloned into the workdir; the scripted model (for
``--model scripted:SCRIPT``) and a Harness as child processes on 127.0.0.1; the
Orchestrator API in this process, on 127.0.0.1, with a token of its own for that
Harness; the Run's worktrees made by the Harness; a ``RunCore`` and a ``RunActor`` whose
ports are the Harness's wire and whose snapshot is a file. Then the actor runs until the
Run ends, while the live table shows its Turns and ``kubeturn send``/``kubeturn cancel``
are read from the Run's files.

Ctrl-C (SIGINT) cancels the Run: the actor sends CANCEL, every live Turn is swept, and
kubeturn waits (bounded) for their settlements before it stops the Harness and exits
130. SIGTERM, or a kill, stops at once: ``--resume NAME`` continues from the snapshot,
and a Turn whose model call was cut by the Harness's own stop settles ``failed``
(``harness_restarted``), which the Machine hears as the Agent's fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml
from aiohttp import web

from kubeturn.api.status import FINISHED, RunPhase
from kubeturn.errors import CommandError, HarnessCallFailed, SnapshotUnreadable
from kubeturn.local import children, repos
from kubeturn.local.delivery import LocalPusher, work_lines
from kubeturn.local.turns import WatchedHarness
from kubeturn.local.view import LiveView, summary
from kubeturn.local.workdir import (
    FileStore,
    Inbox,
    RunFiles,
    Workdir,
    branch_of,
    default_workdir,
    status_of,
)
from kubeturn.machine.load import LoadedRun, load_run_yaml
from kubeturn.machine.targets import state_where
from kubeturn.orchestrator import api, caps, statuses
from kubeturn.orchestrator.actor import RunActor
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.delivery import Deliverer, Remote
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.harness_client import (
    HarnessClient,
    HarnessCommitter,
    HarnessWorktrees,
)
from kubeturn.orchestrator.ids import TurnId
from kubeturn.tracing import Tracing
from kubeturn_harness.errors import ConfigError, ScriptError
from kubeturn_harness.providers import Providers
from kubeturn_harness.scripted import load_script

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
"""Everything listens on loopback only: the Harness runs the Agent's commands."""
WORKSPACE = "local"
"""The Workspace the local Harness's token belongs to, for the Orchestrator API."""
SCRIPTED = "scripted"
SCRIPTED_MODEL = "scripted/scripted"
POLL_S = 0.25
"""How often the Run's files are read for ``kubeturn send`` and ``kubeturn cancel``: a
person does not notice a quarter of a second."""
TICK_S = 1.0
"""How often a terminal's table is redrawn with nothing new (its ages move)."""
SETTLE_S = 20.0
"""How long kubeturn waits, once the Run ended or was cancelled, for the sweeps of its
last Turns to come back: the Harness settles a sweep at once (ADR 0002), so this only
bounds a Harness that stopped answering."""
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
HARNESS_LISTENING = re.compile(r"harness listening on (http://\S+)")
MODEL_LISTENING = re.compile(r"scripted model listening on (http://\S+)")


@dataclass(frozen=True)
class Options:
    """What ``kubeturn run`` was asked."""

    manifest: Path | None
    workdir: Path | None = None
    model: str | None = None
    """``scripted:SCRIPT``: every Agent on the scripted model, answering from SCRIPT."""
    providers: Path | None = None
    resume: str | None = None
    repos: dict[str, str] = field(default_factory=dict)
    """``--repo SLOT=URL|PATH`` overrides."""
    api_port: int = 0
    harness_port: int = 0
    max_live_turns: int | None = None
    """``--max-live-turns``: over the Workspace template's ``spec.maxLiveTurns``."""
    base: Path = field(default_factory=Path.cwd)
    """The directory relative paths are read from."""


@dataclass
class _Started:
    """What a run has set up, to be taken down in reverse."""

    workdir: Workdir
    files: RunFiles
    loaded: LoadedRun
    fresh: bool
    model: children.Child | None = None
    harness: children.Child | None = None
    api_runner: web.AppRunner | None = None
    client: HarnessClient | None = None
    watched: WatchedHarness | None = None
    store: FileStore | None = None
    actor: RunActor | None = None
    worktrees: dict[str, str] = field(default_factory=dict)


class LocalRun:
    def __init__(
        self, options: Options, out: TextIO, *, tty: bool, tracing: Tracing | None = None
    ) -> None:
        self.options = options
        self._tracing = tracing
        """Where the Run's spans go; None: it is not traced (ADR 0107)."""
        self.out = out
        self.view = LiveView(out, tty=tty)
        self._changed = asyncio.Event()
        self._interrupted = asyncio.Event()
        self._forced = asyncio.Event()
        self._terminated = asyncio.Event()
        self._driving = False
        self._main: asyncio.Task[Any] | None = None
        self._started_at = time.time()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        try:
            return await self._run()
        except asyncio.CancelledError:
            if not (self._interrupted.is_set() or self._terminated.is_set()):
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            self.out.write("kubeturn: interrupted before the Run started\n")
            return EXIT_INTERRUPTED if self._interrupted.is_set() else EXIT_TERMINATED
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    def _on_sigint(self) -> None:
        if self._interrupted.is_set():
            self._forced.set()  # a second Ctrl-C: stop waiting for the sweeps
        self._interrupted.set()
        if not self._driving and self._main is not None:
            self._main.cancel()

    def _on_sigterm(self) -> None:
        self._terminated.set()
        if not self._driving and self._main is not None:
            self._main.cancel()

    # ------------------------------------------------------------------ setting up

    async def _run(self) -> int:
        workdir, files, loaded, fresh, saved = self._locate()
        ended = files.read_status() if not fresh else None
        if ended is not None and ended.get("phase") in FINISHED and not ended.get("liveTurns"):
            # Nothing to continue: say how it ended, as the run that ended it did.
            self.out.write(f"kubeturn: the run {loaded.name} has ended\n")
            for line in summary(loaded.name, ended, None):
                self.out.write(line + "\n")
            return 0 if ended["phase"] == RunPhase.SUCCEEDED else 1
        existed = workdir.root.exists()
        with files.locked():
            started = _Started(workdir, files, loaded, fresh)
            try:
                async with self._set_up(started, saved):
                    return await self._drive(started)
            except BaseException:
                if fresh and files.read_status() is None:
                    # Nothing ran: leave the workdir as it was found, so the same command
                    # can be run again once its problem is fixed.
                    _empty(workdir.root, remove=not existed)
                raise

    def _locate(self) -> tuple[Workdir, RunFiles, LoadedRun, bool, dict[str, Any]]:
        """The Run, its workdir and its files; a new Run's workdir must be empty."""
        options = self.options
        if options.resume is not None:
            name = options.resume
            workdir = Workdir.at(options.workdir or default_workdir(name))
            files = workdir.run(name)
            if not files.exists():
                raise CommandError(
                    f"there is no run {name!r} to resume in {workdir.root}; start it with "
                    "`kubeturn run FILE`, or pass the --workdir it ran in"
                )
            text = files.manifest.read_text(encoding="utf-8")
            if options.manifest is not None and _read(options.manifest) != text:
                raise CommandError(
                    f"{options.manifest} is not the manifest the run {name!r} started with "
                    f"({files.manifest}); resume without a FILE, or start the changed Run "
                    "in another --workdir"
                )
            loaded = load_run_yaml(text, str(files.manifest))
            try:
                statuses.resume_point(files.read_status() or {})
            except SnapshotUnreadable as error:
                raise _unrestorable(files, error) from error
            saved = json.loads(files.options.read_text(encoding="utf-8"))
            return workdir, files, loaded, False, dict(saved)
        if options.manifest is None:
            raise CommandError("name the Run manifest to run: kubeturn run FILE.yaml")
        text = _read(options.manifest)
        loaded = load_run_yaml(text, str(options.manifest))
        workdir = Workdir.at(options.workdir or default_workdir(loaded.name))
        workdir.check_fresh(loaded.name)
        files = workdir.run(loaded.name)
        return workdir, files, loaded, True, {}

    @contextlib.asynccontextmanager
    async def _set_up(self, started: _Started, saved: dict[str, Any]) -> AsyncIterator[None]:
        options, workdir, files, loaded = (
            self.options,
            started.workdir,
            started.files,
            started.loaded,
        )
        script, providers_file, default_model = _models_for(loaded, options, saved)
        slots = _slots(loaded, saved.get("repos") or options.repos, options.base)
        files.directory.mkdir(parents=True, exist_ok=True)
        workdir.logs.mkdir(parents=True, exist_ok=True)
        _log_to(workdir.logs / "kubeturn.log")
        # The Run's identity for its trace, kept with its options so a resumed run
        # continues the same trace: a run saved before it had one gets one from its path.
        uid = saved.get("uid") or (
            str(uuid.uuid4())
            if started.fresh
            else str(uuid.uuid5(uuid.NAMESPACE_URL, files.directory.resolve().as_uri()))
        )
        started_at = float(saved.get("startedAt") or self._started_at)
        if started.fresh:
            files.manifest.write_text(_read(options.manifest) if options.manifest else "")
            files.options.write_text(
                json.dumps(
                    {
                        "uid": uid,
                        "startedAt": started_at,
                        "manifest": str(options.manifest),
                        "model": f"{SCRIPTED}:{script}" if script else None,
                        "providers": str(providers_file) if providers_file else None,
                        "repos": {name: slot.url for name, slot in slots.items()},
                        "maxLiveTurns": options.max_live_turns,
                    },
                    indent=1,
                )
                + "\n"
            )
        self.out.write(f"kubeturn: run {loaded.name} in {workdir.root}\n")
        if script is not None and options.model is None and started.fresh:
            self.out.write(
                f"kubeturn: no model providers given: every Agent answers from the scripted "
                f"model's script {script} (pass --providers FILE for real models)\n"
            )
        self.out.flush()
        for slot in slots.values():
            if not (workdir.clone(slot.name) / ".git").exists():
                await repos.clone(slot, workdir.clone(slot.name))

        try:
            if script is not None:
                started.model = await children.start(
                    "scripted model",
                    [
                        sys.executable,
                        "-m",
                        "kubeturn_harness.scripted",
                        "--host",
                        HOST,
                        "--port",
                        "0",
                        "--script",
                        str(script),
                        "--log-level",
                        "info",
                    ],
                    environment=os.environ,
                    log=workdir.logs / "scripted-model.log",
                    listening=MODEL_LISTENING,
                )
                providers_file = workdir.providers
                providers_file.write_text(_scripted_providers(loaded, started.model.url))

            registry = api.Registry()
            workspace_token = secrets.token_urlsafe(32)
            registry.set_token(WORKSPACE, workspace_token)
            started.api_runner = web.AppRunner(
                api.make_app(registry),
                handler_cancellation=True,
                access_log=None,
                shutdown_timeout=1.0,
            )
            await started.api_runner.setup()
            try:
                await web.TCPSite(started.api_runner, HOST, options.api_port).start()
            except OSError as error:
                raise CommandError(
                    f"cannot listen on {HOST}:{options.api_port} for the Orchestrator API: "
                    f"{(error.strerror or str(error)).lower()}; pass another --api-port, or 0 "
                    "for a free one"
                ) from error
            api_url = f"http://{HOST}:{started.api_runner.addresses[0][1]}"

            harness_token = secrets.token_urlsafe(32)
            assert providers_file is not None
            started.harness = await children.start(
                "Harness",
                _harness_command(workdir, providers_file, options.harness_port, default_model),
                environment={
                    **os.environ,
                    "KUBETURN_HARNESS_TOKEN_SHA256": _sha256(harness_token),
                    "KUBETURN_ORCHESTRATOR_URL": api_url,
                    "KUBETURN_ORCHESTRATOR_TOKEN": workspace_token,
                },
                log=workdir.logs / "harness.log",
                listening=HARNESS_LISTENING,
                hint=(
                    "; pass another --harness-port, or 0 for a free one"
                    if options.harness_port
                    else ""
                ),
            )
            started.client = HarnessClient(started.harness.url, harness_token)
            cap = _max_live_turns(loaded, options, saved)
            limits = caps.Caps({caps.WORKSPACE: cap})
            turn_slots = caps.RunSlots(
                limits,
                f"{loaded.namespace}/{loaded.name}",
                (caps.Scope(caps.WORKSPACE, WORKSPACE),),
                lambda turn: _started_at(started, turn),
            )
            started.watched = WatchedHarness(
                started.client, self._changed.set, turn_slots if cap is not None else None
            )
            try:
                started.worktrees = await started.client.worktrees(
                    loaded.name, branch_of(loaded.name), sorted(slots)
                )
            except HarnessCallFailed as failed:
                raise CommandError(f"cannot make the Run's worktrees: {failed}") from failed

            status = files.read_status()
            try:
                snapshot = statuses.resume_point(status) if status else None
                if status and snapshot is None:
                    raise KeyError("snapshot")
                core = RunCore(
                    loaded,
                    workspace=WorkspaceView(started.worktrees, branch_of(loaded.name)),
                    new_id=lambda: secrets.token_hex(4),
                    snapshot=snapshot,
                )
            except (KeyError, TypeError, ValueError) as error:
                raise _unrestorable(files, error) from error
            started.store = FileStore(files, core)
            started.actor = RunActor(
                core,
                turns=started.watched,
                execs=started.watched,
                store=started.store,
                clock=time.time,
                on_change=lambda _: self._changed.set(),
                deliveries=_deliverer(loaded, workdir, started.client, slots),
                worktrees=HarnessWorktrees(loaded.name, started.client),
                slots=turn_slots if cap is not None else None,
                traces=(
                    self._tracing.run(
                        uid, namespace=loaded.namespace, name=loaded.name, started=started_at
                    )
                    if self._tracing is not None
                    else None
                ),
            )
            key = f"{loaded.namespace}/{loaded.name}"
            registry.workspaces[key] = WORKSPACE
            registry.actors[key] = started.actor
            yield
        finally:
            await self._take_down(started)

    async def _take_down(self, started: _Started) -> None:
        if started.actor is not None:
            await started.actor.close()
        if started.store is not None:
            await started.store.close()
        if started.watched is not None:
            await started.watched.close()
        if started.client is not None:
            await started.client.close()
        for child in (started.harness, started.model):
            if child is not None:
                await child.stop()
        if started.api_runner is not None:
            await started.api_runner.cleanup()

    # ------------------------------------------------------------------ driving

    async def _drive(self, started: _Started) -> int:
        actor, files, loaded = started.actor, started.files, started.loaded
        assert actor is not None
        assert started.watched is not None
        watched = started.watched
        core = actor.core
        self._driving = True
        if self._interrupted.is_set() or self._terminated.is_set():
            raise asyncio.CancelledError
        for turn in core.live_turns():
            watched.watch(turn.agent, turn.instanceId)
        for slot, path in sorted(started.worktrees.items()):
            self.out.write(f"kubeturn: worktree {slot}: {path} (branch {branch_of(loaded.name)})\n")
        await actor.start()
        for given in loaded.spec.signals:
            await actor.signal(given.event, dict(given.data), signal_id=given.id)
        if loaded.spec.cancel:
            await actor.cancel()

        inbox = Inbox(files)
        said = 0
        last_draw = 0.0
        while True:
            for sent in inbox.signals():
                await actor.signal(
                    sent["event"], dict(sent.get("data") or {}), signal_id=sent["id"]
                )
            if not core.cancelled and inbox.cancelled():
                await actor.cancel()
            notices = [*watched.refusals, *inbox.problems]
            for notice in notices[said:]:
                self.view.say(f"kubeturn: {notice}")
            said = len(notices)
            now = time.time()
            if self._changed.is_set() or now - last_draw >= TICK_S:
                self._changed.clear()
                self.view.update(core, watched.tool_calls, now)
                last_draw = now
            if actor.finished.is_set() or self._interrupted.is_set() or self._terminated.is_set():
                break
            await _first(
                self._changed, self._interrupted, self._terminated, actor.finished, within=POLL_S
            )

        if self._terminated.is_set() and not self._interrupted.is_set():
            self.view.update(core, watched.tool_calls, time.time())
            self.view.finish()
            self.out.write(
                f"kubeturn: stopped; the run is saved: continue it with "
                f"`kubeturn run --resume {loaded.name}`\n"
            )
            return EXIT_TERMINATED
        if self._interrupted.is_set():
            self.view.say("kubeturn: interrupted: cancelling the Run and settling its Turns")
            await actor.cancel()
        await self._settle(actor, watched)
        self.view.finish()
        elapsed = time.time() - self._started_since(core)
        for line in summary(loaded.name, status_of(core, core.snapshot()), elapsed):
            self.out.write(line + "\n")
        for line in work_lines(branch_of(loaded.name), started.worktrees, core.delivered):
            self.out.write(line + "\n")
        self.out.flush()
        if self._interrupted.is_set():
            return EXIT_INTERRUPTED
        return 0 if core.phase is RunPhase.SUCCEEDED else 1

    async def _settle(self, actor: RunActor, watched: WatchedHarness) -> None:
        """Wait (bounded) until every Turn of the Run is recorded."""
        core = actor.core
        deadline = time.monotonic() + SETTLE_S
        while (
            (core.turns or core.delivering)
            and time.monotonic() < deadline
            and not self._forced.is_set()
        ):
            self._changed.clear()
            self.view.update(core, watched.tool_calls, time.time())
            await _first(self._changed, self._forced, within=POLL_S)
        self.view.update(core, watched.tool_calls, time.time())
        for turn in core.turns.values():
            self.view.say(
                f"kubeturn: Turn {turn.id} ({turn.agent} in {turn.state}) was not settled "
                f"within {SETTLE_S:g} s; its state is saved, and `kubeturn run --resume "
                f"{core.run.name}` settles it"
            )

    def _started_since(self, core: RunCore) -> float:
        started = [r.startedAt for r in core.history] + [t.startedAt for t in core.turns.values()]
        return min([*started, self._started_at])


# ---------------------------------------------------------------------- helpers


def _deliverer(
    loaded: LoadedRun, workdir: Workdir, client: HarnessClient, slots: dict[str, repos.Slot]
) -> Deliverer:
    """The Run's ``DeliverPort``: the Harness commits, this process pushes (ADR 0064)."""
    remotes = {name: Remote(slot.url) for name, slot in slots.items()}

    async def known() -> dict[str, Remote]:
        return remotes

    return Deliverer(
        namespace="",
        run=loaded.name,
        workspace=WORKSPACE,
        branch=branch_of(loaded.name),
        committer=HarnessCommitter(loaded.name, client),
        remotes=known,
        pusher=LocalPusher(workdir.root),
    )


def _max_live_turns(loaded: LoadedRun, options: Options, saved: dict[str, Any]) -> int | None:
    """The cap on the Run's live Turns: ``--max-live-turns``, that of the run resumed, or
    the Workspace template's ``spec.maxLiveTurns``; None: no cap."""
    if options.max_live_turns is not None:
        return options.max_live_turns
    if saved.get("maxLiveTurns") is not None:
        return int(saved["maxLiveTurns"])
    workspace = loaded.spec.workspace
    template = workspace.template if workspace is not None else None
    return template.maxLiveTurns if template is not None else None


def _started_at(started: _Started, turn: TurnId) -> float:
    """When the Turn started, as its core recorded it (the order of the queue)."""
    actor = started.actor
    found = actor.core.turns.get(turn) if actor is not None else None
    return found.startedAt if found is not None else time.time()


def _unrestorable(files: RunFiles, error: Exception) -> CommandError:
    """Why a Run's saved state cannot be restored, naming its file."""
    return CommandError(
        f"the snapshot {files.snapshot} cannot be restored ({error}); the run cannot be "
        "resumed: resume it with a kubeturn that reads it, or start it afresh in another "
        "--workdir"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise CommandError(
            f"cannot read {path}: {(error.strerror or str(error)).lower()}"
        ) from error


def _models_for(
    loaded: LoadedRun, options: Options, saved: dict[str, Any]
) -> tuple[Path | None, Path | None, str | None]:
    """The scripted model's script, or the providers file, and the default model.

    The flags of this command win; a resumed run given neither keeps its first ones; a
    new run given neither reads ``KUBETURN_PROVIDERS``, and without it uses the script
    beside the manifest (``<name>.script.yaml``, as every example has), if there is one.
    """
    model: str | None = options.model
    providers = (options.base / options.providers).resolve() if options.providers else None
    if model is None and providers is None:
        model = saved.get("model")
        providers = Path(saved["providers"]) if saved.get("providers") else None
    if model is None and providers is None and os.environ.get("KUBETURN_PROVIDERS"):
        providers = Path(os.environ["KUBETURN_PROVIDERS"]).resolve()
    beside = script_beside(options.manifest) if options.resume is None else None
    if model is None and providers is None and beside is not None:
        model = f"{SCRIPTED}:{beside}"
    script = _script(model, options.base) if model is not None else None
    if script is not None:
        return script, None, SCRIPTED_MODEL
    if providers is None:
        looked = ""
        if options.manifest is not None and options.resume is None:
            beside_path = _beside_path(options.manifest)
            looked = f" (there is no script beside the manifest: {options.base / beside_path})"
        raise CommandError(
            f"no model provider{looked}: pass --model scripted:SCRIPT to run offline on a "
            "scripted model, or --providers FILE (YAML: name → {type: openai, baseUrl, "
            "apiKeyEnv})"
        )
    default_model = os.environ.get("KUBETURN_DEFAULT_MODEL")
    _check_models(loaded, providers, default_model)
    return None, providers, default_model


def script_beside(manifest: Path | None) -> Path | None:
    """``x.script.yaml`` beside the manifest ``x.yaml``, when there is one."""
    if manifest is None:
        return None
    beside = _beside_path(manifest)
    return beside if beside.is_file() else None


def _beside_path(manifest: Path) -> Path:
    """Where the script of ``manifest`` would be: ``x.yaml`` → ``x.script.yaml``."""
    return manifest.with_name(f"{manifest.name.rsplit('.', 1)[0]}.script.yaml")


def _script(model: str, base: Path) -> Path:
    kind, colon, where = model.partition(":")
    if kind != SCRIPTED or not colon or not where:
        raise CommandError(
            f"--model {model!r} is not a model kubeturn run can start; write scripted:SCRIPT "
            "(a scripted-model script), or give real providers with --providers FILE"
        )
    script = (base / where).resolve()
    if not script.is_file():
        raise CommandError(
            f"cannot read the scripted model's script {where}: there is no file {script}"
        )
    try:
        load_script(script)
    except ScriptError as error:
        head, _, problems = str(error).partition("\n")
        said = "; ".join(line.strip() for line in problems.splitlines() if line.strip())
        message = f"{head.rstrip(':')}: {said}" if said else head
        raise CommandError(f"{message} (docs/scripted-model.md gives the format)") from error
    return script


def _models(loaded: LoadedRun) -> dict[str, str | None]:
    """Each model the Run may admit with, by manifest path (None: the default model)."""
    found: dict[str, str | None] = {}
    used = {s.invoke.agent.slot for s in loaded.chart.agent_states() if s.invoke and s.invoke.agent}
    for name, slot in loaded.agents.items():
        if name in used:
            found[f"spec.agents.{name}.model"] = slot.model
    for state in loaded.chart.agent_states():
        call = state.invoke.agent if state.invoke else None
        if call is not None and call.model is not None:
            found[f"{state_where(state.path)}.invoke.agent.model"] = call.model
    return found


def _check_models(loaded: LoadedRun, providers_file: Path, default: str | None) -> None:
    """Refuse, before anything starts, a model whose provider the providers file lacks:
    the Harness would refuse each admission of it (400, naming ``model``)."""
    try:
        providers = Providers.load(providers_file)
    except ConfigError as error:
        raise CommandError(str(error)) from error
    known = ", ".join(providers.names) or "none"
    for where, model in _models(loaded).items():
        name = model or default
        if name is None:
            raise CommandError(
                f"{where}: no model, and no default model; name one as provider/model, or "
                "set KUBETURN_DEFAULT_MODEL"
            )
        provider = name.partition("/")[0]
        if provider not in providers.names:
            raise CommandError(
                f"{where}: unknown model provider {provider!r} in {name!r}: the providers "
                f"file {providers_file} has {known}; add it there, or run offline with "
                "--model scripted:SCRIPT"
            )


def _scripted_providers(loaded: LoadedRun, url: str) -> str:
    """Every provider the Run names, and ``scripted``, served by the scripted model: the
    manifest stays as a cluster takes it, and every Agent answers from the script."""
    names = {SCRIPTED}
    for model in _models(loaded).values():
        if model is not None:
            names.add(model.partition("/")[0])
    return yaml.safe_dump({name: {"type": "openai", "baseUrl": url} for name in sorted(names)})


def _slots(loaded: LoadedRun, overrides: dict[str, str], base: Path) -> dict[str, repos.Slot]:
    workspace = loaded.spec.workspace
    template = workspace.template if workspace is not None else None
    manifest = dict(template.repos) if template is not None else {}
    if template is not None:
        unknown = sorted(set(overrides) - set(manifest))
        if unknown:
            raise CommandError(
                f"--repo {unknown[0]}=…: the Run has no repo slot {unknown[0]!r} (its slots: "
                f"{', '.join(sorted(manifest))})"
            )
    found = repos.slots(manifest, overrides, base)
    if not found:
        where = (
            f"it names the Workspace {workspace.name!r}, which lives on a cluster"
            if workspace is not None and workspace.name
            else "it has no spec.workspace"
        )
        raise CommandError(
            f"the Run {loaded.name!r} has no repository to work in on this machine ({where}); "
            "give each repo slot with --repo SLOT=URL|PATH"
        )
    return found


def _harness_command(
    workdir: Workdir, providers: Path, port: int, default_model: str | None
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "kubeturn_harness",
        "serve",
        "--host",
        HOST,
        "--port",
        str(port),
        "--data-dir",
        str(workdir.harness_data),
        "--work-root",
        str(workdir.root),
        # The Run's state and logs sit in the work root; no tool may reach them.
        "--private",
        str(workdir.state),
        "--providers",
        str(providers),
        # On one machine the Agent's tools run as you (the worktrees and clones are
        # yours); the sandbox user exists only in a Workspace's pod.
        "--tool-uid",
        str(os.getuid()),
        "--tool-gid",
        str(os.getgid()),
        "--log-level",
        "INFO",
    ]
    if default_model is not None:
        command += ["--default-model", default_model]
    return command


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _log_to(path: Path) -> None:
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def _empty(root: Path, *, remove: bool) -> None:
    """Remove what a failed start put in ``root`` (a new Run's workdir was empty), and
    ``root`` itself when this start made it."""
    if not root.exists():
        return
    for entry in root.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if remove:
        with contextlib.suppress(OSError):
            root.rmdir()


async def _first(*events: asyncio.Event, within: float) -> None:
    """Wait until any of ``events`` is set, or ``within`` seconds pass."""
    if any(event.is_set() for event in events):
        return
    waits = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
