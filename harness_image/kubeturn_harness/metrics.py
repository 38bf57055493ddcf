"""Prometheus metrics of one Harness process, on a registry of its own (served at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubeturn_harness.wire import Usage

SWEEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Sweep → settled is milliseconds on a healthy pod; the tail up to the 10 s wait shows."""


class HarnessMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.admitted = Counter(
            "kubeturn_harness_submissions_admitted",
            "Submissions admitted, by input policy.",
            ["policy"],
            registry=self.registry,
        )
        self.settled = Counter(
            "kubeturn_harness_submissions_settled",
            "Submissions settled, by outcome and error type.",
            ["outcome", "error"],
            registry=self.registry,
        )
        self.running = Gauge(
            "kubeturn_harness_runs_active",
            "Submissions whose run is under way or waiting for its sweep.",
            registry=self.registry,
        )
        self.model_requests = Counter(
            "kubeturn_harness_model_requests",
            "Model requests sent to providers.",
            registry=self.registry,
        )
        self.requests_after_end = Counter(
            "kubeturn_harness_model_requests_after_turn_end",
            "Model requests a run was about to start after its Submission had settled (its "
            "Turn had ended); refused, never sent. kubeturn's guarantee holds while it is 0.",
            registry=self.registry,
        )
        self.tokens = Counter(
            "kubeturn_harness_model_tokens",
            "Tokens providers reported, by Agent, model ('provider/model') and kind "
            "(prompt, completion, cache_read, cache_write; the cache kinds are part of "
            "prompt). The namespace is the scraped Pod's.",
            ["agent", "model", "kind"],
            registry=self.registry,
        )
        self.cost = Counter(
            "kubeturn_harness_model_cost_usd",
            "What model requests cost in USD at the providers file's prices, by Agent and "
            "model; requests of a model with no price add nothing.",
            ["agent", "model"],
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "kubeturn_harness_tool_calls",
            "Working-tool calls run, by tool.",
            ["tool"],
            registry=self.registry,
        )
        self.tool_sessions = Counter(
            "kubeturn_harness_tool_sessions",
            "Toolbox sessions opened for Submissions, by the Landlock ABI that confined "
            "them (0: none; the kernel has no Landlock).",
            ["landlock"],
            registry=self.registry,
        )
        self.picks = Counter(
            "kubeturn_harness_picks",
            "Menu calls, by what became of them (delivered, turn-complete, stale, refused, ...).",
            ["result"],
            registry=self.registry,
        )
        self.sweeps = Counter(
            "kubeturn_harness_sweeps",
            "Sweeps received, by whether they settled anything.",
            ["settled"],
            registry=self.registry,
        )
        self.in_memory = Gauge(
            "kubeturn_harness_conversations_in_memory",
            "Conversations held in memory; the others are read back from their logs.",
            registry=self.registry,
        )
        self.evicted = Counter(
            "kubeturn_harness_conversations_evicted",
            "Idle conversations dropped from memory.",
            registry=self.registry,
        )
        self.loaded = Counter(
            "kubeturn_harness_conversations_loaded",
            "Conversations read back from their logs (on start, and when asked for again).",
            registry=self.registry,
        )
        self.sweep_seconds = Histogram(
            "kubeturn_harness_sweep_to_settled_seconds",
            "From a sweep's arrival to the settlement it caused being recorded.",
            buckets=SWEEP_BUCKETS,
            registry=self.registry,
        )

    def account(self, agent: str, model: str, usage: Usage) -> None:
        """Count one model request's tokens and cost. Labels are the Agent's and the
        model's names, both few per Harness: no Run, Turn or Submission names."""
        for kind, count in (
            ("prompt", usage.promptTokens),
            ("completion", usage.completionTokens),
            ("cache_read", usage.cacheReadTokens),
            ("cache_write", usage.cacheWriteTokens),
        ):
            if count:
                self.tokens.labels(agent=agent, model=model, kind=kind).inc(count)
        if usage.cost is not None:
            self.cost.labels(agent=agent, model=model).inc(float(usage.cost))
