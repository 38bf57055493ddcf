"""A Run's status stays small, says what it dropped, and restores its core exactly.

Cases:
- ``bounded``: a message within the bound is kept as it is; a longer one keeps its start
  and its end around a note saying exactly how many bytes were cut, within the bound,
  never splitting a character, and cutting it again changes nothing (any text, any
  bound);
- every message field of the status models is cut when a model is built: a condition's,
  a Turn record's and its Submissions', an AgentTurn's settlement, the Run's;
- messages entering the core are cut there (a Submission's settlement, a fault's), so the
  history holds what the status shows, and the Run's message in its status is bounded;
- the history keeps at most ``HISTORY_LIMIT`` records, and within ``HISTORY_BYTES``: the
  oldest go first, ``droppedTurns`` counts them, ``turnCount`` counts every Turn;
- the size of a Run after 500 Turns whose provider failed with 4 KiB of error: its status
  under 512 KiB, the whole object (its spec, kubectl's and kopf's annotations) too, the
  annotations within the API server's 256 KiB; it fits the models field for field;
- the history is written once: ``status.turns`` holds it and ``status.snapshot`` not;
  ``resume_point`` joins them again, and a core restored from a status as the API server
  stores it (nulls dropped) every 25 Turns ends as the one never restored; a status of
  an older operator (the history inside its snapshot) resumes from its snapshot alone;
  no snapshot yet, nothing to resume;
- status patches: the fields a model sets and nothing else, a map's removed keys written
  null, a version precondition; a condition keeps its transition time while its status
  stays and has its message cut;
- a spec over ``MAX_SPEC_BYTES`` is refused with its size; one at the bound is taken;
- a Run's phases: Succeeded, Failed and Cancelled are finished (``RunPhase.finished``,
  ``FINISHED``), Pending and Running are not; a phase read from a status as text is found
  in ``FINISHED`` as its enum is.
"""

from __future__ import annotations

import functools
import itertools
import json
from typing import Any

import kopf
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kubeturn.api.agentturn import Settlement
from kubeturn.api.status import (
    FINISHED,
    MESSAGE_LIMIT,
    Condition,
    RunPhase,
    RunStatus,
    SubmissionRecord,
    TurnHistoryRecord,
    WorkspaceStatus,
    bounded,
)
from kubeturn.k8s import conditions, diffbase, patches, runs
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Sweep
from kubeturn.orchestrator.history import HISTORY_BYTES, HISTORY_LIMIT
from kubeturn.orchestrator.snapshots import HISTORY_KEY
from kubeturn_harness.wire import Outcome, Usage
from tests.statuses import unfit, without_nulls
from tests.unit.cores import (
    MACHINES,
    loaded,
    new_core,
    only,
    restored_from_status,
)

PROVIDER_ERROR = "openai/gpt: HTTP 400: " + "the request was refused because " * 130
"""A provider's error of 4 KiB and more, as a Harness reports it in a settlement."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
OBJECT_LIMIT = 512 * 1024
ANNOTATIONS_LIMIT = 256 * 1024
"""The API server's bound on all annotations of an object together."""


def test_a_run_is_finished_in_succeeded_failed_and_cancelled_alone() -> None:
    assert [phase for phase in RunPhase if phase.finished] == [
        RunPhase.SUCCEEDED,
        RunPhase.FAILED,
        RunPhase.CANCELLED,
    ]
    assert {phase for phase in RunPhase if phase.finished} == FINISHED
    assert [text in FINISHED for text in ("Pending", "Running", "Succeeded", None)] == [
        False,
        False,
        True,
        False,
    ]


def size(value: Any) -> int:
    """Bytes of ``value``'s JSON, as the API server stores it."""
    return len(json.dumps(value, separators=(",", ":")).encode())


def stored(status: RunStatus) -> dict[str, Any]:
    """``status`` written as the operator writes it and read back as the API server keeps
    it: through JSON, every null dropped (the strictest it may do)."""
    written = patches.status(status)["status"]
    result: dict[str, Any] = without_nulls(json.loads(json.dumps(written)))
    return result


def status_of(core: RunCore) -> RunStatus:
    return statuses.run_status(core.view(), core.snapshot())


class Failing:
    """The ``retrying`` machine: each Turn's provider fails with ``message``; the Agent is
    asked again at once. Time and ids count up; each Turn takes 3 s."""

    def __init__(self, message: str = PROVIDER_ERROR) -> None:
        ids = itertools.count(1)
        self.new_id = lambda: f"n{next(ids)}"
        self.core = RunCore(loaded("retrying"), workspace=None, new_id=self.new_id)
        self.message = message
        self.now = 1_700_000_000.0
        self.admit = only(self.core.start(self.now), Admit)

    def turn(self) -> None:
        """One Turn: admitted, failed by its provider, swept, recorded."""
        core, admit = self.core, self.admit
        submission = f"{admit.turn}-submission"
        core.admitted(admit.turn, submission, self.now + 1)
        usage = Usage(promptTokens=1200, completionTokens=0)
        effects = core.settled(
            admit.turn, submission, Outcome.FAILED, self.now + 2, usage=usage, message=self.message
        )
        sweep, self.admit = only(effects, Sweep), only(effects, Admit)
        core.swept(sweep.turn, {}, self.now + 3)
        self.now += 3


class TestBounded:
    def test_a_message_within_the_bound_is_kept(self) -> None:
        assert bounded("the Harness was not reached") == "the Harness was not reached"
        exact = "é" * (MESSAGE_LIMIT // 2)
        assert bounded(exact) == exact

    def test_a_longer_one_keeps_its_start_and_end_and_says_how_much_was_cut(self) -> None:
        text = "START " + "x" * 4000 + " END"
        cut = bounded(text)
        assert len(cut.encode()) <= MESSAGE_LIMIT
        head, _, rest = cut.partition(" […")
        said, _, tail = rest.partition(" bytes cut…] ")
        assert text.startswith(head)
        assert text.endswith(tail)
        assert len(head) + int(said) + len(tail) == len(text)

    @given(st.text(min_size=0, max_size=3000), st.integers(min_value=64, max_value=4096))
    def test_any_text_fits_whole_characters_and_cutting_again_changes_nothing(
        self, text: str, limit: int
    ) -> None:
        cut = bounded(text, limit)
        assert len(cut.encode()) <= limit
        assert bounded(cut, limit) == cut
        if len(text.encode()) <= limit:
            assert cut == text
        else:
            head = cut.partition(" […")[0]
            assert text.startswith(head)


class TestModelsCutTheirMessages:
    def test_every_message_field_is_cut_when_built(self) -> None:
        long = "y" * 10_000
        condition = Condition(
            type="Ready", status="False", reason="R", message=long, lastTransitionTime="t"
        )
        submission = SubmissionRecord(id="s", admittedAt=1.0, message=long)
        record = TurnHistoryRecord(
            name="t1",
            agent="a",
            state="s",
            instanceId="i",
            outcome=Outcome.FAILED,
            message=long,
            submissions=[submission],
            startedAt=1.0,
            settledAt=2.0,
        )
        settlement = Settlement(outcome=Outcome.FAILED, message=long, settledAt="t")
        run = RunStatus(message=long)
        messages = [
            condition.message,
            submission.message,
            record.message,
            record.submissions[0].message,
            settlement.message,
            run.message,
        ]
        assert [len((m or "").encode()) <= MESSAGE_LIMIT for m in messages] == [True] * 6


class TestTheCoreCutsWhatComesIn:
    def test_a_settlements_message_is_cut_in_the_submission_and_the_record(self) -> None:
        failing = Failing()
        failing.turn()
        (record,) = failing.core.history
        assert record.message == bounded(PROVIDER_ERROR) != PROVIDER_ERROR
        assert record.submissions[0].message == bounded(PROVIDER_ERROR)

    def test_a_fault_nothing_catches_fails_the_run_with_a_bounded_message(self) -> None:
        core = new_core("agent_faults")
        core.start(0.0)
        admit = only(core.signal("toBare", None, 1.0), Admit)
        core.admitted(admit.turn, "s1", 2.0)
        core.settled(admit.turn, "s1", Outcome.FAILED, 3.0, message=PROVIDER_ERROR)
        assert core.phase.value == "Failed"
        assert core.message is not None
        assert "no onError handles it" in core.message
        assert len(core.message.encode()) <= MESSAGE_LIMIT + 200
        shown = status_of(core).message
        assert shown is not None
        assert len(shown.encode()) <= MESSAGE_LIMIT


class TestHistoryBounds:
    def test_at_most_the_limit_of_records_the_oldest_dropped(self) -> None:
        failing = Failing(message="short")
        for _ in range(HISTORY_LIMIT + 20):
            failing.turn()
        core = failing.core
        assert len(core.history) == HISTORY_LIMIT
        assert core.history[0].name == "t21"
        assert core.history[-1].name == f"t{HISTORY_LIMIT + 20}"
        status = status_of(core)
        assert (status.turnCount, status.droppedTurns) == (HISTORY_LIMIT + 20, 20)

    def test_within_the_byte_budget_the_newest_kept(self) -> None:
        failing = Failing()
        for _ in range(100):
            failing.turn()
        history = failing.core.history
        assert size([r.model_dump(mode="json") for r in history]) <= HISTORY_BYTES
        assert 20 < len(history) < 100
        names = [int(r.name[1:]) for r in history]
        assert names == list(range(101 - len(history), 101))


@functools.cache
def after_500() -> Failing:
    """The Run after 500 failed Turns (made once: the cases only read it)."""
    failing = Failing()
    for _ in range(500):
        failing.turn()
    return failing


class TestARunAfter500FailedTurns:
    def test_its_status_and_its_object_stay_small(self) -> None:
        status = stored(status_of(after_500().core))
        assert status["turnCount"] == 500
        assert status["droppedTurns"] == 500 - len(status["turns"])
        manifest = yaml.safe_load((MACHINES / "retrying.yaml").read_text())
        manifest["metadata"]["namespace"] = "default"
        # As ``kubectl apply`` leaves it: the applied manifest in an annotation.
        applied = json.dumps(manifest, separators=(",", ":")) + "\n"
        metadata = {**manifest["metadata"], "annotations": {LAST_APPLIED: applied}}
        body = {**manifest, "metadata": metadata}
        handled = kopf.Patch()
        storage = diffbase.DigestDiffBaseStorage()
        viewed = kopf.Body(body)
        storage.store(body=viewed, patch=handled, essence=storage.build(body=viewed))
        metadata["annotations"].update(handled["metadata"]["annotations"])
        run = {**body, "status": status}
        annotations = sum(len(k) + len(v.encode()) for k, v in metadata["annotations"].items())
        said = (
            f"Run {size(run)} bytes: status {size(status)} (turns {size(status['turns'])}, "
            f"snapshot {size(status['snapshot'])}), annotations {annotations}"
        )
        assert size(status) < OBJECT_LIMIT, said
        assert size(run) < OBJECT_LIMIT, said
        assert annotations < ANNOTATIONS_LIMIT, said

    def test_it_fits_the_models(self) -> None:
        assert unfit(RunStatus, patches.status(status_of(after_500().core))["status"]) == []


class TestWrittenOnce:
    def test_the_turns_hold_the_history_and_the_snapshot_does_not(self) -> None:
        failing = Failing()
        failing.turn()
        status = stored(status_of(failing.core))
        assert HISTORY_KEY not in status["snapshot"]
        assert [t["name"] for t in status["turns"]] == ["t1"]

    def test_restored_from_its_status_every_25_turns_it_ends_as_the_one_never_restored(
        self,
    ) -> None:
        plain, restarted = Failing(), Failing()
        for number in range(1, 301):
            plain.turn()
            restarted.turn()
            if number % 25 == 0:
                restarted.core = restored_from_status(restarted.core, new_id=restarted.new_id)
                restarted.core.resume()
                assert restarted.core.snapshot() == plain.core.snapshot()
        assert restarted.core.history == plain.core.history
        assert restarted.core.recorded == plain.core.recorded == 300

    def test_an_older_status_resumes_from_its_snapshot_alone(self) -> None:
        failing = Failing()
        failing.turn()
        written = failing.core.snapshot()
        del written["version"]  # written before snapshots had versions
        older = {"turns": [], "snapshot": written}
        assert statuses.resume_point(older) == failing.core.snapshot()

    def test_no_snapshot_yet_nothing_to_resume(self) -> None:
        assert statuses.resume_point({"conditions": []}) is None


class TestPatches:
    def test_the_fields_set_and_removed_keys(self) -> None:
        patch = patches.status(
            WorkspaceStatus(repoCount=1), removed={"repos": ["gone"]}, version="7"
        )
        assert patch == {
            "status": {"repoCount": 1, "repos": {"gone": None}},
            "metadata": {"resourceVersion": "7"},
        }

    def test_a_condition_keeps_its_time_while_its_status_stays(self) -> None:
        first = conditions.put([], "Ready", True, "Running", "x" * 5000, 1)
        (condition,) = first
        assert len(condition.message.encode()) <= MESSAGE_LIMIT
        written = [c.model_dump(mode="json") for c in first]
        moved = [{**written[0], "lastTransitionTime": "2020-01-01T00:00:00Z"}]
        (same,) = conditions.put(moved, "Ready", True, "Finished", "done", 2)
        assert (same.lastTransitionTime, same.reason) == ("2020-01-01T00:00:00Z", "Finished")
        (flipped,) = conditions.put(moved, "Ready", False, "Finished", "failed", 2)
        assert flipped.lastTransitionTime != "2020-01-01T00:00:00Z"


class TestSpecSize:
    def test_a_spec_over_the_bound_is_refused_with_its_size(self) -> None:
        at_bound = {"input": "z" * (runs.MAX_SPEC_BYTES - size({"input": ""}))}
        assert size(at_bound) == runs.MAX_SPEC_BYTES
        assert runs.too_large(at_bound) is None
        over = {"input": "z" * runs.MAX_SPEC_BYTES}
        said = runs.too_large(over)
        assert said is not None
        assert f"the spec is {size(over)} bytes" in said
