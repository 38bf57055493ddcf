"""The Harness service: its conversations, admission checks, and its lifecycle.

HTTP-free: ``app`` turns requests into these calls. On start it rebuilds every recorded
conversation and settles what a previous process left open.
"""

from __future__ import annotations

import logging
import os
import stat
import uuid
from pathlib import Path

from kubeturn_harness.clock import Clock
from kubeturn_harness.clones import Clones
from kubeturn_harness.conversations import Conversation
from kubeturn_harness.errors import WireError
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import ModelPort
from kubeturn_harness.orchestrator import OrchestratorPort
from kubeturn_harness.providers import Providers
from kubeturn_harness.settings import Settings
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.store import Store
from kubeturn_harness.tool_loop import Limits, RunEnv
from kubeturn_harness.tools import ToolContext, run_command, scrubbed_environment, tool_identity
from kubeturn_harness.wire import (
    AdmitRequest,
    ExecRequest,
    ExecResponse,
    ReposResponse,
    SubmissionId,
    WorktreesRequest,
    WorktreesResponse,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]
PRIVATE = stat.S_IRWXU
"""The data dir's mode (0700): when the Harness runs as root and its tools as another
user, they cannot list or read the conversation logs (ADR 0008)."""


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
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = Store(settings.data_dir, clock)
        self.providers = providers
        self.ready = False
        tools = settings.tools
        self._env = RunEnv(
            model=model,
            orchestrator=orchestrator,
            providers=providers,
            clock=clock,
            metrics=metrics,
            tool_env=scrubbed_environment(os.environ, home=str(settings.data_dir / "home")),
            run_as=tool_identity(tools.uid, tools.gid),
            # The file tools run inside this process, where /proc/self is the Harness
            # itself: its environ holds the tokens and provider keys.
            denied=(settings.data_dir.resolve(), Path(f"/proc/{os.getpid()}")),
            limits=Limits(
                max_steps=settings.max_steps,
                max_identical_calls=settings.max_identical_calls,
                bash_timeout_s=tools.bash_timeout_s,
                surface_retry_s=settings.surface_retry_s,
                output_limit_bytes=tools.output_limit_bytes,
            ),
            default_model=settings.default_model,
        )
        self._conversations: dict[Key, Conversation] = {}
        self.clones = Clones(settings.work_root, self._tool_context)

    async def start(self) -> None:
        self.store.check_writable()
        try:
            self.store.root.chmod(PRIVATE)
        except OSError as failure:
            log.warning("could not make the data dir private: %s", failure)
        for conversation_log in self.store.existing():
            conversation = self._conversation_for(
                conversation_log.name, conversation_log.instance_id
            )
            conversation.recover()
        self.ready = True
        log.info("harness ready with %d recorded conversations", len(self._conversations))

    async def close(self) -> None:
        self.ready = False
        for conversation in self._conversations.values():
            await conversation.close()

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
            self.metrics.sweeps.labels(settled="false").inc()
            return False
        return await conversation.sweep(sweep)

    async def exec(self, request: ExecRequest) -> ExecResponse:
        """Run a command for the Machine (an ``exec`` invoke), as the tools run."""
        context = self._tool_context(Path(request.cwd), request.timeoutSeconds)
        result = await run_command(request.command, context, request.timeoutSeconds)
        return ExecResponse(
            exitCode=result.exit_code,
            output=result.output,
            droppedBytes=result.dropped,
            timedOut=result.exit_code is None,
        )

    async def worktrees(self, request: WorktreesRequest) -> WorktreesResponse:
        """Make (or find) a Run's worktree of each repo slot; idempotent."""
        return await self.clones.worktrees(request)

    async def repos(self) -> ReposResponse:
        """The Workspace's clones, with the commit each has checked out."""
        return await self.clones.listing()

    def _tool_context(self, cwd: Path, seconds: float = 0.0) -> ToolContext:
        limits = self._env.limits
        return ToolContext(
            cwd=cwd,
            env=self._env.tool_env,
            run_as=self._env.run_as,
            denied=self._env.denied,
            bash_timeout_s=seconds or limits.bash_timeout_s,
            output_limit_bytes=limits.output_limit_bytes,
        )

    def conversation(self, name: str, instance_id: str) -> Conversation | None:
        return self._conversations.get((name, instance_id))

    def _conversation_for(self, name: str, instance_id: str) -> Conversation:
        key = (name, instance_id)
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = Conversation(
                self.store.open(name, instance_id),
                self._env,
                sweep_wait_s=self.settings.sweep_wait_s,
            )
            self._conversations[key] = conversation
        return conversation
