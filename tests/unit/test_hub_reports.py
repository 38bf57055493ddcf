"""The hub's keeping of finalizers' sweep reports (``Hub.swept`` / ``sweep_done``).

Cases:
- a report is taken once: the second ``sweep_done`` finds nothing;
- a report nobody took within ``REPORT_KEEP_S`` (its Run was deleted) is dropped when the
  next one comes, and a fresh one stays.
"""

from __future__ import annotations

from kubeturn.k8s.hub import REPORT_KEEP_S, Hub
from kubeturn.orchestrator.actor import Settled
from kubeturn.settings import OperatorSettings
from kubeturn_harness.wire import Outcome

SETTLED = [Settled("s1", Outcome.ENDED)]


def make_hub(now: list[float] | None = None) -> Hub:
    hub = Hub(kube=None, settings=OperatorSettings())  # type: ignore[arg-type]
    if now is not None:
        hub.clock = lambda: now[0]
    return hub


def test_a_report_is_taken_once() -> None:
    hub = make_hub()
    hub.swept(("ns", "r-t1"), SETTLED)
    assert hub.sweep_done(("ns", "r-t1")) == SETTLED
    assert hub.sweep_done(("ns", "r-t1")) is None


def test_a_report_nobody_took_is_dropped_after_the_keep() -> None:
    now = [1000.0]
    hub = make_hub(now)
    hub.swept(("ns", "gone-t1"), SETTLED)
    now[0] += REPORT_KEEP_S / 2
    hub.swept(("ns", "live-t1"), SETTLED)
    now[0] += REPORT_KEEP_S / 2 + 1
    hub.swept(("ns", "live-t2"), SETTLED)

    assert hub.sweep_done(("ns", "gone-t1")) is None
    assert hub.sweep_done(("ns", "live-t1")) == SETTLED
    assert hub.sweep_done(("ns", "live-t2")) == SETTLED
    assert hub.sweeps == {}
