"""The prose a model reads for each pick (``receipts``; docs/turn-semantics.md §3).

Cases:
- exact prose of every function: ``stale_pick``, ``turn_over``, ``undeliverable``,
  ``malformed`` and ``cut_at_limit`` (a pick and a Working tool call; with and without
  the placeholder),
  ``cut_before_answer``, ``rejected``, ``refusal`` (outstanding with and without the
  outstanding pick's name; another refusal with and without a message, with and
  without Allowed picks), ``receipt`` (plain, with Allowed picks, none allowed, an
  answer as text and as JSON, a polled pick with no reply, straight back, turnComplete,
  turnComplete with an answer, stopped, stopped with an answer) and the constants;
- the stale pick text is exactly "This pick did not run: you sent it before you read the
  answer to `X`.";
- every receipt that leaves the Turn open ends with exactly "Your turn is not over.",
  once (a table, and hypothesis over every receipt that leaves the Turn open);
- every receipt that ends the Turn says "Your turn is over.", never "not over", lists
  no Allowed picks and gives no imperative order (hypothesis as well).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeturn_harness import receipts
from kubeturn_harness.receipts import (
    AFTER_TURN_END,
    CUT_AT_LIMIT_NOTE,
    NO_REPLY,
    SHOWN_AS_PLACEHOLDER,
    TURN_NOT_OVER,
    cut_at_limit,
    cut_before_answer,
    malformed,
    receipt,
    refusal,
    rejected,
    stale_pick,
    turn_over,
    undeliverable,
)
from kubeturn_harness.wire import Receipt, Refusal

TOOK = "Your pick `verdict` was delivered, and the workflow took it."
STOPPED = (
    "The workflow left the state that asked for this turn while it ran your pick, "
    "and that stopped the pick's work before it finished: your turn is over."
)
IMPERATIVE = re.compile(
    r"(?:^|[.:;!]\s+)(?:stop|do|don't|call|pick|finish|end|try|retry|wait|please)\b"
    r"|\b(?:must|should|never|now stop)\b",
    re.IGNORECASE,
)
"""An order: a sentence that opens with a verb, or a must/should/never anywhere."""


def delivered(**fields: Any) -> Receipt:
    return Receipt(delivered=True, event="verdict", **fields)


class TestConstants:
    def test_the_words(self) -> None:
        assert TURN_NOT_OVER == "Your turn is not over."
        assert AFTER_TURN_END == (
            "This call did not run: a pick before it in your answer ended your turn."
        )
        assert NO_REPLY == "No reply came back for it."
        assert CUT_AT_LIMIT_NOTE == (
            "Your last reply was cut off at the output limit. Go on from where it stopped, "
            "more briefly."
        )
        assert SHOWN_AS_PLACEHOLDER == "Your call is shown with {} as its arguments from now on."


class TestCallsThatCannotRun:
    def test_malformed_arguments_of_a_working_tool_call(self) -> None:
        assert malformed("bash", "the arguments object is not JSON: EOF", pick=False) == (
            "This call of `bash` did not run: the arguments object is not JSON: EOF. "
            "Your call is shown with {} as its arguments from now on. "
            "Call it again with complete JSON."
        )

    def test_malformed_arguments_of_a_pick(self) -> None:
        assert malformed("verdict", "the arguments are JSON, but not an object", pick=True) == (
            "Your pick `verdict` was not sent: the arguments are JSON, but not an object. "
            "Your call is shown with {} as its arguments from now on. "
            "Pick again with complete JSON. Your turn is not over."
        )

    def test_a_working_tool_call_cut_at_the_output_limit(self) -> None:
        assert cut_at_limit("write", pick=False, placeholder=True) == (
            "This call of `write` did not run: your answer was cut off at the output limit "
            "while you wrote it. Your call is shown with {} as its arguments from now on. "
            "Call it again, more briefly (a large file can be written in parts)."
        )
        assert cut_at_limit("write", pick=False, placeholder=False) == (
            "This call of `write` did not run: your answer was cut off at the output limit "
            "while you wrote it. Call it again, more briefly (a large file can be written "
            "in parts)."
        )

    def test_a_pick_cut_at_the_output_limit(self) -> None:
        assert cut_at_limit("verdict", pick=True, placeholder=False) == (
            "Your pick `verdict` was not sent: your answer was cut off at the output limit "
            "while you wrote it. Pick again, more briefly. Your turn is not over."
        )


class TestExactProse:
    def test_stale_pick(self) -> None:
        assert stale_pick("X") == (
            "This pick did not run: you sent it before you read the answer to `X`."
        )
        assert stale_pick("run_tests") == (
            "This pick did not run: you sent it before you read the answer to `run_tests`."
        )

    def test_turn_over(self) -> None:
        assert turn_over("verdict") == (
            "Your pick `verdict` was not delivered: the state that asked for this turn "
            "is no longer waiting for it. Your turn is over."
        )

    def test_undeliverable(self) -> None:
        assert undeliverable("verdict", "connection reset") == (
            "Your pick `verdict` may not have been delivered (connection reset). "
            "It was not sent again. Your turn is not over."
        )

    def test_cut_before_answer(self) -> None:
        assert cut_before_answer("verdict") == (
            "Your pick `verdict` was delivered, and the workflow took it; the turn was "
            "stopped before its answer came."
        )

    def test_rejected(self) -> None:
        assert rejected("verdict", "notes: 'x' is too short.") == (
            "Your pick `verdict` was not delivered: notes: 'x' is too short. Your turn is not over."
        )

    def test_refusal_outstanding_names_the_outstanding_pick(self) -> None:
        body = Refusal(refused="outstanding", outstanding="run_tests", allowed=[])
        assert refusal("finish", body) == (
            "Your pick `finish` was refused, and nothing was delivered: your pick "
            "`run_tests` is still being worked on. No pick is allowed until it is answered. "
            "Your turn is not over."
        )

    def test_refusal_outstanding_without_a_name(self) -> None:
        body = Refusal(refused="outstanding")
        assert refusal("finish", body) == (
            "Your pick `finish` was refused, and nothing was delivered: an earlier pick "
            "is still being worked on. No pick is allowed until it is answered. "
            "Your turn is not over."
        )

    def test_refusal_with_a_message_and_allowed_picks(self) -> None:
        body = Refusal(refused="not-allowed", message="the guard said no", allowed=["a", "b"])
        assert refusal("finish", body) == (
            "Your pick `finish` was refused, and nothing was delivered: the guard said no. "
            "You may pick next: `a`, `b`. Your turn is not over."
        )

    def test_refusal_without_a_message_says_the_refusal(self) -> None:
        body = Refusal(refused="not-allowed")
        assert refusal("finish", body) == (
            "Your pick `finish` was refused, and nothing was delivered: not-allowed. "
            "No pick is allowed right now. Your turn is not over."
        )

    def test_receipt_plain(self) -> None:
        assert receipt("verdict", delivered(), polled=False) == f"{TOOK} Your turn is not over."

    def test_receipt_with_allowed_picks(self) -> None:
        text = receipt("verdict", delivered(allowed=["fix", "verdict"]), polled=False)
        assert text == f"{TOOK} You may pick next: `fix`, `verdict`. Your turn is not over."

    def test_receipt_with_no_allowed_pick(self) -> None:
        text = receipt("verdict", delivered(allowed=[]), polled=False)
        assert text == f"{TOOK} No pick is allowed right now. Your turn is not over."

    def test_receipt_with_a_text_answer(self) -> None:
        text = receipt("verdict", delivered(answer="All 12 tests pass."), polled=True)
        assert text == f"{TOOK} The answer: All 12 tests pass. Your turn is not over."

    def test_receipt_with_a_json_answer_sorts_keys_and_keeps_unicode(self) -> None:
        text = receipt("verdict", delivered(answer={"b": 1, "a": "é"}), polled=False)
        assert text == f'{TOOK} The answer: {{"a": "é", "b": 1}}. Your turn is not over.'

    def test_a_polled_receipt_with_no_reply_says_so(self) -> None:
        text = receipt("verdict", delivered(allowed=["verdict"]), polled=True)
        assert text == (
            f"{TOOK} No reply came back for it. You may pick next: `verdict`. "
            "Your turn is not over."
        )

    def test_an_unpolled_receipt_with_no_reply_says_nothing_of_it(self) -> None:
        assert NO_REPLY not in receipt("verdict", delivered(), polled=False)

    def test_receipt_straight_back(self) -> None:
        text = receipt("verdict", delivered(straightBack=True, answer="ignored"), polled=False)
        assert text == (
            f"{TOOK} It moved the workflow, which came straight back: nothing ran. "
            "Your turn is not over."
        )

    def test_receipt_turn_complete(self) -> None:
        text = receipt("verdict", delivered(turnComplete=True, deliveryId="d-1"), polled=False)
        assert text == f"{TOOK} Your turn is over."

    def test_receipt_turn_complete_with_an_answer_lists_no_allowed_picks(self) -> None:
        body = delivered(turnComplete=True, answer="merged", allowed=["verdict"])
        assert receipt("verdict", body, polled=True) == (
            f"{TOOK} The answer: merged. Your turn is over."
        )

    def test_receipt_stopped(self) -> None:
        text = receipt("verdict", delivered(stopped=True, allowed=["x"]), polled=True)
        assert text == f"{TOOK} {STOPPED}"

    def test_receipt_stopped_keeps_the_last_reply(self) -> None:
        text = receipt("verdict", delivered(stopped=True, answer="3 of 5 done"), polled=True)
        assert text == f"{TOOK} {STOPPED} Before that, the last reply was: 3 of 5 done."


OPEN = [
    pytest.param(receipt("verdict", delivered(), polled=False), id="plain"),
    pytest.param(receipt("verdict", delivered(allowed=["a"]), polled=False), id="allowed"),
    pytest.param(receipt("verdict", delivered(allowed=[]), polled=False), id="none-allowed"),
    pytest.param(receipt("verdict", delivered(answer={"x": 1}), polled=True), id="answered"),
    pytest.param(receipt("verdict", delivered(), polled=True), id="polled-no-reply"),
    pytest.param(receipt("verdict", delivered(straightBack=True), polled=False), id="straight"),
    pytest.param(refusal("f", Refusal(refused="outstanding")), id="refused-outstanding"),
    pytest.param(refusal("f", Refusal(refused="x", allowed=["a"])), id="refused"),
    pytest.param(rejected("f", "bad payload."), id="rejected"),
    pytest.param(undeliverable("f", "timeout"), id="undeliverable"),
]

ENDING = [
    pytest.param(receipt("verdict", delivered(turnComplete=True), polled=False), id="complete"),
    pytest.param(
        receipt("verdict", delivered(turnComplete=True, answer="ok"), polled=True),
        id="complete-answered",
    ),
    pytest.param(turn_over("verdict"), id="gone"),
]


class TestTurnOpenOrOver:
    @pytest.mark.parametrize("text", OPEN)
    def test_a_receipt_that_leaves_the_turn_open_ends_with_the_words_once(self, text: str) -> None:
        assert text.endswith(" Your turn is not over.")
        assert text.count(TURN_NOT_OVER) == 1
        assert "Your turn is over." not in text

    @pytest.mark.parametrize("text", ENDING)
    def test_a_receipt_that_ends_the_turn_says_so_and_gives_no_order(self, text: str) -> None:
        assert text.endswith(" Your turn is over.")
        assert "not over" not in text
        assert "You may pick next" not in text
        assert IMPERATIVE.search(text) is None, text

    def test_a_stopped_receipt_says_the_turn_is_over_and_gives_no_order(self) -> None:
        text = receipt("verdict", delivered(stopped=True), polled=True)
        assert text.endswith(": your turn is over.")
        assert "not over" not in text
        assert IMPERATIVE.search(text) is None, text

    def test_the_after_turn_end_and_stale_texts_give_no_order(self) -> None:
        for text in (AFTER_TURN_END, stale_pick("verdict"), cut_before_answer("verdict")):
            assert IMPERATIVE.search(text) is None, text
            assert TURN_NOT_OVER not in text

    @given(
        answer=st.none() | st.text(alphabet="abc xyz.", max_size=20) | st.integers(),
        allowed=st.none() | st.lists(st.sampled_from(["a", "b_c", "d.e"]), max_size=3),
        straight=st.booleans(),
        polled=st.booleans(),
    )
    def test_any_open_receipt_ends_with_the_words(
        self, answer: Any, allowed: list[str] | None, straight: bool, polled: bool
    ) -> None:
        body = delivered(answer=answer, allowed=allowed, straightBack=straight)
        text = receipt("verdict", body, polled=polled)
        assert text.startswith(TOOK)
        assert text.endswith(" " + TURN_NOT_OVER)
        assert text.count(TURN_NOT_OVER) == 1
        assert "turn is over" not in text

    @given(
        answer=st.none() | st.text(alphabet="abc xyz.", max_size=20) | st.integers(),
        allowed=st.none() | st.lists(st.sampled_from(["a", "b_c"]), max_size=3),
        straight=st.booleans(),
        polled=st.booleans(),
        stopped=st.booleans(),
    )
    def test_any_ending_receipt_says_the_turn_is_over(
        self,
        answer: Any,
        allowed: list[str] | None,
        straight: bool,
        polled: bool,
        stopped: bool,
    ) -> None:
        body = delivered(
            answer=answer,
            allowed=allowed,
            straightBack=straight,
            turnComplete=not stopped,
            stopped=stopped,
        )
        text = receipt("verdict", body, polled=polled)
        assert "your turn is over." in text.lower()
        assert "not over" not in text
        assert "You may pick next" not in text
        assert IMPERATIVE.search(text.replace(str(answer), "")) is None, text


def test_the_module_has_no_other_public_prose() -> None:
    """A new public function here needs its own exact-prose test above."""
    public = {
        name
        for name, value in vars(receipts).items()
        if callable(value) and not name.startswith("_") and value.__module__ == receipts.__name__
    }
    assert public == {
        "malformed",
        "cut_at_limit",
        "stale_pick",
        "turn_over",
        "undeliverable",
        "cut_before_answer",
        "rejected",
        "refusal",
        "receipt",
    }
