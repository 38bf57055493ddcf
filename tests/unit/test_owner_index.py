"""The Orchestrator API's index of owners (``api.Actors``): which Run holds a Turn at an
Instance ID, live or still being swept.

Cases:
- a hypothesis state machine registers, replaces (a restart: a core restored from the
  snapshot), and deletes Run actors, and drives their cores (start, admissions, picks,
  settlements, deletions, sweeps, cancels); after every step, for every Instance ID seen
  and one never held, ``owner`` answers what a walk over every actor and Turn answers.
  Two keys may hold the same fixture, so one Instance ID may be held by two actors (a
  Run made again under its name): the walk's first, in the mapping's order, is the one;
- the index follows one Turn: none before it starts, its Run while live and while being
  swept, none once recorded; a deleted actor owns nothing, and tells the index nothing
  after.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kubeturn.orchestrator.actor import RunActor
from kubeturn.orchestrator.api import Registry
from kubeturn.orchestrator.core import RunCore
from kubeturn_harness.wire import Outcome
from tests.unit.cores import HANDOFF_IID, loaded, new_core, restored

KEYS = ("default/a", "default/b", "default/c")
FIXTURES = ("continued", "handoff")
NEVER = "default.nobody/root/coder"


def actor(core: RunCore) -> RunActor:
    """An actor around ``core``: the index reads only its core, so no port is used."""
    unused: Any = None
    return RunActor(core, turns=unused, execs=unused, store=unused, clock=lambda: 0.0)


def walk(registry: Registry, instance_id: str) -> tuple[str, RunActor] | None:
    """The owner as the Orchestrator API found it before the index: a walk."""
    for key, held in registry.actors.items():
        if any(t.instanceId == instance_id for t in held.core.turns.values()):
            return key, held
    return None


class OwnerIndex(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.registry = Registry()
        self.seen: set[str] = {NEVER}
        self.now = itertools.count(1)
        self.ids = itertools.count(1)

    def _core(self, fixture: str) -> RunCore:
        return RunCore(loaded(fixture), workspace=None, new_id=lambda: f"n{next(self.ids)}")

    @rule(key=st.sampled_from(KEYS), fixture=st.sampled_from(FIXTURES))
    def register(self, key: str, fixture: str) -> None:
        self.registry.actors[key] = actor(self._core(fixture))

    @rule(key=st.sampled_from(KEYS))
    def restart(self, key: str) -> None:
        """The actor that resumes the Run takes the place of the one before."""
        if key in self.registry.actors:
            self.registry.actors[key] = actor(restored(self.registry.actors[key].core))

    @rule(key=st.sampled_from(KEYS))
    def delete(self, key: str) -> None:
        self.registry.actors.pop(key, None)

    @rule(key=st.sampled_from(KEYS), data=st.data())
    def drive(self, key: str, data: st.DataObject) -> None:
        held = self.registry.actors.get(key)
        if held is None:
            return
        core, now = held.core, float(next(self.now))
        turns = sorted(core.turns)
        what = data.draw(
            st.sampled_from(["start", "admitted", "settled", "pick", "deleted", "swept", "cancel"])
        )
        if what == "start":
            core.start(now)
        elif what == "cancel":
            core.cancel(now)
        elif turns:
            turn = core.turns[data.draw(st.sampled_from(turns))]
            if what == "admitted":
                core.admitted(turn.id, f"s{next(self.ids)}", now)
            elif what == "settled" and turn.submissions:
                outcome = data.draw(st.sampled_from([Outcome.COMPLETED, Outcome.FAILED]))
                core.settled(turn.id, turn.submissions[-1].id, outcome, now)
            elif what == "pick":
                core.pick(turn.instanceId, "submit", {"summary": "done"}, now)
            elif what == "deleted":
                core.deleted(turn.id, now)
            elif what == "swept":
                core.swept(turn.id, {}, now)
        for each in self.registry.actors.values():
            self.seen.update(t.instanceId for t in each.core.turns.values())

    @invariant()
    def the_index_answers_as_the_walk(self) -> None:
        for instance_id in self.seen:
            assert self.registry.owner(instance_id) == walk(self.registry, instance_id)


OwnerIndex.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestOwnerIndex = OwnerIndex.TestCase


class TestOneTurn:
    def test_the_index_follows_a_turn_from_its_start_to_its_record(self) -> None:
        registry = Registry()
        core = new_core("handoff")
        registry.actors["default/handoff"] = held = actor(core)
        assert registry.owner(HANDOFF_IID) is None
        core.start(0.0)
        core.admitted("t1", "s1", 0.5)
        assert registry.owner(HANDOFF_IID) == ("default/handoff", held)
        core.pick(HANDOFF_IID, "submit", {"summary": "did it"}, 1.0)
        assert core.turns["t1"].phase.value == "sweeping"
        assert registry.owner(HANDOFF_IID) == ("default/handoff", held)
        core.swept("t1", {}, 2.0)
        assert registry.owner(HANDOFF_IID) is None

    def test_a_deleted_actor_owns_nothing_and_tells_nothing(self) -> None:
        registry = Registry()
        core = new_core("handoff")
        registry.actors["default/handoff"] = actor(core)
        core.start(0.0)
        del registry.actors["default/handoff"]
        assert registry.owner(HANDOFF_IID) is None
        assert core.on_instance is None
        core.swept("t1", {}, 1.0)
        assert registry.owner(HANDOFF_IID) is None
