"""The Harness's errors, split by who must react: every error the Harness raises on
purpose is defined here (the Working tools' in ``tools.errors``), under ``HarnessError``,
and drawn in this tree (a test fails otherwise, ADR 0099).

::

    HarnessError
    ├── ConfigError          bad flags, environment or providers file: the process exits
    ├── ScriptError          the scripted model's script cannot be read or does not fit
    │                        its format, naming the path: whoever loads it exits, saying
    │                        so (``kubeturn run`` as a ``CommandError``)
    ├── NotJson              JSON the Harness cannot read (``bodies``): its reader decides
    │                        (a WireError for a request body; also a ``ValueError``)
    ├── WireError            a request the Harness refuses: a 4xx body naming the field
    ├── ToolboxUnavailable   the toolbox (where the Agents' tools run) cannot serve a
    │                        session now: a tool call fails, the run goes on
    ├── LandlockError        a Landlock call failed, the process is unrestricted (also
    │                        an ``OSError``): the toolbox opens no session
    ├── GitRefused           git could not do what the toolbox was asked
    │                        (``sandbox.clones``): the toolbox answers its ``refused``
    ├── SurfaceUnavailable   a surface read failed in a way worth retrying (503, no
    │                        connection): ``orchestrator.read_surface`` reads again, and
    │                        past its budget the run fails with ``MenuUnreadable``
    ├── PollFailed           a delivery poll failed: it is polled again, slower
    ├── RequestAfterEnd      a run was about to start a model request for a Submission
    │                        already settled: counted, never sent, the run ends
    ├── RunFailed            a Submission's run threw: it settles ``failed`` with a type
    │   ├── ProviderFailure  a model request failed (classified for the retry policy)
    │   └── MenuUnreadable   the surface could not be read or did not parse
    └── ToolError            (``tools.errors``) a Working tool could not run a call
        ├── ToolArgumentError  the model's arguments do not fit the tool's schema: the
        │                      model reads which argument
        └── ToolFailure        an expected failure of one run: the tool's result is an
                               error the model reads (an exec's command: a 400)

Foreign exceptions (openai, aiohttp, pydantic) are translated where they are caught,
each in one place, with the cause chained. Outside the tree on purpose (ADR 0099):
``tool_loop``'s ``_Cut``, control flow that never leaves its module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubeturn_harness.wire import ErrorType

if TYPE_CHECKING:
    from kubeturn_harness.sandbox.protocol import Refused


class HarnessError(Exception):
    """Root of every error the Harness raises on purpose."""


class ConfigError(HarnessError):
    """The Harness cannot start as configured; the message says what to change."""


class ScriptError(HarnessError):
    """The script cannot be read or does not fit the format; the message names the path."""


class NotJson(HarnessError, ValueError):
    """Text that is not JSON the Harness reads: not JSON at all, nested deeper than
    ``bodies.MAX_DEPTH``, or a number that is not finite (NaN, Infinity)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        """What is wrong, naming the field at fault or the whole."""
        self.field = field
        """The dotted path of the value at fault (``notices.0.text``); None for the whole."""


class WireError(HarnessError):
    """A request the Harness refuses with a 4xx, naming the field at fault."""

    def __init__(self, message: str, *, field: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


class ToolboxUnavailable(HarnessError):
    """The toolbox could not be reached, refused a session, or dropped one."""


class LandlockError(HarnessError, OSError):
    """A Landlock call failed in a way that leaves the process unrestricted."""


class GitRefused(HarnessError):
    """git could not do what was asked; ``refused`` is the answer for the Harness."""

    def __init__(self, refused: Refused) -> None:
        super().__init__(refused.error)
        self.refused = refused


class SurfaceUnavailable(HarnessError):
    """One surface read failed in a way worth retrying."""


class PollFailed(HarnessError):
    """A delivery poll failed in transport or with an unexpected answer."""


class RequestAfterEnd(HarnessError):
    """A run was about to start a model request for a Submission that had already
    settled (its Turn had ended): counted in ``kubeturn_harness_model_requests_after_
    turn_end`` and refused, so the request is never sent."""


class RunFailed(HarnessError):
    """A Submission's run threw; it settles ``failed`` with this type and message."""

    error_type: ErrorType = ErrorType.SUBMISSION_FAILED

    def __init__(self, message: str, *, error_type: ErrorType | None = None) -> None:
        super().__init__(message)
        self.message = message
        if error_type is not None:
            self.error_type = error_type


class ProviderFailure(RunFailed):
    """A model request failed; classified so that one retry policy serves every adapter.

    An adapter raises it for ONE attempt, its ``message`` naming the provider and saying
    what that attempt met; the retry policy (``kubeturn_harness.retries``) raises the
    one that ends a model call, its ``message`` saying what every attempt met and why
    no further one was made."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after_s: float | None = None,
        outcome: str | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status the provider answered; None when no answer came."""
        self.retryable = retryable
        """Whether the same request again may succeed (connection errors, timeouts, 408,
        409, 429, 5xx)."""
        self.retry_after_s = retry_after_s
        """How long the provider asked to be left alone (``Retry-After``), when it said."""
        self.outcome = outcome or message
        """What the attempt met, to follow the provider's name: ``answered HTTP 429
        (rate limited)``, ``could not be reached``, ``sent nothing for 60 s``."""
        self.detail = detail
        """The provider's own words (its error message), when it said any."""


class MenuUnreadable(RunFailed):
    """The Orchestrator's surface could not be read, or its Menu did not parse."""
