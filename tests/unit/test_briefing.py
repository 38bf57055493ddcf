"""The Briefing, the turn block after the prompt (``briefing``; docs/turn-semantics.md §4).

Cases:
- the cwd line, exactly; no cwd line for an Agent with no Working tools;
- a Menu with Allowed picks names them in order and says to call one pick once;
- a Menu with no pick allowed says so;
- no Menu: nothing about picks at all, even when ``allowed`` is not empty;
- notices, one line each, in order, after the picks;
- the block is fenced by ``<turn>`` and ``</turn>``; the whole block, exactly.
"""

from __future__ import annotations

from kubeturn_harness.briefing import briefing
from kubeturn_harness.wire import Notice

CWD_LINE = "Working directory: /work/app/run-1 (relative paths in your tools resolve here)."


def lines(text: str) -> list[str]:
    assert text.startswith("<turn>\n")
    assert text.endswith("\n</turn>")
    return text.split("\n")[1:-1]


def test_the_cwd_line() -> None:
    text = briefing(cwd="/work/app/run-1", allowed=[], has_menu=False, notices=[])
    assert lines(text) == [CWD_LINE]


def test_no_cwd_line_without_working_tools() -> None:
    assert briefing(cwd=None, allowed=[], has_menu=False, notices=[]) == "<turn>\n</turn>"


def test_allowed_picks() -> None:
    text = briefing(cwd=None, allowed=["review_verdict", "ask"], has_menu=True, notices=[])
    assert lines(text) == [
        "Picks allowed now: `review_verdict`, `ask`. A pick is a call of that tool: it tells "
        "the workflow what you decided. Call one pick once, then stop."
    ]


def test_no_pick_allowed() -> None:
    text = briefing(cwd=None, allowed=[], has_menu=True, notices=[])
    assert lines(text) == ["No pick is allowed right now."]


def test_no_menu_says_nothing_of_picks() -> None:
    text = briefing(cwd="/work/app/run-1", allowed=["stray"], has_menu=False, notices=[])
    assert lines(text) == [CWD_LINE]
    assert "pick" not in text.lower()


def test_notices_follow_the_picks_in_order() -> None:
    notices = [
        Notice(kind="pick-answer", text="Your pick `finish` was answered: merged."),
        Notice(kind="conversation-restarted", text="This conversation started anew."),
    ]
    text = briefing(cwd="/work", allowed=[], has_menu=True, notices=notices)
    assert lines(text) == [
        "Working directory: /work (relative paths in your tools resolve here).",
        "No pick is allowed right now.",
        "Notice (pick-answer): Your pick `finish` was answered: merged.",
        "Notice (conversation-restarted): This conversation started anew.",
    ]


def test_the_whole_block() -> None:
    text = briefing(
        cwd="/work/app/run-1",
        allowed=["finish"],
        has_menu=True,
        notices=[Notice(kind="k", text="t")],
    )
    assert text == (
        "<turn>\n"
        f"{CWD_LINE}\n"
        "Picks allowed now: `finish`. A pick is a call of that tool: it tells the workflow "
        "what you decided. Call one pick once, then stop.\n"
        "Notice (k): t\n"
        "</turn>"
    )
