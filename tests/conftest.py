"""Suite-wide rules: tier markers by directory, and no asyncio task may outlive its test.

Tiers live in directories (``tests/unit``, ``tests/harness``, ...); the marker of each
test's tier is applied here, so ``-m unit`` selects a tier without any test naming it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kubeturn_harness.sandbox.client import LocalToolbox
from kubeturn_harness.settings import NOBODY
from kubeturn_harness.tools import tool_identity
from tests import background

TESTS = Path(__file__).parent
TIERS = {
    "unit",
    "harness",
    "hostile",
    "system",
    "operator",
    "e2e",
    "docker",
    "static",
    "chart",
    "cli",
    "provider",
    "browser",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(TESTS).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
        elif tier.startswith("test_static"):
            item.add_marker(pytest.mark.static)
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            item.fixturenames.insert(0, "no_leftover_tasks")  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[object]:
    """A test that is not a coroutine runs on no event loop: looptime (ADR 0101), which
    asks pytest-asyncio's policy for the test's loop, is not shown the policy, or the
    policy would make a loop for it that nothing closes (a ResourceWarning, an error
    here, in whichever test the garbage collector runs)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        pyfuncitem.funcargs.pop("event_loop_policy", None)
    return (yield)


def pytest_collection_finish(session: pytest.Session) -> None:
    if (background.BIN / "mypy").exists() and any(
        item.nodeid == background.MYPY_TEST for item in session.items
    ):
        background.start_mypy(session.config)


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.stop(session.config)


@pytest.fixture
async def no_leftover_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running once its fixtures are torn down."""
    before = asyncio.all_tasks()
    yield
    for _ in range(20):
        leftover = asyncio.all_tasks() - before - {asyncio.current_task()}
        if not leftover:
            return
        await asyncio.sleep(0.01)
    names = sorted(task.get_name() + ": " + repr(task.get_coro()) for task in leftover)
    pytest.fail("tasks left running after the test:\n" + "\n".join(names))


@pytest.fixture(scope="session")
def toolbox_socket() -> Iterator[Path]:
    """One toolbox for every Harness this test process runs in itself (it serves this
    process only); its sessions run as nobody when the tests run as root."""
    started = LocalToolbox.start(run_as=tool_identity(NOBODY, NOBODY))
    yield started.socket
    started.stop()
