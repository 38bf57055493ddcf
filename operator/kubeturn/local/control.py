"""``kubeturn send``, ``cancel``, ``turns`` and ``status`` for a Run on this machine.

They touch only the Run's files in its workdir: a signal is a line appended to
``signals.jsonl`` and a cancel is the ``cancel`` file, which the ``kubeturn run`` driving
the Run reads within a quarter of a second (or ``kubeturn run --resume`` reads when it
starts); ``turns`` and ``status`` read ``snapshot.json``. None of them starts anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeturn.api.status import FINISHED, RunPhase
from kubeturn.errors import CommandError
from kubeturn.local.workdir import RunFiles, Workdir, default_workdir


@dataclass(frozen=True)
class Sent:
    signal_id: str
    delivered_now: bool
    """A ``kubeturn run`` drives the Run now; otherwise the signal waits for ``--resume``."""


def files_of(name: str, workdir: Path | None) -> RunFiles:
    root = Workdir.at(workdir or default_workdir(name))
    files = root.run(name)
    if not files.exists():
        raise CommandError(
            f"there is no local run {name!r} in {root.root}; pass the --workdir it runs in "
            "(or --kube for a Run on a cluster)"
        )
    return files


def status(name: str, workdir: Path | None) -> dict[str, Any]:
    files = files_of(name, workdir)
    return files.read_status() or {"phase": RunPhase.PENDING.value}


def driven(name: str, workdir: Path | None) -> bool:
    """Whether a ``kubeturn run`` drives the Run now; a Run none drives stays where it was
    saved until ``kubeturn run --resume`` continues it."""
    return files_of(name, workdir).is_driven()


def send(name: str, event: str, data: dict[str, Any], signal_id: str, workdir: Path | None) -> Sent:
    files = files_of(name, workdir)
    _check_open(name, files)
    files.append_signal({"id": signal_id, "event": event, "data": data})
    return Sent(signal_id, files.is_driven())


def cancel(name: str, workdir: Path | None) -> bool:
    """Ask for CANCEL; True when a ``kubeturn run`` drives the Run now."""
    files = files_of(name, workdir)
    _check_open(name, files)
    files.request_cancel()
    return files.is_driven()


def _check_open(name: str, files: RunFiles) -> None:
    phase = (files.read_status() or {}).get("phase")
    if phase in FINISHED:
        raise CommandError(f"the run {name!r} is {phase}: it takes no more signals")
