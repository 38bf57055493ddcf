"""A provider's retry policy and timeouts in the providers file (``providers.RetrySpec``,
``TimeoutSpec``), and the operator's check of the file it hands every sandbox.

Cases:
- a provider with neither gets the defaults (3 attempts, 1 s back-off doubling to 8 s,
  Retry-After up to 30 s; connect 10 s, idle 60 s);
- given keys override, the rest keep their defaults;
- an unknown key or a value out of bounds is refused naming its path, by the Harness
  (``Providers.parse``) and by the operator (``providers_problem``) alike.
"""

from __future__ import annotations

import pytest

from kubeturn.api import models
from kubeturn_harness.errors import ConfigError
from kubeturn_harness.providers import Providers, RetrySpec, TimeoutSpec


def test_defaults() -> None:
    spec = Providers.parse("p: {baseUrl: 'http://127.0.0.1:1/v1'}", "f").resolve("p/m")
    assert spec.provider.spec.retry == RetrySpec(
        attempts=3, backoffSeconds=1, maxBackoffSeconds=8, maxRetryAfterSeconds=30
    )
    assert spec.provider.spec.timeouts == TimeoutSpec(connectSeconds=10, idleSeconds=60)


def test_given_keys_override() -> None:
    text = (
        "p:\n  baseUrl: http://127.0.0.1:1/v1\n  retry: {attempts: 5}\n"
        "  timeouts: {idleSeconds: 180}\n"
    )
    spec = Providers.parse(text, "f").resolve("p/m").provider.spec
    assert (spec.retry.attempts, spec.retry.maxRetryAfterSeconds) == (5, 30)
    assert (spec.timeouts.idleSeconds, spec.timeouts.connectSeconds) == (180, 10)
    assert models.providers_problem(text) is None


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("retry: {attempts: 0}", "p.retry.attempts: Input should be greater than or equal to 1"),
        ("retry: {tries: 2}", "p.retry.tries: Extra inputs are not permitted"),
        ("timeouts: {idleSeconds: 0}", "p.timeouts.idleSeconds: Input should be greater than 0"),
        ("timeouts: {read: 5}", "p.timeouts.read: Extra inputs are not permitted"),
    ],
)
def test_a_bad_policy_is_refused_naming_its_path(entry: str, said: str) -> None:
    text = f"p:\n  baseUrl: http://127.0.0.1:1/v1\n  {entry}\n"
    with pytest.raises(ConfigError) as refused:
        Providers.parse(text, "providers file x")
    assert str(refused.value) == f"providers file x: {said}"
    assert models.providers_problem(text) == f"providers file: {said}"
