"""The arguments of each Working tool as pydantic models: one source for the JSON
Schema the model reads and for the validation its calls go through.

Validation is strict (``"5"`` is not an integer) and refuses unknown arguments, so
anything the schema does not allow is refused with a message naming the argument.
Nothing here does IO or runs a tool.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema

from kubeturn_harness.tools import errors, limits


class ToolName(StrEnum):
    """The Working tools, in the order they are offered."""

    READ = "read"
    WRITE = "write"
    EDIT = "edit"
    BASH = "bash"
    GREP = "grep"
    GLOB = "glob"


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


_PATH = "Relative paths resolve against the working directory."


class Read(_Arguments):
    path: str = Field(min_length=1, description=f"The file to read. {_PATH}")
    offset: int = Field(default=1, ge=1, description="The 1-based line to start at.")
    limit: int = Field(
        default=limits.READ_LINES, ge=1, description="How many lines to read at most."
    )


class Write(_Arguments):
    path: str = Field(min_length=1, description=f"The file to write. {_PATH}")
    content: str = Field(description="The whole new content of the file.")


class Edit(_Arguments):
    path: str = Field(min_length=1, description=f"The file to edit. {_PATH}")
    oldText: str = Field(
        min_length=1,
        description="Text to replace, exactly as in the file; it must occur exactly once.",
    )
    newText: str = Field(description="The text to put in its place.")


class Bash(_Arguments):
    command: str = Field(min_length=1, description="The command, run with bash -c.")
    timeoutSeconds: Annotated[float, Field(gt=0)] | SkipJsonSchema[None] = Field(
        default=None, description="Seconds before the command is killed; can only lower the limit."
    )


class Grep(_Arguments):
    pattern: str = Field(min_length=1, description="Regular expression to search for.")
    path: str = Field(
        default=".", min_length=1, description=f"File or directory to search. {_PATH}"
    )
    glob: Annotated[str, Field(min_length=1)] | SkipJsonSchema[None] = Field(
        default=None,
        description=(
            "Only search files matching this glob, e.g. '*.py' (any depth) or "
            "'src/**/*.ts' (from path); a leading '!' excludes instead."
        ),
    )
    ignoreCase: bool = Field(default=False, description="Match regardless of case.")


class Glob(_Arguments):
    pattern: str = Field(
        min_length=1,
        description="Glob matched against paths relative to path: '*' stays in one directory, "
        "'**' crosses directories, e.g. '**/*.py'; a trailing '/' matches directories only.",
    )
    path: str = Field(default=".", min_length=1, description=f"Directory to search. {_PATH}")


Arguments = Read | Write | Edit | Bash | Grep | Glob
"""The arguments of any Working tool."""

_MODELS: dict[ToolName, type[Arguments]] = {
    ToolName.READ: Read,
    ToolName.WRITE: Write,
    ToolName.EDIT: Edit,
    ToolName.BASH: Bash,
    ToolName.GREP: Grep,
    ToolName.GLOB: Glob,
}


def schema(tool: ToolName) -> dict[str, Any]:
    """The JSON Schema of ``tool``'s arguments object, without pydantic's titles and
    null defaults, which only add tokens."""
    document = _MODELS[tool].model_json_schema()
    properties: dict[str, dict[str, Any]] = document["properties"]
    plain = {
        name: {key: value for key, value in prop.items() if key != "title"}
        for name, prop in properties.items()
    }
    for prop in plain.values():
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    return {
        "type": "object",
        "properties": plain,
        "required": document.get("required", []),
        "additionalProperties": False,
    }


def validate(tool: ToolName, data: dict[str, Any]) -> Arguments:
    """``data`` as ``tool``'s arguments; ``ToolArgumentError`` says what does not fit."""
    model = _MODELS[tool]
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise errors.ToolArgumentError(_describe(tool, model, error)) from error


def _describe(tool: ToolName, model: type[Arguments], error: ValidationError) -> str:
    problems: dict[str, str] = {}
    for detail in error.errors():
        if detail["type"] == "none_required":
            continue  # the null branch of an optional argument; the other branch explains
        name = str(detail["loc"][0]) if detail["loc"] else "arguments"
        if detail["type"] == "missing":
            problems.setdefault(name, "is required")
        elif detail["type"] == "extra_forbidden":
            problems.setdefault(name, f"is not an argument of {tool}")
        else:
            problems.setdefault(name, f"is invalid: {detail['msg']}")
    listed = "; ".join(f"`{name}` {problem}" for name, problem in problems.items())
    known = ", ".join(model.model_fields)
    return f"Invalid arguments for {tool}: {listed}. The arguments of {tool} are: {known}."
