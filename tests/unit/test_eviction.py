"""Which conversations the Harness drops from memory (``eviction.evictions``, ADR 0027).

Cases:
- an idle conversation untouched for more than the idle period is dropped; one touched
  exactly the idle period ago is kept;
- a busy conversation is never dropped, however long untouched, and busy ones do not
  count against the cap;
- beyond the cap, the least recently touched idle ones go, whatever order they come in;
- a cap of 0 drops every idle conversation;
- for any residents (hypothesis): nothing busy is dropped, at most ``keep_idle`` idle
  ones stay, none of them past its idle period, and every idle one kept was touched no
  earlier than every one dropped for the cap.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kubeturn_harness.eviction import Resident, evictions

IDLE_S = 60.0


def idle(key: str, touched: float) -> Resident[str]:
    return Resident(key, busy=False, touched=touched)


def busy(key: str, touched: float) -> Resident[str]:
    return Resident(key, busy=True, touched=touched)


def test_an_idle_conversation_goes_after_its_idle_period() -> None:
    residents = [idle("old", 0.0), idle("edge", 40.0), idle("new", 99.0)]
    assert evictions(residents, now=100.0, idle_s=IDLE_S, keep_idle=10) == ["old"]


def test_a_busy_conversation_stays_and_does_not_count_against_the_cap() -> None:
    residents = [busy("running", 0.0), busy("read", 1.0), idle("a", 90.0), idle("b", 95.0)]
    assert evictions(residents, now=100.0, idle_s=IDLE_S, keep_idle=2) == []


def test_beyond_the_cap_the_least_recently_touched_go() -> None:
    residents = [idle("c", 30.0), idle("a", 10.0), busy("x", 0.0), idle("d", 40.0), idle("b", 20.0)]
    assert sorted(evictions(residents, now=50.0, idle_s=IDLE_S, keep_idle=2)) == ["a", "b"]


def test_a_cap_of_zero_drops_every_idle_conversation() -> None:
    residents = [idle("a", 99.0), busy("b", 99.0), idle("c", 100.0)]
    assert sorted(evictions(residents, now=100.0, idle_s=IDLE_S, keep_idle=0)) == ["a", "c"]


residents = st.lists(
    st.builds(
        Resident,
        key=st.integers(0, 10_000),
        busy=st.booleans(),
        touched=st.floats(0.0, 1_000.0),
    ),
    unique_by=lambda r: r.key,
    max_size=40,
)


NOW = 2_000.0
"""Later than every drawn ``touched``."""


@given(residents, st.floats(0.0, 1_000.0), st.integers(0, 10))
def test_the_policy_holds_for_any_residents(
    found: list[Resident[int]], idle_s: float, keep_idle: int
) -> None:
    dropped = set(evictions(found, now=NOW, idle_s=idle_s, keep_idle=keep_idle))
    kept_idle = [r for r in found if not r.busy and r.key not in dropped]
    assert not any(r.busy for r in found if r.key in dropped)
    assert len(kept_idle) <= keep_idle
    assert all(NOW - r.touched <= idle_s for r in kept_idle)
    capped = [r for r in found if r.key in dropped and NOW - r.touched <= idle_s]
    assert all(k.touched >= c.touched for k in kept_idle for c in capped)
