"""A pick sent again with its idempotency key, and the phase a Run shows, in the Run core.

The Harness sends a pick again with the same key while the Orchestrator is unreachable
or answers 503 (ADR 0047); the core delivers it once (helpers of ``test_core_outcomes``).

Cases:
- a repeat of a key is answered with the first receipt and delivers nothing: the Machine
  does not move, no delivery is added, no effect;
- also from a core restored from its snapshot and from the ``Run.status`` the operator
  wrote of it (a restarted operator);
- a repeat of a pick whose work still runs below is answered ``outstanding`` with the
  same delivery id; once answered, with the answer;
- a repeat of a pick that ended the Turn, while its sweep is out, is the same
  ``turnComplete`` receipt (not ``Gone``);
- a new key on the same Turn is a new pick; a key on another Instance ID is not a
  repeat; no key is never a repeat;
- the phase shown: ``Running`` while the Machine ended but a Turn's sweep is out, the
  final phase once every Turn is recorded, in the same status as the records
  (``statuses.run_status``); the snapshot keeps the Machine's phase.
"""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Sweep
from kubeturn.orchestrator.picks import Gone
from kubeturn_harness.wire import Receipt, Refusal
from tests.unit.cores import (
    HANDOFF_IID,
    only,
    restored,
    restored_from_status,
    settle_sweep,
    started,
)


class TestRepeats:
    def test_a_repeat_is_answered_with_the_first_receipt_and_delivers_nothing(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        first, _ = core.pick(iid, "lint", {}, 1.0, key="k1")
        assert isinstance(first, Receipt)
        before = (core.config, dict(core.deliveries), core.delivery_seq)
        answer, effects = core.pick(iid, "lint", {}, 2.0, key="k1")
        assert answer == first
        assert effects.items == []
        assert (core.config, dict(core.deliveries), core.delivery_seq) == before

    def test_a_repeat_after_a_restart_is_answered_with_the_first_receipt(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        first, _ = core.pick(iid, "lint", {}, 1.0, key="k1")
        for again in (restored(core), restored_from_status(core)):
            answer, effects = again.pick(iid, "lint", {}, 2.0, key="k1")
            assert answer == first
            assert effects.items == []
            assert again.delivery_seq == core.delivery_seq

    def test_a_repeat_of_an_outstanding_pick_is_outstanding_then_answered(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        first, _ = core.pick(iid, "test", {}, 1.0, key="k1")
        assert isinstance(first, Receipt)
        assert first.outstanding
        answer, effects = restored(core).pick(iid, "test", {}, 2.0, key="k1")
        assert answer == first
        assert effects.items == []
        # A new key while it is out is a new pick, refused as any would be.
        refused, _ = core.pick(iid, "test", {}, 2.0, key="k2")
        assert refused == Refusal(refused="outstanding", outstanding="test", allowed=[])

    def test_a_repeat_of_the_pick_that_ended_the_turn_is_its_receipt(self) -> None:
        core, _ = started("handoff", coder="s1")
        first, effects = core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0, key="k1")
        assert isinstance(first, Receipt)
        assert first.turnComplete
        only(effects, Sweep)
        for again in (core, restored_from_status(core)):
            answer, more = again.pick(HANDOFF_IID, "submit", {"summary": "x"}, 2.0, key="k1")
            assert answer == first
            assert more.items == []
        # Without its key it is a new pick, and the Turn is over.
        assert core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 2.0)[0] == Gone()

    def test_a_key_is_a_repeat_only_on_its_own_instance_id(self) -> None:
        core, admits = started("exec_pick", coder="s1")
        iid = admits["coder"].instance_id
        core.pick(iid, "lint", {}, 1.0, key="k1")
        answer, _ = core.pick(iid + "-other", "lint", {}, 2.0, key="k1")
        assert answer == Gone()
        second, _ = core.pick(iid, "lint", {}, 2.0, key="k2")
        assert isinstance(second, Receipt)
        assert core.delivery_seq == 2


class TestShownPhase:
    def test_a_final_phase_is_shown_only_with_every_turn_recorded(self) -> None:
        core, _admits = started("handoff", coder="s1")
        _, effects = core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0)
        sweep = only(effects, Sweep)
        assert core.phase is RunPhase.SUCCEEDED
        assert core.shown_phase is RunPhase.RUNNING
        status = statuses.run_status(core.view(), core.snapshot())
        assert (status.phase, status.turns) == ("Running", [])
        assert status.snapshot is not None
        assert status.snapshot.phase == "Succeeded"
        settle_sweep(core, sweep, "s1", 2.0)
        status = statuses.run_status(core.view(), core.snapshot())
        assert status.phase == "Succeeded"
        assert [t.name for t in status.turns or []] == ["t1"]

    def test_a_restored_core_shows_the_same(self) -> None:
        core, _ = started("handoff", coder="s1")
        core.pick(HANDOFF_IID, "submit", {"summary": "x"}, 1.0)
        again: RunCore = restored_from_status(core)
        assert (again.phase, again.shown_phase) == (RunPhase.SUCCEEDED, RunPhase.RUNNING)
