"""The Runaway watch (``kubeturn_harness.runaway``; DESIGN.md "Runaway guard").

Cases:
- the defaults are 4 identical calls and 256 steps;
- three identical calls pass; a different call then resets the count, so three more
  identical ones pass again; the fourth identical call in a row trips, naming the count
  and the tool, and every identical call after it trips too;
- the same arguments under another tool name are not identical;
- arguments are compared canonically: key order and whitespace do not matter, values
  do; arguments that are not JSON are compared as written, those nested 200,000 deep or
  holding ``NaN`` too (never ``RecursionError``);
- the step budget: ``max_steps`` steps pass, step ``max_steps + 1`` trips, naming the
  budget; steps and calls are counted apart;
- answers cut at the output limit: three in a row pass, the fourth trips naming the
  count; an answer that was not cut resets the count; calls do not touch it;
- hypothesis: over any sequence of calls, a call trips exactly when it and the three
  before it are canonically identical.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from kubeturn_harness.runaway import DEFAULT_MAX_IDENTICAL, DEFAULT_MAX_STEPS, RunawayWatch


def test_the_defaults() -> None:
    watch = RunawayWatch()
    assert (watch.max_identical, watch.max_steps) == (DEFAULT_MAX_IDENTICAL, DEFAULT_MAX_STEPS)
    assert (DEFAULT_MAX_IDENTICAL, DEFAULT_MAX_STEPS) == (4, 256)


class TestIdenticalCalls:
    def test_three_identical_calls_then_a_different_one_resets(self) -> None:
        watch = RunawayWatch()
        assert [watch.call("bash", '{"command": "ls"}') for _ in range(3)] == [None] * 3
        assert watch.call("bash", '{"command": "pwd"}') is None
        assert [watch.call("bash", '{"command": "ls"}') for _ in range(3)] == [None] * 3

    def test_the_fourth_identical_call_trips(self) -> None:
        watch = RunawayWatch()
        for _ in range(3):
            assert watch.call("review_verdict", '{"verdict": "approve"}') is None
        reason = watch.call("review_verdict", '{"verdict": "approve"}')
        assert reason == "4 identical calls of `review_verdict` in a row"
        assert watch.call("review_verdict", '{"verdict": "approve"}') == (
            "5 identical calls of `review_verdict` in a row"
        )

    def test_another_tool_with_the_same_arguments_is_not_identical(self) -> None:
        watch = RunawayWatch()
        for name in ("read", "grep", "read", "grep", "read"):
            assert watch.call(name, '{"path": "a"}') is None

    def test_arguments_are_compared_canonically(self) -> None:
        watch = RunawayWatch()
        spellings = ['{"a":1,"b":2}', '{"b": 2, "a": 1}', '{ "a" : 1 ,\n "b" : 2 }']
        for arguments in spellings:
            assert watch.call("edit", arguments) is None
        assert watch.call("edit", '{"b":2,"a":1}') == "4 identical calls of `edit` in a row"

    def test_different_values_are_different_calls(self) -> None:
        watch = RunawayWatch()
        for arguments in ('{"a":1}', '{"a":1}', '{"a":1}', '{"a":2}', '{"a":"1"}'):
            assert watch.call("edit", arguments) is None

    def test_arguments_that_are_not_json_are_compared_as_written(self) -> None:
        watch = RunawayWatch()
        for _ in range(3):
            assert watch.call("bash", "{not json") is None
        assert watch.call("bash", "{not  json") is None
        assert watch.call("bash", "{not  json") is None

    def test_arguments_nested_too_deep_or_not_finite_are_compared_as_written(self) -> None:
        watch = RunawayWatch()
        deep = "[" * 200_000 + "]" * 200_000
        for arguments in (deep, deep, '{"a": NaN}', '{"a":NaN}'):
            assert watch.call("bash", arguments) is None

    def test_a_smaller_limit_trips_sooner(self) -> None:
        watch = RunawayWatch(max_identical=2)
        assert watch.call("x", "{}") is None
        assert watch.call("x", "{}") == "2 identical calls of `x` in a row"


class TestAnswersCutAtTheLimit:
    def test_the_fourth_cut_answer_in_a_row_trips(self) -> None:
        watch = RunawayWatch()
        assert [watch.answered(cut_at_limit=True) for _ in range(3)] == [None] * 3
        assert watch.answered(cut_at_limit=True) == (
            "4 answers in a row were cut off at the output limit"
        )

    def test_an_answer_that_was_not_cut_resets_the_count(self) -> None:
        watch = RunawayWatch()
        for _ in range(3):
            assert watch.answered(cut_at_limit=True) is None
        assert watch.answered(cut_at_limit=False) is None
        assert [watch.answered(cut_at_limit=True) for _ in range(3)] == [None] * 3

    def test_calls_do_not_touch_it(self) -> None:
        watch = RunawayWatch(max_identical=2)
        assert watch.answered(cut_at_limit=True) is None
        assert watch.call("x", "{}") is None
        assert watch.answered(cut_at_limit=True) == (
            "2 answers in a row were cut off at the output limit"
        )


class TestStepBudget:
    def test_the_step_after_the_budget_trips(self) -> None:
        watch = RunawayWatch(max_steps=3)
        assert [watch.step() for _ in range(3)] == [None, None, None]
        assert watch.step() == "more than 3 model requests in one Submission"
        assert watch.steps == 4

    def test_the_default_budget(self) -> None:
        watch = RunawayWatch()
        assert all(watch.step() is None for _ in range(256))
        assert watch.step() == "more than 256 model requests in one Submission"

    def test_calls_do_not_count_as_steps(self) -> None:
        watch = RunawayWatch(max_steps=1)
        for index in range(10):
            assert watch.call("read", json.dumps({"path": str(index)})) is None
        assert watch.step() is None
        assert watch.step() is not None


SPELLINGS = {
    "ab": ['{"a":1,"b":2}', '{"b": 2, "a": 1}'],
    "a": ['{"a":1}', '{ "a": 1 }'],
    "raw": ["not json"],
}


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bash", "edit"]),
            st.sampled_from(sorted(SPELLINGS)),
            st.integers(0, 1),
        ),
        max_size=30,
    )
)
def test_a_call_trips_exactly_when_it_is_the_fourth_identical_in_a_row(
    calls: list[tuple[str, str, int]],
) -> None:
    watch = RunawayWatch()
    keys = [(name, meaning) for name, meaning, _ in calls]
    for index, (name, meaning, spelling) in enumerate(calls):
        arguments = SPELLINGS[meaning][spelling % len(SPELLINGS[meaning])]
        reason = watch.call(name, arguments)
        run = 1
        while run <= index and keys[index - run] == keys[index]:
            run += 1
        if run >= 4:
            assert reason == f"{run} identical calls of `{name}` in a row"
        else:
            assert reason is None
