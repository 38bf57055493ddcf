"""Prices of model tokens, and the cost of what a model request used (ADR 0114).

A provider's ``pricing`` in the providers file maps a model to its prices per million
tokens, in USD as a decimal. The Harness, which owns the providers file and sees every
request's usage, prices each request as it ends; the cost travels with the usage on the
conversation stream and in settlements, so the operator needs no price table of its own.
A request of a model with no price has no cost (never a cost of 0). Nothing here does IO.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from kubeturn_harness.wire import Usage, decimal_text

MILLION = Decimal(1_000_000)
COST_PLACES = Decimal("0.00000001")
"""Costs are kept to 1e-8 USD: one token of the cheapest model priced today is about
1e-8 USD, so no request's cost rounds to nothing."""


class Price(BaseModel):
    """USD per million tokens of one model. A cache price left out is the input price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: Decimal = Field(ge=0, description="Per million prompt tokens read fresh.")
    output: Decimal = Field(ge=0, description="Per million tokens the model generated.")
    cacheRead: Decimal | None = Field(
        default=None, ge=0, description="Per million prompt tokens read from the cache."
    )
    cacheWrite: Decimal | None = Field(
        default=None, ge=0, description="Per million prompt tokens written to the cache."
    )

    def cost(self, usage: Usage) -> Decimal:
        """The USD these tokens cost; ``promptTokens`` includes the cached ones."""
        fresh = max(usage.promptTokens - usage.cacheReadTokens - usage.cacheWriteTokens, 0)
        cache_read = self.input if self.cacheRead is None else self.cacheRead
        cache_write = self.input if self.cacheWrite is None else self.cacheWrite
        total = (
            fresh * self.input
            + usage.cacheReadTokens * cache_read
            + usage.cacheWriteTokens * cache_write
            + usage.completionTokens * self.output
        )
        return (total / MILLION).quantize(COST_PLACES)


def priced(usage: Usage, price: Price | None) -> Usage:
    """``usage`` with its cost when the model has a price; as it is otherwise."""
    if price is None:
        return usage
    return usage.model_copy(update={"cost": decimal_text(price.cost(usage))})
