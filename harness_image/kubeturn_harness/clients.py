"""One SDK client per provider, made at its provider's first request and closed with its
adapter: a client holds a connection pool, and a provider is called again and again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from kubeturn_harness.providers import Provider


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class Clients(Generic[C]):
    def __init__(self, make: Callable[[Provider], C]) -> None:
        self._make = make
        self._clients: dict[str, C] = {}

    def get(self, provider: Provider) -> C:
        client = self._clients.get(provider.name)
        if client is None:
            client = self._clients[provider.name] = self._make(provider)
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
