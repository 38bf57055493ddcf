"""Which model an Agent runs on when it names none: the default model, and whether the
providers the operator hands its sandboxes define its provider.

A model is ``provider/model``; the Harness picks the provider by the part before the
slash from the providers file every sandbox gets (the chart's ``providers``). A default
model whose provider that file does not define would fail every Turn that relies on it,
so it is refused where it is set: the chart's ``defaultModel`` stops the operator at its
start, a Workspace's ``spec.defaultModel`` gets a condition naming the path
(ADR 0060). A providers file the Harness would refuse (an unknown key, a retry policy
out of bounds) is refused by the operator at its start too, rather than by every sandbox.
Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Collection

import yaml

from kubeturn_harness.errors import ConfigError
from kubeturn_harness.providers import Providers


def provider_names(providers_yaml: str) -> frozenset[str]:
    """The providers a providers file defines (none for one that is not a mapping: the
    Harness refuses that file itself)."""
    try:
        loaded = yaml.safe_load(providers_yaml)
    except yaml.YAMLError:
        return frozenset()
    return frozenset(str(name) for name in loaded) if isinstance(loaded, dict) else frozenset()


def providers_problem(providers_yaml: str) -> str | None:
    """Why the Harness would refuse this providers file, or None when it reads it."""
    try:
        Providers.parse(providers_yaml, "providers file")
    except ConfigError as error:
        return str(error)
    return None


def unknown_provider(model: str, providers: Collection[str]) -> str | None:
    """Why ``model`` cannot run with ``providers`` defined, or None when it can."""
    provider, slash, name = model.partition("/")
    if not slash or not provider or not name:
        return f"a model is written 'provider/model', e.g. 'openai/gpt-4o'; got {model!r}"
    if provider in providers:
        return None
    known = ", ".join(sorted(providers)) or "none"
    return (
        f"{model!r} names the provider {provider!r}, which the operator's providers do not "
        f"define (defined: {known}); name a model of one of them, or add the provider to the "
        "chart's providers"
    )
