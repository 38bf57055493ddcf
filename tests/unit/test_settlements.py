"""How a sweep's body settles Submissions (``settlements``; docs/turn-semantics.md §2).

Cases:
- ``Sweep.parse`` of every body shape: empty, whitespace only, invalid JSON, non-UTF-8
  bytes, JSON that is not an object (a list, a string, a number, null), a dict with a
  non-string ``cause`` or ``submissionId``, a full body, a body with unknown fields, a
  body padded with whitespace, a body nested too deep to parse (arrays or objects,
  200,000 levels), a body holding ``NaN`` or ``Infinity`` (not JSON: it names nothing);
- ``Sweep.parse`` never raises and names only strings, for any bytes (hypothesis);
- ``running_outcome`` as a table: only cause ``pick`` with the running id gives
  ``ended``; every other cause (none, unknown, a different case) and every other id
  (another, none) gives ``aborted``;
- raw body to outcome, end to end; a Submission queued behind the running one settles
  ``aborted`` for every body.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeturn_harness.settlements import (
    PICK_CAUSE,
    QUEUED_OUTCOME,
    Sweep,
    running_outcome,
)
from kubeturn_harness.wire import Outcome, SubmissionId

RUNNING = SubmissionId("s-running")
OTHER = SubmissionId("s-other")


class TestParse:
    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b"", id="empty"),
            pytest.param(b"   \n\t\r\n ", id="whitespace"),
            pytest.param(b"{", id="truncated-json"),
            pytest.param(b"cause=pick", id="form-encoded"),
            pytest.param(b"{'cause': 'pick'}", id="single-quoted"),
            pytest.param(b"\x80\x81\xfe", id="non-utf8"),
            pytest.param(b'{"cause": "pick", "submissionId": "s-\xff"}', id="non-utf8-in-json"),
            pytest.param(b'["pick", "s-running"]', id="list"),
            pytest.param(b'"pick"', id="string"),
            pytest.param(b"42", id="number"),
            pytest.param(b"null", id="null"),
            pytest.param(b"[" * 100_000, id="nested-too-deep"),
            pytest.param(b"[" * 200_000 + b"]" * 200_000, id="arrays-200000-deep"),
            pytest.param(b'{"a":' * 200_000 + b"1" + b"}" * 200_000, id="objects-200000-deep"),
            pytest.param(b'{"cause": "pick", "submissionId": "s-running", "n": NaN}', id="NaN"),
            pytest.param(
                b'{"cause": "pick", "submissionId": "s-running", "n": -Infinity}', id="inf"
            ),
        ],
    )
    def test_a_body_that_is_no_object_names_nothing(self, raw: bytes) -> None:
        assert Sweep.parse(raw) == Sweep(None, None)

    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            ({"cause": 1, "submissionId": 2}, Sweep(None, None)),
            ({"cause": ["pick"], "submissionId": {"id": "s-running"}}, Sweep(None, None)),
            ({"cause": True, "submissionId": "s-running"}, Sweep(None, RUNNING)),
            ({"cause": "pick", "submissionId": ["s-running"]}, Sweep(PICK_CAUSE, None)),
            ({"cause": None, "submissionId": None}, Sweep(None, None)),
            ({}, Sweep(None, None)),
            ({"cause": "pick"}, Sweep(PICK_CAUSE, None)),
            ({"submissionId": "s-running"}, Sweep(None, RUNNING)),
        ],
        ids=[
            "numbers",
            "list-and-dict",
            "bool-cause",
            "list-id",
            "nulls",
            "empty-object",
            "cause-only",
            "id-only",
        ],
    )
    def test_a_field_that_is_not_a_string_is_none(
        self, body: dict[str, object], expected: Sweep
    ) -> None:
        assert Sweep.parse(json.dumps(body).encode()) == expected

    def test_a_full_body(self) -> None:
        raw = b'{"cause": "pick", "submissionId": "s-running"}'
        assert Sweep.parse(raw) == Sweep("pick", RUNNING)

    def test_unknown_fields_are_ignored(self) -> None:
        raw = b'{"cause": "pick", "submissionId": "s-running", "reason": "x", "n": 1}'
        assert Sweep.parse(raw) == Sweep("pick", RUNNING)

    def test_whitespace_around_a_body_is_fine(self) -> None:
        raw = b'\n  {"cause": "timer", "submissionId": "s-other"}  \n'
        assert Sweep.parse(raw) == Sweep("timer", OTHER)

    @given(st.binary(max_size=200))
    def test_any_bytes_parse_without_raising(self, raw: bytes) -> None:
        sweep = Sweep.parse(raw)
        assert sweep.cause is None or isinstance(sweep.cause, str)
        assert sweep.submission_id is None or isinstance(sweep.submission_id, str)

    @given(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["cause", "submissionId", "x"]), inner, max_size=3
                )
            ),
            max_leaves=8,
        )
    )
    def test_any_json_parses_to_its_string_fields(self, body: object) -> None:
        sweep = Sweep.parse(json.dumps(body).encode())
        fields = body if isinstance(body, dict) else {}
        cause, named = fields.get("cause"), fields.get("submissionId")
        assert sweep.cause == (cause if isinstance(cause, str) else None)
        assert sweep.submission_id == (named if isinstance(named, str) else None)


CAUSES = [PICK_CAUSE, None, "timer", "PICK", "", "pick "]
NAMED = [RUNNING, OTHER, None, SubmissionId("")]


class TestRunningOutcome:
    @pytest.mark.parametrize("cause", CAUSES)
    @pytest.mark.parametrize("named", NAMED)
    def test_only_a_pick_naming_the_running_submission_ends_it(
        self, cause: str | None, named: SubmissionId | None
    ) -> None:
        expected = Outcome.ENDED if (cause, named) == (PICK_CAUSE, RUNNING) else Outcome.ABORTED
        assert running_outcome(Sweep(cause, named), RUNNING) is expected

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (b'{"cause": "pick", "submissionId": "s-running"}', Outcome.ENDED),
            (b'{"cause": "pick", "submissionId": "s-other"}', Outcome.ABORTED),
            (b'{"cause": "pick"}', Outcome.ABORTED),
            (b'{"cause": null, "submissionId": "s-running"}', Outcome.ABORTED),
            (b'{"cause": "timer", "submissionId": "s-running"}', Outcome.ABORTED),
            (b"", Outcome.ABORTED),
            (b"not json", Outcome.ABORTED),
            (b'["pick", "s-running"]', Outcome.ABORTED),
        ],
    )
    def test_a_raw_body_to_its_outcome(self, raw: bytes, expected: Outcome) -> None:
        assert running_outcome(Sweep.parse(raw), RUNNING) is expected

    def test_a_queued_submission_settles_aborted_for_every_cause(self) -> None:
        assert QUEUED_OUTCOME is Outcome.ABORTED
