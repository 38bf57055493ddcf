"""Quantities in a Workspace's spec (``kubeturn.api.workspace.quantity``): what the API
server would refuse in the sandbox Pod or its claims is refused first, at its path.

Cases:
- what ``resource.ParseQuantity`` reads, and its amount: a number, a binary or decimal
  unit, or an exponent; ``K``, a space, ``1.5.2`` or an empty string are none;
- ``storage.size`` and ``storage.harnessSize`` that are no quantity, or zero, are refused
  at their paths;
- a resource request or limit that is no quantity or below zero, and a request above
  its limit, are refused under ``spec.resources``; good ones are taken.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kubeturn.api.validation import validate_workspace
from kubeturn.api.workspace import quantity
from kubeturn.errors import DefinitionErrors


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("500m", Decimal("0.5")),
        (2, Decimal(2)),
        ("512Mi", Decimal(512 * 2**20)),
        ("10Gi", Decimal(10 * 2**30)),
        ("1e3", Decimal(1000)),
        ("+1k", Decimal(1000)),
        (".5", Decimal("0.5")),
        ("-1", Decimal(-1)),
    ],
)
def test_a_quantity_reads_as_the_api_server_reads_it(text: Any, amount: Decimal) -> None:
    assert quantity(text) == amount


@pytest.mark.parametrize("text", ["K", "1K", "1Gi ", "1.5.2", "", "lots", True])
def test_what_is_no_quantity(text: Any) -> None:
    with pytest.raises(ValueError, match="is not a quantity"):
        quantity(text)


def workspace(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "w"},
        "spec": {"repos": {"app": {"url": "https://git.example/app.git"}}} | spec,
    }


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"storage": {"size": "lots"}}, "spec.storage.size"),
        ({"storage": {"harnessSize": "0"}}, "spec.storage.harnessSize"),
        ({"resources": {"requests": {"cpu": "a lot"}}}, "spec.resources.requests"),
        ({"resources": {"limits": {"memory": "-1Gi"}}}, "spec.resources.limits"),
        ({"resources": {"requests": {"cpu": 2}, "limits": {"cpu": "1"}}}, "spec.resources"),
    ],
)
def test_a_quantity_the_api_server_would_refuse_is_refused_at_its_path(
    spec: dict[str, Any], path: str
) -> None:
    with pytest.raises(DefinitionErrors) as refused:
        validate_workspace(workspace(**spec))
    assert [error.path for error in refused.value.errors] == [path]


def test_good_quantities_are_taken() -> None:
    spec = {
        "storage": {"size": "20Gi", "harnessSize": "500Mi"},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 2}},
    }
    assert validate_workspace(workspace(**spec)).spec.storage.size == "20Gi"
