"""The Harness's Working tools: ``read``, ``write``, ``edit``, ``bash``, ``grep`` and
``glob``, rooted at a Turn's ``cwd`` and filtered by the Agent slot's Workspace access.

The tool loop offers ``working_tools(access)`` and checks each call with
``parse_arguments``; a session of the toolbox (``kubeturn_harness.sandbox``) runs it
with ``run_tool``, confined, with ``scrubbed_environment``; ``tool_identity`` is the user
a toolbox started by a root Harness makes its sessions. Nothing here imports aiohttp,
kopf or kubernetes, or talks to the Orchestrator.
"""

from kubeturn_harness.tools.context import RunAs, ToolContext, ToolResult
from kubeturn_harness.tools.dispatch import run_tool
from kubeturn_harness.tools.environment import scrubbed_environment, tool_identity
from kubeturn_harness.tools.errors import ToolArgumentError
from kubeturn_harness.tools.shell import CommandResult, run_command
from kubeturn_harness.tools.specs import ToolSpec, parse_arguments, working_tools

__all__ = [
    "CommandResult",
    "RunAs",
    "ToolArgumentError",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "parse_arguments",
    "run_command",
    "run_tool",
    "scrubbed_environment",
    "tool_identity",
    "working_tools",
]
