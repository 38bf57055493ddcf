"""Errors of the Working tools, split by who reads them: a branch of the Harness's tree
(``kubeturn_harness.errors``).

::

    ToolError            (a HarnessError)
    ├── ToolArgumentError   the model's arguments do not fit the tool's schema;
    │                       the message names the argument, for the model to read
    └── ToolFailure         an expected failure of one run (file not found, no unique
                            match, a refused path); ``run_tool`` answers it as
                            ``ToolResult(is_error=True)``, and the toolbox refuses an
                            exec's command with it (``run_command``)

``OSError`` raised by a tool is translated into a failed ``ToolResult`` in one place
(``dispatch``). Nothing here does IO.
"""

from __future__ import annotations

from kubeturn_harness.errors import HarnessError


class ToolError(HarnessError):
    """The root of the Working tools' errors."""


class ToolArgumentError(ToolError):
    """The arguments the model wrote cannot be used; says which argument and why."""


class ToolFailure(ToolError):
    """A tool ran into an expected failure; the message is what the model reads."""
