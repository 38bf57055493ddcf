"""The web console in a real headless Chromium, over real local Runs.

Cases:
- the Runs list shows each Run with its phase, state and Turns, linked to its page;
- the Run page draws the machine: humanReview (where the Run waits) is the active state,
  the states it passed through are visited, the others neither, the transitions it took
  end ``✓``; it lists the four Turns with their outcomes, tokens and no cost (the model has
  no price), the Run's tokens in all and per Agent slot, and what the Run accepts now
  (approve, reject); the live Run's page shows its Turn live;
- a Run at rest in two regions of a parallel state: both regions drawn side by side
  (mermaid's concurrent regions), the fan-out drawn around its child Machine, the state
  waiting in the other region active;
- a settled Turn's page shows its transcript as the Run's files hold it (``kubeturn logs``'s
  entries): its prompt, the model's words, each tool call and result, the pick, its
  receipt and the settlement;
- a live Turn's page grows without a reload: the live Run's writer has written NOTES.md
  and its next answer is held (turn, prompt, text, tool-call, tool-result); released, the
  page shows the answer, the pick ``done``, its receipt and the settlement (ended);
- the Runs list follows a Run without a reload: approve sent, its row says Succeeded.

``KUBETURN_CONSOLE_SCREENSHOTS=docs/console`` saves each page's screenshot there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.browser.conftest import REGIONS_STATE
from tests.browser.support import release, screenshot, scripted_model, wait_held
from tests.cli.support import environment

WAIT_MS = 20_000
"""Bound of any wait for the page (a live part is asked for every 2 s)."""
RUN = "namespaces/default/runs/task-with-review"


def rows(page: Any) -> list[list[str]]:
    return [
        [cell.strip() for cell in row.split("\t")]
        for row in page.eval_on_selector_all(
            "table.runs tbody tr",
            "rows => rows.map(r => Array.from(r.cells).map(c => c.innerText).join('\\t'))",
        )
    ]


def kinds(page: Any) -> list[str]:
    """The kind of each transcript entry, from its class ``entry-<kind>``."""
    return list(
        page.eval_on_selector_all(
            "ol.transcript li.entry",
            "items => items.map(i => [...i.classList].find(c => c.startsWith('entry-')).slice(6))",
        )
    )


def test_the_runs_list_shows_each_run(page: Any, ui: str) -> None:
    page.goto(f"{ui}/runs")
    assert [row[:5] for row in rows(page)] == [
        ["live", "default", "Running", "writing", "1"],
        ["regions", "default", "Running", REGIONS_STATE, "0"],
        ["task-with-review", "default", "Running", "humanReview", "4"],
    ]
    screenshot(page, "runs")
    page.click("text=task-with-review")
    page.wait_for_selector(".diagram[data-drawn]", timeout=WAIT_MS)
    assert page.url == f"{ui}/{RUN}"


def test_the_run_page_marks_the_active_and_visited_states(page: Any, ui: str) -> None:
    page.goto(f"{ui}/{RUN}")
    page.wait_for_selector(".diagram[data-drawn] svg", timeout=WAIT_MS)
    nodes = page.eval_on_selector_all(
        ".diagram g.node.statediagram-state",
        "nodes => nodes.map(n => [n.textContent.trim(), n.getAttribute('class')])",
    )
    marks = {name: {"active", "visited"} & set(classes.split()) for name, classes in nodes}
    assert marks == {
        "implementing": {"visited"},
        "reviewing": {"visited"},
        "fixing": {"visited"},
        "humanReview": {"active"},
        "done": set(),
        "failed": set(),
    }
    fill = page.eval_on_selector(
        ".diagram g.node.active rect, .diagram g.node.active path",
        "shape => getComputedStyle(shape).fill",
    )
    assert fill == "rgb(253, 230, 138)"
    labels = page.eval_on_selector_all(
        ".diagram .edgeLabel", "labels => labels.map(l => l.textContent.trim())"
    )
    assert sorted({label for label in labels if label.endswith("✓")}) == [
        "review_verdict ✓",
        "submit ✓",
    ]
    turns = page.eval_on_selector_all(
        "table.turns tbody tr",
        "rows => rows.map(r => Array.from(r.cells).slice(0, 5).map(c => c.innerText.trim()))",
    )
    assert turns == [
        ["t1", "coder", "implementing", "ended", "pick"],
        ["t2", "reviewer", "reviewing", "ended", "pick"],
        ["t3", "coder", "fixing", "ended", "pick"],
        ["t4", "reviewer", "reviewing", "ended", "pick"],
    ]
    # The scripted model has no price: each Turn's tokens, no cost; the Run's tokens in
    # its summary, per Agent slot too, and no cost there either.
    used = page.eval_on_selector_all(
        "table.turns tbody tr",
        "rows => rows.map(r => Array.from(r.cells).slice(5, 7).map(c => c.innerText.trim()))",
    )
    assert all(tokens.endswith(" out") and cost == "" for tokens, cost in used), used
    assert page.inner_text("#tokens").endswith(" out")
    assert page.query_selector("#cost") is None
    agents = page.eval_on_selector_all(
        "ul.usage-agents li", "items => items.map(i => i.dataset.agent)"
    )
    assert agents == ["coder", "reviewer"]
    accepted = page.eval_on_selector_all(
        "table.accepted tbody td code", "codes => codes.map(c => c.textContent)"
    )
    assert accepted == ["approve", "reject"]
    screenshot(page, "run")


def test_the_run_page_draws_regions_and_marks_each_active_state(page: Any, ui: str) -> None:
    page.goto(f"{ui}/namespaces/default/runs/regions")
    page.wait_for_selector(".diagram[data-drawn] svg", timeout=WAIT_MS)
    assert page.inner_text("#state") == REGIONS_STATE
    nodes = page.eval_on_selector_all(
        ".diagram g.node.statediagram-state",
        "nodes => nodes.map(n => [n.textContent.trim(), n.getAttribute('class')])",
    )
    marks = {name: {"active", "visited"} & set(classes.split()) for name, classes in nodes}
    assert marks["waiting"] == {"active"}
    assert marks["approved"] == marks["fanned"] == marks["finished"] == set()
    assert {"work", "done"} <= set(marks)
    # mermaid draws each concurrent region of a composite state as a "divider" box
    assert page.eval_on_selector_all(".diagram .divider", "found => found.length") == 2
    clusters = page.eval_on_selector_all(
        ".diagram .statediagram-cluster", "found => found.map(c => c.textContent.trim())"
    )
    assert any(text.startswith("fanning ×forEach") for text in clusters), clusters


def test_a_turns_page_shows_its_transcript(page: Any, ui: str) -> None:
    page.goto(f"{ui}/{RUN}")
    page.click('tr[data-turn="t1"] a')
    page.wait_for_selector("ol.transcript")
    assert page.url == f"{ui}/{RUN}/turns/t1"
    assert kinds(page) == [
        "turn",
        "prompt",
        "text",
        "tool-call",
        "tool-result",
        "tool-call",
        "pick",
        "receipt",
        "settlement",
    ]
    assert page.inner_text("#outcome") == "ended"
    assert "Adding the flag." in page.inner_text("ol.transcript")
    screenshot(page, "turn")


def test_a_live_turns_transcript_grows(page: Any, ui: str, runs: Path) -> None:
    model = scripted_model(runs / "live")
    wait_held(model, [1])
    page.goto(f"{ui}/namespaces/default/runs/live")
    page.wait_for_selector(".diagram[data-drawn] svg", timeout=WAIT_MS)
    live = page.eval_on_selector_all(
        "table.turns tbody tr.live", "rows => rows.map(r => r.dataset.turn)"
    )
    assert live == ["t1"]
    page.click("text=t1")
    page.wait_for_selector('ol.transcript[data-entries="5"]', timeout=WAIT_MS)
    assert kinds(page) == ["turn", "prompt", "text", "tool-call", "tool-result"]
    assert page.inner_text("#outcome") == "live"
    assert "Wrote 8 bytes to" in page.inner_text("ol.transcript")
    screenshot(page, "turn-live")
    page.evaluate("window.loadedOnce = true")
    assert release(model) == 1
    page.wait_for_selector('ol.transcript[data-entries="10"]', timeout=WAIT_MS)
    assert kinds(page) == [
        "turn",
        "prompt",
        "text",
        "tool-call",
        "tool-result",
        "text",
        "tool-call",
        "pick",
        "receipt",
        "settlement",
    ]
    assert page.inner_text("#outcome") == "ended"
    assert "NOTES.md is written." in page.inner_text("ol.transcript")
    assert page.evaluate("window.loadedOnce") is True


def test_the_runs_list_follows_a_run_to_its_end(page: Any, ui: str, project: Path) -> None:
    page.goto(f"{ui}/runs")
    sent = subprocess.run(
        [sys.executable, "-m", "kubeturn", "send", "task-with-review", "approve"],
        cwd=project,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    page.wait_for_selector(
        'tr[data-run="default/task-with-review"] .phase-succeeded', timeout=WAIT_MS
    )
    assert rows(page)[2][:4] == ["task-with-review", "default", "Succeeded", "done"]
