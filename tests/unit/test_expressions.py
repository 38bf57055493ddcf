"""CEL expressions and ``{{ <CEL> }}`` templates (``kubeturn.machine.expressions``).

Cases:
- an expression evaluates over input, context, event and workspace;
- compile problems are ``DefinitionError``s at the given manifest path, quoting the
  expression and CEL's message (its position, without the caret drawing or the list
  of expected tokens);
- only the four variables may be read; comprehension variables, CEL's type names and
  a narrower allowed set are honoured;
- every run-time failure is an ``ExpressionError`` (never a raw KeyError, ValueError,
  RuntimeError, TypeError, ZeroDivisionError, OverflowError or IndexError) naming the
  expression, with the cause chained;
- results leave CEL as JSON: timestamps as RFC 3339, durations as ``<seconds>s``, map
  keys as strings, optionals unwrapped; bytes refused;
- expressions and templates compare and hash by source;
- templates: literal text, holes rendering strings as-is and other values as compact
  JSON, holes with braces and ``}}`` inside CEL strings, a literal ``{{``, a stray
  ``}}``, multi-line text; an unclosed ``{{`` and a hole that does not compile name
  the line and column; a failing hole is an ``ExpressionError`` naming the hole.
"""

from __future__ import annotations

import pytest

from kubeturn.errors import DefinitionError, ExpressionError
from kubeturn.machine.expressions import VARIABLES, CelExpression, CelTemplate

ACTIVATION = {
    "input": {"task": "Add a flag", "n": 3},
    "context": {"rounds": 1, "files": ["a.py", "b.py"]},
    "event": {"type": "review_verdict", "verdict": "approve"},
    "workspace": {"repos": {"target": "/work/target/run-1"}},
}


class TestExpressions:
    def test_a_guard_reads_all_four_variables(self) -> None:
        guard = CelExpression(
            "event.verdict == 'approve' && context.rounds < input.n"
            " && workspace.repos.target.startsWith('/work')"
        )
        assert guard.evaluate(ACTIVATION) is True

    def test_values_of_every_json_type(self) -> None:
        value = CelExpression("{'n': context.rounds + 1, 'f': context.files, 'x': null}")
        assert value.evaluate(ACTIVATION) == {"n": 2, "f": ["a.py", "b.py"], "x": None}

    def test_a_syntax_error_names_where_what_and_the_column(self) -> None:
        with pytest.raises(DefinitionError) as caught:
            CelExpression("event.verdict == ", where="spec.machine.states.a.on.go.guard")
        assert caught.value.path == "spec.machine.states.a.on.go.guard"
        assert caught.value.message == (
            "'event.verdict == ' does not compile: Syntax error: mismatched input '<EOF>' "
            "at column 18"
        )

    def test_a_multi_line_expression_names_the_line(self) -> None:
        with pytest.raises(DefinitionError, match=r"at line 2, column 2$"):
            CelExpression("context.rounds\n+")

    def test_reading_another_variable_is_refused(self) -> None:
        with pytest.raises(DefinitionError) as caught:
            CelExpression("contxt.rounds > 1 && state == 'x'", where="w")
        assert str(caught.value) == (
            "w: \"contxt.rounds > 1 && state == 'x'\" reads 'contxt', 'state'; an expression "
            "may read only context, event, input, workspace"
        )

    @pytest.mark.parametrize(
        "source",
        [
            "context.files.map(f, f + '!')",
            "context.files.all(f, f.endsWith('.py'))",
            "context.files.exists_one(file, file == 'a.py')",
            "context.files.filter(f, f != 'a.py').size() == 1",
            "type(context.rounds) == int",
            "string(context.rounds)",
            "dyn(input)",
        ],
    )
    def test_comprehension_variables_and_cel_names_are_not_variables(self, source: str) -> None:
        CelExpression(source).evaluate(ACTIVATION)

    def test_the_allowed_variables_can_be_narrowed(self) -> None:
        assert frozenset({"input", "context", "event", "workspace"}) == VARIABLES
        with pytest.raises(DefinitionError, match=r"may read only context, input$"):
            CelExpression("event.type", variables=frozenset({"input", "context"}))

    @pytest.mark.parametrize(
        ("source", "activation", "cause", "foreign"),
        [
            pytest.param("event.verdcit", ACTIVATION, "no key 'verdcit'", KeyError, id="key"),
            pytest.param(
                "event.type",
                {"context": {}},
                "Undefined variable or function: 'event'",
                RuntimeError,
                id="undefined",
            ),
            pytest.param(
                "context.rounds + 'x'", ACTIVATION, "No such overload", TypeError, id="type"
            ),
            pytest.param(
                "input.n / 0", ACTIVATION, "division by zero", ZeroDivisionError, id="div"
            ),
            pytest.param(
                "9223372036854775807 + input.n", ACTIVATION, "overflow", OverflowError, id="over"
            ),
            pytest.param("context.files[5]", ACTIVATION, "out of bounds", IndexError, id="index"),
            pytest.param(
                "context", {"context": object()}, "Conversion Error", ValueError, id="conversion"
            ),
        ],
    )
    def test_every_runtime_failure_is_an_expression_error(
        self,
        source: str,
        activation: dict[str, object],
        cause: str,
        foreign: type[Exception],
    ) -> None:
        with pytest.raises(ExpressionError) as caught:
            CelExpression(source, where="w").evaluate(activation)
        assert caught.value.source == source
        assert caught.value.where == "w"
        assert cause in caught.value.cause
        assert str(caught.value).startswith(f"CEL expression {source!r} failed: ")
        assert isinstance(caught.value.__cause__, foreign)

    @pytest.mark.parametrize(
        ("source", "value"),
        [
            ("timestamp('2024-05-01T10:00:00Z')", "2024-05-01T10:00:00Z"),
            ("duration('1h')", "3600s"),
            ("duration('1500ms')", "1.5s"),
            ("{1: 'a', 2: 'b'}", {"1": "a", "2": "b"}),
            ("{true: 'a'}", {"true": "a"}),
            ("optional.of(3)", 3),
            ("optional.none()", None),
            ("type(1)", "int"),
        ],
    )
    def test_values_leave_cel_as_json(self, source: str, value: object) -> None:
        assert CelExpression(source).evaluate({}) == value

    def test_bytes_have_no_json_form(self) -> None:
        with pytest.raises(ExpressionError, match=r"convert it with string\(\)$"):
            CelExpression("b'abc'").evaluate({})

    def test_equal_by_source(self) -> None:
        assert CelExpression("1 + 1") == CelExpression("1 + 1")
        assert CelExpression("1 + 1") != CelExpression("2")
        assert len({CelExpression("input.b"), CelExpression("input.b")}) == 1
        assert CelTemplate("x {{ 1 }}") == CelTemplate("x {{ 1 }}")
        assert CelTemplate("input") != CelExpression("input")


class TestTemplates:
    def test_literal_text_renders_as_written(self) -> None:
        assert CelTemplate("no holes } here {").render({}) == "no holes } here {"

    def test_strings_render_as_is_and_other_values_as_compact_json(self) -> None:
        template = CelTemplate(
            "{{ input.task }} in {{ workspace.repos.target }}: {{ context.files }} "
            "{{ context.rounds }} {{ event.verdict == 'approve' }} {{ null }} {{ 'ü' }}"
        )
        assert template.render(ACTIVATION) == (
            'Add a flag in /work/target/run-1: ["a.py","b.py"] 1 true null ü'
        )

    def test_a_hole_ends_at_the_first_closing_braces_outside_strings_and_maps(self) -> None:
        template = CelTemplate("{{ {'a': {'b': '}}'}} }}|{{ {'x':1}}}|{{ \"}}\" }}")
        assert template.render({}) == '{"a":{"b":"}}"}}|{"x":1}|}}'

    def test_a_literal_double_brace_is_written_as_a_cel_string(self) -> None:
        assert CelTemplate("{{ '{{' }} name }}").render({}) == "{{ name }}"

    def test_multi_line_text(self) -> None:
        template = CelTemplate("Task:\n{{ input.task }}\n\nRound {{ context.rounds }}.\n")
        assert template.render(ACTIVATION) == "Task:\nAdd a flag\n\nRound 1.\n"

    def test_an_unclosed_hole_names_the_line_and_column(self) -> None:
        with pytest.raises(DefinitionError) as caught:
            CelTemplate("Fix it.\nThen run {{ input.command", where="spec.p")
        assert str(caught.value) == (
            "spec.p: the template has an unclosed '{{' at line 2, column 10: close it with "
            "'}}' (write a literal '{{' as {{ '{{' }})"
        )

    def test_a_hole_that_does_not_compile_names_the_hole_and_its_place(self) -> None:
        with pytest.raises(DefinitionError) as caught:
            CelTemplate("Title\n  {{ context.rounds + }}", where="w")
        assert caught.value.message == (
            "the hole {{ context.rounds + }} at line 2, column 3 does not compile: "
            "Syntax error: mismatched input '<EOF>' at column 19 of the hole"
        )

    def test_a_hole_reading_another_variable_is_refused(self) -> None:
        with pytest.raises(DefinitionError, match=r"reads 'state'; an expression may read"):
            CelTemplate("{{ state.name }}")

    def test_a_failing_hole_is_an_expression_error_naming_the_hole(self) -> None:
        with pytest.raises(ExpressionError) as caught:
            CelTemplate("a {{ event.notes }} b", where="w").render(ACTIVATION)
        assert caught.value.source == "event.notes"
        assert caught.value.cause == "no key 'notes'"
        assert caught.value.where == "w"
