"""The codebase's static checks, run as tests so the one test command covers them.

Cases: ruff lint, ruff format, mypy (strict, per pyproject.toml), the import-layer
contracts (import-linter: the Harness never imports kopf, kubernetes or the operator;
its functional core does no HTTP), actionlint on every GitHub workflow (an action on
a retired runtime is a finding; docs/decisions/0058-workflows-are-checked-by-actionlint.md),
and no module under tests/ or bench/ (nor a script under tests/) imports a test module:
what tests share lives in support modules, so running, moving or deleting one test module
never changes another.
"""

from __future__ import annotations

import ast
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


TEST_MODULE = re.compile(r"\btests(?:\.\w+)*\.test_\w+")
"""A dotted name of a module under tests/ whose name starts with ``test_``."""


def imported(tree: ast.Module) -> list[str]:
    """Every module an ``import`` or ``from ... import`` of ``tree`` names, and each name
    a ``from`` imports as a module of its package (``from tests.unit import test_x``)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return found


def test_no_module_imports_a_test_module() -> None:
    offenders = [
        f"{path.relative_to(REPO)}: {name}"
        for root in ("tests", "bench")
        for path in sorted((REPO / root).rglob("*.py"))
        for name in imported(ast.parse(path.read_text(), str(path)))
        if TEST_MODULE.fullmatch(name)
    ]
    offenders += [
        f"{path.relative_to(REPO)}: {found.group(1)}"
        for path in sorted((REPO / "tests").rglob("*.sh"))
        for found in re.finditer(rf"\b(?:from|import)\s+({TEST_MODULE.pattern})", path.read_text())
    ]
    assert offenders == [], "move what is shared into a support module (not test_*):\n" + "\n".join(
        offenders
    )
