"""Model providers: the providers file, and resolving ``provider/model`` names.

The file (``KUBETURN_PROVIDERS``) is YAML mapping each provider name to
``{type: openai | anthropic, baseUrl, apiKeyEnv?, maxTokens?, retry?, timeouts?, pricing?}``. API
keys are read from the named environment variables of the Harness process, never written
to the file and never passed to tools. ``retry`` and ``timeouts`` are kubeturn's own
policy for that provider (``kubeturn_harness.retries``; docs/decisions/0076 and 0077),
not its SDK's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from kubeturn_harness.errors import ConfigError, WireError
from kubeturn_harness.pricing import Price


class ProviderType(StrEnum):
    OPENAI = "openai"
    """Any OpenAI-compatible chat-completions server: OpenAI, vLLM, Ollama, LiteLLM."""
    ANTHROPIC = "anthropic"
    """Anthropic's Messages API (``baseUrl`` without ``/v1``), or a server that speaks it."""


class RetrySpec(BaseModel):
    """How one model request is tried again (docs/decisions/0076): at most ``attempts``
    requests, waiting between them a back-off that doubles from ``backoffSeconds`` to
    ``maxBackoffSeconds`` (jittered), or as long as the provider asked (``Retry-After``)
    when that is no more than ``maxRetryAfterSeconds``; a longer ask fails at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = Field(default=3, ge=1, le=10)
    """Requests per model call, the first included: a blip (a restart, one 502) is
    absorbed; a provider that is down fails the Turn within seconds."""
    backoffSeconds: float = Field(default=1.0, ge=0, le=60)
    """Wait before the second request; it doubles for each further one. 1 s lets a
    restarting server come back without hammering it."""
    maxBackoffSeconds: float = Field(default=8.0, ge=0, le=300)
    """The longest back-off between two requests (the SDK's own ceiling, 8 s)."""
    maxRetryAfterSeconds: float = Field(default=30.0, ge=0, le=600)
    """The longest ``Retry-After`` kubeturn waits for; a provider that asks for longer
    fails the request at once, saying so, rather than holding the Turn for minutes
    while its state waits on it."""


class TimeoutSpec(BaseModel):
    """How long one request may wait on the provider (docs/decisions/0077)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    connectSeconds: float = Field(default=10.0, gt=0, le=300)
    """Opening the connection (TCP and TLS): a reachable provider connects in well under
    a second; 10 s covers a slow DNS or a cold proxy."""
    idleSeconds: float = Field(default=60.0, gt=0, le=3600)
    """The longest the provider may stay silent: until its answer starts, and between
    two chunks of it. A silent stream fails the attempt (retried like a 5xx). 60 s is
    far above a healthy server's gap between tokens; a server that reads a long prompt
    slowly (a CPU-only one) or a model that reasons long before its first token may need
    more."""


class ProviderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ProviderType = ProviderType.OPENAI
    baseUrl: str = Field(min_length=1)
    apiKeyEnv: str | None = None
    maxTokens: int | None = Field(default=None, ge=1)
    """The most tokens one answer may have (``anthropic``: the API requires a limit;
    unset, ``anthropic_models.MAX_TOKENS``; thinking's budget comes on top)."""
    retry: RetrySpec = Field(default_factory=RetrySpec)
    timeouts: TimeoutSpec = Field(default_factory=TimeoutSpec)
    pricing: dict[str, Price] = Field(default_factory=dict)
    """Model name (without the provider) → its prices in USD per million tokens; a model
    left out has its tokens counted and no cost (docs/decisions/0114)."""


class ProvidersFile(RootModel[dict[str, ProviderSpec]]):
    pass


@dataclass(frozen=True)
class Provider:
    name: str
    spec: ProviderSpec

    @property
    def api_key(self) -> str:
        """The key from the environment; servers that need none get a placeholder."""
        if self.spec.apiKeyEnv is None:
            return "unused"
        return os.environ.get(self.spec.apiKeyEnv, "")


@dataclass(frozen=True)
class ModelName:
    provider: Provider
    model: str

    @property
    def price(self) -> Price | None:
        """The model's prices from its provider's ``pricing``; None when it has none."""
        return self.provider.spec.pricing.get(self.model)

    @property
    def label(self) -> str:
        """``provider/model``, as a Submission names it."""
        return f"{self.provider.name}/{self.model}"

    @property
    def where(self) -> str:
        """How a message names it: the provider, its URL and the model."""
        return (
            f"provider {self.provider.name!r} ({self.provider.spec.baseUrl}), model {self.model!r}"
        )


class Providers:
    def __init__(self, providers: dict[str, Provider]) -> None:
        self._providers = providers

    @classmethod
    def load(cls, path: Path | None) -> Providers:
        if path is None:
            return cls({})
        try:
            text = path.read_text()
        except OSError as error:
            raise ConfigError(f"cannot read the providers file {path}: {error}") from error
        return cls.parse(text, f"providers file {path}")

    @classmethod
    def parse(cls, text: str, source: str) -> Providers:
        """The providers ``text`` defines; a ConfigError naming ``source`` and the first
        key at fault otherwise (also for the operator, which checks the file it hands
        every sandbox before it starts)."""
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"cannot read the {source}: {error}") from error
        try:
            parsed = ProvidersFile.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ConfigError(f"{source}: {where}: {first['msg']}") from error
        return cls({name: Provider(name, spec) for name, spec in parsed.root.items()})

    @property
    def names(self) -> list[str]:
        return sorted(self._providers)

    def resolve(self, name: str) -> ModelName:
        """``provider/model`` to its provider; a WireError naming ``model`` otherwise."""
        provider_name, slash, model = name.partition("/")
        if not slash or not model:
            raise WireError(f"model {name!r} must be named 'provider/model'", field="model")
        provider = self._providers.get(provider_name)
        if provider is None:
            known = ", ".join(self.names) or "none are configured"
            raise WireError(
                f"unknown model provider {provider_name!r} (known: {known}); "
                "add it to the providers file",
                field="model",
            )
        return ModelName(provider, model)
