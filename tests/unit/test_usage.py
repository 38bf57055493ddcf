"""Usage and cost (ADR 0114): prices from the providers file, sums that never invent a
cost, a Run's status that counts every Turn, and how the CLI shows them.

Cases:
- a price per million tokens: fresh prompt tokens at ``input``, cached ones at
  ``cacheRead``/``cacheWrite`` (the input price when left out), completion at
  ``output``, kept to 1e-8 USD; a model with no price gets no cost, never 0;
- ``pricing`` in the providers file is read per model; a negative price or an unknown
  key is refused naming its path;
- ``Usage.plus``: tokens field by field; a cost only when both parts have one;
- a Run's ``status.usage`` sums every recorded Turn per Agent slot and in all, beyond
  the 200 records its history keeps; a core restored from that status goes on counting
  from there; a Turn with no usage adds nothing;
- an AgentTurn's ``usage`` and ``tokens`` are written together: the sum of its
  Submissions' and its prompt and completion tokens, a cost only when each is priced,
  both None before any Submission settled;
- the CLI shows a cost as ``$0.0125`` (a tiny one as ``<$0.0001``, none as ``-``),
  ``kubeturn status`` the usage lines, tokens as in/out, and a transcript's settlement
  line the cost after the tokens, where there is one.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from kubeturn.api import agentturn, models
from kubeturn.api.status import SubmissionRecord
from kubeturn.local import view
from kubeturn.machine.load import load_run_yaml
from kubeturn.orchestrator import budgets, statuses, usages
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.transcripts import text
from kubeturn.transcripts.model import Entry, EntryKind
from kubeturn_harness.errors import ConfigError
from kubeturn_harness.pricing import Price, priced
from kubeturn_harness.providers import Providers
from kubeturn_harness.wire import Outcome, Usage
from tests.unit.cores import loaded, only, restored_from_status

PRICE = Price(input=Decimal("3"), output=Decimal("15"), cacheRead=Decimal("0.3"))


def test_a_price_costs_each_kind_of_token() -> None:
    usage = Usage(
        promptTokens=10_000, completionTokens=1_000, cacheReadTokens=6_000, cacheWriteTokens=1_000
    )
    # 3000 fresh * 3 + 6000 * 0.3 + 1000 written * 3 (input's) + 1000 * 15, per million
    assert PRICE.cost(usage) == Decimal("0.0288")
    assert priced(usage, PRICE).cost == "0.0288"
    assert Price(input=Decimal("0.01"), output=Decimal(0)).cost(Usage(promptTokens=1)) == Decimal(
        "0.00000001"
    )


def test_no_price_no_cost() -> None:
    usage = Usage(promptTokens=10, completionTokens=2)
    assert priced(usage, None) == usage
    assert priced(usage, None).cost is None


def test_pricing_is_read_per_model_from_the_providers_file() -> None:
    text = (
        "p:\n  baseUrl: http://127.0.0.1:1/v1\n"
        "  pricing:\n    big: {input: 3, output: 15, cacheRead: 0.3}\n"
    )
    providers = Providers.parse(text, "f")
    assert providers.resolve("p/big").price == PRICE
    assert providers.resolve("p/small").price is None
    assert models.providers_problem(text) is None


@pytest.mark.parametrize(
    ("pricing", "path"),
    [("{big: {input: -1, output: 1}}", "p.pricing.big.input"), ("{big: {in: 1}}", "p.pricing.big")],
)
def test_a_bad_price_is_refused_naming_its_path(pricing: str, path: str) -> None:
    text = f"p:\n  baseUrl: http://127.0.0.1:1/v1\n  pricing: {pricing}\n"
    with pytest.raises(ConfigError, match=rf"f: {path}"):
        Providers.parse(text, "f")


def test_a_sum_has_a_cost_only_when_every_part_has_one() -> None:
    a = Usage(promptTokens=5, completionTokens=1, cacheReadTokens=2, cost="0.1")
    b = Usage(promptTokens=7, completionTokens=3, cacheWriteTokens=4, cost="0.25")
    assert a.plus(b) == Usage(
        promptTokens=12, completionTokens=4, cacheReadTokens=2, cacheWriteTokens=4, cost="0.35"
    )
    assert a.plus(Usage(promptTokens=1)).cost is None
    assert Usage(promptTokens=1).plus(a).cost is None


class Turns:
    """The ``retrying`` machine (Agent slot ``a``): each Turn fails at once with
    ``usage`` and is asked again; one Turn every 3 s."""

    def __init__(self) -> None:
        self.core = RunCore(loaded("retrying"), workspace=None, new_id=lambda: "n")
        self.now = 1_700_000_000.0
        self.admit = only(self.core.start(self.now), Admit)

    def turn(self, usage: Usage | None) -> None:
        core, admit = self.core, self.admit
        submission = f"{admit.turn}-submission"
        core.admitted(admit.turn, submission, self.now + 1)
        effects = core.settled(admit.turn, submission, Outcome.FAILED, self.now + 2, usage=usage)
        sweep, self.admit = only(effects, Sweep), only(effects, Admit)
        core.swept(sweep.turn, {}, self.now + 3)
        self.now += 3


def test_a_runs_usage_counts_every_turn_beyond_its_history_and_survives_a_restore() -> None:
    run = Turns()
    for _ in range(250):
        run.turn(Usage(promptTokens=100, completionTokens=10, cacheReadTokens=40, cost="0.001"))
    run.turn(None)
    status = statuses.run_status(run.core.view(), run.core.snapshot())
    assert status.droppedTurns > 0
    assert status.usage is not None
    assert status.usage.tokens == 250 * 110
    assert status.usage.cost == "0.25"
    assert status.usage.agents == {"a": status.usage.total}
    assert status.usage.total.cacheReadTokens == 250 * 40

    restored = restored_from_status(run.core)
    run.core = restored
    run.turn(Usage(promptTokens=1, completionTokens=1))
    again = statuses.run_status(restored.view(), restored.snapshot()).usage
    assert again is not None
    assert (again.tokens, again.cost) == (250 * 110 + 2, None)


def test_an_agentturns_tokens_are_written_with_its_usage() -> None:
    def record(n: int, usage: Usage | None) -> SubmissionRecord:
        return SubmissionRecord(id=f"s{n}", admittedAt=0.0, usage=usage)

    priced = Usage(promptTokens=100, completionTokens=20, cacheReadTokens=60, cost="0.001")
    unpriced = Usage(promptTokens=5, completionTokens=1)
    assert agentturn.used([record(1, priced), record(2, None)]) == {
        "usage": priced,
        "tokens": 120,
    }
    both = agentturn.used([record(1, priced), record(2, unpriced)])
    assert (both["tokens"], both["usage"].cost) == (126, None)
    assert agentturn.used([record(1, None)]) == {"usage": None, "tokens": None}


def test_no_usage_yet_no_usage_shown() -> None:
    assert usages.run_usage({}) is None
    assert usages.add({}, "a", None) == {}


@pytest.mark.parametrize(
    ("cost", "shown"),
    [("0.0125", "$0.0125"), ("0.00000123", "<$0.0001"), ("12.34567", "$12.3457"), (None, "-")],
)
def test_a_cost_as_a_table_shows_it(cost: str | None, shown: str) -> None:
    assert view.cost({"promptTokens": 1, "cost": cost}) == shown


def test_status_shows_the_usage_in_all_and_per_agent() -> None:
    usage = usages.run_usage(
        {
            "reviewer": Usage(promptTokens=300, completionTokens=20, cost="0.002"),
            "coder": Usage(promptTokens=1000, completionTokens=90, cacheReadTokens=600),
        }
    )
    assert usage is not None
    lines = view.status_lines("r", {"phase": "Running", "usage": usage.model_dump(mode="json")})
    assert lines[4:] == [
        "usage: 1300/110 tokens in/out, 600 read from the cache",
        "  coder: 1000/90 tokens in/out, 600 read from the cache",
        "  reviewer: 300/20 tokens in/out, $0.0020",
    ]


def test_status_shows_how_much_of_each_limit_is_spent() -> None:
    run = load_run_yaml(
        """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: r}
spec:
  limits: {tokens: 5000, cost: "0.01", wallTime: 1h}
  agents:
    coder: {instructions: Code., limits: {tokens: 1000, perTurn: {tokens: 500}}}
    reviewer: {instructions: Review., limits: {cost: "1"}}
  machine:
    initial: done
    states: {done: {type: final}}
""",
        "r.yaml",
    )
    sums = {
        "coder": Usage(promptTokens=1000, completionTokens=90, cost="0.02"),
        "reviewer": Usage(promptTokens=300, completionTokens=20),
    }
    usage = usages.run_usage(sums, budgets.standing(run, sums))
    assert usage is not None
    lines = view.status_lines("r", {"phase": "Running", "usage": usage.model_dump(mode="json")})
    assert lines[7:] == [
        "limits:",
        "  spec.limits.tokens: 1410 of 5000 tokens",
        "  spec.limits.cost: no price of 0.01 USD, reached",
        "  spec.agents.coder.limits.tokens: 1090 of 1000 tokens, reached",
        "  spec.agents.reviewer.limits.cost: no price of 1 USD, reached",
    ]


def test_a_transcripts_settlement_line_shows_the_cost_where_there_is_one() -> None:
    def settled(usage: dict[str, Any]) -> list[str]:
        entry = Entry(
            turn="t1",
            number=1,
            state="s",
            agent="coder",
            kind=EntryKind.SETTLEMENT,
            at="2026-12-02T15:00:00Z",
            text="ended",
            data={"outcome": "ended", "usage": usage},
        )
        return text.lines(entry)

    assert settled({"promptTokens": 9, "completionTokens": 2, "cost": "0.0012"}) == [
        "  ■ ended · tokens 9/2 · $0.0012"
    ]
    assert settled({"promptTokens": 9, "completionTokens": 2}) == ["  ■ ended · tokens 9/2"]
