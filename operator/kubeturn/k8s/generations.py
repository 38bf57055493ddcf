"""A Run daemon's wait for a new generation of its Run: woken by the watch, never a timer.

Signals and a cancel are changes to a Run's spec, and every change of a spec is a new
``metadata.generation``. kopf's watch of Runs already delivers each change, and kopf
updates a daemon's live body before it calls the Run's event handlers: the event handler
tells the Run's ``Generation`` what it saw, and the daemon, waiting on it, wakes only for
a generation it has not read. A status write (the Run's own saves) keeps the generation,
so it wakes nothing. A daemon that waits costs nothing: no timer, no poll (ADR 0084).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import kopf

from kubeturn.k8s import pauses


@dataclass
class Generation:
    """One Run's: the generation its daemon last read, and the wake a newer one sets."""

    read: int | None = None
    newer: asyncio.Event = field(default_factory=asyncio.Event)

    def reading(self, generation: int | None) -> None:
        """The daemon reads the spec of ``generation`` now: only another one wakes it.

        The live body holds the newest generation the watch delivered, so one seen before
        this call is the one read, and the wake is cleared with no loss."""
        self.read = generation
        self.newer.clear()

    def seen(self, generation: int | None) -> None:
        """The watch delivered the Run at ``generation`` (any event: status writes too)."""
        if generation != self.read:
            self.newer.set()

    async def changed(self, stopped: kopf.DaemonStopped) -> None:
        """Until a generation other than the one read is seen, or the daemon is to stop."""
        await pauses.pause_or_wake(stopped, self.newer, None)
