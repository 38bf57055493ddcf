"""Names, labels, keys and object metadata, checked as kube-apiserver checks them.

Two layers, each a mirror of the API server's own:

- the syntax of names (``k8s.io/apimachinery/pkg/util/validation``): DNS-1123
  subdomains (object names, at most 253 characters), DNS-1123 labels (namespaces,
  container and volume names, at most 63), DNS-1035 labels (Service names), qualified
  names (label and annotation keys: an optional DNS subdomain prefix and ``/``, then at
  most 63 characters), label values (at most 63, ``(([A-Za-z0-9][-A-Za-z0-9_.]*)?
  [A-Za-z0-9])?``), IANA service names (port names: at most 15, a letter, no ``--``),
  configuration keys and environment variable names. Each answers the API server's
  messages, none when the text is valid;
- ``ObjectMeta`` (``apimachinery/pkg/api/validation/objectmeta.go``): the name (or
  ``generateName``) by the resource's own rule, the namespace, labels, annotations (keys,
  and at most 256 KiB in all), owner references (and at most one controller) and
  finalizers, answered as :class:`fielderrors.FieldError` at ``metadata.…``.

Pure: no IO, no state.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.operator import fielderrors, limits
from tests.operator.fielderrors import FieldError

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
PORT_NAME_MAX = 15
CONFIG_KEY_MAX = 253

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_CONFIG_KEY = "[-._a-zA-Z0-9]+"

NameRule = Callable[[str], list[str]]
"""A syntax rule: the API server's messages about a text, none when it is valid."""


def max_len_error(limit: int) -> str:
    return f"must be no more than {limit} characters"


def regex_error(message: str, pattern: str, *examples: str) -> str:
    """``validation.RegexError``: the rule's words, examples, and the regex."""
    if not examples:
        return f"{message} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _full(pattern: str) -> re.Pattern[str]:
    return re.compile(f"(?:{pattern})")


def is_dns1123_label(value: str) -> list[str]:
    errors = [max_len_error(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _full(_DNS1123_LABEL).fullmatch(value):
        if _full(_DNS1123_SUBDOMAIN).fullmatch(value):
            errors.append("must not contain dots")
        else:
            message = (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                "characters or '-', and must start and end with an alphanumeric character"
            )
            errors.append(regex_error(message, _DNS1123_LABEL, "my-name", "123-abc"))
    return errors


def is_dns1123_subdomain(value: str) -> list[str]:
    errors = [max_len_error(DNS1123_SUBDOMAIN_MAX)] if len(value) > DNS1123_SUBDOMAIN_MAX else []
    if not _full(_DNS1123_SUBDOMAIN).fullmatch(value):
        message = (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character"
        )
        errors.append(regex_error(message, _DNS1123_SUBDOMAIN, "example.com"))
    return errors


def is_dns1035_label(value: str) -> list[str]:
    errors = [max_len_error(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _full(_DNS1035_LABEL).fullmatch(value):
        message = (
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
            "start with an alphabetic character, and end with an alphanumeric character"
        )
        errors.append(regex_error(message, _DNS1035_LABEL, "my-name", "abc-123"))
    return errors


def is_path_segment_name(value: str) -> list[str]:
    """RBAC objects' names (``path.IsValidPathSegmentName``): anything a URL path segment
    can carry, so ``system:discovery`` is one."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in value]


_QUALIFIED_WORDS = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


def is_qualified_name(value: str) -> list[str]:
    """A label key or annotation key: ``[prefix/]name``."""
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        shown = regex_error(_QUALIFIED_WORDS, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
        return [
            f"a qualified name {shown} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {message}" for message in is_dns1123_subdomain(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errors.append(f"name part {max_len_error(QUALIFIED_NAME_MAX)}")
    if not _full(_QUALIFIED_NAME).fullmatch(name):
        shown = regex_error(_QUALIFIED_WORDS, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
        errors.append(f"name part {shown}")
    return errors


def is_label_value(value: str) -> list[str]:
    errors = [max_len_error(LABEL_VALUE_MAX)] if len(value) > LABEL_VALUE_MAX else []
    if not _full(_LABEL_VALUE).fullmatch(value):
        message = (
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
        errors.append(regex_error(message, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errors


def is_port_name(value: str) -> list[str]:
    """An IANA_SVC_NAME (RFC 6335), lower case only: a container port's name."""
    errors = [max_len_error(PORT_NAME_MAX)] if len(value) > PORT_NAME_MAX else []
    if not re.fullmatch("[-a-z0-9]+", value):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", value):
        errors.append("must contain at least one letter (a-z)")
    if "--" in value:
        errors.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def is_config_key(value: str) -> list[str]:
    """A ConfigMap's or Secret's key (and so a file name in a volume)."""
    errors = [max_len_error(CONFIG_KEY_MAX)] if len(value) > CONFIG_KEY_MAX else []
    if not _full(_CONFIG_KEY).fullmatch(value):
        message = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
        errors.append(regex_error(message, _CONFIG_KEY, "key.name", "KEY_NAME", "key-name"))
    if value in (".", ".."):
        errors.append(f"must not be '{value}'")
    elif value.startswith(".."):
        errors.append("must not start with '..'")
    return errors


def is_env_var_name(value: str) -> list[str]:
    """An environment variable's name, as relaxed since Kubernetes 1.32 (GA in 1.34):
    any printable ASCII but ``=``."""
    if not value:
        return ["environment variable name must be non-empty"]
    if any(not (" " <= char <= "~") or char == "=" for char in value):
        return [
            "a valid environment variable name must consist only of printable ASCII "
            "characters other than '='"
        ]
    return []


def mask_trailing_dash(name: str) -> str:
    """How a ``generateName`` is checked: ``maskTrailingDash``, which (as the API server
    does) replaces the last two characters of a name ending in ``-`` with ``a``."""
    return f"{name[:-2]}a" if len(name) > 1 and name.endswith("-") else name


# --- ObjectMeta ---


def validate_labels(labels: Any, field: str) -> list[FieldError]:
    """``ValidateLabels``: every key a qualified name, every value a label value."""
    if not isinstance(labels, Mapping):
        return []
    errors = []
    for label, value in labels.items():
        errors += [fielderrors.invalid(field, label, m) for m in is_qualified_name(str(label))]
        if isinstance(value, str):
            errors += [fielderrors.invalid(field, value, m) for m in is_label_value(value)]
    return errors


def validate_annotations(annotations: Any, field: str) -> list[FieldError]:
    """Keys are qualified names (of any case); all keys and values together fit in
    ``limits.TOTAL_ANNOTATION_BYTES``."""
    if not isinstance(annotations, Mapping):
        return []
    errors = []
    for name in annotations:
        for message in is_qualified_name(str(name).lower()):
            errors.append(fielderrors.invalid(field, name, message))
    total = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if total > limits.TOTAL_ANNOTATION_BYTES:
        errors.append(fielderrors.too_long(field, limits.TOTAL_ANNOTATION_BYTES))
    return errors


def validate_owner_references(references: Any, field: str) -> list[FieldError]:
    """``ValidateOwnerReferences``: each names its owner fully (apiVersion, kind, name,
    uid; errors at ``metadata.ownerReferences.<field>``, with no index, as there); no
    Event owns anything; at most one reference is the controller."""
    if not isinstance(references, list):
        return []
    errors = []
    controller = ""
    for reference in references:
        if not isinstance(reference, Mapping):
            continue
        for part, words in (("apiVersion", "version"), ("kind", "kind"), ("name", "name")):
            if not reference.get(part):
                value = reference.get(part, "")
                errors.append(
                    fielderrors.invalid(f"{field}.{part}", value, f"{words} must not be empty")
                )
        if not reference.get("uid"):
            errors.append(
                fielderrors.invalid(
                    f"{field}.uid", reference.get("uid", ""), "uid must not be empty"
                )
            )
        if (reference.get("apiVersion"), reference.get("kind")) == ("v1", "Event"):
            errors.append(
                fielderrors.invalid(
                    field, reference, "/v1, Kind=Event is disallowed from being an owner"
                )
            )
        if reference.get("controller"):
            current = f"{reference.get('kind')}/{reference.get('name')}"
            if controller:
                errors.append(
                    fielderrors.invalid(
                        field,
                        references,
                        'Only one reference can have Controller set to true. Found "true" in '
                        f"references for {controller} and {current}",
                    )
                )
            else:
                controller = current
    return errors


def validate_finalizers(finalizers: Any, field: str) -> list[FieldError]:
    """``ValidateFinalizers``: each a qualified name, none twice."""
    if not isinstance(finalizers, list):
        return []
    errors = []
    seen: set[str] = set()
    for finalizer in finalizers:
        name = str(finalizer)
        errors += [fielderrors.invalid(field, name, m) for m in is_qualified_name(name)]
        if name in seen:
            errors.append(fielderrors.duplicate(field, name))
        seen.add(name)
    return errors


def validate_object_meta(
    meta: Mapping[str, Any], *, namespaced: bool, rule: NameRule
) -> list[FieldError]:
    """``ValidateObjectMetaAccessor``: every problem of an object's metadata.

    ``rule`` is the resource's name rule (a DNS-1123 subdomain for most, a DNS-1123
    label for Namespaces, a DNS-1035 label for Services). A ``generateName`` is checked
    as a prefix; the name made from it, as any name.
    """
    errors: list[FieldError] = []
    generate = meta.get("generateName")
    if generate:
        for message in rule(mask_trailing_dash(str(generate))):
            errors.append(fielderrors.invalid("metadata.generateName", generate, message))
    name = meta.get("name")
    if not name:
        errors.append(fielderrors.required("metadata.name", "name or generateName is required"))
    else:
        errors += [fielderrors.invalid("metadata.name", name, m) for m in rule(str(name))]
    namespace = meta.get("namespace")
    if namespaced and namespace:
        for message in is_dns1123_label(str(namespace)):
            errors.append(fielderrors.invalid("metadata.namespace", namespace, message))
    errors += validate_labels(meta.get("labels"), "metadata.labels")
    errors += validate_annotations(meta.get("annotations"), "metadata.annotations")
    errors += validate_owner_references(meta.get("ownerReferences"), "metadata.ownerReferences")
    errors += validate_finalizers(meta.get("finalizers"), "metadata.finalizers")
    return errors


def validate_label_selector(selector: Any, field: str) -> list[FieldError]:
    """``ValidateLabelSelector``: matchLabels as labels; each matchExpressions term with a
    qualified key, a known operator, and values for In and NotIn only, each a label value."""
    if not isinstance(selector, Mapping):
        return []
    errors = validate_labels(selector.get("matchLabels"), fielderrors.child(field, "matchLabels"))
    terms = selector.get("matchExpressions") or []
    for position, term in enumerate(terms if isinstance(terms, list) else []):
        where = fielderrors.index(fielderrors.child(field, "matchExpressions"), position)
        if not isinstance(term, Mapping):
            continue
        operator, values = term.get("operator"), term.get("values") or []
        for message in is_qualified_name(str(term.get("key", ""))):
            errors.append(fielderrors.invalid(f"{where}.key", term.get("key"), message))
        if operator in ("In", "NotIn") and not values:
            errors.append(
                fielderrors.required(
                    f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"
                )
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(
                fielderrors.forbidden(
                    f"{where}.values",
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errors.append(
                fielderrors.not_supported(
                    f"{where}.operator", operator, ["In", "NotIn", "Exists", "DoesNotExist"]
                )
            )
        for value_position, value in enumerate(values if isinstance(values, list) else []):
            for message in is_label_value(str(value)):
                errors.append(
                    fielderrors.invalid(
                        fielderrors.index(f"{where}.values", value_position), value, message
                    )
                )
    return errors
