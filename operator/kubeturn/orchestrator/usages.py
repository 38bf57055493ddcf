"""A Run's usage: tokens and cost summed per Agent slot and over the Run (ADR 0114).

Each Harness prices its model requests and reports the usage with every Submission's
settlement; a Turn's record sums its Submissions'. The core adds each recorded Turn's to
its Agent slot's sum, which outlives the bounded Turn history. A sum holds a cost only
when every part of it had one: a model with no price leaves its Agent (and the Run)
showing tokens only, never a cost that left it out. Nothing here does IO.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from kubeturn.api.status import RunUsage
from kubeturn_harness.wire import Usage


def add(sums: Mapping[str, Usage], agent: str, usage: Usage | None) -> dict[str, Usage]:
    """``sums`` with ``usage`` added to ``agent``'s; as they were when it is None."""
    if usage is None:
        return dict(sums)
    earlier = sums.get(agent)
    return {**sums, agent: usage if earlier is None else earlier.plus(usage)}


def run_usage(sums: Mapping[str, Usage]) -> RunUsage | None:
    """What ``Run.status.usage`` shows of the sums; None before any Turn used tokens."""
    if not sums:
        return None
    total = functools.reduce(Usage.plus, (sums[agent] for agent in sorted(sums)))
    return RunUsage(
        tokens=total.promptTokens + total.completionTokens,
        cost=total.cost,
        total=total,
        agents=dict(sorted(sums.items())),
    )
