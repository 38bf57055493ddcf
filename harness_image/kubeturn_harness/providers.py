"""Model providers: the providers file, and resolving ``provider/model`` names.

The file (``KUBETURN_PROVIDERS``) is YAML mapping each provider name to
``{type: openai | anthropic, baseUrl, apiKeyEnv?, maxTokens?}``. API keys are read from
the named environment variables of the Harness process, never written to the file and
never passed to tools.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from kubeturn_harness.errors import ConfigError, WireError


class ProviderType(StrEnum):
    OPENAI = "openai"
    """Any OpenAI-compatible chat-completions server: OpenAI, vLLM, Ollama, LiteLLM."""
    ANTHROPIC = "anthropic"
    """Anthropic's Messages API (``baseUrl`` without ``/v1``), or a server that speaks it."""


class ProviderSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: ProviderType = ProviderType.OPENAI
    baseUrl: str = Field(min_length=1)
    apiKeyEnv: str | None = None
    maxTokens: int | None = Field(default=None, ge=1)
    """The most tokens one answer may have (``anthropic``: the API requires a limit;
    unset, ``anthropic_models.MAX_TOKENS``; thinking's budget comes on top)."""


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


class Providers:
    def __init__(self, providers: dict[str, Provider]) -> None:
        self._providers = providers

    @classmethod
    def load(cls, path: Path | None) -> Providers:
        if path is None:
            return cls({})
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read the providers file {path}: {error}") from error
        try:
            parsed = ProvidersFile.model_validate(raw)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ConfigError(f"providers file {path}: {where}: {first['msg']}") from error
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
