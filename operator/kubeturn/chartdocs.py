"""The chart README's table of values, generated from values.yaml's ``# --`` comments.

values.yaml is where every value is explained; the README's table repeats it for readers
of the chart's page, and only this module writes it, so the two cannot drift
(docs/decisions/0059-the-charts-values-table-is-generated.md). The comment convention is
helm-docs': a block of comment lines whose first starts with ``# --`` documents the key
right below it. Every key must have one.

In a cell, the comment's lines are joined with spaces; a line indented two to four
spaces past ``#`` (an item of a list laid out inside the comment) starts a line of its
own, and so does the first unindented line after such a list. The default is the value
as JSON, except for a mapping whose keys have rows of their own.

``python -m kubeturn.chartdocs`` rewrites the table between the README's markers;
``--check`` only says whether it is current.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

COMMAND = "python -m kubeturn.chartdocs"
"""What rewrites the table (run from the repository root)."""
CHART = Path("charts/kubeturn")
BEGIN = f"<!-- The values table: generated from values.yaml by `{COMMAND}`; do not edit. -->"
END = "<!-- End of the values table. -->"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+):(?:\s|$)")
_DOC = "# --"


@dataclass(frozen=True)
class Value:
    """One row: a key's dotted path, its type, its default as shown, and its comment."""

    path: str
    type: str
    default: str
    description: str


def documented(values_text: str) -> list[Value]:
    """Every key of values.yaml, in file order, with its ``# --`` comment.

    Raises ValueError naming the line of a key that has none."""
    values = yaml.safe_load(values_text)
    keys: list[tuple[str, list[str]]] = []
    stack: list[tuple[int, str]] = []
    block: list[str] | None = None
    for number, line in enumerate(values_text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(_DOC):
            block = [stripped.removeprefix(_DOC)]
            continue
        if stripped.startswith("#"):
            if block is not None:
                block.append(stripped.removeprefix("#"))
            continue
        match = _KEY.match(line)
        if match is None:
            block = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(name for _, name in stack)
        if block is None:
            raise ValueError(f"values.yaml:{number}: {path} has no `{_DOC}` comment above it")
        keys.append((path, block))
        block = None
    parents = {path.rpartition(".")[0] for path, _ in keys}
    return [
        _row(path, _at(values, path), comment, has_rows_below=path in parents)
        for path, comment in keys
    ]


def _at(values: Any, path: str) -> Any:
    for name in path.split("."):
        values = values[name]
    return values


def _row(path: str, value: Any, comment: list[str], *, has_rows_below: bool) -> Value:
    default = "" if has_rows_below else f"`{json.dumps(value, separators=(', ', ': '))}`"
    return Value(path, _type(value), default, _description(comment))


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "null"


def _description(comment: list[str]) -> str:
    """The comment as one table cell (see the module's docstring)."""
    lines: list[str] = []
    in_list = False
    for text in comment:
        indent = len(text) - len(text.lstrip(" ")) - 1
        words = " ".join(text.split())
        if not words:
            continue
        item = 2 <= indent <= 4
        if not lines or item or (in_list and indent <= 0):
            lines.append(words)
            in_list = item
        else:
            lines[-1] = f"{lines[-1]} {words}"
    return "<br>".join(_cell(line) for line in lines)


def _cell(text: str) -> str:
    """Markdown for a table cell: ``|`` escaped everywhere, ``<`` and ``>`` outside code."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def table(values: Sequence[Value]) -> str:
    """The Markdown table, one row per key."""
    rows = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    rows += [
        f"| `{value.path}` | {value.type} | {value.default} | {value.description} |"
        for value in values
    ]
    return "\n".join(rows) + "\n"


def with_table(readme: str, values_text: str) -> str:
    """The README with the table between its markers made from ``values_text``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no {BEGIN!r} followed by {END!r}")
    head = readme[: start + len(BEGIN)]
    return f"{head}\n\n{table(documented(values_text))}\n{readme[end:]}"


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the chart README's values table; with ``--check``, write nothing and exit 1
    when it is out of date."""
    parser = argparse.ArgumentParser(
        prog=COMMAND, description="Write the chart README's values table from values.yaml."
    )
    parser.add_argument("--chart", type=Path, default=CHART, help="the chart's directory")
    parser.add_argument(
        "--check", action="store_true", help="only say whether the README is up to date"
    )
    options = parser.parse_args(argv)
    readme_path = options.chart / "README.md"
    readme = readme_path.read_text()
    try:
        wanted = with_table(readme, (options.chart / "values.yaml").read_text())
    except ValueError as error:
        print(f"{COMMAND}: {error}", file=sys.stderr)
        return 1
    if wanted == readme:
        return 0
    if options.check:
        print(f"out of date: {readme_path}; regenerate with: {COMMAND}", file=sys.stderr)
        return 1
    readme_path.write_text(wanted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
