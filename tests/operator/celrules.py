"""``x-kubernetes-validations``: CEL rules of a CRD, evaluated as kube-apiserver does.

Each rule is compiled once, when its CRD is loaded, with the ``cel`` package the
operator itself uses (``common-expression-language``, see
``kubeturn.machine.expressions``), and evaluated against a value with ``self`` bound to
it and, for a *transition rule* (one that reads ``oldSelf``), ``oldSelf`` bound to the
value it replaces. As in the API server:

- a transition rule is skipped when there is no old value (a create, a new list item),
  unless the rule sets ``optionalOldSelf``: then ``oldSelf`` is an optional
  (``oldSelf.hasValue()``, ``oldSelf.orValue(x)``);
- a rule that is not true gives ``Invalid value: "<the node's type>": <message>`` at
  the node (or at ``fieldPath`` below it), the message being ``message``, the value of
  ``messageExpression``, or ``failed rule: <rule>``; ``reason`` turns it into a
  ``Forbidden``, ``Required`` or ``Duplicate`` error instead;
- a rule that fails to run (no such key, an overflow) gives ``<error> evaluating rule:
  <rule>``.

Kubernetes' CEL environment has libraries beyond the CEL standard (strings, lists,
regex, URLs, quantities, IPs...). The ``cel`` package has the standard functions
(``matches`` among them); a rule that calls anything else is refused when its CRD is
loaded (:class:`CrdError`), naming the function, rather than evaluated wrongly: either
Kubernetes has no such function (the API server would refuse the CRD) or the emulator
has not implemented it yet (then implement it here). Not emulated: the cost
estimates and budgets the API server checks a CRD's rules against.

Pure apart from CEL evaluation: no IO, no state.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import cel

from tests.operator import fielderrors
from tests.operator.fielderrors import FieldError

STANDARD = frozenset(
    {
        # macros
        "has",
        "all",
        "exists",
        "exists_one",
        "map",
        "filter",
        # functions and conversions
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "duration",
        "timestamp",
        "dyn",
        "type",
        "getFullYear",
        "getMonth",
        "getDate",
        "getDayOfMonth",
        "getDayOfWeek",
        "getDayOfYear",
        "getHours",
        "getMinutes",
        "getSeconds",
        "getMilliseconds",
        # optionals (``optionalOldSelf``)
        "hasValue",
        "value",
        "orValue",
        "of",
        "none",
    }
)
"""The functions the emulator evaluates: the CEL standard, as the ``cel`` package
implements it (``test_emulator`` runs each once)."""

KUBERNETES_ONLY = frozenset(
    {
        # cel-go's strings extension
        "charAt",
        "indexOf",
        "lastIndexOf",
        "lowerAscii",
        "upperAscii",
        "replace",
        "split",
        "substring",
        "trim",
        "join",
        "quote",
        "reverse",
        "format",
        # Kubernetes' lists, regex, URL, quantity, IP and CIDR, semver libraries
        "isSorted",
        "sum",
        "min",
        "max",
        "find",
        "findAll",
        "url",
        "isURL",
        "getScheme",
        "getHost",
        "getHostname",
        "getPort",
        "getEscapedPath",
        "getQuery",
        "quantity",
        "isQuantity",
        "sign",
        "isInteger",
        "asInteger",
        "asApproximateFloat",
        "add",
        "sub",
        "compareTo",
        "isGreaterThan",
        "isLessThan",
        "ip",
        "isIP",
        "cidr",
        "isCIDR",
        "family",
        "isUnspecified",
        "isLoopback",
        "isLinkLocalMulticast",
        "isLinkLocalUnicast",
        "isGlobalUnicast",
        "containsIP",
        "containsCIDR",
        "prefixLength",
        "masked",
        "isCanonical",
        "semver",
        "isSemver",
        "major",
        "minor",
        "patch",
        "validate",
        "dns1123Label",
        "dns1123Subdomain",
        # cel-go's sets extension and two-variable comprehensions
        "equivalent",
        "intersects",
        "transformList",
        "transformMap",
        "transformMapEntry",
    }
)
"""Functions Kubernetes' CEL environment has that the emulator does not evaluate yet."""

_STRING = re.compile(r"""[rR]?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")
_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


class CrdError(ValueError):
    """A CRD the emulator cannot serve as the API server would: say which and why."""


def called(source: str) -> set[str]:
    """The names of the functions and macros an expression calls (strings left out)."""
    return set(_CALL.findall(_STRING.sub('""', source)))


def _compiled(source: str, where: str) -> cel.Program:
    unknown = sorted(called(source) - STANDARD)
    if unknown:
        missing = [name for name in unknown if name in KUBERNETES_ONLY]
        foreign = [name for name in unknown if name not in KUBERNETES_ONLY]
        if foreign:
            raise CrdError(
                f"{where}: {source!r} calls {', '.join(foreign)}, which Kubernetes' CEL "
                "environment does not have: the API server would refuse this CRD"
            )
        raise CrdError(
            f"{where}: {source!r} calls {', '.join(missing)}, which Kubernetes' CEL has "
            "but the emulator does not evaluate yet: implement it in tests/operator/celrules.py"
        )
    try:
        return cel.compile(source)
    except Exception as error:  # the cel package raises ValueError; any means "refused"
        raise CrdError(f"{where}: {source!r} does not compile: {error}") from error


_FIELD_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['([^']*)'\]")


def _field_path(text: str, where: str) -> tuple[str, ...]:
    """``fieldPath`` (``.a.b``, ``.a['b.c']``) as its steps."""
    steps, position = [], 0
    while position < len(text):
        step = _FIELD_PATH_STEP.match(text, position)
        if step is None:
            raise CrdError(f"{where}: fieldPath {text!r} is not a path the emulator reads")
        steps.append(step[1] if step[1] is not None else step[2])
        position = step.end()
    return tuple(steps)


MISSING = object()
"""No old value: a create, or a value new in an update."""
REASONS = ("FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate")
"""The ``reason`` values a rule may give."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """One compiled ``x-kubernetes-validations`` entry."""

    rule: str
    program: cel.Program = dataclasses.field(compare=False)
    message: str = ""
    message_program: cel.Program | None = dataclasses.field(default=None, compare=False)
    reason: str = ""
    field_path: tuple[str, ...] = ()
    optional_old_self: bool = False

    @classmethod
    def of(cls, spec: Mapping[str, Any], where: str) -> Rule:
        """Compile an ``x-kubernetes-validations`` entry; ``CrdError`` if the API server
        would refuse it or the emulator cannot evaluate it."""
        known = {"rule", "message", "messageExpression", "reason", "fieldPath", "optionalOldSelf"}
        if set(spec) - known:
            raise CrdError(f"{where}: unknown keys in a validation rule: {set(spec) - known}")
        reason = str(spec.get("reason") or "")
        if reason not in ("", *REASONS):
            raise CrdError(f"{where}: reason {reason!r} is not one the API server accepts")
        expression = spec.get("messageExpression")
        return cls(
            rule=str(spec["rule"]),
            program=_compiled(str(spec["rule"]), where),
            message=str(spec.get("message") or "").strip(),
            message_program=_compiled(str(expression), where) if expression else None,
            reason=reason,
            field_path=_field_path(str(spec.get("fieldPath") or ""), where),
            optional_old_self=bool(spec.get("optionalOldSelf")),
        )

    @property
    def transition(self) -> bool:
        """Whether the rule reads ``oldSelf``."""
        return "oldSelf" in self.program.variables()

    def check(self, value: Any, old: Any, *, field: str, type_name: str) -> FieldError | None:
        """The error the rule gives ``value`` (``old``: the value it replaces, or
        :data:`MISSING`) at ``field``; None when it holds or is not to be checked."""
        activation: dict[str, Any] = {"self": value}
        if self.transition:
            if self.optional_old_self:
                activation["oldSelf"] = (
                    cel.OptionalValue.none() if old is MISSING else cel.OptionalValue.of(old)
                )
            elif old is MISSING:
                return None
            else:
                activation["oldSelf"] = old
        try:
            result = self.program.execute(activation)
        except KeyError as error:
            detail = f"no such key: {error.args[0]} evaluating rule: {self._said()}"
            return fielderrors.invalid(field, type_name, detail)
        except RuntimeError as error:
            if "Undefined variable or function" in str(error):
                raise  # an emulator gap, not a refusal: fail the test loudly
            return fielderrors.invalid(field, type_name, f"{error} evaluating rule: {self._said()}")
        except Exception as error:  # overflow, division by zero, no such overload...
            return fielderrors.invalid(field, type_name, f"{error} evaluating rule: {self._said()}")
        if result is True:
            return None
        where = field
        for step in self.field_path:
            where = fielderrors.child(where, step)
        detail = self._message(activation)
        match self.reason:
            case "FieldValueForbidden":
                return fielderrors.forbidden(where, detail)
            case "FieldValueRequired":
                return fielderrors.required(where, detail)
            case "FieldValueDuplicate":
                return fielderrors.duplicate(where, type_name)
            case _:
                return fielderrors.invalid(where, type_name, detail)

    def _said(self) -> str:
        """``ruleErrorString``: the message, else the rule."""
        return self.message or self.rule.strip()

    def _message(self, activation: Mapping[str, Any]) -> str:
        """``messageExpression``'s text when it gives a non-empty single line; else the
        message, else ``failed rule: <rule>``."""
        if self.message_program is not None:
            try:
                text = self.message_program.execute(dict(activation))
            except Exception:  # the API server falls back to the message, as here
                text = None
            if isinstance(text, str) and text.strip() and "\n" not in text:
                return text.strip()
        return self.message or f"failed rule: {self.rule.strip()}"
