"""A Run's usage: tokens and cost summed per Agent slot and over the Run (ADR 0114).

Each Harness prices its model requests and reports the usage with every Submission's
settlement; a Turn's record sums its Submissions'. The core adds each recorded Turn's to
its Agent slot's sum, which outlives the bounded Turn history. A sum holds a cost only
when every part of it had one: a model with no price leaves its Agent (and the Run)
showing tokens only, never a cost that left it out. ``shown_cost`` is how the CLI's tables
and the console show a cost. Nothing here does IO.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from decimal import Decimal

from kubeturn.api.status import LimitUse, RunUsage, token_total
from kubeturn_harness.wire import Usage

COST_SHOWN = Decimal("0.0001")
"""Costs are shown rounded to 1/100 of a cent (``-o json`` and the statuses have them whole):
a model request costs fractions of a cent, a Run dollars."""


def add(sums: Mapping[str, Usage], agent: str, usage: Usage | None) -> dict[str, Usage]:
    """``sums`` with ``usage`` added to ``agent``'s; as they were when it is None."""
    if usage is None:
        return dict(sums)
    earlier = sums.get(agent)
    return {**sums, agent: usage if earlier is None else earlier.plus(usage)}


def run_usage(sums: Mapping[str, Usage], limits: Sequence[LimitUse] = ()) -> RunUsage | None:
    """What ``Run.status.usage`` shows of the sums, and of the limits' standing; None
    before any Turn used tokens."""
    if not sums:
        return None
    total = functools.reduce(Usage.plus, (sums[agent] for agent in sorted(sums)))
    return RunUsage(
        tokens=token_total(total),
        cost=total.cost,
        total=total,
        agents=dict(sorted(sums.items())),
        limits=list(limits),
    )


def shown_cost(cost: str) -> str:
    """A cost (decimal USD text, ``Usage.cost``) as a person reads it: ``$0.0123``; one
    that rounds to nothing, ``<$0.0001`` rather than a cost of 0."""
    value = Decimal(cost)
    shown = value.quantize(COST_SHOWN)
    if value and not shown:
        return f"<${COST_SHOWN}"
    return f"${shown}"
