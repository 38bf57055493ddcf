"""One Submission's run: read the surface, then model requests and tool calls, step by step.

The run decides nothing about how its Turn ended. It returns how it stopped
(``Completed``, ``TurnOver``, ``NeverPrompted``) or raises ``RunFailed``; the
conversation settles it. The rules it keeps (docs/turn-semantics.md §3):

- the surface is read fresh before any model request; a 404 means the Turn was over
  before it started: no prompt, nothing written;
- only the first pick of one model answer runs; later picks of that answer are stale;
- a pick whose answer ends the Turn (``turnComplete`` or 404) blocks every later call of
  that answer, and the run ends at the step boundary: no further model request;
- a cancelled run (a sweep, an ``interrupt``) keeps what the model had said, marked as
  cut, and answers every call it had not run, so the record stays a valid conversation;
- a model request that fails midway keeps what had streamed, marked ``failed``, and the
  usage reported so far; none of its calls runs (the run then fails);
- while a model answer streams, how far it has come is reported (``model-streamed``,
  throttled by ``stream_progress``), never once its Submission has settled;
- a call whose arguments are not one JSON object does not run, and neither does the last
  call of an answer the output limit cut; the model reads why and may try again. An
  answer with no call that the output limit cut is followed by a note asking the model
  to go on, and the run goes on (ADR 0073).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from opentelemetry import trace
from opentelemetry.context import Context

from kubeturn_harness import briefing, pricing, receipts, tracing
from kubeturn_harness.clock import Clock
from kubeturn_harness.errors import (
    MenuUnreadable,
    RequestAfterEnd,
    RunFailed,
    ToolboxUnavailable,
)
from kubeturn_harness.history import SubmissionRecord
from kubeturn_harness.metrics import HarnessMetrics
from kubeturn_harness.models import Finish, ModelAnswer, ModelPort, ModelRequest, Partial
from kubeturn_harness.orchestrator import (
    Delivered,
    Gone,
    Lost,
    OrchestratorPort,
    PickResult,
    Refused,
    Rejected,
    await_answer,
    deliver,
    read_surface,
)
from kubeturn_harness.pricing import Price
from kubeturn_harness.projection import OpenAIMessage, arguments_object, project, to_openai
from kubeturn_harness.providers import ModelName, Providers
from kubeturn_harness.runaway import RunawayWatch
from kubeturn_harness.sandbox.client import Session, Toolbox
from kubeturn_harness.sandbox.protocol import Kind
from kubeturn_harness.store import ConversationLog
from kubeturn_harness.stream_progress import (
    STREAM_PROGRESS_S,
    STREAM_PROGRESS_TOKENS,
    StreamThrottle,
)
from kubeturn_harness.tools import ToolArgumentError, ToolSpec, parse_arguments, working_tools
from kubeturn_harness.wire import (
    ErrorType,
    EventType,
    MenuItem,
    Message,
    MessageStatus,
    Projection,
    ProjectionRecord,
    Role,
    Streamed,
    ToolCall,
    Usage,
    WorkspaceAccess,
    total_usage,
)

log = logging.getLogger(__name__)

NOT_RUN_STOPPED = "This call did not run: the turn was stopped before it ran."
CUT_WHILE_RUNNING = "This call was cut off before it finished: the turn was stopped."
REQUEST_AFTER_END = "a model request after its Turn ended was refused"
"""What the log says each time ``kubeturn_harness_model_requests_after_turn_end`` counts
one: the scenario tests read it in every Harness's log, restarted ones' too."""
RECEIPT_AFTER_CUT_S = 5.0
"""How long a cut run still waits for the receipt of a pick it had sent: the Orchestrator
answers within a round trip of its sweep, and the record should say what the pick did."""


@dataclass
class Tally:
    """Tokens a run has used so far; the caller holds it, so a cut run's count survives."""

    usage: Usage | None = None
    """Of the model requests that ended."""
    asking: tuple[Partial, Price | None] | None = None
    """The model request under way: its answer so far, and its model's price."""

    def add(self, usage: Usage | None) -> None:
        if usage is None:
            return
        self.usage = usage if self.usage is None else self.usage.plus(usage)

    @property
    def total(self) -> Usage | None:
        """What the run has used, the request under way as far as it went: a settlement
        that cuts that request (a sweep settles before the cut is recorded) counts it."""
        if self.asking is None:
            return self.usage
        partial, price = self.asking
        so_far = partial.used
        return total_usage((self.usage, pricing.priced(so_far, price) if so_far else None))


@dataclass(frozen=True)
class Completed:
    """The model stopped calling tools while the Turn was still open."""


@dataclass(frozen=True)
class TurnOver:
    """A pick found the Turn over; the Submission now waits for the sweep."""


@dataclass(frozen=True)
class NeverPrompted:
    """The surface read answered 404: the Turn was over before the run began."""


RunResult = Completed | TurnOver | NeverPrompted


@dataclass(frozen=True)
class Limits:
    max_steps: int
    max_identical_calls: int
    surface_retry_s: float
    pick_retry_s: float
    stream_progress_tokens: int = STREAM_PROGRESS_TOKENS
    """Output pieces between two ``model-streamed`` reports of one request, at the least."""
    stream_progress_s: float = STREAM_PROGRESS_S
    """Seconds between two ``model-streamed`` reports of one request, at the least."""


@dataclass(frozen=True)
class RunEnv:
    """Everything a run needs from outside: ports, configuration, the clock."""

    model: ModelPort
    orchestrator: OrchestratorPort | None
    providers: Providers
    clock: Clock
    metrics: HarnessMetrics
    toolbox: Toolbox
    limits: Limits
    default_model: str | None
    tracer: trace.Tracer = field(default_factory=trace.NoOpTracer)
    """Where the run's ``chat`` and ``execute_tool`` spans go (ADR 0107)."""


CutMark = Callable[[], tuple[MessageStatus, Projection]]
"""How a reply cut by this run's cancellation is marked; asked at the moment of the cut."""


@dataclass
class _Run:
    submission: SubmissionRecord
    log: ConversationLog
    env: RunEnv
    cut_mark: CutMark
    tally: Tally
    prompt: list[OpenAIMessage] = field(default_factory=list)
    sequence: int = 0
    trace: Context | None = None
    """The Turn's trace context its spans are children of; None: none is made."""

    def record(self, message: Message) -> None:
        self.log.append(EventType.MESSAGE_APPENDED, {"message": message.model_dump(mode="json")})
        self.prompt.append(to_openai(message))

    def message(self, role: Role, content: str = "", **extra: Any) -> Message:
        self.sequence += 1
        return Message(
            id=f"{self.submission.id}.{self.sequence}",
            submissionId=self.submission.id,
            role=role,
            content=content,
            **extra,
        )


async def run_submission(
    submission: SubmissionRecord,
    earlier: list[Message],
    log: ConversationLog,
    env: RunEnv,
    cut_mark: CutMark,
    tally: Tally,
) -> RunResult:
    """Run one Submission to the point where it stops; see the module docstring."""
    request = submission.request
    menu: list[MenuItem] = []
    allowed: list[str] = []
    notices = list(request.notices)
    if env.orchestrator is not None:
        surface = await read_surface(
            env.orchestrator,
            log.instance_id,
            env.clock,
            budget_s=env.limits.surface_retry_s,
        )
        if surface is None:
            return NeverPrompted()
        menu, allowed = surface.menu, surface.allowed
        notices.extend(surface.notices)

    access = request.definition.workspace
    tools = working_tools(access)
    menu_by_name = _menu(menu, {spec.name for spec in tools})
    model_name = env.providers.resolve(request.model or env.default_model or "")

    run = _Run(submission, log, env, cut_mark, tally, trace=tracing.parent(request.traceparent))
    run.prompt.append({"role": "system", "content": request.definition.instructions})
    if request.continue_:
        projected, decisions = project(earlier)
        run.prompt.extend(projected)
        if decisions:
            record = ProjectionRecord(submissionId=submission.id, decisions=decisions)
            log.append(EventType.PROJECTION_RECORDED, record.model_dump(mode="json"))
    cwd = None if access is WorkspaceAccess.NONE else request.resolved_cwd
    block = briefing.briefing(cwd=cwd, allowed=allowed, has_menu=bool(menu), notices=notices)
    run.record(run.message(Role.USER, request.prompt, briefing=block))

    specs = [*(spec.openai() for spec in tools), *(_menu_tool(item) for item in menu)]
    working = _Tools(env.toolbox, Path(request.resolved_cwd), access, env.metrics)
    watch = RunawayWatch(
        max_identical=env.limits.max_identical_calls, max_steps=env.limits.max_steps
    )
    tool_specs = {spec.name: spec for spec in tools}
    try:
        while True:
            if reason := watch.step():
                raise RunFailed(f"runaway: {reason}", error_type=ErrorType.RUNAWAY)
            answer = await _ask(
                run, ModelRequest(model_name, list(run.prompt), specs, request.thinkingLevel)
            )
            cut_at_limit = answer.finish is Finish.LENGTH
            if reason := watch.answered(cut_at_limit=cut_at_limit):
                _answer(run, answer.tool_calls, f"This call did not run: {reason}.")
                raise RunFailed(f"runaway: {reason}", error_type=ErrorType.RUNAWAY)
            if not answer.tool_calls:
                if not cut_at_limit:
                    return Completed()
                run.record(run.message(Role.USER, briefing=receipts.CUT_AT_LIMIT_NOTE))
                continue
            turn_over = await _calls(
                run,
                answer.tool_calls,
                tool_specs,
                menu_by_name,
                working,
                watch,
                cut_at_limit=cut_at_limit,
            )
            if turn_over:
                return TurnOver()
    finally:
        await working.close()


@dataclass
class _Tools:
    """The run's session of the toolbox, opened at its first Working tool call and
    closed when the run stops: the toolbox then ends every process it started."""

    toolbox: Toolbox
    cwd: Path
    access: WorkspaceAccess
    metrics: HarnessMetrics
    session: Session | None = None

    async def run(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            if self.session is None:
                self.session = await self.toolbox.session(
                    Kind.TOOLS, cwd=self.cwd, access=self.access
                )
                confined = self.session.opened.landlock
                self.metrics.tool_sessions.labels(landlock=str(confined)).inc()
                if not confined:
                    log.warning("the tools in %s run unconfined: no Landlock here", self.cwd)
            result = await self.session.call(name, arguments)
        except ToolboxUnavailable as error:
            await self.close()
            return f"The call of `{name}` could not run: {error}. You may call it again."
        return result.text

    async def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            await session.close()


async def _ask(run: _Run, request: ModelRequest) -> ModelAnswer:
    """One model request; a cut answer is recorded as far as it went."""
    if run.submission.settlement is not None:
        run.env.metrics.requests_after_end.inc()
        log.error("%s: Submission %s", REQUEST_AFTER_END, run.submission.id)
        raise RequestAfterEnd(run.submission.id)
    run.log.append(
        EventType.MODEL_REQUESTED,
        {
            "submissionId": run.submission.id,
            "model": f"{request.model.provider.name}/{request.model.model}",
        },
    )
    run.env.metrics.model_requests.inc()
    partial = Partial()
    partial.on_delta = _Streaming.of(run, request.model, partial)
    provider = request.model.provider.spec.type.value
    with tracing.span(
        run.env.tracer,
        f"chat {request.model.model}",
        run.trace,
        kind=trace.SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.system": provider,
            "gen_ai.request.model": request.model.model,
            "kubeturn.submission": run.submission.id,
        },
        cuts=(asyncio.CancelledError,),
    ) as span:
        run.tally.asking = (partial, request.model.price)
        try:
            answer = await run.env.model.complete(request, partial)
        except asyncio.CancelledError:
            _record_partial(run, request.model, partial, *run.cut_mark())
            _usage(span, partial.usage)
            raise
        except Exception:
            if partial.text or partial.tool_calls or partial.usage is not None:
                _record_partial(
                    run, request.model, partial, MessageStatus.FAILED, Projection.ASSISTANT_MARKED
                )
            _usage(span, partial.usage)
            raise
        _usage(span, answer.usage)
        span.set_attribute("gen_ai.response.finish_reasons", [answer.finish.value])
    usage = _account(run, request.model, answer.usage)
    run.record(run.message(Role.ASSISTANT, answer.text, toolCalls=answer.tool_calls, usage=usage))
    return answer


@dataclass
class _Streaming:
    """Reports how far one model request has streamed (``model-streamed``), as often as
    its throttle allows: each report's usage is what the answer has used so far as far as
    it is known (``Partial.used``: the prompt's tokens where the provider reported them
    as the stream began, the output streamed), priced. None once the Submission has
    settled: a sweep settles it before its cut reaches the stream, and pieces the adapter
    has already read still come."""

    run: _Run
    model: ModelName
    partial: Partial
    throttle: StreamThrottle

    @classmethod
    def of(cls, run: _Run, model: ModelName, partial: Partial) -> _Streaming:
        limits = run.env.limits
        started = run.env.clock.monotonic()
        throttle = StreamThrottle(limits.stream_progress_tokens, limits.stream_progress_s, started)
        return cls(run, model, partial, throttle)

    def __call__(self, tokens: int) -> None:
        run = self.run
        if not self.throttle.due(run.env.clock.monotonic) or run.submission.settlement is not None:
            return
        streamed = Streamed(
            submissionId=run.submission.id,
            outputTokens=tokens,
            usage=pricing.priced(self.partial.used or Usage(), self.model.price),
        )
        run.log.append(EventType.MODEL_STREAMED, streamed.model_dump(mode="json"))


def _account(run: _Run, model: ModelName, usage: Usage | None) -> Usage | None:
    """Price one request's usage, add it to the run's tally and to the counters; the
    priced usage goes on the assistant message, so a follower of the conversation stream
    sees each request's tokens and cost as it ends."""
    run.tally.asking = None
    if usage is None:
        return None
    usage = pricing.priced(usage, model.price)
    run.tally.add(usage)
    run.env.metrics.account(run.log.name, model.label, usage)
    return usage


def _usage(span: trace.Span, usage: Usage | None) -> None:
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.promptTokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completionTokens)


def _record_partial(
    run: _Run,
    model: ModelName,
    partial: Partial,
    status: MessageStatus,
    projection: Projection,
) -> None:
    """What a cut or failed answer had said, its calls as far as they streamed (they never
    run, and no prompt carries them) and the usage reported so far, which counts. A
    provider that reported none before the cut (most report usage only at a stream's end)
    is taken at the pieces it streamed: the output the answer was billed for, at least
    (ADR 0117)."""
    usage = _account(run, model, partial.used)
    calls = [partial.tool_calls[index] for index in sorted(partial.tool_calls)]
    run.record(
        run.message(
            Role.ASSISTANT,
            partial.content,
            toolCalls=calls,
            status=status,
            projection=projection,
            usage=usage,
        )
    )


class _Cut(Exception):
    """The run was cut while a call ran; ``text`` is what that call did, for the record."""

    def __init__(self, text: str, *, turn_over: bool) -> None:
        super().__init__(text)
        self.text = text
        self.turn_over = turn_over


async def _calls(
    run: _Run,
    calls: list[ToolCall],
    tools: dict[str, ToolSpec],
    menu: dict[str, _MenuTool],
    working: _Tools,
    watch: RunawayWatch,
    *,
    cut_at_limit: bool,
) -> bool:
    """Run one model answer's calls in order; True when a pick found the Turn over.

    Every call gets a result in the record, also when the run is cut or ends as a
    runaway, so a continued conversation stays a valid one. ``cut_at_limit``: the output
    limit cut the answer, so its last call is incomplete and never runs.
    """
    first_pick: str | None = None
    turn_over = False
    for index, call in enumerate(calls):
        rest = calls[index + 1 :]
        if turn_over:
            _answer(run, [call], receipts.AFTER_TURN_END)
            continue
        verdict = _judge(call, tools, menu, first_pick, cut=cut_at_limit and not rest)
        if reason := watch.call(call.name, call.arguments):
            _answer(run, [call, *rest], f"This call did not run: {reason}.")
            raise RunFailed(f"runaway: {reason}", error_type=ErrorType.RUNAWAY)
        try:
            with tracing.span(
                run.env.tracer,
                f"execute_tool {call.name}",
                run.trace,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.name,
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.tool.type": "function",
                    "kubeturn.pick": call.name in menu,
                    "kubeturn.submission": run.submission.id,
                },
                cuts=(asyncio.CancelledError, _Cut),
            ) as span:
                if isinstance(verdict, str):
                    text = verdict
                    span.set_attribute("kubeturn.refused", True)
                elif isinstance(verdict, _Stale):
                    run.env.metrics.picks.labels(result="stale").inc()
                    text = receipts.stale_pick(verdict.first_pick)
                    span.set_attribute("kubeturn.refused", True)
                elif isinstance(verdict, _Payload):
                    text, over = await _pick(run, menu[call.name], verdict.payload)
                    first_pick, turn_over = call.name, over
                    span.set_attribute("kubeturn.turn_complete", over)
                else:
                    text = await _work(call, tools[call.name], working, run.env.metrics)
        except _Cut as cut:
            _answer(run, [call], cut.text)
            _answer(run, rest, receipts.AFTER_TURN_END if cut.turn_over else NOT_RUN_STOPPED)
            raise asyncio.CancelledError from None
        except asyncio.CancelledError:
            _answer(run, [call], CUT_WHILE_RUNNING)
            _answer(run, rest, NOT_RUN_STOPPED)
            raise
        _answer(run, [call], text)
    return turn_over


@dataclass(frozen=True)
class _Stale:
    """A pick after the answer's first pick: the model wrote it before reading that answer."""

    first_pick: str


@dataclass(frozen=True)
class _Payload:
    """A pick to send, its payload checked against the Menu's schema."""

    payload: dict[str, Any]


@dataclass(frozen=True)
class _Work:
    """A Working tool call to run."""


def _judge(
    call: ToolCall,
    tools: dict[str, ToolSpec],
    menu: dict[str, _MenuTool],
    first_pick: str | None,
    *,
    cut: bool,
) -> str | _Stale | _Payload | _Work:
    """What becomes of one call before anything runs: the text of a call that cannot run
    (the model's own fault), a stale pick, a pick to send, or a Working tool call."""
    pick = call.name in menu
    if call.name not in tools and not pick:
        known = ", ".join([*tools, *menu]) or "none"
        return f"There is no tool `{call.name}`. Your tools: {known}."
    arguments = arguments_object(call.arguments)
    if cut:
        return receipts.cut_at_limit(call.name, pick=pick, placeholder=isinstance(arguments, str))
    if isinstance(arguments, str):
        return receipts.malformed(call.name, arguments, pick=pick)
    if not pick:
        return _Work()
    if problem := _payload_problem(arguments, menu[call.name]):
        return f"Your pick `{call.name}` was not sent: {problem}"
    if first_pick is not None:
        return _Stale(first_pick)
    return _Payload(arguments)


def _answer(run: _Run, calls: list[ToolCall], text: str) -> None:
    for call in calls:
        run.record(run.message(Role.TOOL, text, toolCallId=call.id))


async def _work(call: ToolCall, spec: ToolSpec, working: _Tools, metrics: HarnessMetrics) -> str:
    metrics.tool_calls.labels(tool=spec.name).inc()
    try:
        arguments = parse_arguments(spec, call.arguments or "{}")
    except ToolArgumentError as error:
        return f"The call of `{spec.name}` did not run: {error}"
    return await working.run(spec.name, arguments)


async def _pick(run: _Run, tool: _MenuTool, payload: dict[str, Any]) -> tuple[str, bool]:
    """One pick sent: (what the model reads, whether the Turn is over).

    Raises ``_Cut`` when the run was cut while the pick was out: a sent pick's receipt
    belongs in the record even then (the sweep usually lands before the receipt).
    """
    item = tool.item
    orchestrator = run.env.orchestrator
    assert orchestrator is not None, "a Menu exists only where an Orchestrator does"
    result, polled, cut = await _deliver(
        orchestrator, run, item.name, payload, key=uuid.uuid4().hex
    )
    if isinstance(result, Delivered):
        over = result.receipt.turnComplete or result.receipt.stopped
        if cut and not over and result.receipt.outstanding:
            text = receipts.cut_before_answer(item.name)
        else:
            text = receipts.receipt(item.name, result.receipt, polled=polled)
        kind = "turn-complete" if over else "delivered"
    elif isinstance(result, Gone):
        over, text, kind = True, receipts.turn_over(item.name), "gone"
    elif isinstance(result, Refused):
        over, text, kind = False, receipts.refusal(item.name, result.refusal), "refused"
    elif isinstance(result, Rejected):
        over, text, kind = False, receipts.rejected(item.name, result.message), "rejected"
    else:
        over, text, kind = False, receipts.undeliverable(item.name, result.reason), "lost"
    run.env.metrics.picks.labels(result=kind).inc()
    run.log.append(
        EventType.PICK_SENT,
        {
            "submissionId": run.submission.id,
            "event": item.name,
            "result": kind,
            "deliveryId": result.receipt.deliveryId if isinstance(result, Delivered) else None,
            "turnComplete": over,
        },
    )
    if cut:
        raise _Cut(text, turn_over=over)
    return text, over


async def _deliver(
    orchestrator: OrchestratorPort, run: _Run, event: str, payload: dict[str, Any], *, key: str
) -> tuple[PickResult, bool, bool]:
    """Send a pick (again, with its ``key``, while the Orchestrator is not there) and wait
    for its answer: (result, whether polled, whether cut)."""
    iid = run.log.instance_id
    window = run.env.limits.pick_retry_s
    sent = asyncio.ensure_future(
        deliver(orchestrator, iid, event, payload, key, run.env.clock, window_s=window)
    )
    try:
        result = await asyncio.shield(sent)
    except asyncio.CancelledError:
        try:
            async with asyncio.timeout(RECEIPT_AFTER_CUT_S):
                return await sent, False, True
        except TimeoutError:
            return Lost("the turn was stopped before the receipt came"), False, True
    if not (isinstance(result, Delivered) and result.receipt.outstanding):
        return result, False, False
    delivery = result.receipt.deliveryId
    if delivery is None:
        return result, False, False
    try:
        answer = await await_answer(orchestrator, iid, delivery)
    except asyncio.CancelledError:
        return result, False, True
    return (answer if isinstance(answer, Gone) else Delivered(answer)), True, False


@dataclass(frozen=True)
class _MenuTool:
    """A Menu item and its payload validator, built once per Submission."""

    item: MenuItem
    validator: jsonschema.protocols.Validator


def _payload_problem(payload: dict[str, Any], tool: _MenuTool) -> str | None:
    """Where a pick's payload does not fit the Menu's schema, and how; None when it fits."""
    problem = jsonschema.exceptions.best_match(tool.validator.iter_errors(payload))
    if problem is None:
        return None
    where = "/".join(str(part) for part in problem.absolute_path) or "the arguments"
    return f"{where}: {problem.message}"


def _menu(menu: list[MenuItem], working: set[str]) -> dict[str, _MenuTool]:
    """The Menu by name, its schemas checked once (a bad one makes it unreadable)."""
    by_name: dict[str, _MenuTool] = {}
    for item in menu:
        if item.name in working or item.name in by_name:
            raise MenuUnreadable(
                f"the Menu offers `{item.name}` twice or under a Working tool's name"
            )
        kind = jsonschema.validators.validator_for(item.input)
        try:
            kind.check_schema(item.input)
        except jsonschema.SchemaError as error:
            raise MenuUnreadable(
                f"the Menu's schema for `{item.name}` is not JSON Schema: {error.message}"
            ) from error
        by_name[item.name] = _MenuTool(item, kind(item.input))
    return by_name


def _menu_tool(item: MenuItem) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": item.name, "description": item.description, "parameters": item.input},
    }
