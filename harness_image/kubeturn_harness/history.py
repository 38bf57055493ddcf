"""Reading a conversation's log: the history view and each Submission's state.

Pure functions over recorded events, so the view a client reads and the queue a
restarted Harness rebuilds come from one reading of the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubeturn_harness.wire import (
    AdmitRequest,
    ConversationId,
    EventType,
    History,
    Message,
    ProjectionRecord,
    Settlement,
    StreamEvent,
    SubmissionId,
    SubmissionState,
    SubmissionView,
)


@dataclass
class SubmissionRecord:
    """What the log says of one Submission."""

    id: SubmissionId
    request: AdmitRequest
    admitted_at: str
    started: bool = False
    run_ended: bool = False
    settlement: Settlement | None = None

    @property
    def state(self) -> SubmissionState:
        if self.settlement is not None:
            return SubmissionState.SETTLED
        if self.run_ended:
            return SubmissionState.WAITING_FOR_SWEEP
        if self.started:
            return SubmissionState.RUNNING
        return SubmissionState.QUEUED

    def view(self) -> SubmissionView:
        return SubmissionView(
            submissionId=self.id,
            state=self.state,
            policy=self.request.policy,
            model=self.request.model,
            cwd=self.request.resolved_cwd,
            admittedAt=self.admitted_at,
            outcome=self.settlement.outcome if self.settlement else None,
        )


def submissions(events: Sequence[StreamEvent]) -> dict[SubmissionId, SubmissionRecord]:
    """Every Submission in the log, in admission order."""
    records: dict[SubmissionId, SubmissionRecord] = {}
    for event in events:
        sid = SubmissionId(event.data.get("submissionId", ""))
        if event.type is EventType.SUBMISSION_ADMITTED:
            request = AdmitRequest.model_validate(event.data["request"])
            records[sid] = SubmissionRecord(sid, request, event.at)
        elif sid not in records:
            continue
        elif event.type is EventType.SUBMISSION_STARTED:
            records[sid].started = True
        elif event.type is EventType.RUN_ENDED:
            records[sid].run_ended = True
        elif event.type is EventType.SUBMISSION_SETTLED:
            records[sid].settlement = Settlement.model_validate(event.data)
    return records


def messages(events: Sequence[StreamEvent]) -> list[Message]:
    return [
        Message.model_validate(event.data["message"])
        for event in events
        if event.type is EventType.MESSAGE_APPENDED
    ]


def history(
    conversation: ConversationId, name: str, instance_id: str, events: Sequence[StreamEvent]
) -> History:
    records = submissions(events)
    return History(
        conversationId=conversation,
        name=name,
        instanceId=instance_id,
        messages=messages(events),
        settlements=[r.settlement for r in records.values() if r.settlement is not None],
        projections=[
            ProjectionRecord.model_validate(event.data)
            for event in events
            if event.type is EventType.PROJECTION_RECORDED
        ],
        submissions=[record.view() for record in records.values()],
    )
