"""The messages between the Harness and its toolbox: one JSON object per line over a
Unix stream socket.

A connection is a session. Its first line opens it (``Open``) and the toolbox answers
``Opened``; then each line is one request and is answered by one line, in order. The
Harness closing the connection ends the session: the toolbox ends the session's
processes, whatever they are doing. Nothing here does IO.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kubeturn_harness.wire import ForgetRunRequest, WorkspaceAccess, Worktree, WorktreesRequest

LINE_LIMIT = 64 * 1024 * 1024
"""The longest line either side reads: a ``write`` of a large file travels in one line."""


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Kind(StrEnum):
    TOOLS = "tools"
    """An Agent's Working tools for one Submission, confined to its Run's worktrees."""
    EXEC = "exec"
    """One command for the Machine (an ``exec`` invoke), confined like the tools."""
    DELIVER = "deliver"
    """Commit a Run's worktree and bundle its branch (a ``deliver`` invoke), confined like
    the tools; the bundle goes to a file the session opened before it was confined."""
    GIT = "git"
    """The Workspace's clones and the Runs' worktrees: git run by kubeturn itself, with
    every hook and executable setting off; no Agent's command runs in it."""


class Limits(_Message):
    bashTimeoutS: float = Field(gt=0, description="Ceiling of one command, in seconds.")
    outputLimitBytes: int = Field(gt=0, description="Tail of output a result carries.")
    processes: int = Field(gt=0, description="Processes the session may add (RLIMIT_NPROC).")
    memoryBytes: int | None = Field(
        default=None, gt=0, description="Data segment of each process (RLIMIT_DATA)."
    )


class Open(_Message):
    kind: Kind
    workRoot: str = Field(description="The Workspace's tree: clones in .repos, worktrees.")
    cwd: str | None = Field(default=None, description="The Frame's absolute directory.")
    access: WorkspaceAccess = WorkspaceAccess.WRITE
    private: list[str] = Field(
        default_factory=list, description="Paths no session may reach (the Harness's data)."
    )
    limits: Limits
    bundle: str | None = Field(
        default=None,
        description="A deliver session's bundle, relative to the work root (under .deliveries).",
    )


class Opened(_Message):
    error: str | None = Field(default=None, description="Why the session could not open.")
    landlock: int = Field(default=0, description="The Landlock ABI confining it; 0: none.")
    reach: list[str] = Field(default_factory=list, description="What its tools work in.")
    writable: bool = False


class Call(_Message):
    """A Working tool, in a ``tools`` session."""

    tool: str
    arguments: dict[str, Any]


class Result(_Message):
    text: str
    isError: bool = False


class Command(_Message):
    """The command of an ``exec`` session."""

    command: str
    timeoutSeconds: float = Field(gt=0)


class CommandDone(_Message):
    exitCode: int | None
    output: str
    droppedBytes: int
    timedOut: bool


class Deliver(_Message):
    """The request of a ``deliver`` session."""

    branch: str
    message: str
    authorName: str
    authorEmail: str


class Delivered(_Message):
    commit: str
    changed: bool


class GitOp(StrEnum):
    WORKTREES = "worktrees"
    REPOS = "repos"
    FORGET = "forget"


class Git(_Message):
    """One request of a ``git`` session."""

    op: GitOp
    worktrees: WorktreesRequest | None = None
    forget: ForgetRunRequest | None = None


class Refused(_Message):
    """A ``git`` request refused: the Harness answers it as a ``WireError``."""

    error: str
    field: str | None = None
    status: int = 409


class Removed(_Message):
    """What forgetting a Run removed: repo slot → worktree (its branch kept)."""

    worktrees: dict[str, Worktree]
