"""The codebase's static checks, run as tests so the one test command covers them.

Cases: ruff lint, ruff format, mypy (strict, per pyproject.toml), the import-layer
contracts (import-linter: the Harness never imports kopf, kubernetes or the operator;
its functional core does no HTTP), actionlint on every GitHub workflow (an action on
a retired runtime is a finding; docs/decisions/0058-workflows-are-checked-by-actionlint.md),
and the decisions' index (docs/decisions/README.md) listing every decision once; and no
module under tests/ or bench/ (nor a script under tests/) imports a test module: what
tests share lives in support modules, so running, moving or deleting one test module
never changes another.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import background

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> None:
    executable = BIN / tool if (BIN / tool).exists() else shutil.which(tool)
    if executable is None:
        pytest.fail(f"{tool} is not installed; install the dev extras: pip install -e '.[dev]'")
    result = subprocess.run(
        [str(executable), *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{tool} {' '.join(args)}:\n{result.stdout}{result.stderr}"


def test_ruff_lint() -> None:
    run("ruff", "check", ".")


def test_ruff_format() -> None:
    run("ruff", "format", "--check", ".")


@pytest.mark.timeout(300)
def test_mypy_strict(request: pytest.FixtureRequest) -> None:
    """A cold mypy reads the kubernetes, openai and anthropic SDKs' types: about a minute
    of one core. It was started when the suite was collected (``tests/background.py``);
    run alone, this test starts it."""
    if background.MYPY not in request.config.stash:
        if not (background.BIN / "mypy").exists():
            pytest.fail("mypy is not installed; install the dev extras: pip install -e '.[dev]'")
        background.start_mypy(request.config)
    process = request.config.stash[background.MYPY]
    output, _ = process.communicate(timeout=280)
    assert process.returncode == 0, f"mypy:\n{output}"


def test_import_layers() -> None:
    run("lint-imports")


def test_actionlint() -> None:
    """actionlint finds nothing in .github/workflows. Its shellcheck and pyflakes
    integrations are off: they run only where those tools are on PATH (GitHub's runners
    have shellcheck), and a finding must not depend on the machine."""
    workflows = sorted(
        str(path.relative_to(REPO)) for path in (REPO / ".github" / "workflows").glob("*.y*ml")
    )
    assert workflows, "no workflow under .github/workflows"
    run("actionlint", "-no-color", "-shellcheck=", "-pyflakes=", *workflows)


def test_decision_index() -> None:
    """docs/decisions/README.md links every decision record exactly once, each link names
    a record that exists, and the numbers it says were never used are the gaps."""
    decisions = REPO / "docs" / "decisions"
    index = (decisions / "README.md").read_text()
    records = sorted(path.name for path in decisions.glob("[0-9][0-9][0-9][0-9]-*.md"))
    links = re.findall(r"\]\(([0-9]{4}-[^)]+\.md)\)", index)
    assert sorted(links) == records, "each decision record is linked once from the index"
    numbers = {int(name[:4]) for name in records}
    gaps = {f"{n:04d}" for n in range(1, max(numbers)) if n not in numbers}
    unused = re.search(r"((?:[0-9]{4},?\s(?:and\s)?)+)were never used", index)
    assert unused is not None, "the index says which numbers were never used"
    assert set(re.findall(r"[0-9]{4}", unused.group(1))) == gaps


TEST_MODULE = re.compile(r"tests(?:\.\w+)*\.test_\w+")
"""A dotted name of a module under tests/ whose name starts with ``test_``."""
IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<package>tests(?:\.\w+)*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|.*)"
    r"|import[ \t]+(?P<modules>.*))",
    re.MULTILINE,
)
"""An import statement at the start of a line (Python's, or Python in a shell script)."""


def imported(text: str) -> list[str]:
    """Every module the import statements of ``text`` name, and each name a ``from``
    imports as a module of its package (``from tests.unit import test_x``). Read as text,
    not parsed: the check runs in every CI run, and parsing every module costs seconds."""
    found: list[str] = []
    for statement in IMPORT.finditer(text):
        if statement["package"] is not None:
            names = re.findall(r"\w+", statement["names"].split("#")[0])
            found += [statement["package"], *(f"{statement['package']}.{n}" for n in names)]
        else:
            found += re.findall(r"[\w.]+", statement["modules"].split("#")[0])
    return found


def test_no_module_imports_a_test_module() -> None:
    sources = [
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "tests").rglob("*.sh"),
        *(REPO / "bench").rglob("*.py"),
    ]
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for path in sorted(sources)
        for name in imported(path.read_text())
        if TEST_MODULE.fullmatch(name)
    ]
    assert offenders == [], "move what is shared into a support module (not test_*):\n" + "\n".join(
        offenders
    )
