"""When a model answer's streamed output is reported (``stream_progress``), and the count
it reports (``models.Partial``).

Cases:
- the defaults are 64 pieces and 2 s;
- a report is due only when both enough pieces AND enough seconds have passed since the
  request began or the last report: pieces alone are not enough while the time has not
  passed, and time alone is not enough while the pieces have not come; each report
  starts both counts again;
- the time is asked only once enough pieces have come;
- with 1 piece and 0 s every piece is a report;
- ``Partial.delta`` counts each piece and tells ``on_delta`` the running count;
  ``Partial.clear`` (a further attempt) forgets the text, calls, usage and count, and
  keeps the hook;
- the Harness's OpenAPI document holds the event's data (``Streamed``: submissionId,
  outputTokens, usage, all required) and lets a stream read ask for ``model-streamed``.
"""

from __future__ import annotations

from kubeturn_harness import openapi
from kubeturn_harness.models import Partial
from kubeturn_harness.stream_progress import (
    STREAM_PROGRESS_S,
    STREAM_PROGRESS_TOKENS,
    StreamThrottle,
)
from kubeturn_harness.wire import ToolCall, Usage


class Clock:
    """A time that moves only when a test says, counting how often it was asked."""

    def __init__(self) -> None:
        self.at = 100.0
        self.asked = 0

    def __call__(self) -> float:
        self.asked += 1
        return self.at


def pieces(throttle: StreamThrottle, clock: Clock, count: int) -> list[bool]:
    return [throttle.due(clock) for _ in range(count)]


def test_the_defaults() -> None:
    assert (STREAM_PROGRESS_TOKENS, STREAM_PROGRESS_S) == (64, 2.0)


def test_a_report_needs_both_the_pieces_and_the_time() -> None:
    clock = Clock()
    throttle = StreamThrottle(tokens=3, seconds=2.0, since=clock.at)
    assert pieces(throttle, clock, 5) == [False] * 5
    clock.at += 2.0
    assert pieces(throttle, clock, 1) == [True]
    assert pieces(throttle, clock, 3) == [False] * 3
    clock.at += 1.9
    assert pieces(throttle, clock, 1) == [False]
    clock.at += 0.1
    assert pieces(throttle, clock, 1) == [True]
    clock.at += 60.0
    assert pieces(throttle, clock, 3) == [False, False, True]


def test_the_time_is_asked_only_once_enough_pieces_came() -> None:
    clock = Clock()
    throttle = StreamThrottle(tokens=4, seconds=0.0, since=clock.at)
    assert pieces(throttle, clock, 8) == [False, False, False, True] * 2
    assert clock.asked == 2


def test_one_piece_and_no_wait_report_every_piece() -> None:
    clock = Clock()
    throttle = StreamThrottle(tokens=1, seconds=0.0, since=clock.at)
    assert pieces(throttle, clock, 4) == [True] * 4


def test_a_partial_counts_its_pieces_and_tells_its_hook() -> None:
    told: list[int] = []
    partial = Partial(on_delta=told.append)
    for _ in range(3):
        partial.delta()
    assert (partial.output_tokens, told) == (3, [1, 2, 3])
    bare = Partial()
    bare.delta()
    assert bare.output_tokens == 1


def test_clearing_a_partial_forgets_the_attempt_but_keeps_its_hook() -> None:
    told: list[int] = []
    partial = Partial(on_delta=told.append)
    partial.text.append("Half")
    partial.tool_calls[0] = ToolCall(id="c", name="read", arguments="{")
    partial.usage = Usage(completionTokens=3)
    partial.delta()
    partial.clear()
    assert (partial.content, partial.tool_calls, partial.usage) == ("", {}, None)
    assert partial.output_tokens == 0
    partial.delta()
    assert told == [1, 1]


def test_the_openapi_document_describes_the_event() -> None:
    document = openapi.document()
    streamed = document["components"]["schemas"]["Streamed"]
    assert sorted(streamed["required"]) == ["outputTokens", "submissionId", "usage"]
    read = document["paths"]["/agents/{name}/{id}"]["get"]
    (types,) = [p for p in read["parameters"] if p["name"] == "types"]
    assert "model-streamed" in types["schema"]["items"]["enum"]


def test_what_a_partial_has_used_is_what_was_reported_its_output_at_least_streamed() -> None:
    partial = Partial()
    assert partial.used is None
    partial.delta()
    partial.delta()
    assert partial.used == Usage(completionTokens=2)
    partial.usage = Usage(promptTokens=10, completionTokens=1)  # Anthropic's message_start
    assert partial.used == Usage(promptTokens=10, completionTokens=2)
    partial.usage = Usage(promptTokens=10, completionTokens=7)  # the end's own count
    assert partial.used == Usage(promptTokens=10, completionTokens=7)
