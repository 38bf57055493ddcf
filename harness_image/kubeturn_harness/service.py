"""The Harness service: its conversations, admission checks, and its lifecycle.

HTTP-free: ``app`` turns requests into these calls. On start it rebuilds every recorded
conversation and settles what a previous process left open. It keeps in memory only the
conversations something waits on and the recently used idle ones (``eviction``, ADR
0027); any other is read back from its log when a request asks for it. Forgetting a
deleted Run removes its worktrees and its conversations, from memory and the data dir
(ADR 0030).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
import uuid
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry import trace

from kubeturn_harness import eviction
from kubeturn_harness.clock import Clock
from kubeturn_harness.conversations import Conversation
from kubeturn_harness.errors import ConfigError, ToolboxUnavailable, WireError
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import ModelPort
from kubeturn_harness.orchestrator import OrchestratorPort
from kubeturn_harness.providers import Providers
from kubeturn_harness.sandbox import deliveries
from kubeturn_harness.sandbox.client import Toolbox
from kubeturn_harness.sandbox.clones import worktree_path
from kubeturn_harness.sandbox.protocol import Deliver
from kubeturn_harness.settings import Settings
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.store import ConversationLog, Store
from kubeturn_harness.tool_loop import RECEIPT_AFTER_CUT_S, Limits, RunEnv
from kubeturn_harness.wire import (
    AdmitRequest,
    DeliverRequest,
    DeliverResponse,
    ExecRequest,
    ExecResponse,
    ForgetRunRequest,
    ReposResponse,
    RunForgotten,
    SubmissionId,
    WorktreesRequest,
    WorktreesResponse,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

Key = tuple[str, str]
PRIVATE = stat.S_IRWXU
"""The data dir's mode (0700): when the Harness runs as root and its tools as another
user, they cannot list or read the conversation logs (ADR 0008)."""
TOOLBOX_START_S = 120.0
"""How long a starting Harness waits for its toolbox to take sessions: in a Pod the tools
container may start after the Harness's; past this the Harness exits (and is restarted)."""
FINISHING_WAIT_S = 2 * RECEIPT_AFTER_CUT_S
"""How long forgetting a Run waits for a run its sweep cut to stop: such a run waits up to
``RECEIPT_AFTER_CUT_S`` (5 s) for its pick's receipt, then records its reply; twice that,
and it is not stopping."""


class Harness:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock,
        model: ModelPort,
        orchestrator: OrchestratorPort | None,
        providers: Providers,
        metrics: HarnessMetrics,
        toolbox: Toolbox,
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.settings = settings
        self.toolbox = toolbox
        self.metrics = metrics
        self.store = Store(settings.data_dir, clock)
        self.providers = providers
        self.ready = False
        self._env = RunEnv(
            model=model,
            orchestrator=orchestrator,
            providers=providers,
            clock=clock,
            metrics=metrics,
            toolbox=toolbox,
            limits=Limits(
                max_steps=settings.max_steps,
                max_identical_calls=settings.max_identical_calls,
                surface_retry_s=settings.surface_retry_s,
                pick_retry_s=settings.pick_retry_s,
                stream_progress_tokens=settings.stream_progress_tokens,
                stream_progress_s=settings.stream_progress_s,
            ),
            default_model=settings.default_model,
            tracer=tracer or trace.NoOpTracer(),
        )
        self._conversations: dict[Key, Conversation] = {}
        self._evictor: asyncio.Task[None] | None = None
        self._uncut_tasks: set[asyncio.Task[Any]] = set()
        """Forgettings and deliveries under way: a caller that goes away does not cut git
        short."""
        self._delivery_locks: dict[tuple[str, str], asyncio.Lock] = {}
        """One delivery of a Run's slot at a time: one asked again waits for the first."""
        metrics.in_memory.set_function(lambda: len(self._conversations))

    async def start(self) -> None:
        """Settle what a previous process left open (before any await: no request is
        served in between), then wait for the toolbox; ready once it answers."""
        self.store.check_writable()
        try:
            self.store.root.chmod(PRIVATE)
        except OSError as failure:
            log.warning("could not make the data dir private: %s", failure)
        recorded = 0
        for conversation_log in self.store.existing():
            key = (conversation_log.name, conversation_log.instance_id)
            self._hold(key, conversation_log).recover()
            recorded += 1
        self._evictor = asyncio.create_task(self._evict_periodically(), name="eviction")
        try:
            await self.toolbox.ready(TOOLBOX_START_S)
        except ToolboxUnavailable as error:
            raise ConfigError(f"no toolbox to run the Agents' tools: {error}") from error
        self.ready = True
        log.info("harness ready with %d recorded conversations", recorded)

    async def close(self) -> None:
        self.ready = False
        tasks: list[asyncio.Task[Any]] = [*self._uncut_tasks]
        if self._evictor is not None:
            tasks.append(self._evictor)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for conversation in list(self._conversations.values()):
            await conversation.close()

    def evict_idle(self) -> int:
        """Drop from memory every idle conversation past its idle period or beyond the
        cap (``settings.idle_conversations_kept``); answer how many were dropped."""
        return self._evict(protect=None)

    def admit(self, name: str, instance_id: str, request: AdmitRequest) -> tuple[SubmissionId, int]:
        model = request.model or self.settings.default_model
        if model is None:
            raise WireError(
                "no model: name one as 'provider/model' (this Harness has no default model)",
                field="model",
            )
        self.providers.resolve(model)
        conversation = self._conversation_for(name, instance_id)
        if request.key is not None and (earlier := conversation.admitted_as(request.key)):
            return earlier
        sid = SubmissionId(f"sub-{uuid.uuid4().hex}")
        return sid, conversation.admit(sid, request)

    async def sweep(self, name: str, instance_id: str, sweep: Sweep) -> bool:
        conversation = self._conversations.get((name, instance_id))
        if conversation is None:
            # Only a conversation whose Submissions have all settled leaves memory, and an
            # admission reads it back before changing that: there is nothing to settle.
            self.metrics.sweeps.labels(settled="false").inc()
            return False
        conversation.touch()
        return await conversation.sweep(sweep)

    async def exec(self, request: ExecRequest) -> ExecResponse:
        """Run a command for the Machine (an ``exec`` invoke), as the tools run."""
        async with _toolbox_answers():
            done = await self.toolbox.exec(
                Path(request.cwd), request.command, request.timeoutSeconds
            )
        return ExecResponse.model_validate(done.model_dump())

    async def deliver(self, request: DeliverRequest) -> DeliverResponse:
        """Commit a Run's worktree of a slot on its branch and bundle the branch (a
        ``deliver`` invoke); the toolbox does both, as the tools run (ADR 0063). Runs to
        its end even if the caller goes away (an operator restarting asks again, and
        waits for it), so git is never cut mid-commit."""
        return await self._uncut(self._deliver(request), f"deliver {request.run}")

    async def _deliver(self, request: DeliverRequest) -> DeliverResponse:
        lock = self._delivery_locks.setdefault((request.run, request.slot), asyncio.Lock())
        async with lock:
            return await self._deliver_now(request)

    async def _deliver_now(self, request: DeliverRequest) -> DeliverResponse:
        worktree = worktree_path(self.toolbox.work_root, request.slot, request.branch)
        bundle = deliveries.bundle_path(request.run, request.slot)
        asked = Deliver(
            branch=request.branch,
            message=request.message,
            authorName=request.author.name,
            authorEmail=request.author.email,
        )
        async with _toolbox_answers():
            done = await self.toolbox.deliver(worktree, bundle, asked)
        return DeliverResponse(
            commit=done.commit,
            changed=done.changed,
            bundle=bundle,
            clone=deliveries.clone_path(request.slot),
        )

    async def worktrees(self, request: WorktreesRequest) -> WorktreesResponse:
        """Make (or find) a Run's worktree of each repo slot; idempotent."""
        async with _toolbox_answers():
            return await self.toolbox.worktrees(request)

    async def forget_run(self, request: ForgetRunRequest) -> RunForgotten:
        """Forget a deleted Run: its conversations and its worktrees (their branch stays).
        Runs to its end even if the caller goes away, so git is never cut mid-removal."""
        return await self._uncut(self._forget_run(request), f"forget {request.run}")

    async def _uncut(self, work: Coroutine[Any, Any, T], name: str) -> T:
        """``work``'s result; it runs to its end even if the caller goes away."""
        task = asyncio.create_task(work, name=name)
        self._uncut_tasks.add(task)
        task.add_done_callback(self._uncut_tasks.discard)
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _forget_run(self, request: ForgetRunRequest) -> RunForgotten:
        prefix = f"{request.run}/"
        # A Submission unsettled is refused at once; a run its sweep cut is waited for.
        ours = [(k, c) for k, c in self._conversations.items() if k[1].startswith(prefix)]
        _refuse_live(ours, finishing=False)
        await asyncio.gather(*(c.stopped(FINISHING_WAIT_S) for _, c in ours))
        # From here to the last log removed nothing awaits: no admission slips in between.
        ours = [(k, c) for k, c in self._conversations.items() if k[1].startswith(prefix)]
        _refuse_live(ours, finishing=True)
        keys = {key for key, _ in ours}
        keys |= {key for key in self.store.instances() if key[1].startswith(prefix)}
        for key in keys:
            conversation = self._conversations.pop(key, None)
            if conversation is not None:
                conversation.log.close()
            self.store.remove(*key)
        async with _toolbox_answers():
            worktrees = await self.toolbox.forget(request)
        log.info(
            "forgot Run %s: %d conversations, worktrees %s",
            request.run,
            len(keys),
            sorted(tree.path for tree in worktrees.values()),
        )
        return RunForgotten(run=request.run, worktrees=worktrees, conversations=len(keys))

    async def repos(self) -> ReposResponse:
        """The Workspace's clones, with the commit each has checked out."""
        async with _toolbox_answers():
            return await self.toolbox.repos()

    def conversation(self, name: str, instance_id: str) -> Conversation | None:
        """The recorded conversation, read back from its log if it left memory; None
        when it was never recorded (a read of an unknown one holds nothing in memory)."""
        key = (name, instance_id)
        conversation = self._conversations.get(key)
        if conversation is None:
            if not self.store.recorded(name, instance_id):
                return None
            conversation = self._hold(key, self.store.open(name, instance_id))
        conversation.touch()
        return conversation

    def _conversation_for(self, name: str, instance_id: str) -> Conversation:
        """The conversation an admission goes to: in memory, read back, or new."""
        key = (name, instance_id)
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = self._hold(key, self.store.open(name, instance_id))
        conversation.touch()
        return conversation

    def _hold(self, key: Key, conversation_log: ConversationLog) -> Conversation:
        """Put a conversation in memory; past the cap, make room among the idle ones."""
        conversation = Conversation(
            conversation_log, self._env, sweep_wait_s=self.settings.sweep_wait_s
        )
        if conversation_log.events:
            self.metrics.loaded.inc()
        self._conversations[key] = conversation
        if len(self._conversations) > self.settings.idle_conversations_kept:
            self._evict(protect=key)
        return conversation

    def _evict(self, *, protect: Key | None) -> int:
        """Drop what the policy chooses; ``protect`` (the conversation a request is
        about to use) counts as busy."""
        residents = [
            eviction.Resident(key, conversation.busy or key == protect, conversation.touched)
            for key, conversation in self._conversations.items()
        ]
        dropped = eviction.evictions(
            residents,
            now=self._env.clock.monotonic(),
            idle_s=self.settings.idle_eviction_s,
            keep_idle=self.settings.idle_conversations_kept,
        )
        for key in dropped:
            self._conversations.pop(key).log.close()
        self.metrics.evicted.inc(len(dropped))
        return len(dropped)

    async def _evict_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.settings.eviction_interval_s)
            self.evict_idle()


def _refuse_live(conversations: list[tuple[Key, Conversation]], *, finishing: bool) -> None:
    """Refuse (409) to forget a Run while a conversation of it has a Submission unsettled
    or, with ``finishing``, a run still under way: naming the first such conversation."""
    for (name, instance_id), conversation in sorted(conversations, key=lambda kc: kc[0]):
        if (sid := conversation.unsettled()) is not None:
            said = f"Submission {sid} is not settled: sweep it before forgetting the Run"
        elif finishing and not conversation.idle:
            said = f"a swept run has not stopped within {FINISHING_WAIT_S:g} s: ask again"
        else:
            continue
        raise WireError(f"agent {name!r} at {instance_id!r}: {said}", field="run", status=409)


@contextlib.asynccontextmanager
async def _toolbox_answers() -> AsyncIterator[None]:
    """A toolbox that cannot serve now is the Harness's 503, for the caller to retry."""
    try:
        yield
    except ToolboxUnavailable as error:
        raise WireError(str(error), status=503) from error


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Retrieve a forgetting's failure even when its caller went away (else asyncio logs
    it as never retrieved); the caller, if still there, has it from the shield."""
    if not task.cancelled():
        task.exception()
