"""What every kubeturn resource model shares: the base model, object metadata, names.

The models in ``kubeturn.api`` are the source of truth for the CRDs' openAPIV3Schema,
so every field carries a ``description`` written for the person running
``kubectl explain``. Unknown fields are refused everywhere except in metadata and in
free JSON (``input``, ``context``, signal data), so a misspelt key is an error instead
of a silently ignored line. Nothing here does IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GROUP = "kubeturn.dev"
"""The API group of kubeturn's resources, and the prefix of the labels, annotations and
finalizer it writes (``kubeturn.dev/run``)."""
VERSION = "v1alpha1"
"""The one version of the group the CRDs serve."""
GROUP_VERSION = f"{GROUP}/{VERSION}"
"""A kubeturn resource's ``apiVersion``."""
GroupVersion = Literal["kubeturn.dev/v1alpha1"]
"""``GROUP_VERSION`` as the type of a model's ``apiVersion`` (a ``Literal`` takes no
name; ``tests/unit/test_crds.py`` checks the two agree)."""

SLOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
"""Agent and repo slot names: one safe path segment (never ``.`` or ``..``), as instance
ids and worktree paths carry them (docs/decisions/0007)."""

MODEL_NAME = re.compile(r"^[^/\s]+/\S+$")
"""``provider/model``: the Harness picks the provider by the part before the slash."""

OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A Kubernetes object's name (a DNS-1123 subdomain): what the API server admits as the
name of a Run, a Workspace, a Secret or a ServiceAccount."""
OBJECT_NAME_MAX = 253
NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
"""A namespace's name (a DNS-1123 label, at most ``NAMESPACE_NAME_MAX``)."""
NAMESPACE_NAME_MAX = 63


class Spec(BaseModel):
    """A part of a resource: camelCase as written, unknown fields refused, immutable.

    pydantic's own error text never quotes what was written (``hide_input_in_errors``): a
    manifest can hold a secret (an env value, a URL with a token), and such text can
    reach a log. ``kubeturn.api.validation`` says what is wrong without it."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, frozen=True, hide_input_in_errors=True
    )


class ObjectMeta(BaseModel):
    """Kubernetes object metadata; only the fields kubeturn reads are declared."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, description="The object's name, unique in its namespace.")
    namespace: str | None = Field(
        default=None,
        description="The namespace the object lives in; absent outside a cluster.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_object_name(value)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and not (
            NAMESPACE_NAME.match(value) and len(value) <= NAMESPACE_NAME_MAX
        ):
            raise ValueError(
                "a namespace's name has at most 63 lowercase letters, digits and '-', and "
                f"starts and ends with a letter or digit; got {value!r}"
            )
        return value


def check_slot_names(kind: str, slots: Mapping[str, Any]) -> None:
    """Refuse slot names that could not be one path segment, naming each."""
    for name in slots:
        if not SLOT_NAME.match(name):
            raise ValueError(
                f"{kind} name {name!r} must start with a letter or digit and hold only "
                "letters, digits, '_', '.' and '-' (at most 63 characters)"
            )


def check_object_name(value: str) -> str:
    """Refuse a name the API server would not admit as an object's (a Run's, a
    Workspace's, a Secret's...): a DNS-1123 subdomain of at most 253 characters."""
    if not (OBJECT_NAME.match(value) and len(value) <= OBJECT_NAME_MAX):
        raise ValueError(
            "an object's name has at most 253 lowercase letters, digits, '-' and '.', and "
            f"starts and ends with a letter or digit (a DNS subdomain); got {value!r}"
        )
    return value


def check_model_name(value: str | None) -> str | None:
    """Refuse a model that does not say its provider."""
    if value is not None and not MODEL_NAME.match(value):
        raise ValueError(
            f"a model is written 'provider/model', e.g. 'openai/gpt-4o'; got {value!r}"
        )
    return value
