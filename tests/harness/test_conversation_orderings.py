"""Racing orderings of one conversation (``conversations``; docs/turn-semantics.md §2, §5).

Everything of the Harness's own is real (Conversation, ConversationLog in a temporary
directory, the tool loop, HarnessMetrics, SystemClock); only the external ports are
fakes: a model whose every request waits on an event the test releases (after it has
said some words), and an Orchestrator whose ``finish`` pick ends the Turn when its
payload says ``over``.

Cases:
- hypothesis over operation sequences (admit with each input policy, sweeps with every
  kind of body, the model's answer — text, text cut at the output limit, a Turn-ending
  pick, a pick that keeps the Turn open, a Turn-ending pick followed by more calls, twelve
  identical Turn-ending picks, a pick with truncated arguments, a provider failure — loop
  ticks, time passing beyond the sweep wait, and a restart of the Harness on the same
  log), then a drain (a sweep, or answering until idle). After every sweep: it settled
  exactly the unsettled Submissions, as its body says (``ended`` only for a pick naming
  the running one; queued ones ``aborted``, "never ran"), and answered whether it
  settled anything. After every restart: a run under way settled
  ``failed``/``harness_restarted``, a run waiting for its sweep ``aborted``, saying no
  sweep came; queued ones run on. After the drain:
  every admitted Submission has exactly one settlement; the model never had two
  requests in flight; each run's events lie between its start and the next start, and
  runs start in admission order; every outcome has its cause (``ended`` ⇐ a pick sweep
  naming it while it ran, ``completed`` ⇐ a text answer, ``failed`` ⇐ a provider
  failure, four identical calls across answers, four answers in a row cut at the output
  limit, or a restart, ``aborted`` ⇐ a sweep, the first cutting
  admission, or no sweep after its Turn was over); a cut reply is marked by the first
  stop that cut it; every prompt the model received is one a provider accepts (each
  call answered in order, its arguments one JSON object); a failed request's partial
  reply is kept, marked failed, as its
  run's last message; every call of a complete answer has its answer; no model request
  follows a Turn-ending pick; the metrics agree;
- hypothesis over the sweep's timing for a Turn-ending pick: in the pick's own send,
  any number of loop ticks after the receipt, or after the run ended — all settle
  ``ended`` with no message, with the same record;
- a sweep while nothing runs answers False and writes nothing (nor after everything
  settled); a Turn-ending run that no sweep reaches settles ``aborted`` after the wait,
  saying so; a sweep after that answers False;
- with no Orchestrator (no Menu), a sweep naming the running Submission cuts its model
  request: ``ended``, the partial reply kept and projected into the next continued
  prompt, marked as cut;
- a ``supersede`` admission and then a sweep before the cut lands: the sweep settles
  the run, and the reply stays superseded, out of the next prompt (a regression test);
- a close right after a sweep woke the run waiting for it, with a Submission admitted
  behind it: the close returns at once and starts nothing; a restart runs that
  Submission (a regression test: the close's cancellation used to be lost, and it
  started the queued run and waited for it forever).

Every step of a hypothesis scenario, its drain and its close are bounded
(``STEP_LIMIT_S``): a hang fails naming the step and every Submission's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kubeturn_harness import history
from kubeturn_harness.clock import SystemClock
from kubeturn_harness.conversations import (
    NO_SWEEP,
    NO_SWEEP_RESTART,
    QUEUED_SWEPT,
    RESTARTED,
    Conversation,
)
from kubeturn_harness.errors import ProviderFailure
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import Finish, ModelAnswer, ModelRequest, Partial
from kubeturn_harness.orchestrator import Delivered, Gone, PickResult
from kubeturn_harness.providers import Provider, Providers, ProviderSpec
from kubeturn_harness.receipts import AFTER_TURN_END
from kubeturn_harness.sandbox.client import Toolbox
from kubeturn_harness.sandbox.protocol import Limits as ToolLimits
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.store import ConversationLog
from kubeturn_harness.tool_loop import Limits, RunEnv
from kubeturn_harness.wire import (
    AdmitRequest,
    AgentDefinition,
    DeliveryId,
    ErrorType,
    EventType,
    InputPolicy,
    MenuItem,
    Message,
    MessageStatus,
    Outcome,
    Projection,
    Receipt,
    Role,
    Settlement,
    StreamEvent,
    SubmissionId,
    Surface,
    ToolCall,
    Usage,
    WorkspaceAccess,
)

IID = "ns.run/review/reviewer"
PROVIDERS = Providers({"fake": Provider("fake", ProviderSpec(baseUrl="http://127.0.0.1:1"))})
LIMITS = Limits(max_steps=64, max_identical_calls=4, surface_retry_s=0.1, pick_retry_s=0.1)
NO_TOOLBOX = Toolbox(
    socket=Path("/nonexistent/toolbox.sock"),
    work_root=Path("/nonexistent"),
    limits=ToolLimits(bashTimeoutS=5.0, outputLimitBytes=1000, processes=8),
)
"""No Working tool runs in these orderings: the toolbox is never asked."""
DEFINITION = AgentDefinition(instructions="You review.", workspace=WorkspaceAccess.NONE)
FINISH = MenuItem(
    name="finish",
    description="Say what you decided.",
    input={"type": "object", "properties": {"over": {"type": "boolean"}}},
)
SWEEP_MARK = (MessageStatus.INTERRUPTED, Projection.ASSISTANT_MARKED)
ORDERINGS = settings(max_examples=60, deadline=None)
STEP_LIMIT_S = 5.0
"""How long one operation of a scenario (or its drain, or its close) may take before the
scenario fails naming it. Each takes milliseconds (the longest waits are the 50 ms of
``time`` and a drain's waits for the 30 ms sweep wait), so 5 s means stuck, even on a
loaded machine. The scenario bounds itself because pytest-timeout cannot end a hung
hypothesis test: its one alarm raises ``Failed``, which hypothesis catches as a failing
example and runs again, with no alarm left, to report it."""


# ----------------------------------------------------------------------------- fakes


@dataclass
class HeldRequest:
    sid: str
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    answer: ModelAnswer | Exception | None = None


class FakeModel:
    """Each request says a few words and begins a call, then waits until the test
    releases it."""

    def __init__(self) -> None:
        self.pending: HeldRequest | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests: list[str] = []
        self.prompts: list[list[dict[str, Any]]] = []

    async def complete(self, request: ModelRequest, partial: Partial) -> ModelAnswer:
        prompts = [
            m["content"]
            for m in request.messages
            if m["role"] == "user" and m["content"].startswith("prompt ")
        ]
        held = HeldRequest(sid=prompts[-1].split()[1])
        self.requests.append(held.sid)
        self.prompts.append(request.messages)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.pending = held
        try:
            partial.text.append(f"Partial words of {held.sid}")
            partial.tool_calls[0] = ToolCall(id=f"{held.sid}-cut", name="finish", arguments='{"ov')
            await held.gate.wait()
        finally:
            self.in_flight -= 1
            if self.pending is held:
                self.pending = None
        assert held.answer is not None
        if isinstance(held.answer, Exception):
            raise held.answer
        return held.answer

    def release(self, answer: ModelAnswer | Exception) -> HeldRequest:
        held = self.pending
        assert held is not None
        held.answer = answer
        held.gate.set()
        self.pending = None
        return held

    async def wait_pending(self, ticks: int = 50) -> HeldRequest | None:
        for _ in range(ticks):
            if self.pending is not None:
                return self.pending
            await asyncio.sleep(0)
        return self.pending

    async def wait_request_of(self, sid: str) -> HeldRequest:
        """The held request of ``sid``, once its run has reached the model."""
        async with asyncio.timeout(5):
            while self.pending is None or self.pending.sid != sid:
                await asyncio.sleep(0)
        return self.pending


OnPick = Callable[[dict[str, Any]], Awaitable[None]]


class FakeOrchestrator:
    """One Menu item, ``finish``; its receipt ends the Turn unless the payload says not."""

    def __init__(self) -> None:
        self.picks: list[dict[str, Any]] = []
        self.on_pick: OnPick | None = None

    async def surface(self, instance_id: str) -> Surface | None:
        return Surface(instanceId=instance_id, menu=[FINISH], allowed=["finish"])

    async def pick(
        self, instance_id: str, event: str, payload: dict[str, Any], key: str
    ) -> PickResult:
        self.picks.append(payload)
        if self.on_pick is not None:
            await self.on_pick(payload)
        receipt = Receipt(
            delivered=True,
            event=event,
            turnComplete=bool(payload.get("over", True)),
            deliveryId=DeliveryId(f"d-{len(self.picks)}"),
        )
        return Delivered(receipt)

    async def poll(self, instance_id: str, delivery: DeliveryId) -> Receipt | Gone | None:
        raise AssertionError("no pick of this fake is outstanding")


ANSWERS = [
    "text",
    "text-cut-at-limit",
    "pick-over",
    "pick-open",
    "pick-over-then-more",
    "pick-over-twelve-times",
    "pick-malformed",
    "fail",
]
CALLS = {
    "pick-over": [("finish", '{"over": true}')],
    "pick-open": [("finish", '{"over": false}')],
    "pick-over-then-more": [
        ("finish", '{"over": true}'),
        ("finish", '{"over": false}'),
        ("nope", "{}"),
    ],
    "pick-over-twelve-times": [("finish", '{"over": true}')] * 12,
    "pick-malformed": [("finish", '{"over": tr')],
}


def model_answer(kind: str, sid: str, step: int) -> ModelAnswer | Exception:
    usage = Usage(promptTokens=3, completionTokens=2)
    if kind == "text":
        return ModelAnswer(text="All done.", tool_calls=[], usage=usage)
    if kind == "text-cut-at-limit":
        return ModelAnswer(text="All do", tool_calls=[], usage=usage, finish=Finish.LENGTH)
    if kind == "fail":
        return ProviderFailure("the fake provider is down")
    calls = [
        ToolCall(id=f"{sid}-{step}-{index}", name=name, arguments=arguments)
        for index, (name, arguments) in enumerate(CALLS[kind])
    ]
    return ModelAnswer(text="", tool_calls=calls, usage=usage)


@dataclass
class World:
    conversation: Conversation
    model: FakeModel
    orchestrator: FakeOrchestrator
    metrics: HarnessMetrics
    env: RunEnv
    sweep_wait_s: float

    @property
    def log(self) -> ConversationLog:
        return self.conversation.log

    def records(self) -> dict[SubmissionId, history.SubmissionRecord]:
        return history.submissions(self.log.events)

    def settlements(self) -> list[Settlement]:
        return [
            Settlement.model_validate(event.data)
            for event in self.log.events
            if event.type is EventType.SUBMISSION_SETTLED
        ]

    def metric(self, name: str) -> float:
        total = 0.0
        for family in self.metrics.registry.collect():
            for sample in family.samples:
                if sample.name == name:
                    total += sample.value
        return total

    async def restart(self) -> None:
        """The Harness process stops and starts again on the same data dir."""
        directory = self.log.directory
        await self.conversation.close()
        log = ConversationLog(directory, "reviewer", IID, SystemClock())
        self.conversation = Conversation(log, self.env, sweep_wait_s=self.sweep_wait_s)
        self.conversation.recover()

    async def wait_idle(self, seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds):
            while not self.conversation.idle:
                await asyncio.sleep(0.001)


def make_world(directory: Path, *, sweep_wait_s: float, menu: bool = True) -> World:
    """A conversation with fake ports; ``menu=False`` runs it with no Orchestrator."""
    metrics = HarnessMetrics()
    model = FakeModel()
    orchestrator = FakeOrchestrator()
    env = RunEnv(
        model=model,
        orchestrator=orchestrator if menu else None,
        providers=PROVIDERS,
        clock=SystemClock(),
        metrics=metrics,
        toolbox=NO_TOOLBOX,
        limits=LIMITS,
        default_model="fake/m",
    )
    log = ConversationLog(directory, "reviewer", IID, SystemClock())
    conversation = Conversation(log, env, sweep_wait_s=sweep_wait_s)
    return World(conversation, model, orchestrator, metrics, env, sweep_wait_s)


def request(
    sid: str,
    policy: InputPolicy = InputPolicy.QUEUE,
    projection: Projection = Projection.ASSISTANT_MARKED,
) -> AdmitRequest:
    return AdmitRequest(
        prompt=f"prompt {sid}",
        definition=DEFINITION,
        policy=policy,
        projection=projection,
        continue_=True,
    )


def sweep_body(cause: str | None, sid: str | None) -> bytes:
    return json.dumps({"cause": cause, "submissionId": sid}).encode()


@contextlib.asynccontextmanager
async def bounded(world: World, what: str) -> AsyncIterator[None]:
    """Fail, naming ``what`` and every Submission's state, if it takes ``STEP_LIMIT_S``."""
    try:
        async with asyncio.timeout(STEP_LIMIT_S):
            yield
    except TimeoutError:
        states = {sid: record.state.value for sid, record in world.records().items()}
        raise AssertionError(
            f"stuck for {STEP_LIMIT_S:g} s in {what}; the Submissions: {states}"
        ) from None


# ----------------------------------------------------------------------------- the driver

SWEEP_KINDS = ["pick-running", "pick-other", "timer-running", "no-body", "garbage"]
CUTTING = ["interrupt", "supersede"]
DRAIN_WAIT_S = 0.03

Op = tuple[str, Any]
OPERATIONS = st.one_of(
    st.tuples(
        st.just("admit"),
        st.tuples(st.sampled_from(list(InputPolicy)), st.sampled_from(list(Projection))),
    ),
    st.tuples(st.just("admit"), st.just((InputPolicy.QUEUE, Projection.ASSISTANT_MARKED))),
    st.tuples(st.just("sweep"), st.sampled_from(SWEEP_KINDS)),
    st.tuples(st.just("sweep"), st.just("pick-running")),
    st.tuples(st.just("reach-model"), st.none()),
    st.tuples(st.just("reach-model"), st.sampled_from(["pick-running", *CUTTING])),
    st.tuples(st.just("answer"), st.sampled_from(ANSWERS)),
    st.tuples(st.just("answer"), st.sampled_from(["text", "pick-over"])),
    st.tuples(st.just("tick"), st.integers(1, 6)),
    st.tuples(st.just("time"), st.none()),
    st.tuples(st.just("restart"), st.none()),
)
"""One step of the world: an admission, a sweep, the running model request reached (the
worker runs until the model holds a request; then, maybe, a sweep naming it or a
cutting admission) or answered, loop ticks, time beyond the sweep wait, or a restart of
the Harness. Sweeps naming the running Submission and plain admissions are drawn more
often, so ``ended`` and queues are common."""


class Driver:
    """Runs operations on a World, predicting from the log what every sweep must do."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.admitted: list[str] = []
        self.requests: dict[str, AdmitRequest] = {}
        self.answered: defaultdict[str, list[str]] = defaultdict(list)
        self.cutter: dict[str, str] = {}
        self.stops: defaultdict[str, list[tuple[MessageStatus, Projection]]] = defaultdict(list)
        self.swept: dict[str, Outcome] = {}
        self.restarted: dict[str, Settlement] = {}

    async def run(self, op: Op) -> None:
        kind, argument = op
        if kind == "admit":
            self.admit(*argument)
        elif kind == "sweep":
            await self.sweep(argument)
        elif kind == "answer":
            await self.answer(argument)
        elif kind == "reach-model":
            await self.world.model.wait_pending()
            if argument in CUTTING:
                self.admit(InputPolicy(argument), Projection.SYSTEM_NOTE)
            elif argument is not None:
                await self.sweep(argument)
        elif kind == "restart":
            await self.restart()
        elif kind == "tick":
            for _ in range(argument):
                await asyncio.sleep(0)
        else:
            await asyncio.sleep(DRAIN_WAIT_S + 0.02)

    def running(self) -> history.SubmissionRecord | None:
        running = [r for r in self.world.records().values() if r.started and not r.settlement]
        assert len(running) <= 1, f"two Submissions run at once: {running}"
        return running[0] if running else None

    def admit(self, policy: InputPolicy, projection: Projection) -> None:
        sid = f"s-{len(self.admitted) + 1}"
        running = self.running()
        if (
            policy is not InputPolicy.QUEUE
            and running is not None
            and not running.run_ended
            and running.id not in self.cutter
        ):
            self.cutter[running.id] = sid
            supersede = policy is InputPolicy.SUPERSEDE
            self.stops[running.id].append(
                (MessageStatus.SUPERSEDED, Projection.OMIT)
                if supersede
                else (MessageStatus.INTERRUPTED, projection)
            )
        self.requests[sid] = request(sid, policy, projection)
        self.admitted.append(sid)
        offset = self.world.conversation.admit(SubmissionId(sid), self.requests[sid])
        assert self.world.log.events[offset].type is EventType.SUBMISSION_ADMITTED

    async def sweep(self, kind: str) -> None:
        running = self.running()
        unsettled = [r for r in self.world.records().values() if r.settlement is None]
        target = running.id if running else (unsettled[0].id if unsettled else "s-none")
        others = [sid for sid in self.admitted if sid != target] or ["s-elsewhere"]
        raw = {
            "pick-running": sweep_body("pick", target),
            "pick-other": sweep_body("pick", others[-1]),
            "timer-running": sweep_body("timer", target),
            "no-body": b"",
            "garbage": b"{",
        }[kind]
        expected = {
            r.id: Outcome.ENDED
            if running is not None and r.id == running.id and kind == "pick-running"
            else Outcome.ABORTED
            for r in unsettled
        }
        before = self.world.log.next_offset

        answered = await self.world.conversation.sweep(Sweep.parse(raw))

        assert answered is bool(unsettled)
        written = self.world.log.read(before, 1000)
        assert [event.type for event in written] == [EventType.SUBMISSION_SETTLED] * len(expected)
        after = self.world.records()
        for sid, outcome in expected.items():
            settlement = after[sid].settlement
            assert settlement is not None
            assert settlement.outcome is outcome, (sid, kind, settlement)
            assert settlement.error is None
            is_running = running is not None and sid == running.id
            assert settlement.message == (None if is_running else QUEUED_SWEPT)
            self.swept[sid] = outcome
        if running is not None:
            self.stops[running.id].append(SWEEP_MARK)

    async def restart(self) -> None:
        expected: dict[str, tuple[Outcome, str | None, ErrorType | None]] = {}
        for record in self.world.records().values():
            if record.settlement is not None or not record.started:
                continue
            if record.run_ended:
                expected[record.id] = (Outcome.ABORTED, NO_SWEEP_RESTART, None)
            else:
                expected[record.id] = (Outcome.FAILED, None, ErrorType.HARNESS_RESTARTED)
                self.stops[record.id].append(SWEEP_MARK)
        await self.world.restart()
        after = self.world.records()
        for sid, (outcome, message, error) in expected.items():
            settlement = after[SubmissionId(sid)].settlement
            assert settlement is not None
            assert (settlement.outcome, settlement.message) == (outcome, message)
            assert (settlement.error.type if settlement.error else None) is error
            if error is not None:
                assert settlement.error is not None
                assert settlement.error.message == RESTARTED
            self.restarted[sid] = settlement

    async def answer(self, kind: str) -> None:
        held = await self.world.model.wait_pending()
        if held is None:
            return
        self.answered[held.sid].append(kind)
        self.world.model.release(model_answer(kind, held.sid, len(self.answered[held.sid])))

    async def drain(self, by: str) -> None:
        if by == "sweep":
            await self.sweep("no-body")
        else:
            for _ in range(500):
                if self.world.conversation.idle:
                    break
                if self.world.model.pending is not None:
                    await self.answer("text")
                elif any(
                    r.state.value == "waiting-for-sweep" for r in self.world.records().values()
                ):
                    await asyncio.sleep(DRAIN_WAIT_S + 0.02)
                else:
                    await asyncio.sleep(0.001)
        await self.world.wait_idle()


def check_invariants(driver: Driver) -> None:
    world = driver.world
    events = world.log.events
    records = world.records()

    # Every admitted Submission has exactly one settlement.
    assert list(records) == driver.admitted
    counts = Counter(s.submissionId for s in world.settlements())
    assert counts == Counter(driver.admitted), counts

    # Runs never overlap: one model request at a time, and each run's events lie between
    # its start and the next start; runs start in admission order.
    assert world.model.max_in_flight <= 1
    started: list[str] = []
    current: str | None = None
    for event in events:
        if event.type is EventType.SUBMISSION_STARTED:
            current = event.data["submissionId"]
            started.append(current)
        elif event.type is EventType.MESSAGE_APPENDED:
            assert event.data["message"]["submissionId"] == current, event
        elif event.type in (
            EventType.MODEL_REQUESTED,
            EventType.PICK_SENT,
            EventType.RUN_ENDED,
            EventType.PROJECTION_RECORDED,
        ):
            assert event.data["submissionId"] == current, event
    assert started == [sid for sid in driver.admitted if sid in started]
    assert len(set(started)) == len(started)

    messages = history.messages(events)
    for sid in driver.admitted:
        settlement = records[SubmissionId(sid)].settlement
        assert settlement is not None
        answered = driver.answered[sid]
        mine = [m for m in messages if m.submissionId == sid]

        # Every outcome has its cause.
        if sid in driver.swept:
            assert settlement.outcome is driver.swept[sid]
        if sid in driver.restarted:
            assert settlement == driver.restarted[sid]
        if settlement.outcome is Outcome.ENDED:
            assert driver.swept.get(sid) is Outcome.ENDED
            assert (settlement.message, settlement.error) == (None, None)
        elif settlement.outcome is Outcome.COMPLETED:
            assert "text" in answered
            assert (settlement.message, settlement.error) == (None, None)
        elif settlement.outcome is Outcome.FAILED:
            assert settlement.error is not None
            if settlement.error.type is ErrorType.HARNESS_RESTARTED:
                assert sid in driver.restarted
            elif settlement.error.type is ErrorType.RUNAWAY:
                # Only a loop across answers is a runaway: never a Turn-ending pick's
                # blocked calls, however many.
                identical = "runaway: 4 identical calls of `finish` in a row"
                cut = "runaway: 4 answers in a row were cut off at the output limit"
                assert settlement.error.message in (identical, cut)
                if settlement.error.message == identical:
                    assert max(answered.count(k) for k in ("pick-open", "pick-malformed")) >= 4
                else:
                    assert answered[-4:] == ["text-cut-at-limit"] * 4
            else:
                assert settlement.error.type is ErrorType.SUBMISSION_FAILED
                assert "fail" in answered
        else:
            assert settlement.error is None
            message = settlement.message
            if message is None or message == QUEUED_SWEPT:
                assert sid in driver.swept
                assert (sid in started) is (message is None)
            elif message in (NO_SWEEP.format(wait=DRAIN_WAIT_S), NO_SWEEP_RESTART):
                assert any(kind.startswith("pick-over") for kind in answered)
                assert records[SubmissionId(sid)].run_ended
                assert (sid in driver.restarted) is (message == NO_SWEEP_RESTART)
            else:
                cutter = driver.cutter[sid]
                word = (
                    "superseded"
                    if driver.requests[cutter].policy is InputPolicy.SUPERSEDE
                    else "interrupted"
                )
                assert message == f"{word} by Submission {cutter}"
        if sid in driver.cutter and sid not in driver.swept and sid not in driver.restarted:
            assert settlement.outcome is Outcome.ABORTED
            assert (settlement.message or "").endswith(f"by Submission {driver.cutter[sid]}")
        if (
            sid not in driver.swept | driver.restarted.keys()
            and records[SubmissionId(sid)].run_ended
        ):
            assert settlement.message == NO_SWEEP.format(wait=DRAIN_WAIT_S)

        # A reply whose request failed is kept, marked failed: the run's last message.
        failed = [m for m in mine if m.status is MessageStatus.FAILED]
        provider_failed = (
            settlement.error is not None
            and settlement.error.type is ErrorType.SUBMISSION_FAILED
            and sid not in driver.swept | driver.restarted.keys()
        )
        if provider_failed:
            assert [(m.content, m.projection) for m in failed] == [
                (f"Partial words of {sid}", Projection.ASSISTANT_MARKED)
            ]
            assert mine[-1] == failed[0]
        elif failed:
            # The request failed, and a sweep or a restart settled the run before it
            # concluded: the record keeps the reply, the sweep's word settles it.
            assert "fail" in answered
            assert sid in driver.swept | driver.restarted.keys()
            assert mine[-1] == failed[0]

        # A cut reply is marked by the first stop that cut it.
        cut = [
            m
            for m in mine
            if m.role is Role.ASSISTANT
            and m.status not in (MessageStatus.COMPLETE, MessageStatus.FAILED)
        ]
        assert len(cut) <= 1
        for reply in cut:
            assert driver.stops[sid], f"{sid} has a cut reply but was never stopped"
            assert (reply.status, reply.projection) == driver.stops[sid][0], (
                sid,
                reply,
                driver.stops[sid],
            )

        # Every tool call in the record has its answer, in order.
        check_calls_answered(mine)

        # No model request follows a Turn-ending pick.
        check_nothing_after_turn_over(events, sid)

    # Every prompt is one a provider accepts: each call answered by its results, in
    # order, and its arguments one JSON object.
    for prompt in world.model.prompts:
        check_prompt(prompt)

    assert world.metric("kubeturn_harness_runs_active") == 0
    assert world.metric("kubeturn_harness_submissions_settled_total") == len(driver.admitted)
    assert world.metric("kubeturn_harness_submissions_admitted_total") == len(driver.admitted)


def check_calls_answered(mine: list[Message]) -> None:
    """Every call of a complete answer has its result next; a cut or failed reply's calls
    never ran, and no prompt carries them."""
    for index, message in enumerate(mine):
        if message.role is not Role.ASSISTANT or not message.toolCalls:
            continue
        if message.status is not MessageStatus.COMPLETE:
            assert index == len(mine) - 1, "a cut or failed reply is its run's last message"
            continue
        answers = mine[index + 1 : index + 1 + len(message.toolCalls)]
        assert [(a.role, a.toolCallId) for a in answers] == [
            (Role.TOOL, call.id) for call in message.toolCalls
        ]


def check_prompt(prompt: list[dict[str, Any]]) -> None:
    waiting: list[str] = []
    for entry in prompt:
        if entry["role"] == "tool":
            assert waiting, f"a result that answers no call: {entry}"
            assert entry["tool_call_id"] == waiting.pop(0)
            continue
        assert waiting == [], f"calls left unanswered: {waiting}"
        for call in entry.get("tool_calls", ()):
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
            waiting.append(call["id"])


def check_nothing_after_turn_over(events: list[StreamEvent], sid: str) -> None:
    over = False
    for event in events:
        if event.data.get("submissionId") != sid:
            continue
        if event.type is EventType.PICK_SENT and event.data["turnComplete"]:
            over = True
        elif event.type is EventType.MODEL_REQUESTED:
            assert not over, f"{sid} asked the model again after its Turn was over"


@ORDERINGS
@given(
    ops=st.lists(OPERATIONS, min_size=4, max_size=16),
    drain=st.sampled_from(["sweep", "answer"]),
)
@example(
    # A restart right after a sweep woke the run waiting for it, with a Submission
    # admitted behind it: the close lost its cancellation and started that Submission,
    # then waited for its run forever.
    ops=[
        ("time", None),
        ("admit", (InputPolicy.QUEUE, Projection.ASSISTANT_MARKED)),
        ("answer", "pick-over-then-more"),
        ("admit", (InputPolicy.INTERRUPT, Projection.ASSISTANT_MARKED)),
        ("answer", "pick-over-then-more"),
        ("reach-model", None),
        ("reach-model", None),
        ("admit", (InputPolicy.QUEUE, Projection.SYSTEM_NOTE)),
        ("reach-model", None),
        ("reach-model", None),
        ("sweep", "pick-running"),
        ("admit", (InputPolicy.QUEUE, Projection.ASSISTANT_MARKED)),
        ("restart", None),
        ("answer", "pick-open"),
        ("answer", "pick-over-then-more"),
        ("sweep", "pick-running"),
    ],
    drain="answer",
)
def test_any_ordering_settles_every_submission_once_as_the_orchestrator_says(
    ops: list[Op], drain: str
) -> None:
    async def scenario(directory: Path) -> None:
        world = make_world(directory, sweep_wait_s=DRAIN_WAIT_S)
        driver = Driver(world)
        try:
            for step, op in enumerate(ops):
                async with bounded(world, f"step {step} {op}"):
                    await driver.run(op)
            async with bounded(world, f"the drain by {drain}"):
                await driver.drain(drain)
            before = world.log.next_offset
            assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", "s-1"))) is False
            assert world.log.next_offset == before
            check_invariants(driver)
            for settlement in world.settlements():
                hypothesis.event(
                    f"settled {settlement.outcome.value}: {settlement.message or ''}"[:40]
                )
        finally:
            async with bounded(world, "the close"):
                await world.conversation.close()
        assert asyncio.all_tasks() == {asyncio.current_task()}

    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(Path(directory)))


# ----------------------------------------------------------------------------- the two ends

SweepTiming = tuple[str, int]


async def turn_over_run(
    directory: Path, timing: SweepTiming, open_picks: int, extra: list[str]
) -> tuple[Settlement, list[tuple[str, str, str]], list[str]]:
    """One Submission whose pick ends its Turn; the sweep lands as ``timing`` says."""
    world = make_world(directory, sweep_wait_s=5.0)
    sid = SubmissionId("s-1")
    body = sweep_body("pick", sid)
    background: list[asyncio.Task[bool]] = []

    async def late_sweep(ticks: int) -> bool:
        for _ in range(ticks):
            await asyncio.sleep(0)
        return await world.conversation.sweep(Sweep.parse(body))

    async def on_pick(payload: dict[str, Any]) -> None:
        if not payload.get("over", True):
            return
        where, ticks = timing
        if where == "in-pick":
            assert await world.conversation.sweep(Sweep.parse(body)) is True
        elif where == "ticks-after-receipt":
            background.append(asyncio.create_task(late_sweep(ticks)))

    world.orchestrator.on_pick = on_pick
    try:
        world.conversation.admit(sid, request(sid))
        for step in range(open_picks):
            assert await world.model.wait_pending() is not None
            world.model.release(model_answer("pick-open", sid, step))
        assert await world.model.wait_pending() is not None
        calls = [
            *CALLS["pick-over"],
            *[CALLS["pick-open"][0] if e == "finish" else ("nope", "{}") for e in extra],
        ]
        world.model.release(
            ModelAnswer(
                text="",
                tool_calls=[
                    ToolCall(id=f"final-{i}", name=name, arguments=arguments)
                    for i, (name, arguments) in enumerate(calls)
                ],
                usage=None,
            )
        )
        if timing[0] == "after-run-ended":
            async with asyncio.timeout(5):
                while not world.records()[sid].run_ended:
                    await asyncio.sleep(0)
            assert world.records()[sid].settlement is None
            assert await world.conversation.sweep(Sweep.parse(body)) is True
        await world.wait_idle()
        for task in background:
            assert await task is True
        assert world.model.pending is None
        assert world.model.requests == [sid] * (open_picks + 1)
        settlements = world.settlements()
        assert len(settlements) == 1
        messages = [
            (m.role.value, m.content, m.status.value) for m in history.messages(world.log.events)
        ]
        tool_texts = [m.content for m in history.messages(world.log.events) if m.role is Role.TOOL]
        return settlements[0], messages, tool_texts
    finally:
        await world.conversation.close()


TIMINGS = st.one_of(
    st.just(("in-pick", 0)),
    st.tuples(st.just("ticks-after-receipt"), st.integers(0, 12)),
    st.just(("after-run-ended", 0)),
)


@ORDERINGS
@given(
    timing=TIMINGS,
    open_picks=st.integers(0, 2),
    extra=st.lists(st.sampled_from(["finish", "nope"]), max_size=2),
)
def test_a_turn_over_settles_ended_whether_the_sweep_lands_before_or_after_the_run_ends(
    timing: SweepTiming, open_picks: int, extra: list[str]
) -> None:
    async def both() -> None:
        with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
            settled, record, tools = await turn_over_run(Path(first), timing, open_picks, extra)
            baseline = await turn_over_run(Path(second), ("after-run-ended", 0), open_picks, extra)
        assert settled.outcome is Outcome.ENDED
        assert (settled.message, settled.error) == (None, None)
        assert (settled.outcome, record) == (baseline[0].outcome, baseline[1])
        assert tools[-len(extra) - 1] == (
            "Your pick `finish` was delivered, and the workflow took it. Your turn is over."
        )
        assert tools[len(tools) - len(extra) :] == [AFTER_TURN_END] * len(extra)
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(both())


# ----------------------------------------------------------------------------- plain cases


async def test_a_sweep_while_nothing_runs_answers_false_and_writes_nothing(
    tmp_path: Path,
) -> None:
    world = make_world(tmp_path / "conversation", sweep_wait_s=0.2)
    try:
        for raw in (b"", sweep_body("pick", "s-1"), b"{"):
            assert await world.conversation.sweep(Sweep.parse(raw)) is False
        assert world.log.events == []
        assert not (tmp_path / "conversation").exists()

        sid = SubmissionId("s-1")
        world.conversation.admit(sid, request(sid))
        assert await world.model.wait_pending() is not None
        world.model.release(model_answer("text", sid, 1))
        await world.wait_idle()
        assert world.records()[sid].settlement is not None
        before = world.log.next_offset
        assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", sid))) is False
        assert world.log.next_offset == before
        assert [s.outcome for s in world.settlements()] == [Outcome.COMPLETED]
    finally:
        await world.conversation.close()


@pytest.mark.looptime
async def test_a_turn_over_with_no_sweep_settles_aborted_after_the_wait(tmp_path: Path) -> None:
    world = make_world(tmp_path, sweep_wait_s=0.2)
    sid = SubmissionId("s-1")
    try:
        world.conversation.admit(sid, request(sid))
        assert await world.model.wait_pending() is not None
        world.model.release(model_answer("pick-over", sid, 1))
        loop = asyncio.get_running_loop()
        started = loop.time()
        await world.wait_idle()
        assert loop.time() - started >= 0.15
        (settlement,) = world.settlements()
        assert settlement.outcome is Outcome.ABORTED
        assert settlement.message == (
            "the run found its Turn over, but no sweep came from the Orchestrator within 0.2 s"
        )
        assert world.records()[sid].run_ended
        assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", sid))) is False
        assert world.model.requests == [sid]
    finally:
        await world.conversation.close()


async def test_without_an_orchestrator_a_sweep_cuts_the_model_request(tmp_path: Path) -> None:
    world = make_world(tmp_path, sweep_wait_s=0.2, menu=False)
    first, second = SubmissionId("s-1"), SubmissionId("s-2")
    try:
        world.conversation.admit(first, request(first))
        assert await world.model.wait_pending() is not None
        assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", first))) is True
        world.conversation.admit(second, request(second))
        await world.model.wait_request_of(second)
        world.model.release(model_answer("text", second, 1))
        await world.wait_idle()

        assert [(s.submissionId, s.outcome) for s in world.settlements()] == [
            (first, Outcome.ENDED),
            (second, Outcome.COMPLETED),
        ]
        cut = history.messages(world.log.events)[1]
        assert (cut.role, cut.content, cut.status, cut.projection) == (
            Role.ASSISTANT,
            "Partial words of s-1",
            MessageStatus.INTERRUPTED,
            Projection.ASSISTANT_MARKED,
        )
        (projection,) = world.conversation.history().projections
        assert projection.submissionId == second
        assert [(d.messageId, d.projectedAs) for d in projection.decisions] == [
            (cut.id, Projection.ASSISTANT_MARKED)
        ]
        tools = [e for e in world.log.events if e.type is EventType.PICK_SENT]
        assert tools == []
    finally:
        await world.conversation.close()


async def test_a_sweep_after_a_supersede_keeps_the_reply_superseded(tmp_path: Path) -> None:
    """The supersede cut the run; a sweep lands before the cut does, and settles it."""
    world = make_world(tmp_path, sweep_wait_s=0.2)
    first, superseding, third = SubmissionId("s-1"), SubmissionId("s-2"), SubmissionId("s-3")
    try:
        world.conversation.admit(first, request(first))
        assert await world.model.wait_pending() is not None
        world.conversation.admit(superseding, request(superseding, InputPolicy.SUPERSEDE))
        assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", first))) is True
        world.conversation.admit(third, request(third))
        await world.model.wait_request_of(third)
        world.model.release(model_answer("text", third, 1))
        await world.wait_idle()

        assert [(s.submissionId, s.outcome, s.message) for s in world.settlements()] == [
            (superseding, Outcome.ABORTED, QUEUED_SWEPT),
            (first, Outcome.ENDED, None),
            (third, Outcome.COMPLETED, None),
        ]
        (cut,) = [
            m for m in history.messages(world.log.events) if m.status is not MessageStatus.COMPLETE
        ]
        assert (cut.submissionId, cut.status, cut.projection) == (
            first,
            MessageStatus.SUPERSEDED,
            Projection.OMIT,
        )
        (projection,) = world.conversation.history().projections
        assert [(d.messageId, d.projectedAs) for d in projection.decisions] == [(cut.id, None)]
        prompt = json.dumps(world.model.prompts[-1])
        assert "Partial words of s-1" not in prompt
    finally:
        await world.conversation.close()


async def test_a_close_right_after_a_sweep_woke_the_run_starts_nothing(tmp_path: Path) -> None:
    """The sweep settles the run waiting for it and wakes its worker; the close lands
    before the worker runs again. The close must still stop it: the Submission admitted
    behind stays queued, unstarted, for the next process to run."""
    world = make_world(tmp_path, sweep_wait_s=5.0)
    first, second = SubmissionId("s-1"), SubmissionId("s-2")
    try:
        world.conversation.admit(first, request(first))
        assert await world.model.wait_pending() is not None
        world.model.release(model_answer("pick-over", first, 1))
        async with asyncio.timeout(STEP_LIMIT_S):
            while not world.records()[first].run_ended:
                await asyncio.sleep(0)
        # No await from the sweep to the close: the worker has not run in between.
        assert await world.conversation.sweep(Sweep.parse(sweep_body("pick", first))) is True
        world.conversation.admit(second, request(second))
        async with bounded(world, "the close after the sweep"):
            await world.conversation.close()

        assert world.model.requests == [first]
        assert not world.records()[second].started
        assert [(s.submissionId, s.outcome) for s in world.settlements()] == [
            (first, Outcome.ENDED)
        ]
        await world.restart()
        await world.model.wait_request_of(second)
        world.model.release(model_answer("text", second, 1))
        await world.wait_idle()
        assert [(s.submissionId, s.outcome) for s in world.settlements()] == [
            (first, Outcome.ENDED),
            (second, Outcome.COMPLETED),
        ]
    finally:
        await world.conversation.close()
