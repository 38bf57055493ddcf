"""The chart README's values table, generated from values.yaml by kubeturn.chartdocs
(ADR 0059).

Cases:
- drift: generating from values.yaml gives the committed README byte for byte, and the
  failure names the command that regenerates it; the command's ``--check`` agrees;
- the command rewrites only the table: a key added to values.yaml makes ``--check``
  fail without writing, then the command adds its row and leaves the prose as it was;
- every key values.yaml holds (every mapping key, as YAML reads it) has one row, in the
  file's order, and a key without a ``# --`` comment is refused with its line;
- a row: the default as JSON (none for a mapping whose keys have rows), the type, and
  the comment as one cell: ``|`` escaped, ``<`` and ``>`` escaped outside code, a list
  laid out in the comment on lines of its own.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeturn import chartdocs

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubeturn"


def _paths(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    found = []
    for key, value in node.items():
        found.append(prefix + key)
        found += _paths(value, f"{prefix}{key}.")
    return found


def test_readme_table_is_current() -> None:
    readme = (CHART / "README.md").read_text()
    wanted = chartdocs.with_table(readme, (CHART / "values.yaml").read_text())
    assert wanted == readme, f"the values table is out of date; run {chartdocs.COMMAND}"
    assert chartdocs.main(["--chart", str(CHART), "--check"]) == 0


def test_command_rewrites_only_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ["README.md", "values.yaml"]:
        shutil.copy(CHART / name, tmp_path / name)
    before = (tmp_path / "README.md").read_text()
    with (tmp_path / "values.yaml").open("a") as values:
        values.write("\n# -- A value | of <its> own.\nextra: {a: 1}\n")

    assert chartdocs.main(["--chart", str(tmp_path), "--check"]) == 1
    assert chartdocs.COMMAND in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == before

    assert chartdocs.main(["--chart", str(tmp_path)]) == 0
    after = (tmp_path / "README.md").read_text()
    row = '| `extra` | object | `{"a": 1}` | A value \\| of &lt;its&gt; own. |\n'
    assert after.replace(row, "") == before
    assert chartdocs.main(["--chart", str(tmp_path), "--check"]) == 0


def test_every_key_has_one_row_in_order() -> None:
    text = (CHART / "values.yaml").read_text()
    rows = [value.path for value in chartdocs.documented(text)]
    assert rows == _paths(yaml.safe_load(text))


def test_a_key_without_its_comment_is_refused() -> None:
    text = "# -- Documented.\na:\n  # a plain comment\n  b: 1\n"
    with pytest.raises(ValueError, match=r"^values.yaml:4: a.b has no `# --` comment above it$"):
        chartdocs.documented(text)


def test_rows() -> None:
    text = (
        "# -- Parent.\n"
        "parent:\n"
        "  # -- A `<code>` and a <tag>; a | pipe. Each:\n"
        "  #   one: first\n"
        "  #   two: second (wrapped\n"
        "  #                over two lines)\n"
        "  # After the list.\n"
        "  child: [{port: 1}]\n"
        "# -- Flag.\n"
        "flag: false\n"
    )
    assert chartdocs.documented(text) == [
        chartdocs.Value("parent", "object", "", "Parent."),
        chartdocs.Value(
            "parent.child",
            "list",
            '`[{"port": 1}]`',
            "A `<code>` and a &lt;tag&gt;; a \\| pipe. Each:<br>one: first"
            "<br>two: second (wrapped over two lines)<br>After the list.",
        ),
        chartdocs.Value("flag", "bool", "`false`", "Flag."),
    ]
