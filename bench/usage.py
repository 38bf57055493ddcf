"""Benchmark of usage accounting per model request (ADR 0114).

Prints, per model request:
1. the accounting alone, in-process: what ``tool_loop._account`` does for a request
   (price its usage, add it to the run's tally, count tokens and cost in the metrics),
   for a priced and an unpriced model, against what the Harness did before it (add the
   usage to the tally, nothing else);
2. a whole model request in a real Conversation (its log in a temporary directory, the
   tool loop, HarnessMetrics; a model that answers at once, ``PER_SUBMISSION`` requests
   per Submission, ``SUBMISSIONS`` Submissions a round): the time per request with
   accounting, and with ``_account`` swapped for the tally-only step it replaced,
   alternating rounds;
3. the Run core's side: ``usages.add``, once per recorded Turn;
4. limits (ADR 0117), per report of a running Submission's spend: the follower's part
   (``harness_client.Spend.seen`` and ``total`` for a stream event) and the core's
   (``RunCore.progressed`` with the spend, checking a Turn's, its slot's and the Run's
   limits with 3 Turns recorded), against ``progressed`` without a spend (a Run with no
   limits, which the follower tells only of stall progress).

Run: ``python bench/usage.py [--rounds N] [--json]``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.timing import per_call_us, scratch  # noqa: E402
from kubeturn.machine.load import load_run_yaml  # noqa: E402
from kubeturn.orchestrator import usages  # noqa: E402
from kubeturn.orchestrator.core import RunCore  # noqa: E402
from kubeturn.orchestrator.harness_client import Spend  # noqa: E402
from kubeturn_harness import pricing, tool_loop  # noqa: E402
from kubeturn_harness.clock import SystemClock  # noqa: E402
from kubeturn_harness.conversations import Conversation  # noqa: E402
from kubeturn_harness.metrics import HarnessMetrics  # noqa: E402
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial  # noqa: E402
from kubeturn_harness.pricing import Price  # noqa: E402
from kubeturn_harness.providers import Provider, Providers, ProviderSpec  # noqa: E402
from kubeturn_harness.sandbox.client import Toolbox  # noqa: E402
from kubeturn_harness.sandbox.protocol import Limits as ToolLimits  # noqa: E402
from kubeturn_harness.store import ConversationLog  # noqa: E402
from kubeturn_harness.tool_loop import Limits, RunEnv, Tally  # noqa: E402
from kubeturn_harness.wire import (  # noqa: E402
    AdmitRequest,
    AgentDefinition,
    EventType,
    Outcome,
    StreamEvent,
    SubmissionId,
    Usage,
    WorkspaceAccess,
)

PRICE = Price(input=Decimal("3"), output=Decimal("15"), cacheRead=Decimal("0.3"))
USAGE = Usage(promptTokens=12_345, completionTokens=678, cacheReadTokens=10_000)
PER_SUBMISSION = 4
"""Model requests per Submission in part 2: three cut at the output limit, then one that
completes (four cut ones in a row are a runaway)."""
SUBMISSIONS = 10
"""Submissions per round in part 2, one after another on one conversation."""
PROVIDERS = Providers(
    {"fake": Provider("fake", ProviderSpec(baseUrl="http://127.0.0.1:1", pricing={"big": PRICE}))}
)
NO_TOOLBOX = Toolbox(
    socket=Path("/nonexistent/toolbox.sock"),
    work_root=Path("/nonexistent"),
    limits=ToolLimits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8),
)


def accounting(number: int) -> dict[str, float]:
    metrics = HarnessMetrics()
    priced_model = PROVIDERS.resolve("fake/big")
    unpriced_model = PROVIDERS.resolve("fake/small")

    def account(model: Any) -> Callable[[], None]:
        tally = Tally()

        def step() -> None:
            used = pricing.priced(USAGE, model.price)
            tally.add(used)
            metrics.account("coder", model.label, used)

        return step

    before = Tally()
    return {
        "before_us": per_call_us(lambda: before.add(USAGE), number),
        "priced_us": per_call_us(account(priced_model), number),
        "unpriced_us": per_call_us(account(unpriced_model), number),
    }


class InstantModel:
    """Answers at once: ``PER_SUBMISSION - 1`` answers cut at the output limit (so the
    run asks again), then one that completes the Submission."""

    def __init__(self) -> None:
        self.requests = 0

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        self.requests += 1
        last = self.requests % PER_SUBMISSION == 0
        return ModelAnswer("more", [], USAGE, Finish.STOP if last else Finish.LENGTH)


def _tally_only(run: Any, model: Any, usage: Usage | None) -> Usage | None:
    """What the Harness did per request before ADR 0114."""
    run.tally.add(usage)
    return usage


async def one_round(directory: Path, number: int) -> float:
    """Seconds per model request over ``SUBMISSIONS`` Submissions on one conversation."""
    model = InstantModel()
    env = RunEnv(
        model=model,
        orchestrator=None,
        providers=PROVIDERS,
        clock=SystemClock(),
        metrics=HarnessMetrics(),
        toolbox=NO_TOOLBOX,
        limits=Limits(max_steps=64, max_identical_calls=4, surface_retry_s=0.1, pick_retry_s=0.1),
        default_model="fake/big",
    )
    log = ConversationLog(directory / str(number), "coder", f"i{number}", SystemClock())
    conversation = Conversation(log, env, sweep_wait_s=1.0)
    definition = AgentDefinition(instructions="You code.", workspace=WorkspaceAccess.NONE)
    started = time.perf_counter()
    for submission in range(SUBMISSIONS):
        request = AdmitRequest(prompt="Work.", definition=definition)
        conversation.admit(SubmissionId(f"s-{submission}"), request)
    while not conversation.idle:
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    await conversation.close()
    assert model.requests == SUBMISSIONS * PER_SUBMISSION, model.requests
    return elapsed / model.requests


async def requests(rounds: int, directory: Path) -> dict[str, float]:
    account = tool_loop._account
    with_, without = [], []
    for number in range(rounds):
        tool_loop._account = account  # type: ignore[assignment]
        with_.append(await one_round(directory / "with", number))
        tool_loop._account = _tally_only  # type: ignore[assignment]
        without.append(await one_round(directory / "without", number))
    tool_loop._account = account  # type: ignore[assignment]
    return {
        "request_with_us": statistics.median(with_) * 1e6,
        "request_without_us": statistics.median(without) * 1e6,
    }


def core(number: int) -> dict[str, float]:
    sums = {"coder": USAGE.model_copy(update={"cost": "1.5"}), "reviewer": USAGE}
    used = USAGE.model_copy(update={"cost": "0.0123"})
    return {"core_add_us": per_call_us(lambda: usages.add(sums, "coder", used), number)}


LIMITED = """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: limited}
spec:
  limits: {tokens: 100000000, cost: "1000", wallTime: 24h}
  agents:
    coder:
      instructions: Code.
      limits: {tokens: 50000000, perTurn: {tokens: 10000000, cost: "100", wallTime: 1h}}
  machine:
    initial: work
    states:
      work:
        invoke: {agent: {slot: coder, prompt: Work.}}
        on: {submit: {target: again, description: Again.}}
      again:
        invoke: {agent: {slot: coder, prompt: Again.}}
        on: {submit: {target: work, description: Again.}}
"""


def live_core(limited: bool) -> RunCore:
    """A core whose Turn ``t4`` is live with Submission ``s4``, three Turns recorded."""
    text = (
        LIMITED
        if limited
        else "\n".join(line for line in LIMITED.splitlines() if "limits:" not in line)
    )
    run = load_run_yaml(text, "bench")
    core = RunCore(run, workspace=None, new_id=lambda: "n")
    core.start(0.0)
    for turn in range(1, 4):
        core.admitted(f"t{turn}", f"s{turn}", 1.0)
        core.pick(core.turns[f"t{turn}"].instanceId, "submit", {}, 2.0)
        used = USAGE.model_copy(update={"cost": "0.01"})
        core.swept(f"t{turn}", {f"s{turn}": (Outcome.ENDED, used, None)}, 3.0)
    core.admitted("t4", "s4", 4.0)
    return core


def limits(number: int) -> dict[str, float]:
    spends = [USAGE.model_copy(update={"cost": f"0.{n:04d}"}) for n in range(1, 3)]
    limited, unlimited = live_core(True), live_core(False)
    counter = iter(range(10**9))

    def report() -> None:
        limited.progressed("t4", "s4", 5.0, spent=spends[next(counter) % 2])

    events = [
        StreamEvent(
            offset=0,
            type=EventType.MODEL_STREAMED,
            at="",
            data={"submissionId": "s4", "outputTokens": 64, "usage": {"completionTokens": 64}},
        ),
        StreamEvent(
            offset=1,
            type=EventType.MESSAGE_APPENDED,
            at="",
            data={"message": {"role": "assistant", "usage": USAGE.model_dump(mode="json")}},
        ),
    ]
    spend = Spend()

    def follow() -> None:
        spend.seen(events[next(counter) % 2])
        spend.total  # noqa: B018

    assert limited.watches_progress("t4")
    assert not unlimited.watches_progress("t4")
    return {
        "follower_us": per_call_us(follow, number),
        "core_limited_us": per_call_us(report, number),
        "core_unlimited_us": per_call_us(lambda: unlimited.progressed("t4", "s4", 5.0), number),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of each kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with scratch() as directory:
        figures = {
            **accounting(20_000),
            **asyncio.run(requests(args.rounds, Path(directory))),
            **core(20_000),
            **limits(20_000),
            "load": os.getloadavg()[0],
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"load average at the end: {figures['load']:.2f}")
    print("accounting alone, per request (µs):")
    print(f"  before (tally only)      {figures['before_us']:8.1f}")
    print(f"  priced model             {figures['priced_us']:8.1f}")
    print(f"  unpriced model           {figures['unpriced_us']:8.1f}")
    print(f"a whole model request in a Conversation, median of {args.rounds} (µs):")
    print(f"  with accounting          {figures['request_with_us']:8.1f}")
    print(f"  tally only               {figures['request_without_us']:8.1f}")
    print(f"the Run core, per recorded Turn: usages.add {figures['core_add_us']:.1f} µs")
    print("limits, per report of a running Submission's spend (µs):")
    print(f"  follower (Spend.seen)    {figures['follower_us']:8.1f}")
    print(f"  core, limits checked     {figures['core_limited_us']:8.1f}")
    print(f"  core, no limits          {figures['core_unlimited_us']:8.1f}")


if __name__ == "__main__":
    main()
