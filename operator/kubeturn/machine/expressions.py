"""CEL guards, values and ``{{ <CEL> }}`` templates, compiled once when a Run is loaded.

This is the one adapter of the ``cel`` package (``common-expression-language``, a Rust
core): every exception it raises is translated here. A compile problem is a
``DefinitionError`` at the manifest path the expression was written at; a run-time
failure is an ``ExpressionError`` naming the expression and what CEL said.

Expressions may read only ``input``, ``context``, ``event`` and ``workspace``, checked
at compile time so a typo fails the manifest, not a Run hours later. Values leave CEL
as JSON (timestamps as RFC 3339 strings, durations as ``"<seconds>s"``): what an
assign stores in the context is then exactly what ``Run.status`` persists, so a Run
resumed after a restart sees the same values as the one that stored them. No IO.

Only the package's compiled extension is loaded (``_engine``): the package's
``__init__`` also imports its command line (typer, rich, prompt_toolkit, pygments), which
cost 0.6 s of CPU in every kubeturn process, 40% of the command's start, for a REPL
kubeturn never runs. Everything used here (``compile``, ``Program``, ``OptionalValue``)
is the extension's own.
"""

from __future__ import annotations

import datetime
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from kubeturn.api.depth import MAX_VALUE_DEPTH
from kubeturn.errors import DefinitionError, ExpressionError


def _engine() -> ModuleType:
    """The ``cel`` package's extension, as ``cel.cel`` (where the package puts it), without
    running the package's ``__init__``; the one already loaded, if any."""
    loaded = sys.modules.get("cel.cel")
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("cel")
    assert package is not None, "the cel package is installed"
    assert package.submodule_search_locations, "cel is a package"
    folder = Path(next(iter(package.submodule_search_locations)))
    path = next(
        folder / f"cel{suffix}"
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (folder / f"cel{suffix}").exists()
    )
    loader = importlib.machinery.ExtensionFileLoader("cel.cel", str(path))
    spec = importlib.util.spec_from_loader("cel.cel", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules["cel.cel"] = module
    return module


if TYPE_CHECKING:
    import cel.cel as cel
else:
    cel = _engine()

VARIABLES = frozenset({"input", "context", "event", "workspace"})
"""The top-level names an expression may read."""

_CEL_NAMES = frozenset(
    {"bool", "bytes", "double", "dyn", "int", "list", "map", "null_type", "optional"}
    | {"string", "type", "uint"}
)
"""Names CEL itself defines (type names, the ``optional`` namespace); ``cel`` reports
them among an expression's variables."""

_BOUND = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
"""The variable a comprehension macro binds (``items.map(x, x.name)`` binds ``x``); the
``cel`` package reports it among the variables."""

_CEL_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_EXPECTING = re.compile(r" expecting \{.*\}$")


class CelExpression:
    """A compiled CEL expression: a guard, an assign value, or a final state's output.

    Two expressions are equal when their sources are, so compiled Charts compare.
    """

    __slots__ = ("_program", "source", "where")

    def __init__(self, source: str, *, where: str = "", variables: frozenset[str] = VARIABLES):
        """Compile ``source``; ``DefinitionError`` at ``where`` if it does not compile or
        reads a name outside ``variables``."""
        self.source = source
        self.where = where
        self._program = _compile(source, where, variables, what=repr(source), within="")

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The value as JSON (dicts, lists, str, int, float, bool, None)."""
        return _evaluate(self._program, self.source, self.where, activation)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelExpression) and other.source == self.source

    def __hash__(self) -> int:
        return hash((CelExpression, self.source))

    def __repr__(self) -> str:
        return f"CelExpression({self.source!r})"


class CelTemplate:
    """A compiled string with ``{{ <CEL> }}`` holes: a prompt, a cwd, a command.

    Text between holes is literal. A hole's value renders as itself when it is a string
    and as compact JSON otherwise. A hole ends at the first ``}}`` outside CEL strings
    and braces, so ``{{ {'a': {'b': 1}} }}`` is one hole; a literal ``{{`` is written
    ``{{ '{{' }}``.
    """

    __slots__ = ("_parts", "source", "where")

    def __init__(self, source: str, *, where: str = "", variables: frozenset[str] = VARIABLES):
        """Compile every hole; ``DefinitionError`` at ``where`` for an unclosed ``{{``, or
        a hole that does not compile or reads a name outside ``variables``."""
        self.source = source
        self.where = where
        parts: list[str | tuple[str, cel.Program]] = []
        for piece in _split(source, where):
            if isinstance(piece, str):
                parts.append(piece)
            else:
                expression, line, column = piece
                what = f"the hole {{{{{expression}}}}} at line {line}, column {column}"
                program = _compile(expression, where, variables, what=what, within=" of the hole")
                parts.append((expression, program))
        self._parts = tuple(parts)

    def render(self, activation: Mapping[str, Any]) -> str:
        """The text with every hole replaced by its value."""
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            expression, program = part
            value = _evaluate(program, expression.strip(), self.where, activation)
            out.append(
                value
                if isinstance(value, str)
                else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            )
        return "".join(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelTemplate) and other.source == self.source

    def __hash__(self) -> int:
        return hash((CelTemplate, self.source))

    def __repr__(self) -> str:
        return f"CelTemplate({self.source!r})"


def _compile(
    source: str, where: str, variables: frozenset[str], *, what: str, within: str
) -> cel.Program:
    """``source`` compiled; ``what`` names it in messages, ``within`` follows CEL's
    positions (a hole's positions count from the hole)."""
    try:
        program = cel.compile(source)
    except Exception as error:  # the cel package raises ValueError; translate any
        raise DefinitionError(
            where, f"{what} does not compile: {_cel_message(str(error), within)}"
        ) from error
    bound = set(_BOUND.findall(source))
    unknown = sorted(set(program.variables()) - variables - _CEL_NAMES - bound)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        allowed = ", ".join(sorted(variables))
        raise DefinitionError(where, f"{what} reads {names}; an expression may read only {allowed}")
    return program


def _cel_message(text: str, within: str) -> str:
    """CEL's error without its caret drawing and its list of expected tokens."""
    found = _CEL_ERROR.findall(text)
    if not found:
        return text.strip()
    return "; ".join(
        f"{_EXPECTING.sub('', message)} at column {column}{within}"
        if line == "1"
        else f"{_EXPECTING.sub('', message)} at line {line}, column {column}{within}"
        for line, column, message in found
    )


def _evaluate(program: cel.Program, source: str, where: str, activation: Mapping[str, Any]) -> Any:
    try:
        value = program.execute(dict(activation))
    except KeyError as error:  # a missing map key; its str() would be only the quoted key
        key = error.args[0] if error.args else None
        raise ExpressionError(
            source, f"no key {key!r}", where=where, key=None if key is None else str(key)
        ) from error
    except Exception as error:  # CEL raises many kinds; all mean "this expression failed"
        raise ExpressionError(source, str(error) or type(error).__name__, where=where) from error
    try:
        return _json(value)
    except TypeError as error:
        raise ExpressionError(source, str(error), where=where) from error


def _json(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON; ``TypeError`` for a value JSON cannot hold: a number that is not
    finite (``1e308 * 10.0``), or one nested deeper than a Run's free JSON may be
    (``MAX_VALUE_DEPTH``), such as an assign that wraps the context in itself each step
    would make. Either would be written to ``Run.status``, which could not hold it."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TypeError(f"the value {value} is not a finite number, which JSON cannot hold")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth >= MAX_VALUE_DEPTH:
        raise TypeError(f"the value nests deeper than {MAX_VALUE_DEPTH} levels")
    if isinstance(value, list | tuple):
        return [_json(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        return {_key(key): _json(item, depth + 1) for key, item in value.items()}
    if isinstance(value, datetime.datetime):
        text = value.astimezone(datetime.UTC).isoformat()
        return text.removesuffix("+00:00") + "Z"
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
        return f"{int(seconds)}s" if seconds.is_integer() else f"{seconds:.9f}".rstrip("0") + "s"
    if isinstance(value, cel.OptionalValue):
        return _json(value.value(), depth) if value.has_value() else None
    if isinstance(value, bytes):
        raise TypeError("the value is bytes, which JSON cannot hold; convert it with string()")
    raise TypeError(f"the value is a {type(value).__name__}, which JSON cannot hold")


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    raise TypeError(f"a map key of type {type(key).__name__} has no JSON form")


def _split(source: str, where: str) -> list[str | tuple[str, int, int]]:
    """Literal text and ``(expression, line, column)`` holes, in order."""
    pieces: list[str | tuple[str, int, int]] = []
    position = 0
    while True:
        start = source.find("{{", position)
        if start < 0:
            break
        if start > position:
            pieces.append(source[position:start])
        end = _hole_end(source, start + 2)
        line, column = _line_column(source, start)
        if end < 0:
            raise DefinitionError(
                where,
                f"the template has an unclosed '{{{{' at line {line}, column {column}: "
                "close it with '}}' (write a literal '{{' as {{ '{{' }})",
            )
        pieces.append((source[start + 2 : end], line, column))
        position = end + 2
    if position < len(source):
        pieces.append(source[position:])
    return pieces


def _hole_end(source: str, position: int) -> int:
    """Where the hole opened before ``position`` closes, or -1: the first ``}}`` outside
    CEL string literals and outside braces the hole itself opened."""
    depth = 0
    while position < len(source):
        char = source[position]
        if char in "'\"":
            position = _string_end(source, position)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0 and source.startswith("}}", position):
                return position
            depth = max(depth - 1, 0)
        position += 1
    return -1


def _string_end(source: str, position: int) -> int:
    """The index after the CEL string literal starting at ``position`` (its end of text
    if unterminated, so the hole is reported unclosed)."""
    quote = source[position] * 3 if source.startswith(source[position] * 3, position) else None
    quote = quote or source[position]
    raw = position > 0 and source[position - 1] in "rR"
    position += len(quote)
    while position < len(source):
        if source.startswith(quote, position):
            return position + len(quote)
        position += 2 if source[position] == "\\" and not raw else 1
    return position


def _line_column(source: str, index: int) -> tuple[int, int]:
    line = source.count("\n", 0, index) + 1
    column = index - (source.rfind("\n", 0, index) + 1) + 1
    return line, column
