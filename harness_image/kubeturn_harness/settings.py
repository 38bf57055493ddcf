"""The Harness's settings: one tree of dataclasses, parsed from flags and environment
only at the entry point (``__main__``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubeturn_harness.conversations import SWEEP_WAIT_S
from kubeturn_harness.models import MODEL_CALLS
from kubeturn_harness.orchestrator import PICK_RETRY_S, SURFACE_RETRY_S
from kubeturn_harness.runaway import DEFAULT_MAX_IDENTICAL, DEFAULT_MAX_STEPS
from kubeturn_harness.stream_progress import STREAM_PROGRESS_S, STREAM_PROGRESS_TOKENS

NOBODY = 65534


@dataclass(frozen=True)
class ToolSettings:
    socket: Path | None = None
    """The toolbox's Unix socket (the sandbox Pod's ``tools`` container); None: the
    Harness starts a toolbox of its own, as its child (one machine)."""
    uid: int = NOBODY
    """Unprivileged uid a toolbox the Harness starts runs as, when the Harness is root."""
    gid: int = NOBODY
    """Its gid."""
    bash_timeout_s: float = 120.0
    """Default and ceiling of one ``bash`` call, in seconds: long builds fit, hangs end."""
    output_limit_bytes: int = 30_000
    """Tail of a tool's output the model reads: enough for a failing test's report."""
    processes: int = 512
    """Processes one session of the tools may add (RLIMIT_NPROC): a parallel build runs a
    few dozen; a fork bomb stops here rather than at the machine's limit."""
    memory_bytes: int | None = 8 * 1024**3
    """Each tool process's data (RLIMIT_DATA, bytes): a backstop on one machine, where no
    container limit applies; in the Pod the ``tools`` container's memory limit binds first."""


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    """Where conversation logs live; survives restarts (a PVC in the pod)."""
    token_sha256: str | None = None
    """Hex SHA-256 of the only bearer token accepted; None refuses every guarded route."""
    orchestrator_url: str | None = None
    """Base URL of the Orchestrator API; None runs Turns without a Menu."""
    orchestrator_token: str | None = field(default=None, repr=False)
    """This Workspace's token for the Orchestrator API."""
    providers_file: Path | None = None
    """YAML: provider name → {type, baseUrl, apiKeyEnv, retry, timeouts}; each provider's
    retry policy and timeouts are its own (``providers.RetrySpec``, ``TimeoutSpec``)."""
    default_model: str | None = None
    """``provider/model`` used when an admission names none."""
    sweep_wait_s: float = SWEEP_WAIT_S
    """How long a run whose Turn is over waits for the sweep, in seconds (§2 of
    docs/turn-semantics.md)."""
    surface_retry_s: float = SURFACE_RETRY_S
    """How long a failing surface read is retried before the Submission fails (seconds)."""
    pick_retry_s: float = PICK_RETRY_S
    """How long a pick is sent again (same idempotency key, backing off) while the
    Orchestrator is not there (no connection, a cut one, a timeout, 503), in seconds,
    before the model reads that it may be lost. 90 s rides out an operator restart or a
    leader change; a sweep ends the wait sooner (ADR 0047)."""
    long_poll_s: float = 25.0
    """How long a long-poll read of a stream parks before 204: under common 30 s proxies."""
    model_calls: int = MODEL_CALLS
    """Model requests in flight at once to one provider; a further one waits (each holds a
    socket: ``kubeturn_harness.models.MODEL_CALLS`` says why 256)."""
    max_steps: int = DEFAULT_MAX_STEPS
    """Model requests one Submission may make before it is a runaway."""
    max_identical_calls: int = DEFAULT_MAX_IDENTICAL
    """Identical tool calls in a row that make a runaway."""
    stream_progress_tokens: int = STREAM_PROGRESS_TOKENS
    """Output pieces (about tokens) of one model request between two ``model-streamed``
    reports, at the least (``kubeturn_harness.stream_progress`` says why 64)."""
    stream_progress_s: float = STREAM_PROGRESS_S
    """Seconds between two ``model-streamed`` reports of one model request, at the least
    (``kubeturn_harness.stream_progress`` says why 2 s)."""
    idle_eviction_s: float = 60.0
    """Seconds a conversation nothing waits on stays in memory after its last request or
    run. Above the 25 s long-poll, so a follower that polls again, the Orchestrator's
    reads after a settlement and the next Turn of a continued conversation find it there;
    a dropped one is read back from its log with the same answers, so this only trades
    memory for the milliseconds of reading a log again."""
    idle_conversations_kept: int = 256
    """Most idle conversations kept in memory, the least recently used dropped first:
    a burst of short Turns holds a few MiB (~22 KiB each in bench/sweep.py), not its whole
    length. Far above the conversations one Workspace's Runs use at once."""
    eviction_interval_s: float = 10.0
    """Seconds between two passes that drop idle conversations: an idle one leaves at
    most this long after its idle period; a pass over a few hundred takes under 1 ms."""
    work_root: Path = Path("/work")
    """Where the Workspace's clones (``.repos/<slot>``) and worktrees (``<slot>/<branch>``)
    live; the Workspace's volume in the pod."""
    tools: ToolSettings = field(default_factory=ToolSettings)
    private: tuple[Path, ...] = ()
    """Paths, besides the data dir, that no tool may reach (the local runner's state)."""

    def private_paths(self) -> tuple[Path, ...]:
        return (self.data_dir.resolve(), *(path.resolve() for path in self.private))
