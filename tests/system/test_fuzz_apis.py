"""Both HTTP APIs fuzzed from their own OpenAPI documents (schemathesis, ADR 0055).

A live System serves on 127.0.0.1: the Orchestrator API over a real core and actor
holding a Run whose Agent's Turn is live (its model request held), and the Harness that
runs that Turn. For every operation of each document, schemathesis generates requests
that fit the document (positive) and requests that do not (negative), half of them aimed
at the live Turn's Instance ID and Agent so that they reach a real conversation and a
real actor rather than a 404, and sends them with the API's token.

Cases, per API:
- no response is a 5xx (not even a documented 503: the toolbox and the core are up);
- every response's status, content type, headers and body are the document's;
- a request that does not fit the document is refused with a 4xx.

Bounded: a fixed number of examples per operation and mode, derandomized (the same
requests every run), no example database; about 20 s per API on 2 cores. What was sent
is printed (``-s``). ``KUBETURN_FUZZ_SCALE=10`` multiplies the examples for a longer run
by hand; CI runs the default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import strategies
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from kubeturn.orchestrator import openapi as orchestrator_openapi
from kubeturn_harness import openapi as harness_openapi
from kubeturn_harness.wire import MAX_EXEC_S
from tests.harness.support import script
from tests.system.conftest import StartSystem
from tests.system.support import HARNESS_TOKEN, MACHINES, WORKSPACE_TOKEN

HELD = "Make the tests pass."
SCALE = int(os.environ.get("KUBETURN_FUZZ_SCALE", "1"))
HARNESS_EXAMPLES = 15 * SCALE
"""Examples per operation and mode: the Harness's 11 operations, each positive and
negative, make about 250 requests (the ones that take no input have no negative cases);
``KUBETURN_FUZZ_SCALE`` multiplies them for a longer search."""
ORCHESTRATOR_EXAMPLES = 70 * SCALE
"""The Orchestrator API's 3 operations that take input make about 280 requests."""
COMMAND_S = 1.0
"""The longest an ``/exec`` the fuzzer makes may run: its command is random text."""

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@dataclass
class Fuzzed:
    """What one API's fuzz run sent, and what it found."""

    sent: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    """Each operation and mode: requests sent, and the time they took."""


def fuzz(
    document: dict[str, Any],
    base_url: str,
    token: str,
    live: dict[str, str],
    examples: int,
) -> Fuzzed:
    """Fuzz every operation of ``document`` at ``base_url``; blocking (run it in a thread
    while the event loop serves the APIs)."""
    fuzzed = Fuzzed()
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {token}"
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            source = document if mode is GenerationMode.POSITIVE else without_security(document)
            schema = schemathesis.openapi.from_dict(source)
            for result in schema.get_all_operations():
                operation = result.ok()
                if mode is GenerationMode.NEGATIVE and not _breakable(source, operation):
                    continue
                aimed = {k: v for k, v in live.items() if f"{{{k}}}" in operation.path}
                cases = operation.as_strategy(mode)
                if aimed:
                    cases = strategies.one_of(
                        cases, operation.as_strategy(mode, path_parameters=aimed)
                    )
                checks = CHECKS + ([negative_data_rejection] if mode.is_negative else [])
                before, started = fuzzed.sent, time.monotonic()
                _examples(cases, checks, examples, base_url, session, fuzzed)
                fuzzed.operations.append(
                    f"{operation.label} {mode.value}: {fuzzed.sent - before} requests, "
                    f"{time.monotonic() - started:.1f} s"
                )
    return fuzzed


def _examples(
    cases: strategies.SearchStrategy[Any],
    checks: list[Any],
    examples: int,
    base_url: str,
    session: requests.Session,
    fuzzed: Fuzzed,
) -> None:
    @hypothesis.settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=cases)
    def send(case: Any) -> None:
        if case.operation.path == "/exec" and isinstance(case.body, dict):
            _bound_command(case.body)
        response = case.call(base_url=base_url, session=session)
        fuzzed.sent += 1
        status = response.status_code
        fuzzed.statuses[status] = fuzzed.statuses.get(status, 0) + 1
        try:
            case.validate_response(response, checks=checks)
        except FailureGroup as failure:  # each is kept, and all are reported at the end
            fuzzed.failures.append(f"{case.method} {case.formatted_path}: {failure}")

    # Nothing to generate is no failure: a negative case of an operation with no input.
    with contextlib.suppress(hypothesis.errors.Unsatisfiable):
        send()


def _bound_command(body: dict[str, Any]) -> None:
    """Make an ``/exec`` the fuzzer sends run at most ``COMMAND_S`` (its command is random
    text, its default limit 600 s), leaving a limit the schema refuses as it is."""
    seconds = body.setdefault("timeoutSeconds", COMMAND_S)
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if number and 0 < seconds <= MAX_EXEC_S:
        body["timeoutSeconds"] = min(seconds, COMMAND_S)


def _breakable(document: dict[str, Any], operation: Any) -> bool:
    """Whether the operation takes anything a request could get wrong: a body, a query
    parameter, or a path parameter with a constraint (any text fits a bare string)."""
    described = document["paths"][operation.path][operation.method.lower()]
    parameters = described.get("parameters", [])
    return "requestBody" in described or any(
        p["in"] != "path" or p["schema"] != {"type": "string"} for p in parameters
    )


def without_security(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with no security scheme, for the negative cases: they then break the
    parameters and the body (each sent with the token), not the token, which
    ``test_hostile_headers`` and the Harness's wire tests cover."""
    paths = {
        path: {
            method: {k: v for k, v in operation.items() if k != "security"}
            for method, operation in item.items()
        }
        for path, item in document["paths"].items()
    }
    return {**document, "security": [], "paths": paths}


async def _live_system(system: StartSystem) -> tuple[Any, str, str]:
    world = await system(script(HELD, {"text": "Working", "hold": True}), long_poll_s=0.2)
    await world.start_run(MACHINES / "exec-pick.yaml")
    await world.wait_held(HELD)
    (turn,) = world.core.live_turns()
    return world, turn.agent, turn.instanceId


def _report(api: str, fuzzed: Fuzzed, seconds: float) -> None:
    statuses = ", ".join(f"{s}: {n}" for s, n in sorted(fuzzed.statuses.items()))
    print(f"\n{api}: {fuzzed.sent} requests in {seconds:.1f} s ({statuses})")
    print("\n".join(fuzzed.operations))
    assert fuzzed.failures == [], "\n\n".join(fuzzed.failures[:10])


@pytest.mark.timeout(300)
async def test_the_orchestrator_api_answers_as_its_document_says(system: StartSystem) -> None:
    world, _, iid = await _live_system(system)
    started = time.monotonic()
    fuzzed = await asyncio.to_thread(
        fuzz,
        orchestrator_openapi.document(),
        world.api_url,
        WORKSPACE_TOKEN,
        {"iid": iid},
        ORCHESTRATOR_EXAMPLES,
    )
    _report("Orchestrator API", fuzzed, time.monotonic() - started)


@pytest.mark.timeout(300)
async def test_the_harness_answers_as_its_document_says(system: StartSystem) -> None:
    world, agent, iid = await _live_system(system)
    started = time.monotonic()
    fuzzed = await asyncio.to_thread(
        fuzz,
        harness_openapi.document(),
        world.harness_url,
        HARNESS_TOKEN,
        {"name": agent, "id": iid},
        HARNESS_EXAMPLES,
    )
    _report("Harness", fuzzed, time.monotonic() - started)
