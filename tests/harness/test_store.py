"""The conversation log (``kubeturn_harness.store``) and its reading (``history``).

Cases, store:
- ``conversation_id`` is stable, distinct per name and Instance ID, ``conv-`` + 24 hex;
- append answers the event (offset, type, time of the injected clock, data); read by
  offset and limit; ``next_offset``; one JSON line per event on disk; the meta file;
  a durable append; a closed log reopens its file on the next append;
- a reload reads back every event;
- a torn last line (a crash mid-write, with or without a newline) is cut off the file
  on load, and later appends are readable after another reload;
- ``wait_beyond``: True at once when the event exists, True on an append, False after
  its seconds when nothing comes;
- ``Store``: ``open`` places a log under ``conversations/``; ``existing`` finds every
  recorded conversation and skips an unreadable directory; ``check_writable``.

Cases, history:
- ``submissions`` reads each Submission's state: queued, running, waiting-for-sweep,
  settled (with its outcome), in admission order; events of an unknown Submission are
  ignored; the view resolves an absent cwd to /work;
- ``messages`` and the ``history`` view: messages, settlements, projections and
  Submissions, read back from a reloaded log.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from kubeturn_harness import history
from kubeturn_harness.store import (
    EVENTS_FILE,
    META_FILE,
    ConversationLog,
    Store,
    conversation_id,
)
from kubeturn_harness.wire import (
    AdmitRequest,
    AgentDefinition,
    EventType,
    InputPolicy,
    Message,
    MessageStatus,
    Outcome,
    ProjectionDecision,
    ProjectionRecord,
    Role,
    Settlement,
    SubmissionId,
    SubmissionState,
)


class StepClock:
    """A clock that ticks one second per reading."""

    def __init__(self) -> None:
        self.ticks = 0

    def now(self) -> str:
        self.ticks += 1
        return f"2026-07-27T10:00:{self.ticks:02d}.000Z"

    def monotonic(self) -> float:
        return float(self.ticks)


def open_log(directory: Path) -> ConversationLog:
    return ConversationLog(directory, "reviewer", "ns.run/review/reviewer", StepClock())


# ----------------------------------------------------------------------------- store


class TestConversationId:
    def test_stable_and_distinct(self) -> None:
        one = conversation_id("reviewer", "iid-1")
        assert one == conversation_id("reviewer", "iid-1")
        assert one != conversation_id("reviewer", "iid-2")
        assert one != conversation_id("coder", "iid-1")
        assert conversation_id("a", "b/c") != conversation_id("a/b", "c")
        assert one.startswith("conv-")
        assert len(one) == len("conv-") + 24
        int(one.removeprefix("conv-"), 16)


class TestAppendAndRead:
    def test_append_read_and_next_offset(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        assert (log.next_offset, log.events) == (0, [])
        first = log.append(EventType.SUBMISSION_ADMITTED, {"submissionId": "s-1"})
        second = log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        third = log.append(EventType.SUBMISSION_SETTLED, {"submissionId": "s-1"}, durable=True)
        log.close()
        assert (first.offset, second.offset, third.offset) == (0, 1, 2)
        assert first.type is EventType.SUBMISSION_ADMITTED
        assert first.at == "2026-07-27T10:00:01.000Z"
        assert third.at == "2026-07-27T10:00:03.000Z"
        assert first.data == {"submissionId": "s-1"}
        assert log.next_offset == 3
        assert log.read(0, 10) == [first, second, third]
        assert log.read(1, 1) == [second]
        assert log.read(3, 10) == []

    def test_one_json_line_per_event_and_the_meta_file(self, tmp_path: Path) -> None:
        log = open_log(tmp_path / "c")
        log.append(EventType.SUBMISSION_ADMITTED, {"submissionId": "s-1"})
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        log.close()
        raw = (tmp_path / "c" / EVENTS_FILE).read_text().splitlines()
        assert [json.loads(line)["offset"] for line in raw] == [0, 1]
        assert json.loads((tmp_path / "c" / META_FILE).read_text()) == {
            "name": "reviewer",
            "instanceId": "ns.run/review/reviewer",
        }

    def test_nothing_is_written_before_the_first_append(self, tmp_path: Path) -> None:
        open_log(tmp_path / "c").close()
        assert not (tmp_path / "c").exists()

    def test_a_closed_log_reopens_on_append(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        log.append(EventType.SUBMISSION_ADMITTED, {"submissionId": "s-1"})
        log.close()
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        log.close()
        assert [e.type for e in open_log(tmp_path).events] == [
            EventType.SUBMISSION_ADMITTED,
            EventType.SUBMISSION_STARTED,
        ]

    def test_a_reload_reads_every_event_back(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        written = [
            log.append(EventType.MESSAGE_APPENDED, {"n": index, "text": "é\n"})
            for index in range(5)
        ]
        log.close()
        again = open_log(tmp_path)
        assert again.events == written
        assert again.next_offset == 5


class TestTornTail:
    @pytest.mark.parametrize(
        "torn",
        [
            pytest.param(b'{"offset": 2, "type": "submission-sta', id="no-newline"),
            pytest.param(b'{"offset": 2, "type"\n', id="with-newline"),
            pytest.param(b"\x00\x00\x00", id="zeros"),
        ],
    )
    def test_a_torn_last_line_is_cut_and_later_appends_are_readable(
        self, tmp_path: Path, torn: bytes
    ) -> None:
        log = open_log(tmp_path)
        log.append(EventType.SUBMISSION_ADMITTED, {"submissionId": "s-1"})
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        log.close()
        path = tmp_path / EVENTS_FILE
        good = path.read_bytes()
        with path.open("ab") as handle:
            handle.write(torn)

        reloaded = open_log(tmp_path)
        assert [e.offset for e in reloaded.events] == [0, 1]
        assert path.read_bytes() == good

        appended = reloaded.append(EventType.RUN_ENDED, {"submissionId": "s-1"})
        reloaded.close()
        assert appended.offset == 2
        final = open_log(tmp_path)
        assert [e.offset for e in final.events] == [0, 1, 2]
        assert final.events[2].type is EventType.RUN_ENDED


@pytest.mark.looptime
class TestWaitBeyond:
    async def test_an_existing_event_answers_at_once(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        log.append(EventType.SUBMISSION_ADMITTED, {})
        assert await log.wait_beyond(0, 0) is True
        log.close()

    async def test_an_append_wakes_the_waiter(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        log.append(EventType.SUBMISSION_ADMITTED, {})
        waiter = asyncio.create_task(log.wait_beyond(2, 5.0))
        await asyncio.sleep(0)
        log.append(EventType.SUBMISSION_STARTED, {})
        await asyncio.sleep(0)
        assert not waiter.done()
        log.append(EventType.MODEL_REQUESTED, {})
        assert await asyncio.wait_for(waiter, 1.0) is True
        log.close()

    async def test_nothing_appended_is_false_after_its_seconds(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await log.wait_beyond(0, 0.05) is False
        assert loop.time() - started >= 0.04
        log.close()


class TestStore:
    def test_open_and_existing(self, tmp_path: Path) -> None:
        store = Store(tmp_path, StepClock())
        first = store.open("reviewer", "iid-1")
        second = store.open("coder", "iid-2")
        assert first.directory == tmp_path / "conversations" / conversation_id("reviewer", "iid-1")
        for log in (first, second):
            log.append(EventType.SUBMISSION_ADMITTED, {"submissionId": "s"})
            log.close()
        (tmp_path / "conversations" / "conv-broken").mkdir()
        found = {(log.name, log.instance_id, log.next_offset) for log in store.existing()}
        assert found == {("reviewer", "iid-1", 1), ("coder", "iid-2", 1)}

    def test_existing_without_a_data_dir(self, tmp_path: Path) -> None:
        assert list(Store(tmp_path / "absent", StepClock()).existing()) == []

    def test_check_writable(self, tmp_path: Path) -> None:
        Store(tmp_path / "data", StepClock()).check_writable()
        assert list((tmp_path / "data").iterdir()) == []


# ----------------------------------------------------------------------------- history

DEFINITION = AgentDefinition(instructions="You review.")


def admit(log: ConversationLog, sid: str, **request: Any) -> None:
    body = AdmitRequest(prompt=f"prompt {sid}", definition=DEFINITION, **request)
    log.append(
        EventType.SUBMISSION_ADMITTED,
        {"submissionId": sid, "request": body.model_dump(mode="json", by_alias=True)},
    )


def settle(log: ConversationLog, sid: str, outcome: Outcome) -> Settlement:
    settlement = Settlement(
        submissionId=SubmissionId(sid), outcome=outcome, at="2026-07-27T11:00:00.000Z"
    )
    log.append(EventType.SUBMISSION_SETTLED, settlement.model_dump(mode="json"), durable=True)
    return settlement


class TestSubmissions:
    def test_every_state(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        admit(log, "s-settled", policy="interrupt", model="p/m", cwd="/work/a")
        admit(log, "s-waiting")
        admit(log, "s-running")
        admit(log, "s-queued")
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-settled"})
        settle(log, "s-settled", Outcome.ENDED)
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-waiting"})
        log.append(EventType.RUN_ENDED, {"submissionId": "s-waiting", "reason": "turn-over"})
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-running"})
        log.close()

        records = history.submissions(open_log(tmp_path).events)
        assert list(records) == ["s-settled", "s-waiting", "s-running", "s-queued"]
        assert {sid: r.state for sid, r in records.items()} == {
            "s-settled": SubmissionState.SETTLED,
            "s-waiting": SubmissionState.WAITING_FOR_SWEEP,
            "s-running": SubmissionState.RUNNING,
            "s-queued": SubmissionState.QUEUED,
        }
        settled = records[SubmissionId("s-settled")].view()
        assert settled.outcome is Outcome.ENDED
        assert (settled.policy, settled.model, settled.cwd) == (
            InputPolicy.INTERRUPT,
            "p/m",
            "/work/a",
        )
        assert settled.admittedAt == "2026-07-27T10:00:01.000Z"
        queued = records[SubmissionId("s-queued")].view()
        assert (queued.outcome, queued.cwd, queued.policy) == (None, "/work", InputPolicy.QUEUE)

    def test_a_settled_submission_stays_settled_after_its_run_ended(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        admit(log, "s-1")
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        log.append(EventType.RUN_ENDED, {"submissionId": "s-1"})
        settle(log, "s-1", Outcome.ABORTED)
        log.close()
        record = history.submissions(log.events)[SubmissionId("s-1")]
        assert record.state is SubmissionState.SETTLED
        assert record.run_ended

    def test_events_of_an_unknown_submission_are_ignored(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-ghost"})
        settle(log, "s-ghost", Outcome.ENDED)
        log.append(EventType.MODEL_REQUESTED, {})
        admit(log, "s-1")
        log.close()
        records = history.submissions(log.events)
        assert list(records) == ["s-1"]
        assert records[SubmissionId("s-1")].state is SubmissionState.QUEUED


class TestHistoryView:
    def test_messages_settlements_projections_and_submissions(self, tmp_path: Path) -> None:
        log = open_log(tmp_path)
        admit(log, "s-1")
        log.append(EventType.SUBMISSION_STARTED, {"submissionId": "s-1"})
        user = Message(id="s-1.1", submissionId=SubmissionId("s-1"), role=Role.USER, content="p")
        cut = Message(
            id="s-1.2",
            submissionId=SubmissionId("s-1"),
            role=Role.ASSISTANT,
            content="half",
            status=MessageStatus.INTERRUPTED,
        )
        for message in (user, cut):
            log.append(EventType.MESSAGE_APPENDED, {"message": message.model_dump(mode="json")})
        settlement = settle(log, "s-1", Outcome.ABORTED)
        admit(log, "s-2", **{"continue": True})
        projection = ProjectionRecord(
            submissionId=SubmissionId("s-2"),
            decisions=[
                ProjectionDecision(
                    messageId="s-1.2",
                    status=MessageStatus.INTERRUPTED,
                    projectedAs=None,
                    reason="declared omit",
                )
            ],
        )
        log.append(EventType.PROJECTION_RECORDED, projection.model_dump(mode="json"))
        log.close()

        events = open_log(tmp_path).events
        assert history.messages(events) == [user, cut]
        view = history.history(log.id, log.name, log.instance_id, events)
        assert view.conversationId == log.id
        assert (view.name, view.instanceId) == ("reviewer", "ns.run/review/reviewer")
        assert view.messages == [user, cut]
        assert view.settlements == [settlement]
        assert view.projections == [projection]
        assert [(s.submissionId, s.state) for s in view.submissions] == [
            ("s-1", SubmissionState.SETTLED),
            ("s-2", SubmissionState.QUEUED),
        ]
