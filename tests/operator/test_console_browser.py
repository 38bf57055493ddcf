"""The operator's console in a real headless Chromium, through the API server with a
user's RBAC (ADR 0110): the real operator (kopf, in a thread of its own) against the API
emulator and its aggregation layer, serving the console ``kubeturn operator`` mounts
(``cluster_console``); Chromium (Playwright) sends the user's token with every request,
as ``kubectl proxy`` would for them.

It lives in the operator tier, whose fixtures (the emulator, the chart's installation)
it needs, and skips as the browser tier does without Chromium or Playwright.

Cases:
- a viewer (the chart's console role and ``get``/``list`` of Runs in the namespace) opens
  the Run's page under ``/apis/console.kubeturn.dev/v1alpha1/``: the machine is drawn,
  ``waiting`` (where the Run waits) active, ``drafting`` (passed through) visited, the
  taken ``submit`` marked; the signals accepted now are listed; every asset (the
  console's script and style, mermaid, htmx) came through the aggregated ``assets`` path,
  the page's live part was polled there, and the page reported no error;
- a user who may not get the Run, and one without the console's RBAC, each get 403 and
  no diagram.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kubeturn.k8s.console_source import cluster_console
from tests.browser.support import chromium
from tests.operator import emulator
from tests.operator import installation as installation_
from tests.operator.console_support import PREFIX, place_console, user
from tests.operator.operator_support import GROUP_VERSION, NAMESPACE, fail_on_logged_errors
from tests.operator.world import OperatorWorld, operator_world

Body = dict[str, Any]
RUN = "reviewed"
PAGE = f"{PREFIX}/namespaces/{NAMESPACE}/runs/{RUN}"
WAIT_MS = 20_000
"""Bound of any wait for the page (its live part is asked for every 2 s)."""


def run() -> Body:
    """A Run of no Agent that waits for ``submit``, then for ``approve``."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": RUN, "namespace": NAMESPACE},
        "spec": {
            "agents": {},
            "machine": {
                "initial": "drafting",
                "states": {
                    "drafting": {"on": {"submit": "waiting"}},
                    "waiting": {"on": {"approve": "done", "reject": "drafting"}},
                    "done": {"type": "final"},
                },
            },
        },
    }


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    executable = chromium()
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[dev]')")
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable)
        yield launched
        await launched.close()


@pytest.fixture
async def world(
    browser: Any,
    k8s: emulator.KubernetesApi,
    k8s_client: aiohttp.ClientSession,
    installation: installation_.Installation,
    chart: Callable[[installation_.Shape], list[Body]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> AsyncIterator[OperatorWorld]:
    """The operator serving its console behind the aggregated API; the Run waiting at
    ``waiting`` after ``submit``. The test fails if the operator logged an error."""
    place = place_console(
        k8s, chart(installation.shape), installation.operator_namespace, tmp_path / "tls"
    )
    async with operator_world(
        k8s, k8s_client, installation, console=cluster_console, **place.settings
    ) as made:
        await made.create(run())
        await made.until(lambda: made.run(RUN).get("state") == "drafting", "the Run", run=RUN)
        await made.signal(RUN, "submit")
        await made.until(lambda: made.run(RUN).get("state") == "waiting", "submit", run=RUN)
        yield made
    fail_on_logged_errors(caplog, [])


async def page_of(browser: Any, token: str) -> tuple[Any, Any, list[str], list[str]]:
    """A page whose every request carries ``token``; the errors it reports, and the
    paths of what it asked for."""
    context = await browser.new_context(
        viewport={"width": 1280, "height": 900},
        extra_http_headers={"Authorization": f"Bearer {token}"},
    )
    opened = await context.new_page()
    errors: list[str] = []
    asked: list[str] = []
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: errors.append(str(e)))
    opened.on("requestfinished", lambda r: asked.append(r.url))
    return context, opened, errors, asked


async def test_a_viewer_sees_the_run_page_through_the_api_server(
    world: OperatorWorld, browser: Any
) -> None:
    viewer = user(world.k8s, "viewer", console=True, runs=True)
    base = str(world.k8s.url).rstrip("/")
    context, page, errors, asked = await page_of(browser, viewer)
    try:
        answer = await page.goto(f"{base}{PAGE}")
        assert answer.status == 200
        await page.wait_for_selector(".diagram[data-drawn] svg", timeout=WAIT_MS)
        nodes = await page.eval_on_selector_all(
            ".diagram g.node.statediagram-state",
            "nodes => nodes.map(n => [n.textContent.trim(), n.getAttribute('class')])",
        )
        marks = {name: {"active", "visited"} & set(classes.split()) for name, classes in nodes}
        assert marks == {"drafting": {"visited"}, "waiting": {"active"}, "done": set()}
        labels = await page.eval_on_selector_all(
            ".diagram .edgeLabel", "labels => labels.map(l => l.textContent.trim())"
        )
        assert sorted({label for label in labels if label.endswith("✓")}) == ["submit ✓"]
        accepted = await page.eval_on_selector_all(
            "table.accepted tbody td code", "codes => codes.map(c => c.textContent)"
        )
        assert accepted == ["approve", "reject"]
        async with page.expect_request_finished(
            lambda r: f"{PAGE}?part=1&v=" in r.url, timeout=WAIT_MS
        ) as polled:
            pass
        assert (await (await polled.value).response()).status == 204  # unchanged
    finally:
        await context.close()
    assets = sorted(url.removeprefix(base) for url in asked if "/assets/" in url)
    assert assets == [
        f"{PREFIX}/assets/{name}"
        for name in ("console.css", "console.js", "htmx.min.js", "mermaid.min.js")
    ]
    assert all(url.startswith(base) for url in asked), asked
    assert errors == []


@pytest.mark.parametrize(("console", "runs"), [(True, False), (False, True)])
async def test_a_user_without_rbac_gets_403_and_no_diagram(
    world: OperatorWorld, browser: Any, console: bool, runs: bool
) -> None:
    stranger = user(world.k8s, "stranger", console=console, runs=runs)
    context, page, _, asked = await page_of(browser, stranger)
    try:
        answer = await page.goto(f"{str(world.k8s.url).rstrip('/')}{PAGE}")
        assert answer.status == 403
        assert "Forbidden" in await page.content()
        assert await page.query_selector(".diagram") is None
    finally:
        await context.close()
    assert [url for url in asked if "/assets/" in url] == []
