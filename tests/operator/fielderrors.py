"""Field errors and the 422 ``Invalid`` answer, worded as kube-apiserver words them.

A refusal of an object's content is a list of :class:`FieldError` (a mirror of
``k8s.io/apimachinery/pkg/util/validation/field``): a type, the field's path as
Kubernetes writes it (``spec.containers[0].name``), the bad value and a detail.
:func:`invalid` turns the list into the :class:`apimachinery.ApiError` that
``apierrors.NewInvalid`` makes: HTTP 422, reason ``Invalid``, ``details.causes`` one per
error, and the message ``<Kind>.<group> "<name>" is invalid: <errors>``. Clients and
people read these words, so they follow the API server's; values are quoted as Go's
``%q`` and ``%v`` print them (objects and lists as compact JSON, where Go would print
its own syntax). Pure: no IO, no state.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Sequence
from typing import Any

from tests.operator import apimachinery


class ErrorType(enum.Enum):
    """``field.ErrorType``: the cause's ``reason`` and the words that open its message."""

    NOT_FOUND = ("FieldValueNotFound", "Not found")
    REQUIRED = ("FieldValueRequired", "Required value")
    DUPLICATE = ("FieldValueDuplicate", "Duplicate value")
    INVALID = ("FieldValueInvalid", "Invalid value")
    NOT_SUPPORTED = ("FieldValueNotSupported", "Unsupported value")
    FORBIDDEN = ("FieldValueForbidden", "Forbidden")
    TOO_LONG = ("FieldValueTooLong", "Too long")
    TOO_MANY = ("FieldValueTooMany", "Too many")
    INTERNAL = ("InternalError", "Internal error")
    TYPE_INVALID = ("FieldValueTypeInvalid", "Invalid value")

    @property
    def reason(self) -> str:
        return self.value[0]

    @property
    def words(self) -> str:
        return self.value[1]


OMITTED = object()
"""A value the message leaves out (``field.omitValue``)."""

WITHOUT_VALUE = frozenset(
    {ErrorType.REQUIRED, ErrorType.FORBIDDEN, ErrorType.TOO_LONG, ErrorType.INTERNAL}
)
"""Types whose message never shows the value (``Error.ErrorBody``)."""


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One problem at one field (``field.Error``)."""

    type: ErrorType
    field: str
    value: Any = OMITTED
    detail: str = ""

    def body(self) -> str:
        """``Error.ErrorBody``: the type's words, the value (for most types), the detail."""
        text = self.type.words
        if self.type not in WITHOUT_VALUE and self.value is not OMITTED:
            text += f": {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": self.type.reason, "message": self.body(), "field": self.field}


class GoSyntax(str):
    """A value already written as Go's ``%#v`` writes it (a list-map item's keys)."""


def go_value(value: Any) -> str:
    """A value as ``ErrorBody`` prints it: null, %v for numbers and booleans, %q for text."""
    if isinstance(value, GoSyntax):
        return str(value)
    if value is None:
        return '"null"'  # ErrorBody prints a nil value as the string "null", quoted
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))  # Go's %v writes a whole float64 without a point
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def child(path: str, name: str) -> str:
    """``Path.Child``: ``spec`` + ``x`` is ``spec.x``; from the root, ``x``."""
    return f"{path}.{name}" if path else name


def index(path: str, position: int) -> str:
    """``Path.Index``: ``spec.items`` + 0 is ``spec.items[0]``."""
    return f"{path}[{position}]"


def key(path: str, name: str) -> str:
    """``Path.Key``: ``data`` + ``a`` is ``data[a]``."""
    return f"{path}[{name}]"


# --- Constructors, as field.Required(...) and the like ---


def required(field: str, detail: str = "") -> FieldError:
    return FieldError(ErrorType.REQUIRED, field, detail=detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, field, value, detail)


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.TYPE_INVALID, field, value, detail)


def not_supported(field: str, value: Any, supported: Sequence[str]) -> FieldError:
    quoted = ", ".join(json.dumps(choice) for choice in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, field, value, f"supported values: {quoted}")


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, field, detail=detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(ErrorType.DUPLICATE, field, value)


def not_found(field: str, value: Any) -> FieldError:
    return FieldError(ErrorType.NOT_FOUND, field, value)


def too_long(field: str, limit: int) -> FieldError:
    """``field.TooLong``: a size in bytes over a limit (annotations, a Secret's data)."""
    return FieldError(ErrorType.TOO_LONG, field, detail=f"must have at most {limit} bytes")


def too_long_max_length(field: str, limit: int) -> FieldError:
    """``field.TooLongMaxLength``: a schema's ``maxLength``."""
    return FieldError(ErrorType.TOO_LONG, field, detail=f"may not be longer than {limit}")


def too_many(field: str, actual: int, limit: int) -> FieldError:
    """``field.TooMany``: a schema's ``maxItems`` or ``maxProperties``."""
    return FieldError(ErrorType.TOO_MANY, field, actual, f"must have at most {limit} items")


# --- The 422 answer ---


def aggregate(errors: Iterable[FieldError]) -> str:
    """``ErrorList.ToAggregate().Error()``: one error as it is, several as ``[a, b]``,
    each message once."""
    messages = list(dict.fromkeys(str(error) for error in errors))
    return messages[0] if len(messages) == 1 else f"[{', '.join(messages)}]"


def invalid_status(
    group: str, kind: str, name: str, errors: Sequence[FieldError]
) -> apimachinery.ApiError:
    """``apierrors.NewInvalid(GroupKind{group, kind}, name, errors)``: HTTP 422."""
    qualified = f"{kind}.{group}" if group else kind
    return apimachinery.ApiError(
        422,
        f"{qualified} {json.dumps(name)} is invalid: {aggregate(errors)}",
        name=name,
        group=group,
        kind=kind,
        causes=[error.cause() for error in errors],
    )
