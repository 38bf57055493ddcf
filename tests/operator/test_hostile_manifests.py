"""Hostile Runs against the real operator (kopf, in a thread of its own, as the chart's
ServiceAccount) and the strict API emulator: each is refused with its path or runs
harmlessly, while the operator stays up and serves ordinary Runs to their end.

One operator serves the whole module's Runs at once (one start, a few seconds in all):
- nested as deep as the API server stores (10,000 levels in ``spec.input``), states
  nested 2,000 deep, a payload schema and an unknown field nested past their bounds:
  ``Ready=False``, ``Invalid``, naming the path and the bound (ADR 0050);
- near the API server's size (1.4 MiB of input; 5,000 keys): ``TooLarge``;
- 5,000 states: loaded (off the event loop) and run to ``Succeeded``;
- long strings (a 60,000-character state name; a guard of 8,000 terms, 117 KiB), an unknown CEL
  function, a sum that overflows, a double that is not finite: refused at the path, or
  the Run ``Failed`` saying which expression failed;
- absurd durations (``10000000000d``, ``-5s``, 400 digits of hours, ``NaNs``): refused
  at the timer's path;
- odd unicode in state and event names (RTL marks, NUL, U+FFFF, emoji), where the CRD
  admits any key: refused with the naming rule, or run.
An ordinary Run (a 100 ms timer) runs to ``Succeeded`` before the hostile Runs are created
and another after they all have their verdict; the operator's thread never ended.
"""

from __future__ import annotations

import asyncio
import copy
import io
import itertools
import json
import string
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import kmock
import pytest

from kubeturn.api.depth import MAX_SPEC_DEPTH, MAX_STATE_DEPTH, MAX_VALUE_DEPTH
from kubeturn.k8s import runs
from tests.operator import emulator
from tests.operator.installation import Installation
from tests.operator.operator_support import (
    GROUP_VERSION,
    NAMESPACE,
    RUNS,
    OperatorThread,
    eventually,
    fail_on_logged_errors,
    settings,
)

Body = dict[str, Any]
FINAL: Body = {"type": "final"}
VERDICT_S = 60.0
"""How long every hostile Run may take to get its verdict (all at once, on 2 busy cores)."""


def run(name: str, machine: Body, **spec: Any) -> Body:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Run",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"agents": {}, "machine": machine, **spec},
    }


def nested(depth: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": … leaf}}``, ``depth`` objects deep."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def to(target: str, **more: Any) -> Body:
    return {"initial": "a", "states": {"a": {"always": {"target": target, **more}}, "b": FINAL}}


def short_name(index: int) -> str:
    """``a``, ``b``, … ``z``, ``ba``, …: the shortest state names, so 5,000 states fit
    the operator's spec bound."""
    letters = string.ascii_lowercase
    name = ""
    while True:
        name = letters[index % 26] + name
        index //= 26
        if index == 0:
            return name


def many_states(count: int) -> Body:
    """``count`` states in a chain by the event ``n``; the first goes to the last at once."""
    names = [short_name(index) for index in range(count)]
    states: Body = {name: {"on": {"n": after}} for name, after in itertools.pairwise(names)}
    states[names[0]]["always"] = names[-1]
    states[names[-1]] = FINAL
    return {"initial": names[0], "states": states}


def deep_states(depth: int) -> Body:
    state: Body = FINAL
    for _ in range(depth - 1):
        state = {"initial": "a", "states": {"a": state}}
    return {"initial": "a", "states": {"a": state}}


def ordinary(name: str) -> Body:
    return run(name, {"initial": "wait", "states": {"wait": {"after": {"100ms": "b"}}, "b": FINAL}})


@dataclass(frozen=True)
class Case:
    body: Body
    reason: str | None
    """``Ready=False``'s reason; None for a Run that runs to ``phase``."""
    said: str
    """What the condition's (or the failed Run's) message holds."""
    phase: str | None = None


ODD = "\u200f\u0000x"
CASES: dict[str, Case] = {
    "deep-input": Case(
        run("deep-input", to("b"), input=nested(emulator.MAX_JSON_DEPTH - 3)),
        "Invalid",
        f"spec.input.a.a.a.a.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH} levels",
    ),
    "deep-states": Case(
        run("deep-states", deep_states(300)),
        "Invalid",
        "spec.machine.states.a.states.a.states.a.states.a…: states nested deeper than "
        f"{MAX_STATE_DEPTH} levels",
    ),
    "deep-schema": Case(
        run("deep-schema", to("b", schema=nested(100, {}))),
        "Invalid",
        f"spec.machine.states.a.always.schema.a.a.a.a…: nested deeper than {MAX_VALUE_DEPTH}",
    ),
    "deep-unknown": Case(
        run("deep-unknown", {**to("b"), "extra": nested(1000)}),
        "Invalid",
        f"spec.machine.extra.a.a.a.a.a.a.a…: nested deeper than {MAX_SPEC_DEPTH} levels",
    ),
    "large": Case(
        run("large", to("b"), input={"document": "x" * (1400 * 1024)}),
        "TooLarge",
        "bytes of JSON, over the",
    ),
    "many-keys": Case(
        run("many-keys", to("b"), input={f"key-{index:016d}": index for index in range(5_000)}),
        "TooLarge",
        "bytes of JSON, over the",
    ),
    "many-states": Case(run("many-states", many_states(5000)), None, "", "Succeeded"),
    "long-name": Case(
        run("long-name", {"initial": "s" * 60_000, "states": {"s" * 60_000: FINAL}}),
        "Invalid",
        "(at most 63 characters)",
    ),
    "long-guard": Case(
        run("long-guard", to("b", guard=" && ".join(["input.x > 0"] * 8_000)), input={"x": 1}),
        None,
        "",
        "Succeeded",
    ),
    "unknown-function": Case(
        run("unknown-function", to("b", guard="frobnicate(input.x)"), input={"x": 1}),
        None,
        "frobnicate",
        "Failed",
    ),
    "overflow": Case(
        run("overflow", to("b", guard="input.n + 1 > 0"), input={"n": 2**63 - 1}),
        None,
        "overflow",
        "Failed",
    ),
    "not-finite": Case(
        run(
            "not-finite",
            to("b", assign={"context.n": "input.n * 10.0"}),
            input={"n": 1.7e308},
        ),
        None,
        "not a finite number",
        "Failed",
    ),
    "days": Case(
        run(
            "days", {"initial": "a", "states": {"a": {"after": {"10000000000d": "b"}}, "b": FINAL}}
        ),
        "Invalid",
        "spec.machine.states.a.after.10000000000d: unknown unit 'd'",
    ),
    "negative": Case(
        run("negative", {"initial": "a", "states": {"a": {"after": {"-5s": "b"}}, "b": FINAL}}),
        "Invalid",
        "spec.machine.states.a.after.-5s: a duration cannot carry a sign",
    ),
    "endless": Case(
        run(
            "endless",
            {"initial": "a", "states": {"a": {"after": {"9" * 400 + "h": "b"}}, "b": FINAL}},
        ),
        "Invalid",
        "is longer than the longest duration, 2562047h",
    ),
    "nan": Case(
        run("nan", {"initial": "a", "states": {"a": {"after": {"NaNs": "b"}}, "b": FINAL}}),
        "Invalid",
        "spec.machine.states.a.after.NaNs: 'NaNs' is not a duration",
    ),
    "far-timer": Case(
        run(
            "far-timer",
            {
                "initial": "a",
                "states": {"a": {"after": {"2562047h": "b"}, "always": "b"}, "b": FINAL},
            },
        ),
        None,
        "",
        "Succeeded",
    ),
    "odd-names": Case(
        run("odd-names", {"initial": ODD, "states": {ODD: FINAL, "\ufffd\uffff": FINAL}}),
        "Invalid",
        "must start with a letter, digit or '_'",
    ),
    "emoji": Case(
        run(
            "emoji",
            {
                "initial": "a",
                "states": {"a": {"on": {"🤖\u200f\u0000": "b"}, "always": "b"}, "b": FINAL},
            },
        ),
        None,
        "",
        "Succeeded",
    ),
}


@pytest.fixture
async def operator(
    installation: Installation, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[OperatorThread]:
    """The operator alone (no Workspace: these Runs invoke nothing); the test fails if it
    logged an error."""
    started = OperatorThread(settings(installation, providers_yaml="{}\n"), installation.kubeconfig)
    await started.start()
    try:
        yield started
    finally:
        await started.stop()
    fail_on_logged_errors(caplog, [])


def status(k8s: emulator.KubernetesApi, name: str) -> Body:
    """The Run's status, read without copying the whole object (``read`` copies it: a
    megabyte each time for the largest Runs here, many times a second)."""
    key = (kmock.resource(RUNS), NAMESPACE, name)
    if key not in k8s.objects or k8s.objects[key].deleted:
        return {}
    stored = k8s.objects[key]
    return copy.deepcopy(stored.raw.get("status") or {})


def ready(k8s: emulator.KubernetesApi, name: str) -> Body:
    found = [c for c in status(k8s, name).get("conditions", []) if c["type"] == "Ready"]
    return found[0] if found else {}


def phase(k8s: emulator.KubernetesApi, name: str) -> str | None:
    return status(k8s, name).get("phase")


async def succeeds(k8s: emulator.KubernetesApi, create: Callable[[Body], Any], name: str) -> None:
    await create(ordinary(name))
    await eventually(lambda: phase(k8s, name) == "Succeeded", f"the Run {name} to succeed")


async def test_hostile_runs_are_refused_or_run_harmlessly_while_the_operator_serves(
    k8s: emulator.KubernetesApi, k8s_client: aiohttp.ClientSession, operator: OperatorThread
) -> None:
    path = f"/apis/{GROUP_VERSION}/namespaces/{NAMESPACE}/runs"

    async def create(body: Body) -> None:
        data = io.BytesIO(json.dumps(body).encode())  # aiohttp warns of large raw bytes
        async with k8s_client.post(
            path, data=data, headers={"Content-Type": "application/json"}
        ) as answer:
            assert answer.status == 201, (body["metadata"]["name"], await answer.text())

    await succeeds(k8s, create, "ordinary-before")
    # The largest spec the operator drives takes its 5,000 states within the bound.
    size = len(json.dumps(CASES["many-states"].body["spec"], separators=(",", ":")).encode())
    assert size <= runs.MAX_SPEC_BYTES, size
    await asyncio.gather(*(create(case.body) for case in CASES.values()))

    def verdict(name: str, case: Case) -> bool:
        if case.reason is not None:
            return ready(k8s, name).get("reason") == case.reason
        return phase(k8s, name) == case.phase

    def pending() -> str:
        return ", ".join(
            f"{name}: {phase(k8s, name)} {ready(k8s, name)}"
            for name, case in CASES.items()
            if not verdict(name, case)
        )

    await eventually(
        lambda: all(verdict(name, case) for name, case in CASES.items()),
        "every hostile Run's verdict",
        timeout=VERDICT_S,
        describe=pending,
    )
    for name, case in CASES.items():
        condition = ready(k8s, name)
        if case.reason is not None:
            assert condition["status"] == "False", (name, condition)
            assert case.said in condition["message"], (name, condition["message"][:500])
            assert phase(k8s, name) in (None, "Pending"), name
        elif case.phase == "Failed":
            message = status(k8s, name).get("message", "")
            assert case.said in message, (name, message[:500])
    assert operator.running, "the operator's thread ended"
    await succeeds(k8s, create, "ordinary-after")
    assert operator.running, "the operator's thread ended"
