"""kubeturn's guarantee, checked at the end of every scenario that runs a Harness: no
model request started after its Turn ended (ADR 0114).

A Harness counts each such request it refused in
``kubeturn_harness_model_requests_after_turn_end`` and logs it
(``tool_loop.REQUEST_AFTER_END``). The system tier reads the counter of each in-process
Harness; the operator tier reads every Harness process's log, since a restarted process
starts its counter again from 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kubeturn_harness.tool_loop import REQUEST_AFTER_END

COUNTER = "kubeturn_harness_model_requests_after_turn_end_total"


def check_counter(registry: CollectorRegistry) -> None:
    """Fail the test when the Harness of ``registry`` counted a request after its end."""
    counted = registry.get_sample_value(COUNTER) or 0
    if counted:
        pytest.fail(f"{counted:g} model request(s) started after their Turn ended ({COUNTER})")


def check_logs(logs: Iterable[Path]) -> None:
    """Fail the test when a Harness log says it refused a request after its end."""
    found = [
        f"{log}: {line}"
        for log in logs
        if log.exists()
        for line in log.read_text(errors="replace").splitlines()
        if REQUEST_AFTER_END in line
    ]
    if found:
        pytest.fail("model requests started after their Turn ended:\n" + "\n".join(found))
