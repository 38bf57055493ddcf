"""Print the version a release tag publishes, or refuse the tag.

kubeturn has one version (docs/decisions/0057-one-version-released-from-a-tag.md):
pyproject.toml's ``project.version``, and charts/kubeturn/Chart.yaml's ``version`` and
``appVersion``. A tag ``vX.Y.Z`` releases only when all three are ``X.Y.Z``; the release
workflow runs this before it builds anything:

    python .github/scripts/release_version.py "$GITHUB_REF_NAME" >>"$GITHUB_OUTPUT"

On success it prints ``version=X.Y.Z``; otherwise it names every disagreement on
stderr (as workflow ``::error::`` lines) and exits 1. Standard library only: it runs
before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"
CHART = REPO / "charts" / "kubeturn" / "Chart.yaml"

_TOP_LEVEL = re.compile(
    r"""^(?P<key>version|appVersion):[ \t]*(?P<q>["']?)(?P<value>[^"'#\s]+)(?P=q)[ \t]*(?:#.*)?$"""
)
"""A top-level (unindented) ``version:`` or ``appVersion:`` line and its scalar."""


def chart_versions(text: str) -> dict[str, str]:
    """Chart.yaml's top-level ``version`` and ``appVersion`` (plain or quoted scalars)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _TOP_LEVEL.match(line)
        if match is not None:
            found[match["key"]] = match["value"]
    return found


def versions() -> dict[str, str]:
    """Every place the one version is written, by name."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    chart = chart_versions(CHART.read_text())
    return {
        "pyproject.toml project.version": project,
        "charts/kubeturn/Chart.yaml version": chart.get("version", "(missing)"),
        "charts/kubeturn/Chart.yaml appVersion": chart.get("appVersion", "(missing)"),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: release_version.py TAG", file=sys.stderr)
        return 2
    tag = argv[0]
    if not tag.startswith("v"):
        print(f"::error::the tag {tag!r} is not v<version>", file=sys.stderr)
        return 1
    wanted = tag.removeprefix("v")
    wrong = {place: value for place, value in versions().items() if value != wanted}
    for place, value in wrong.items():
        print(f"::error::the tag {tag} wants {wanted}, but {place} is {value}", file=sys.stderr)
    if wrong:
        return 1
    print(f"version={wanted}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
