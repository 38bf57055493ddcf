"""The values one Working tool run takes and gives: its context, identity and result.

Plain frozen dataclasses. Nothing here does IO or knows any particular tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunAs:
    """The unprivileged identity the toolbox's sessions take when it runs as root."""

    uid: int
    gid: int


@dataclass(frozen=True)
class ToolContext:
    """Where and as whom a Working tool runs, and the limits it keeps."""

    cwd: Path
    """Absolute directory the tools are rooted at; relative paths in arguments resolve here."""
    env: Mapping[str, str]
    """The whole environment of every subprocess; already scrubbed (``scrubbed_environment``)."""
    denied: tuple[Path, ...] = ()
    """Paths the tools never read, write or list (the Harness's data dir, its tokens)."""
    bash_timeout_s: float = 120.0
    """Seconds a command (and a search) may run: long enough for a test suite or a build
    step, short enough that a hung command cannot hold a Turn for long. ``bash``'s
    ``timeoutSeconds`` can only lower it."""
    output_limit_bytes: int = 30_000
    """Bytes of output one tool result carries at most: about 7,500 tokens, a screenful
    of context a model can use without one result crowding out the conversation."""
    end_strays: Callable[[], object] = lambda: None
    """Ends every process a command left behind outside its process group (``setsid``,
    a double fork): the toolbox's session, a child subreaper, kills all beneath it."""

    def __post_init__(self) -> None:
        if not self.cwd.is_absolute():
            raise ValueError(f"the Working tools' cwd must be absolute, got {self.cwd}")


@dataclass(frozen=True)
class ToolResult:
    """What the model reads back from one tool call."""

    text: str
    is_error: bool = False
