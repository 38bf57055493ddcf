"""kubeturn's errors, split by who must react: every error kubeturn raises on purpose is
defined here, under ``KubeturnError``, and drawn in this tree (a test fails otherwise,
ADR 0099). Each line says who catches it and what they do.

::

    KubeturnError
    ├── DefinitionError     one problem of a manifest: its path, and what to do about it
    ├── DefinitionErrors    every problem of one manifest at once: the Run cannot start
    ├── ExpressionError     a CEL expression failed at run time: its source and the cause
    ├── CommandError        a ``kubeturn`` command cannot do what it was asked: one line
    │   └── UnknownTarget   ``kubeturn logs``' TURN or AGENT names no Turn and no Agent
    │                       slot of the Run: the message names those there are
    ├── WireError           a request body the Orchestrator API refuses: a 4xx naming the
    │                       field, or the body (also a ``ValueError``)
    ├── SnapshotUnreadable  a Run's saved state cannot be restored (an unknown version, a
    │                       damaged one): the Run says why and is not driven
    ├── FrameRefused        an invoke's Frame cannot be made (a prompt that does not
    │                       render, a cwd that is not absolute, a conversation with a
    │                       live Turn): the core admits nothing, the state hears
    │                       ``error.invoke`` (reason ``refused``)
    ├── ActorClosed         a Run's actor was asked after it closed (its operator stops,
    │                       its daemon restarts): the Orchestrator API answers 503 and
    │                       the Harness asks again
    ├── AdmitFailed         a ``TurnPort`` could not admit a Submission (its cause says
    │   │                   why): the Run's actor records the admission failed
    │   └── Withdrawn       a Turn waiting for a slot under a cap on live Turns ended
    │                       first (``orchestrator.caps``): it is never admitted, and the
    │                       core, which swept it, records nothing of the failure
    ├── HarnessCallFailed   a call to a Harness failed (``orchestrator.harness_client``);
    │   │                   its caller decides what is safe to repeat
    │   ├── HarnessUnreachable  no answer: no connection, a cut one, a timeout, a closed
    │   │                       client; ``sent`` says whether the request may have
    │   │                       reached the Harness
    │   ├── HarnessRefused      an answer, with an error status or not of the wire
    │   └── ConversationLost    a follower's Harness kept saying it has no such
    │                           conversation (or offset): the Submission followed
    │                           settles ``failed``
    ├── DeliveryFailed      the sandbox could not commit or bundle a delivery: the
    │                       delivery's result says why
    ├── NotFound            (``k8s.kube``) the Kubernetes object is gone: its caller
    │                       goes on without it
    ├── Conflict            (``k8s.kube``) the object changed since the version a write
    │                       named (HTTP 409): the writer reads it again, or leaves it
    │                       to the one that wrote first
    ├── Going               an object a Workspace makes is an earlier Workspace's, or is
    │                       being deleted: the Workspace waits, saying which
    ├── LeadershipLost      (``k8s.leader``) the operator lost its Lease: it exits
    └── ConsoleUnavailable  (``k8s.console_server``) the aggregated console cannot serve
                            (no request-header CA published, a certificate unreadable):
                            the operator logs why and runs without it

A definition error is the user's to fix; the operator shows it as a status condition
and never retries the manifest as it stands. An expression error happens while a Run
is running (a guard met a value of the wrong type); the interpreter decides what it
means for the Run. An unreadable snapshot is the operator's own data gone wrong (written
by a newer kubeturn, or damaged): retrying cannot help, so the Run shows why
(``Ready=False``, ``SnapshotUnreadable``) and waits. A command error is for the person
at the terminal: the CLI prints it as one line (what is wrong, where, what to do) and
exits 1, never with a traceback.
Foreign exceptions (pydantic, CEL, YAML, git, aiohttp, the Kubernetes client) are
translated where they are caught, in one place each, with the cause chained.

Outside the tree on purpose (ADR 0099): ``_Failed`` (``machine.interpreter``) and
``_Conflict`` (``k8s.control``), control flow that never leaves its module, and
``k8s.push_program``'s ``Refused``: that program runs alone in a delivery Pod and
imports nothing of kubeturn.

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


class UnknownTarget(CommandError):
    """A transcript was asked for a Turn or an Agent slot the Run does not have; the
    message names the Turns and the slots it has."""


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


class FrameRefused(KubeturnError):
    """The Turn cannot be admitted; the message names the Frame and what to change."""


class ActorClosed(KubeturnError):
    """The actor was closed (its operator is stopping, or its daemon is restarting): what
    it was asked is for the actor that resumes its Run, so the caller should retry."""


class AdmitFailed(KubeturnError):
    """A ``TurnPort`` could not admit a Submission: the Harness refused it or could not be
    reached. The message says which; the cause (a ``HarnessCallFailed``) is chained."""


class Withdrawn(AdmitFailed):
    """A Turn that waited for a slot under a cap on live Turns (ADR 0116) was swept first:
    its admission is dropped, never sent to the Harness."""


class HarnessCallFailed(KubeturnError):
    """A call to a Harness failed; the message says which call and how."""


class HarnessUnreachable(HarnessCallFailed):
    """No answer came: the connection failed or was cut, the call timed out, or this
    client was closed (the Workspace's sandbox Pod changed, ADR 0024)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent
        """Whether the request may have reached the Harness: False only when no
        connection was made (refused, timed out, or the client was closed first)."""


class HarnessRefused(HarnessCallFailed):
    """The Harness answered, with an error status or with a body not of its wire."""

    def __init__(self, message: str, *, status: int, said: str) -> None:
        super().__init__(message)
        self.status = status
        self.said = said
        """What the Harness said: its error body's message, or the start of its body."""


class ConversationLost(HarnessCallFailed):
    """The Harness serving now kept saying, for ``harness_client.LOST_AFTER_S``, that it
    has no such conversation or offset: its log is not the one followed (the Workspace's
    volume was replaced, or emptied), and the conversation will not come back."""


class DeliveryFailed(KubeturnError):
    """The sandbox could not commit or bundle the work; the message says why, in a line."""


class NotFound(KubeturnError):
    """The Kubernetes object is gone."""


class Conflict(KubeturnError):
    """The Kubernetes object changed since the version a write was made against (HTTP
    409)."""


class Going(KubeturnError):
    """An object the Workspace makes is there from an earlier Workspace of its name, or is
    being deleted: the Workspace's own is made once it is gone (the message says which)."""


class LeadershipLost(KubeturnError):
    """This replica no longer holds the Lease it led by: another took it, or renewals
    failed past the renew deadline. The operator stops, and the process exits to restart
    as a standby, so that two replicas never act at once."""


class ConsoleUnavailable(KubeturnError):
    """The aggregated console cannot serve; the operator runs without it."""
