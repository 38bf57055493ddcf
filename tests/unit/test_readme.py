"""The README's manifests are valid: a user copying one gets a Run that loads.

Cases: every ```yaml block of README.md that is a Run loads with the operator's checks.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubeturn.machine.load import load_run_yaml

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = [
    block
    for block in re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.DOTALL)
    if "kind: Run" in block
]


def test_the_readme_shows_a_run() -> None:
    assert BLOCKS, "README.md has no Run manifest"


@pytest.mark.parametrize("block", BLOCKS)
def test_a_readme_run_loads(block: str) -> None:
    load_run_yaml(block, "README.md")
