"""Benchmark of counting a model answer's output as it streams (``model-streamed``).

Prints, per output piece (one delta of text, reasoning or a tool call's arguments):
1. in-process, the count alone: ``Partial.delta`` with no hook; with the tool loop's
   hook (``tool_loop._Streaming``: the throttle of ``stream_progress``) before the
   request's first 64 pieces (a count and a comparison), and after them while 2 s have
   not passed (the clock asked too); what a text piece cost before (appending it);
2. one report: a due piece that writes the ``model-streamed`` event (priced, to the
   conversation's log in a temporary directory), per report;
3. the OpenAI adapter reading a stream of ``PIECES`` text chunks already parsed by the
   SDK (``openai_models._collect``), per chunk: with the tool loop's hook at its
   defaults, and with a ``Partial`` that has none (the count only); and, for scale, what
   the SDK spends parsing one such chunk from its JSON (``json.loads`` and building its
   model), which every chunk costs before the adapter sees it.

Run: ``python bench/streamed.py [--json]``. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from openai._models import construct_type  # noqa: E402
from openai.types.chat import ChatCompletionChunk  # noqa: E402

from bench.timing import per_call_us, scratch  # noqa: E402
from kubeturn_harness import openai_models, tool_loop  # noqa: E402
from kubeturn_harness.clock import SystemClock  # noqa: E402
from kubeturn_harness.history import SubmissionRecord  # noqa: E402
from kubeturn_harness.metrics import HarnessMetrics  # noqa: E402
from kubeturn_harness.models import Partial  # noqa: E402
from kubeturn_harness.pricing import Price  # noqa: E402
from kubeturn_harness.providers import Provider, Providers, ProviderSpec  # noqa: E402
from kubeturn_harness.sandbox.client import Toolbox  # noqa: E402
from kubeturn_harness.sandbox.protocol import Limits as ToolLimits  # noqa: E402
from kubeturn_harness.store import ConversationLog  # noqa: E402
from kubeturn_harness.tool_loop import Limits, RunEnv  # noqa: E402
from kubeturn_harness.wire import AdmitRequest, AgentDefinition, SubmissionId  # noqa: E402

PIECES = 20_000
"""Chunks of one streamed answer in part 3: a long one (a file written through a tool)."""
PROVIDERS = Providers(
    {
        "fake": Provider(
            "fake",
            ProviderSpec(
                baseUrl="http://127.0.0.1:1",
                pricing={"big": Price(input=Decimal("3"), output=Decimal("15"))},
            ),
        )
    }
)
MODEL = PROVIDERS.resolve("fake/big")
NO_TOOLBOX = Toolbox(
    socket=Path("/nonexistent/toolbox.sock"),
    work_root=Path("/nonexistent"),
    limits=ToolLimits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8),
)


def run_in(directory: Path, limits: Limits) -> tool_loop._Run:
    """A run of one Submission, its log in ``directory``, as the tool loop makes one."""
    env = RunEnv(
        model=None,  # type: ignore[arg-type]  # no request is made
        orchestrator=None,
        providers=PROVIDERS,
        clock=SystemClock(),
        metrics=HarnessMetrics(),
        toolbox=NO_TOOLBOX,
        limits=limits,
        default_model="fake/big",
    )
    definition = AgentDefinition(instructions="You code.")
    record = SubmissionRecord(
        SubmissionId("s-1"), AdmitRequest(prompt="Work.", definition=definition), "now"
    )
    log = ConversationLog(directory, "coder", "i-1", SystemClock())
    return tool_loop._Run(record, log, env, lambda: None, tool_loop.Tally())  # type: ignore[arg-type, return-value]


def defaults() -> Limits:
    return Limits(max_steps=64, max_identical_calls=4, surface_retry_s=0.1, pick_retry_s=0.1)


def counting(directory: Path, number: int) -> dict[str, float]:
    bare = Partial()
    hooked = Partial(on_delta=tool_loop._Streaming.of(run_in(directory / "a", defaults()), MODEL))
    hooked.on_delta.throttle.tokens = 10**12  # type: ignore[union-attr]  # never 64 pieces
    asking = Partial(on_delta=tool_loop._Streaming.of(run_in(directory / "b", defaults()), MODEL))
    asking.on_delta.throttle.tokens = 0  # type: ignore[union-attr]  # past 64 pieces
    asking.on_delta.throttle.seconds = 10**12  # type: ignore[union-attr]  # never 2 s
    text: list[str] = []
    figures = {
        "before_us": per_call_us(lambda: text.append("word "), number),
        "count_only_us": per_call_us(bare.delta, number),
        "hook_counting_us": per_call_us(hooked.delta, number),
        "hook_asking_clock_us": per_call_us(asking.delta, number),
    }
    every = Limits(**{**defaults().__dict__, "stream_progress_tokens": 1, "stream_progress_s": 0})
    reporting = Partial(on_delta=tool_loop._Streaming.of(run_in(directory / "c", every), MODEL))
    figures["report_us"] = per_call_us(reporting.delta, number // 20)
    return figures


def chunks() -> list[Any]:
    def parsed(delta: dict[str, Any], finish: str | None = None) -> Any:
        value = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "big",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return construct_type(type_=ChatCompletionChunk, value=value)

    return [parsed({"content": "word "}) for _ in range(PIECES)] + [parsed({}, "stop")]


async def stream(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def adapter(directory: Path, rounds: int) -> dict[str, float]:
    items = chunks()
    with_hook: list[float] = []
    without: list[float] = []
    for number in range(rounds):
        hook = tool_loop._Streaming.of(run_in(directory / f"r{number}", defaults()), MODEL)
        for partial, figures in ((Partial(on_delta=hook), with_hook), (Partial(), without)):
            started = time.perf_counter()
            await openai_models._collect(stream(items), partial)
            figures.append((time.perf_counter() - started) / len(items))
    raw = json.dumps(items[0].model_dump())
    return {
        "chunk_with_hook_us": statistics.median(with_hook) * 1e6,
        "chunk_without_hook_us": statistics.median(without) * 1e6,
        "sdk_parse_us": per_call_us(
            lambda: construct_type(type_=ChatCompletionChunk, value=json.loads(raw)), 20_000
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="streams of each kind")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with scratch() as directory:
        figures = {
            **counting(Path(directory), 200_000),
            **asyncio.run(adapter(Path(directory), args.rounds)),
            "load": os.getloadavg()[0],
        }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"load average at the end: {figures['load']:.2f}")
    print("per output piece, in-process (µs):")
    print(f"  before: the text appended      {figures['before_us']:8.3f}")
    print(f"  counted, no hook               {figures['count_only_us']:8.3f}")
    print(f"  the hook, before 64 pieces     {figures['hook_counting_us']:8.3f}")
    print(f"  the hook, the clock asked      {figures['hook_asking_clock_us']:8.3f}")
    print(f"one report written (µs): {figures['report_us']:.1f}")
    print(f"the OpenAI adapter per chunk, {PIECES} chunks, median of {args.rounds} (µs):")
    print(f"  with the hook                  {figures['chunk_with_hook_us']:8.3f}")
    print(f"  count only                     {figures['chunk_without_hook_us']:8.3f}")
    print(f"  the SDK parsing one chunk      {figures['sdk_parse_us']:8.3f}")


if __name__ == "__main__":
    main()
