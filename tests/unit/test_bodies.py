"""The two readers of JSON bodies: the Orchestrator's (``kubeturn.orchestrator.bodies``)
and the Harness's (``kubeturn_harness.bodies``), which must agree.

Cases, for each reader:
- a body nested 200,000 deep, of arrays or of objects, is refused naming the body ("nests
  deeper than 64 levels"), never with ``RecursionError``; 64 levels are read, 65 refused;
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused, at the top or in a field (the
  field named by its dotted path), and so is a number beyond a double (``1e999``);
- text that is not JSON (a syntax error, nothing, bytes that are not UTF-8, trailing
  words) is refused naming the body and where it broke;
- a wide body (100,000 items) is read;
- whatever the bytes, the answer is a value or the reader's error (hypothesis);
- both readers bound the depth alike, and the Harness's names what it reads as asked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubeturn.errors import WireError
from kubeturn.orchestrator import bodies as orchestrator_bodies
from kubeturn_harness import bodies as harness_bodies
from kubeturn_harness.errors import NotJson

DEEP = 200_000
Parse = Callable[[bytes], Any]
READERS: list[tuple[Parse, type[Exception]]] = [
    (orchestrator_bodies.parse, WireError),
    (harness_bodies.parse, NotJson),
]
NOT_FINITE = "is not a finite number: JSON has no NaN or Infinity, and a number must fit a double"


def arrays(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def refused(parse: Parse, error: type[Exception], raw: bytes) -> tuple[str, str | None]:
    """(message, field) of the reader's refusal of ``raw``."""
    with pytest.raises(error) as raised:
        parse(raw)
    found = raised.value
    assert isinstance(found, WireError | NotJson)
    return found.message, found.field


@pytest.mark.parametrize(("parse", "error"), READERS)
class TestReaders:
    @pytest.mark.parametrize("nested", [arrays, objects])
    def test_a_body_nested_200000_deep_is_refused_naming_the_body(
        self, parse: Parse, error: type[Exception], nested: Callable[[int], bytes]
    ) -> None:
        assert refused(parse, error, nested(DEEP)) == ("the body nests deeper than 64 levels", None)

    @pytest.mark.parametrize("nested", [arrays, objects])
    def test_64_levels_are_read_and_65_refused(
        self, parse: Parse, error: type[Exception], nested: Callable[[int], bytes]
    ) -> None:
        assert parse(nested(64)) is not None
        assert refused(parse, error, nested(65)) == ("the body nests deeper than 64 levels", None)

    @pytest.mark.parametrize(
        ("raw", "field"),
        [
            (b"NaN", None),
            (b"Infinity", None),
            (b"-Infinity", None),
            (b"1e999", None),
            (b'{"type": "finish", "score": NaN}', "score"),
            (b'{"type": "finish", "score": Infinity}', "score"),
            (b'{"type": "finish", "score": -Infinity}', "score"),
            (b'{"items": [1, {"x": 1e999}]}', "items.1.x"),
        ],
    )
    def test_numbers_json_does_not_have_are_refused_naming_the_field(
        self, parse: Parse, error: type[Exception], raw: bytes, field: str | None
    ) -> None:
        assert refused(parse, error, raw) == (f"{field or 'the body'} {NOT_FINITE}", field)

    @pytest.mark.parametrize(
        ("raw", "where"),
        [
            (b"{nope}", "line 1 column 2"),
            (b"", "line 1 column 0"),
            (b"\xff\xfe", "line 1 column 1"),
            (b'{"a": 1} and more', "line 1 column 10"),
        ],
    )
    def test_text_that_is_not_json_is_refused_saying_where(
        self, parse: Parse, error: type[Exception], raw: bytes, where: str
    ) -> None:
        message, field = refused(parse, error, raw)
        assert message.startswith("the body is not JSON: ")
        assert message.endswith(where)
        assert field is None

    def test_a_wide_body_is_read(self, parse: Parse, error: type[Exception]) -> None:
        wide = {"items": [{"n": n, "x": 0.5} for n in range(100_000)]}
        assert parse(str(wide).replace("'", '"').encode()) == wide

    @given(
        raw=st.binary(max_size=256)
        | st.text(alphabet='[]{}":,-.0123456789aeflnrstuINy ').map(str.encode)
    )
    def test_any_bytes_give_a_value_or_the_readers_error(
        self, parse: Parse, error: type[Exception], raw: bytes
    ) -> None:
        with contextlib.suppress(error):
            parse(raw)


def test_both_readers_bound_the_depth_alike() -> None:
    assert orchestrator_bodies.MAX_DEPTH == harness_bodies.MAX_DEPTH


def test_the_harness_names_what_it_reads() -> None:
    what = "the arguments object"
    with pytest.raises(NotJson, match=f"^{what} nests deeper than 64 levels$"):
        harness_bodies.parse(arrays(DEEP).decode(), what=what)
    with pytest.raises(NotJson, match=f"^{what} is not JSON: "):
        harness_bodies.parse("{path: 'a'}", what=what)
