"""kubeturn's errors, split by who must react.

::

    KubeturnError
    ├── DefinitionError    one problem of a manifest: its path, and what to do about it
    ├── DefinitionErrors   every problem of one manifest at once: the Run cannot start
    ├── ExpressionError    a CEL expression failed at run time: its source and the cause
    ├── CommandError       a ``kubeturn`` command cannot do what it was asked: one line
    ├── WireError          a request body the Orchestrator API refuses: a 4xx naming the
    │                      field, or the body (also a ``ValueError``)
    ├── SnapshotUnreadable a Run's saved state cannot be restored (an unknown version, a
    │                      damaged one): the Run says why and is not driven
    └── LeadershipLost     (``kubeturn.k8s.leader``) the operator lost its Lease: it exits

A definition error is the user's to fix; the operator shows it as a status condition
and never retries the manifest as it stands. An expression error happens while a Run
is running (a guard met a value of the wrong type); the interpreter decides what it
means for the Run. An unreadable snapshot is the operator's own data gone wrong (written
by a newer kubeturn, or damaged): retrying cannot help, so the Run shows why
(``Ready=False``, ``SnapshotUnreadable``) and waits. A command error is for the person
at the terminal: the CLI prints it as one line (what is wrong, where, what to do) and
exits 1, never with a traceback.
Foreign exceptions (pydantic, CEL, YAML, git, the Kubernetes client) are translated where
they are caught, in one place each, with the cause chained.

Manifest paths are dotted, with list indices in brackets and keys that would be
ambiguous quoted: ``spec.machine.states.reviewing.on.review_verdict[1].target``,
``spec.machine.states.fixing.on.done[0].assign["context.rounds"]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

_PLAIN_KEY = re.compile(r"^[^.\[\]\"\s]+$")


def manifest_path(base: str, *parts: str | int) -> str:
    """``base`` extended by keys (``.key``, or ``["a.b"]`` when the key holds a dot,
    a bracket, a quote or a space, or is empty) and list indices (``[i]``)."""
    path = base
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            path += f".{part}" if path else part
        else:
            path += f"[{json.dumps(part)}]"
    return path


SHOWN_LENGTH = 200
"""The most of a path or a name a message shows: a key may be as long as a manifest
(60,000 characters of state name), and a message must still say what is wrong."""


def shown(text: str, limit: int = SHOWN_LENGTH) -> str:
    """``text``, or its start and a note of how long it is when it is longer than
    ``limit`` characters."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}…({len(text)} characters)"


class KubeturnError(Exception):
    """Root of every error kubeturn raises on purpose."""


class DefinitionError(KubeturnError):
    """One problem of a manifest: where it is, and what to do about it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{shown(path)}: {message}" if path else message)
        self.path = path
        """The manifest path, e.g. ``spec.agents.coder.workspace``; empty for the whole."""
        self.message = message
        """What is wrong and what to write instead."""


class DefinitionErrors(KubeturnError):
    """Every problem found in one manifest, raised together so one edit can fix them all."""

    def __init__(self, errors: Iterable[DefinitionError]) -> None:
        self.errors = list(errors)
        if not self.errors:
            raise ValueError("DefinitionErrors needs at least one DefinitionError")
        super().__init__("\n".join(str(error) for error in self.errors))


class ExpressionError(KubeturnError):
    """A CEL expression failed while a Run was running.

    CEL does not coerce types and a missing key is an error, so a guard written for one
    payload can fail on another; the interpreter decides what that means for the Run.
    """

    def __init__(self, source: str, cause: str, *, where: str = "", key: str | None = None) -> None:
        super().__init__(f"CEL expression {source!r} failed: {cause}")
        self.source = source
        """The expression as written."""
        self.cause = cause
        """What CEL (or the conversion of its result) said."""
        self.where = where
        """The manifest path the expression was written at, when known."""
        self.key = key
        """The map key that was missing, when that is why it failed."""


class CommandError(KubeturnError):
    """A ``kubeturn`` command cannot do what it was asked (a repo that cannot be cloned,
    a dirty workdir, a port in use, a Run that is not there).

    Its message is one line that says what is wrong, where, and what to do; the CLI prints
    it after ``kubeturn:`` and exits 1.
    """


class WireError(KubeturnError, ValueError):
    """A body the Orchestrator API refuses: not JSON, nested too deep, a number JSON does
    not have, too large. The API answers ``status`` with a JSON error body carrying the
    message and the field at fault; never a 500, never a traceback."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        """What is wrong, naming the field or "the body"."""
        self.field = field
        """The dotted path of the value at fault (``items.2.score``); None for the body."""
        self.status = status


class SnapshotUnreadable(KubeturnError, ValueError):
    """A Run's snapshot that this kubeturn cannot restore: the message says why (its
    version, the field that is wrong), for the Run's condition or the terminal."""
