"""How deep a Run may nest (``kubeturn.api.depth``), and what reads it after: the loader,
the YAML reader, CEL's values, durations.

Cases:
- at each bound a Run loads; one level more is refused at the path, with the bound, and
  nothing else is reported: ``spec.input``, ``spec.machine.context``, a signal's data, a
  transition's schema (under ``on``, ``after``, ``always``, ``invoke.onError``, in a
  list), states in states, anything else in the spec (``MAX_SPEC_DEPTH``);
- 10,000 levels (the API server's most) of input and of states are refused the same way,
  without recursion, in well under a second;
- a long path is shown cut (``…``), a long key cut, keys YAML made numbers or booleans
  shown as written;
- any JSON value (hypothesis): the walk reports a problem exactly when the value nests
  deeper than the bound, never raises;
- (YAML too deep to read names the file and the bounds, and ``kubeturn validate`` prints
  it: ``tests/cli/test_validate.py``);
- an expression whose value is not finite or nests too deep fails as an expression;
- a duration over Go's longest is refused; Go's longest is taken;
- a Workspace's spec is bounded like anything in a Run's (its env items keep unknown
  fields);
- the operator's check of a Run gives a loaded Run, or a reason and message: ``Invalid``
  for a Run too deep, ``LoadFailed`` naming what a loader that raised raised.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubeturn.api.depth import (
    MAX_SPEC_DEPTH,
    MAX_STATE_DEPTH,
    MAX_VALUE_DEPTH,
    depth_problems,
    shown_path,
)
from kubeturn.api.durations import MAX_HOURS, parse_duration
from kubeturn.api.validation import validate_workspace
from kubeturn.errors import DefinitionErrors, ExpressionError
from kubeturn.k8s import runs
from kubeturn.machine.expressions import CelExpression
from kubeturn.machine.load import load_run

FINAL: dict[str, Any] = {"type": "final"}


def run(machine: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    machine = machine or {"initial": "a", "states": {"a": {"always": "b"}, "b": FINAL}}
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "deep"},
        "spec": {"agents": {}, "machine": machine, **spec},
    }


def nested(depth: int, leaf: Any = 1) -> Any:
    """``depth`` objects deep: ``nested(1)`` is ``{"a": 1}``."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_states(depth: int) -> dict[str, Any]:
    state: dict[str, Any] = FINAL
    for _ in range(depth - 1):
        state = {"initial": "a", "states": {"a": state}}
    return {"initial": "a", "states": {"a": state}}


def refused(document: dict[str, Any]) -> list[str]:
    with pytest.raises(DefinitionErrors) as raised:
        load_run(document)
    return [str(error) for error in raised.value.errors]


def with_schema(schema: Any) -> dict[str, Any]:
    return {
        "initial": "a",
        "states": {"a": {"on": {"go": {"target": "b", "schema": schema}}}, "b": FINAL},
    }


VALUES = {
    "input": lambda value: run(input=value),
    "context": lambda value: run({**run()["spec"]["machine"], "context": value}),
    "signal data": lambda value: run(signals=[{"id": "s", "event": "e", "data": value}]),
}


@pytest.mark.parametrize("where", VALUES)
def test_free_json_nests_to_its_bound(where: str) -> None:
    load_run(VALUES[where](nested(MAX_VALUE_DEPTH)))
    problems = refused(VALUES[where](nested(MAX_VALUE_DEPTH + 1)))
    assert len(problems) == 1
    assert problems[0].endswith(f"…: nested deeper than {MAX_VALUE_DEPTH} levels")


def test_input_too_deep_is_refused_at_its_path() -> None:
    assert refused(run(input=nested(MAX_VALUE_DEPTH + 1))) == [
        f"spec.input.a.a.a.a.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH} levels"
    ]
    assert refused(run(input=[[[nested(MAX_VALUE_DEPTH)]]])) == [
        f"spec.input[0][0][0].a.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH} levels"
    ]


@pytest.mark.parametrize(
    "machine",
    [
        with_schema(nested(MAX_VALUE_DEPTH + 1, {})),
        {
            "initial": "a",
            "states": {"a": {"after": {"1s": [{"target": "b", "schema": nested(65)}]}}, "b": FINAL},
        },
        {
            "initial": "a",
            "states": {"a": {"always": {"target": "b", "schema": nested(65)}}, "b": FINAL},
        },
        {
            "initial": "a",
            "states": {
                "a": {
                    "invoke": {
                        "exec": {"command": "true"},
                        "onError": {"target": "b", "schema": nested(65)},
                    }
                },
                "b": FINAL,
            },
        },
    ],
    ids=["on", "after-list", "always", "invoke-onError"],
)
def test_a_transitions_schema_nests_to_the_value_bound(machine: dict[str, Any]) -> None:
    problems = refused(run(machine))
    assert len(problems) == 1, problems
    assert problems[0].startswith("spec.machine.states.a.")
    assert ".schema" in problems[0]
    assert problems[0].endswith(f"nested deeper than {MAX_VALUE_DEPTH} levels")
    assert not depth_problems(run(with_schema(nested(MAX_VALUE_DEPTH - 1, {}))))


def test_states_nest_to_their_bound() -> None:
    load_run(run(deep_states(MAX_STATE_DEPTH)))
    assert refused(run(deep_states(MAX_STATE_DEPTH + 1))) == [
        "spec.machine.states.a.states.a.states.a.states.a…: states nested deeper than "
        f"{MAX_STATE_DEPTH} levels"
    ]


def test_anything_else_nests_to_the_spec_bound() -> None:
    machine = {**run()["spec"]["machine"], "extra": nested(MAX_SPEC_DEPTH - 1)}
    assert not depth_problems(run(machine))
    machine["extra"] = nested(MAX_SPEC_DEPTH)
    assert [str(p) for p in depth_problems(run(machine))] == [
        f"spec.machine.extra.a.a.a.a.a.a.a…: nested deeper than {MAX_SPEC_DEPTH} levels"
    ]


def test_what_the_api_server_stores_is_refused_without_recursion() -> None:
    started = time.perf_counter()
    assert len(refused(run(input=nested(10_000)))) == 1
    assert len(refused(run(deep_states(10_000)))) == 1
    assert time.perf_counter() - started < 5  # a bound far above the ~0.05 s it takes


def test_a_long_path_and_long_keys_are_cut() -> None:
    assert shown_path(("spec", "input", "k" * 100)) == f"spec.input.{'k' * 40}…"
    assert shown_path(("spec", "input", 3, "a")) == "spec.input[3].a"
    document = run(input={1: nested(MAX_VALUE_DEPTH), False: 1})
    assert [str(p) for p in depth_problems(document)] == [
        f"spec.input.1.a.a.a.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH} levels"
    ]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=30,
)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@settings(max_examples=60, deadline=None)
@given(value=JSON, wrap=st.integers(min_value=0, max_value=MAX_VALUE_DEPTH + 4))
def test_a_problem_exactly_when_a_value_is_too_deep(value: Any, wrap: int) -> None:
    for _ in range(wrap):
        value = [value]
    problems = depth_problems(run(input=value))
    assert bool(problems) == (depth_of(value) > MAX_VALUE_DEPTH)
    assert all(str(p).startswith("spec.input") for p in problems)


@pytest.mark.parametrize(
    ("source", "activation", "cause"),
    [
        ("input.n * 10.0", {"input": {"n": 1.7e308}}, "inf is not a finite number"),
        (
            "input.a",
            {"input": {"a": nested(MAX_VALUE_DEPTH + 1)}},
            f"deeper than {MAX_VALUE_DEPTH}",
        ),
    ],
)
def test_a_value_json_cannot_hold_fails_the_expression(
    source: str, activation: dict[str, Any], cause: str
) -> None:
    with pytest.raises(ExpressionError) as raised:
        CelExpression(source).evaluate(activation)
    assert cause in raised.value.cause
    assert CelExpression("input.a").evaluate({"input": {"a": nested(MAX_VALUE_DEPTH)}})


def test_durations_end_at_gos_longest() -> None:
    assert parse_duration(f"{MAX_HOURS}h") == MAX_HOURS * 3600.0
    for text in (f"{MAX_HOURS + 1}h", "9" * 400 + "h", "106752d"[:-1] + "0000h"):
        with pytest.raises(ValueError, match="longer than the longest duration"):
            parse_duration(text)


def test_the_operators_check_reports_rather_than_raises(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What the Run daemon is told: a loaded Run, or a reason and a message; a bug in the
    loader (here made to raise) is ``LoadFailed`` naming what it raised, never raised."""
    document = {
        **run(input=nested(MAX_VALUE_DEPTH + 1)),
        "metadata": {"name": "d", "namespace": "n"},
    }
    assert runs.check(document) == (
        "Invalid",
        f"spec.input.a.a.a.a.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH} levels",
    )
    document["spec"]["input"] = {}
    assert not isinstance(runs.check(document), tuple)

    def broken(*_: Any, **__: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(runs, "load_run", broken)
    reason, said = runs.check(document)  # type: ignore[misc]
    assert reason == "LoadFailed"
    assert said.startswith(
        "the operator failed to load this Run (RecursionError: maximum recursion depth "
        "exceeded), which is a bug in kubeturn"
    )
    assert "loading the Run n/d failed" in caplog.text


def test_a_workspace_nests_to_the_spec_bound() -> None:
    """A Workspace's env items keep unknown fields too: bounded like anything in a spec."""
    workspace = {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "w"},
        "spec": {"repos": {}, "env": [{"name": "A", "valueFrom": nested(MAX_SPEC_DEPTH)}]},
    }
    with pytest.raises(DefinitionErrors) as raised:
        validate_workspace(workspace)
    assert str(raised.value) == (
        f"spec.env[0].valueFrom.a.a.a.a.a.a…: nested deeper than {MAX_SPEC_DEPTH} levels"
    )
