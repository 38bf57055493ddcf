"""What the model is offered: each Working tool's name, description and argument schema,
filtered by the Agent slot's Workspace access, and the parsing of the arguments it sends.

The descriptions are the model's only manual, so each says what the tool answers and
where it stops. Nothing here does IO or runs a tool.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kubeturn_harness import bodies, wire
from kubeturn_harness.errors import NotJson
from kubeturn_harness.tools import errors, limits, schemas


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model sees it."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""

    def openai(self) -> dict[str, Any]:
        """The OpenAI chat-completions ``tools`` entry (a copy; callers may change it)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }


_DESCRIPTIONS = {
    schemas.ToolName.READ: (
        "Read a text file. Answers its lines numbered like `cat -n`, from line `offset` "
        f"(default 1), at most `limit` lines (default {limits.READ_LINES}); lines longer "
        f"than {limits.LINE_CHARS} characters are cut. A long result is cut short and says "
        "which offset to read on from. Directories (use glob) and binary files are refused."
    ),
    schemas.ToolName.WRITE: (
        "Write a file with the given content, replacing it if it exists and creating "
        "missing parent directories. Answers how many bytes were written."
    ),
    schemas.ToolName.EDIT: (
        "Replace one exact piece of text in a file. `oldText` must occur exactly once, "
        "whitespace and line breaks included; if it occurs more often, add surrounding "
        "lines to it. Prefer this to rewriting a whole file."
    ),
    schemas.ToolName.BASH: (
        "Run a command with `bash -c` in the working directory, stdin empty. Answers stdout "
        "and stderr combined, then the exit code; only the end of a long output is kept "
        "(the result says how much was dropped). The command is killed after the Harness's "
        "time limit (`timeoutSeconds` can lower it), and processes it leaves in the "
        "background are killed when it ends."
    ),
    schemas.ToolName.GREP: (
        "Search file contents for a regular expression. Answers `file:line:text` lines, "
        "files relative to `path`, sorted by file; at most "
        f"{limits.GREP_MATCHES} matches, lines cut at {limits.LINE_CHARS} characters. "
        "Hidden files are searched; .git and binary files are skipped."
    ),
    schemas.ToolName.GLOB: (
        "Find files and directories by glob pattern. Answers matching paths relative to "
        f"`path`, sorted, directories ending in '/', at most {limits.GLOB_PATHS}. "
        ".git is skipped; symbolic links are listed but not followed."
    ),
}

_CATALOGUE = tuple(
    ToolSpec(name=tool.value, description=_DESCRIPTIONS[tool], parameters=schemas.schema(tool))
    for tool in schemas.ToolName
)

_ALLOWED = {
    wire.WorkspaceAccess.WRITE: frozenset(schemas.ToolName),
    wire.WorkspaceAccess.READ: frozenset(
        {schemas.ToolName.READ, schemas.ToolName.GREP, schemas.ToolName.GLOB}
    ),
    wire.WorkspaceAccess.NONE: frozenset[schemas.ToolName](),
}
"""What each Workspace access offers: ``read`` cannot change files or run commands."""


def working_tools(access: wire.WorkspaceAccess) -> list[ToolSpec]:
    """The Working tools an Agent slot with ``access`` is offered, in a stable order."""
    allowed = _ALLOWED[access]
    return [spec for spec in _CATALOGUE if spec.name in allowed]


def parse_arguments(spec: ToolSpec, arguments: str) -> dict[str, Any]:
    """The arguments object the model wrote for ``spec``, checked against its schema.

    Raises ``ToolArgumentError`` for text that is not JSON, JSON that is not an object,
    or an object that does not fit; ``ValueError`` if ``spec`` is not a Working tool.
    """
    try:
        tool = schemas.ToolName(spec.name)
    except ValueError:
        raise ValueError(f"{spec.name!r} is not a Working tool") from None
    try:
        data = bodies.parse(arguments, what="the arguments object")
    except NotJson as error:
        raise errors.ToolArgumentError(
            f"The arguments of {tool} are not valid JSON ({error}); "
            "send one JSON object of the tool's arguments."
        ) from error
    if not isinstance(data, dict):
        raise errors.ToolArgumentError(
            f"The arguments of {tool} must be a JSON object, got {_json_kind(data)}."
        )
    schemas.validate(tool, data)
    return data


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
