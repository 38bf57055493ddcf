"""A local Run's workdir: where its clones, worktrees and state live, and the files that
hold that state between ``kubeturn`` commands.

One workdir holds one Run (by default ``./.kubeturn-work/<run name>``)::

    <workdir>/                        the Harness's work root
      .repos/<slot>/                  the clone of each repo slot
      <slot>/kubeturn-<run>/          the Run's worktree of each slot (branch kubeturn/<run>)
      .kubeturn/
        harness/                      the Harness's data dir: its conversation logs
        providers.yaml                the providers file written for ``--model scripted:``
        logs/                         the Harness's, the scripted model's and kubeturn's logs
        runs/<run>/
          run.yaml                    the manifest the Run started with (``--resume`` uses it)
          options.json                the flags it started with
          snapshot.json               its status, shaped like ``Run.status``: the snapshot,
                                      its settled Turns in ``turns``
          signals.jsonl               outside events ``kubeturn send`` appended
          cancel                      present once ``kubeturn cancel`` asked
          lock                        locked (flock) while a ``kubeturn run`` drives the Run

Every file another process reads is replaced atomically (a temporary file, fsync, rename,
fsync of the directory), so a reader or a crash sees the old content or the new, never
half. ``signals.jsonl`` is only ever appended to, one line per write.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeturn.errors import CommandError
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore

DEFAULT_ROOT = Path(".kubeturn-work")
"""Where workdirs go unless ``--workdir`` says otherwise: one per Run, under the
directory ``kubeturn`` runs in (a hidden name, so a project's tools pass it by)."""
STATE = ".kubeturn"
REPOS = ".repos"


def default_workdir(run: str) -> Path:
    return DEFAULT_ROOT / run


def branch_of(run: str) -> str:
    """The git branch of a Run's worktrees (the cluster's name for it too)."""
    return f"kubeturn/{run}"


@dataclass(frozen=True)
class Workdir:
    root: Path
    """Absolute."""

    @classmethod
    def at(cls, path: Path) -> Workdir:
        return cls(path.expanduser().resolve())

    @property
    def state(self) -> Path:
        return self.root / STATE

    @property
    def harness_data(self) -> Path:
        return self.state / "harness"

    @property
    def providers(self) -> Path:
        return self.state / "providers.yaml"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def clone(self, slot: str) -> Path:
        return self.root / REPOS / slot

    def run(self, name: str) -> RunFiles:
        return RunFiles(self.state / "runs" / name, name)

    def is_empty(self) -> bool:
        return not self.root.exists() or not any(self.root.iterdir())

    def check_fresh(self, run: str) -> None:
        """A new Run needs an empty workdir: a used one would mix two Runs' clones and state."""
        if self.is_empty():
            return
        if self.run(run).snapshot.exists():
            raise CommandError(
                f"the workdir {self.root} already holds the run {run!r}; continue it with "
                f"`kubeturn run --resume {run}`, or remove the directory to start it afresh"
            )
        raise CommandError(
            f"the workdir {self.root} is not empty; a new run needs an empty one: remove it, "
            "or pass another --workdir"
        )


@dataclass(frozen=True)
class RunFiles:
    """The files of one Run in its workdir."""

    directory: Path
    name: str

    @property
    def manifest(self) -> Path:
        return self.directory / "run.yaml"

    @property
    def options(self) -> Path:
        return self.directory / "options.json"

    @property
    def snapshot(self) -> Path:
        return self.directory / "snapshot.json"

    @property
    def signals(self) -> Path:
        return self.directory / "signals.jsonl"

    @property
    def cancel_file(self) -> Path:
        return self.directory / "cancel"

    @property
    def lock_file(self) -> Path:
        return self.directory / "lock"

    def exists(self) -> bool:
        return self.manifest.exists()

    def read_status(self) -> dict[str, Any] | None:
        """The Run's last saved status; None before its first save."""
        try:
            return dict(json.loads(self.snapshot.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise CommandError(
                f"cannot read {self.snapshot}: {error}; the run's state is damaged"
            ) from error

    def append_signal(self, signal: dict[str, Any]) -> None:
        """Append one signal line (one ``write`` of a whole line, to an O_APPEND file)."""
        line = (json.dumps(signal, separators=(",", ":")) + "\n").encode()
        descriptor = os.open(self.signals, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, line)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def request_cancel(self) -> None:
        write_atomic(self.cancel_file, json.dumps({"requestedAt": time.time()}) + "\n")

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the Run's lock while a ``kubeturn run`` drives it; the kernel drops it when
        the process dies, however it dies."""
        self.directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CommandError(
                    f"the run {self.name!r} is already being driven by another `kubeturn run` "
                    f"(it holds {self.lock_file}); stop that one first"
                ) from None
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"{os.getpid()}\n".encode())
            yield
        finally:
            os.close(descriptor)

    def is_driven(self) -> bool:
        """Whether a ``kubeturn run`` holds the Run's lock now."""
        try:
            descriptor = os.open(self.lock_file, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(descriptor)
        return False


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: a reader, or a crash, sees the old file or the new."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with open(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class FileStore:
    """The local ``SnapshotStore``: the core's snapshot, with what ``kubeturn status`` and
    ``kubeturn turns`` show, in ``snapshot.json`` (shaped like ``Run.status``).

    Writes run in one worker thread, in the order they were asked for, and a write once
    asked for is finished even when the actor that asked is stopped while it waits
    (``close`` waits for them): the last state decided is the last state written.
    """

    def __init__(self, files: RunFiles, core: RunCore) -> None:
        self._files = files
        self._core = core
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")
        self._pending: set[asyncio.Future[None]] = set()

    async def save(self, snapshot: dict[str, Any]) -> None:
        text = json.dumps(status_of(self._core, snapshot), indent=1, sort_keys=True) + "\n"
        loop = asyncio.get_running_loop()
        written = loop.run_in_executor(self._writer, write_atomic, self._files.snapshot, text)
        self._pending.add(written)
        written.add_done_callback(self._pending.discard)
        await asyncio.shield(written)

    async def close(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        self._writer.shutdown(wait=True)


def status_of(core: RunCore, snapshot: dict[str, Any]) -> dict[str, Any]:
    """What the operator writes in ``Run.status`` (``statuses.run_status``: the settled
    Turns in ``turns``, the rest of the snapshot in ``snapshot``), for a local Run, with
    what only a local Run shows: its live Turns, and when it was saved."""
    status = statuses.run_status(core.view(), snapshot)
    shown = status.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return {**shown, "liveTurns": len(core.turns), "savedAt": time.time()}


@dataclass
class Inbox:
    """What ``kubeturn send`` and ``kubeturn cancel`` left for a running Run.

    Read from the start on each ``kubeturn run`` (the core sends each signal id once, and
    remembers the ids in its snapshot), then only what was appended since.
    """

    files: RunFiles
    _offset: int = 0
    _partial: bytes = b""
    problems: list[str] = field(default_factory=list)
    """Lines that were not a signal, each said once."""

    def signals(self) -> list[dict[str, Any]]:
        try:
            with open(self.files.signals, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        found = []
        for line in filter(None, (raw.strip() for raw in lines)):
            try:
                signal = json.loads(line)
            except ValueError:
                signal = None
            if (
                not isinstance(signal, dict)
                or not isinstance(signal.get("id"), str)
                or not isinstance(signal.get("event"), str)
                or not isinstance(signal.get("data", {}), dict)
            ):
                self.problems.append(
                    f"{self.files.signals}: ignored a line that is not a signal "
                    f"{{id, event, data}}: {line[:200].decode(errors='replace')}"
                )
                continue
            found.append(signal)
        return found

    def cancelled(self) -> bool:
        return self.files.cancel_file.exists()
