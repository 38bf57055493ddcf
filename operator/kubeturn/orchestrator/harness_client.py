"""The Orchestrator's client of a Harness: admit, follow, sweep, exec, worktrees and
forgetting a deleted Run (a ``TurnPort`` and an ``ExecPort`` over HTTP).

Admissions carry an idempotency key, so re-sending one (after a restart, or after a
failure that hid the answer) admits nothing twice. Settlements are followed on the
conversation's stream with long-polls from an offset; a failed read is retried, because
reading is safe, with the client a ``CurrentHarness`` gives then: a sandbox Pod made
again runs a new Harness, reached by a new client, whose log (on the Workspace's volume)
has the same offsets (ADR 0024, 0025); a Harness that keeps saying it has no such
conversation lost it, and the Submission followed is settled ``failed`` (ADR 0029). The
sweep answers only after the Harness recorded what it settled, so its settlements are
read back at once, each call within its own short bound (ADR 0028).

aiohttp's failures become ``HarnessUnreachable`` in one place (``HarnessClient._call``),
pydantic's ``HarnessRefused`` in another (``_decoded``); with ``ConversationLost`` they
are the ``HarnessCallFailed`` of ``kubeturn.errors``, which draws their tree. The raising
calls (``send_admit``, ``read``, ``send_sweep``, ``send_exec``, ...) raise them; the port
calls the Run's actor makes say what a failure means for the Run: ``admit`` raises
``AdmitFailed`` (the failure chained), ``sweep`` and ``run`` never raise.

It does no retrying of its own but the stream's; callers decide what is safe to repeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import TypeAdapter, ValidationError

from kubeturn.errors import (
    AdmitFailed,
    ConversationLost,
    DeliveryFailed,
    HarnessCallFailed,
    HarnessRefused,
    HarnessUnreachable,
)
from kubeturn.orchestrator.actor import Progress, Settled
from kubeturn.orchestrator.delivery import Committed
from kubeturn.orchestrator.effects import Admit, MakeWorktrees, StartExec, Sweep
from kubeturn.orchestrator.ids import InstanceId
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.worktrees import Made
from kubeturn_harness.wire import (
    AdmitResponse,
    DeliverResponse,
    ErrorBody,
    EventType,
    ExecResponse,
    Outcome,
    Role,
    RunForgotten,
    Settlement,
    StreamEvent,
    SubmissionId,
    Usage,
    WorktreesResponse,
    total_usage,
)

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Pause before reading a stream again after a failed read."""
POLL_TIMEOUT_S = 35.0
"""Above the Harness's 25 s long-poll park."""
CALL_TIMEOUT_S = 300.0
"""Any other call (aiohttp's own default): worktrees of large repos may queue behind
other Runs' at one clone, and every other call answers in milliseconds."""
SWEEP_TIMEOUT_S = 15.0
"""The sweep, and the history read back after it: a Harness that lives settles a sweep at
once (ADR 0002) and reads the history from its log in memory, in milliseconds; 15 s
leaves a loaded node room, while a Harness that accepts connections and never answers (a
frozen process) holds the sweep's caller 15 s a try instead of ``CALL_TIMEOUT_S``."""
LOST_AFTER_S = 30.0
"""How long the Harness serving now may keep saying it has no such conversation (404)
or no such offset (400) before a follower takes the conversation as lost. The Harness
of a Pod made again rebuilt every conversation from the volume before it was Ready (ADR
0025), so a refusal from it is no passing state; the wait outlasts the Workspace's look
at a Ready Harness (20 s), in case the client is about to be replaced."""
LOST_STATUSES = frozenset({400, 404})
"""A stream read's refusals that say the Harness's log is not the one being followed."""
LOST_REASON = "conversation_lost"
"""The reason of a Submission settled ``failed`` because its conversation was lost."""
CONNECT_TIMEOUT_S = 5.0
"""How long a connection may take: a Harness in the cluster's network accepts in
milliseconds, and the address of a Pod that is gone may never answer, while a follower
should turn to the Harness of the Pod made in its place."""
EXEC_GRACE_S = 30.0
"""How much longer than its own time limit an exec may take to answer."""
SAID_LIMIT = 500
"""Characters of a refusal's body kept in its message."""

T = TypeVar("T")


NOT_SENT: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectorError,
    aiohttp.ConnectionTimeoutError,
)
"""aiohttp's failures to connect: nothing of the request left this process."""
NO_ANSWER: tuple[type[Exception], ...] = (aiohttp.ClientError, TimeoutError)
"""Every failure aiohttp raises for a request before its answer was read whole."""

CurrentHarness = Callable[[], Awaitable["HarnessClient"]]
"""Gives the client of the Harness serving now (it may wait for one): a follower asks
again after every failed read, since the one it had may have been replaced."""


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


def _call_timeout(total: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total, sock_connect=CONNECT_TIMEOUT_S)


class HarnessClient:
    """One Workspace's Harness, over its wire.

    Its connections are not capped: every live Turn holds one, parked in the long-poll that
    waits for its settlement, and a cap (aiohttp's default is 100) would queue a sweep, an
    admission or a Run's worktrees behind the parked reads of as many live Turns, and
    with them the stop guarantee (ADR 0095).
    """

    def __init__(self, base_url: str, token: str) -> None:
        self._base = base_url.rstrip("/")
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"},
            connector=aiohttp.TCPConnector(limit=0),
        )

    async def close(self) -> None:
        await self._session.close()

    def _url(self, agent: str, instance_id: InstanceId, *rest: str) -> str:
        return "/".join(
            [self._base, "agents", quote(agent, safe=""), quote(instance_id, safe=""), *rest]
        )

    async def _call(
        self,
        method: str,
        url: str,
        what: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        seconds: float = CALL_TIMEOUT_S,
    ) -> _Answer:
        """One request and its whole answer: where aiohttp's failures become
        ``HarnessUnreachable`` (``what`` names the call in the message)."""
        if self._session.closed:
            raise HarnessUnreachable(
                f"the Harness could not be reached for {what}: its client was closed "
                "(the Workspace's sandbox Pod changed)",
                sent=False,
            )
        try:
            async with self._session.request(
                method, url, json=json, params=params, timeout=_call_timeout(seconds)
            ) as response:
                return _Answer(response.status, response.headers, await response.read())
        except NO_ANSWER as error:
            why = str(error) or type(error).__name__
            raise HarnessUnreachable(
                f"the Harness could not be reached for {what}: {why}",
                sent=not isinstance(error, NOT_SENT),
            ) from error

    # ------------------------------------------------------------------ TurnPort

    async def admit(self, effect: Admit) -> SubmissionId:
        """Admit one Submission (see ``send_admit``); a failed call is ``AdmitFailed``,
        with it chained."""
        try:
            return await self.send_admit(effect)
        except HarnessCallFailed as failed:
            raise AdmitFailed(str(failed)) from failed

    async def send_admit(self, effect: Admit) -> SubmissionId:
        """The raising call behind ``admit``: the Submission's id. Safe to repeat: the
        effect's key admits it once."""
        body = {
            "prompt": effect.prompt,
            "cwd": effect.cwd,
            "continue": effect.continue_,
            "model": effect.model,
            "thinkingLevel": effect.thinking_level,
            "definition": {"instructions": effect.instructions, "workspace": effect.workspace},
            "notices": [n.model_dump() for n in effect.notices],
            "key": effect.key,
            "traceparent": effect.traceparent,
        }
        body = {k: v for k, v in body.items() if v is not None}
        what = "the admission"
        answer = await self._call(
            "POST", self._url(effect.agent, effect.instance_id), what, json=body
        )
        if answer.status != 200:
            raise _refused(what, answer)
        return _decoded(_ADMITTED, answer, what).submissionId

    def follow(self, agent: str, instance_id: InstanceId) -> AsyncIterator[StreamEvent]:
        """Every event of a conversation, from its start, as it happens, at this client's
        Harness (see ``follow``). Ends only when the Harness lost the conversation."""
        return follow(self._itself, agent, instance_id)

    async def settlement(
        self, effect: Admit, submission: SubmissionId, *, progress: Progress | None = None
    ) -> Settled:
        """How the Submission settled, at this client's Harness (see ``settlement``)."""
        return await settlement(self._itself, effect, submission, progress=progress)

    async def sweep(self, effect: Sweep) -> list[Settled]:
        """Send the sweep; answer the settlements it caused. A sweep that failed settled
        nothing the Run hears of (its record says none came back): it is logged."""
        try:
            return await self.send_sweep(effect)
        except HarnessCallFailed as error:
            log.warning("sweeping %s failed: %s", effect.instance_id, error)
            return []

    # ------------------------------------------------------------------ ExecPort

    async def run(self, effect: StartExec) -> ExecResult:
        """An ``exec`` invoke, run in the Workspace by its Harness; a failed call is the
        result's error."""
        try:
            return await self.send_exec(effect)
        except HarnessCallFailed as error:
            return ExecResult(None, "", error=str(error))

    # ------------------------------------------------------------------ raising calls

    async def read(
        self,
        agent: str,
        instance_id: InstanceId,
        offset: int,
        types: Collection[EventType] | None = None,
        *,
        live: bool = True,
    ) -> tuple[list[StreamEvent], int]:
        """One long-poll read of a conversation's stream from ``offset``: its events
        (none when nothing came while the Harness parked the read), only those of
        ``types`` if given, and the offset to read on from. ``live=False`` answers at
        once with what the log holds (a page), as a transcript's reader wants."""
        what = "the stream"
        params = {"offset": str(offset)}
        if live:
            params["live"] = "long-poll"
        if types is not None:
            params["types"] = ",".join(sorted(types))
        answer = await self._call(
            "GET", self._url(agent, instance_id), what, params=params, seconds=POLL_TIMEOUT_S
        )
        if answer.status not in (200, 204):
            raise _refused(what, answer)
        events = _decoded(_EVENTS, answer, what) if answer.status == 200 else []
        return events, _next_offset(answer, offset, what)

    async def send_sweep(self, effect: Sweep) -> list[Settled]:
        """Send the sweep and read back every settlement of the conversation (a repeated
        sweep settles nothing again, so it may be sent again)."""
        body: dict[str, str] = {}
        if effect.cause is not None:
            body["cause"] = effect.cause
        if effect.submission is not None:
            body["submissionId"] = effect.submission
        url = self._url(effect.agent, effect.instance_id)
        answer = await self._call(
            "POST", url + "/abort", "the sweep", json=body, seconds=SWEEP_TIMEOUT_S
        )
        if answer.status != 200:
            raise _refused("the sweep", answer)
        return await self._settlements(url)

    async def _settlements(self, url: str) -> list[Settled]:
        """Every settlement of the conversation at ``url``, read from its stream's
        ``submission-settled`` events alone (not its history: no message is read), a page
        at a time; none when the Harness has no such conversation."""
        what = "the settlements"
        found: list[Settled] = []
        offset = 0
        while True:
            params = {"offset": str(offset), "types": EventType.SUBMISSION_SETTLED.value}
            answer = await self._call("GET", url, what, params=params, seconds=SWEEP_TIMEOUT_S)
            if answer.status == 404:
                return []
            if answer.status != 200:
                raise _refused(what, answer)
            found += _settlements_in(_decoded(_EVENTS, answer, what), answer, what)
            after = _next_offset(answer, offset, what)
            if answer.headers.get("stream-up-to-date") == "true" or after <= offset:
                return found
            offset = after

    async def send_exec(self, effect: StartExec) -> ExecResult:
        """Run an ``exec`` invoke's command (not safe to repeat unless it was not sent)."""
        body = {"command": effect.command, "cwd": effect.cwd, "timeoutSeconds": effect.timeout_s}
        what = "the exec"
        answer = await self._call(
            "POST", f"{self._base}/exec", what, json=body, seconds=effect.timeout_s + EXEC_GRACE_S
        )
        if answer.status != 200:
            raise _refused(what, answer)
        ran = _decoded(_EXECUTED, answer, what)
        return ExecResult(ran.exitCode, ran.output, timed_out=ran.timedOut)

    async def send_deliver(
        self, run: str, branch: str, slot: str, message: str, author: tuple[str, str]
    ) -> DeliverResponse:
        """Have the Harness commit the Run's worktree of ``slot`` and bundle its branch
        (safe to repeat: nothing changed since is the same commit)."""
        body = {
            "run": run,
            "branch": branch,
            "slot": slot,
            "message": message,
            "author": {"name": author[0], "email": author[1]},
        }
        what = "the delivery"
        answer = await self._call("POST", f"{self._base}/deliveries", what, json=body)
        if answer.status != 200:
            raise _refused(what, answer)
        return _decoded(_DELIVERED, answer, what)

    async def worktrees(
        self, run: str, branch: str, slots: list[str], *, base: str | None = None
    ) -> dict[str, str]:
        """The Run's worktree of each repo slot on ``branch`` (made if missing, from the
        clone, or with ``base`` from the Run's worktree on that branch): slot → path."""
        body: dict[str, Any] = {"run": run, "branch": branch, "slots": slots}
        if base is not None:
            body["base"] = base
        what = "the worktrees"
        answer = await self._call("POST", f"{self._base}/worktrees", what, json=body)
        if answer.status != 200:
            raise _refused(what, answer)
        made = _decoded(_WORKTREES, answer, what)
        return {slot: tree.path for slot, tree in made.worktrees.items()}

    async def forget_run(self, run_id: str, branch: str, *, seconds: float) -> RunForgotten:
        """Have the Harness forget a deleted Run (``<namespace>.<name>``): remove its
        worktrees on ``branch`` (the branch stays) and its conversations; what it removed.
        Safe to repeat: a second call removes nothing more."""
        what = "the forgetting of the Run"
        answer = await self._call(
            "DELETE",
            f"{self._base}/runs/{quote(run_id, safe='')}",
            what,
            params={"branch": branch},
            seconds=seconds,
        )
        if answer.status != 200:
            raise _refused(what, answer)
        return _decoded(_FORGOTTEN, answer, what)

    async def _itself(self) -> HarnessClient:
        return self


async def follow(
    current: CurrentHarness,
    agent: str,
    instance_id: InstanceId,
    types: Collection[EventType] | None = None,
) -> AsyncIterator[StreamEvent]:
    """Every event of a conversation (only those of ``types``, if given: the Harness
    sends no other), from its start, as it happens (long-polls). A failed read is retried
    from the same offset with the client ``current`` gives then; a refusal is logged
    once, not at every try. Ends only by raising ``ConversationLost``, when the Harness
    kept saying for ``LOST_AFTER_S`` that it has no such conversation or offset."""
    offset = 0
    client = await current()
    # The status of the reads refused since the last one answered (said once), and since
    # when every answer says the conversation is not there (failures to reach aside).
    refused: int | None = None
    lost_since: float | None = None
    while True:
        try:
            events, offset = await client.read(agent, instance_id, offset, types)
        except HarnessUnreachable as error:
            log.debug("following %s from %d: %s", instance_id, offset, error)
        except HarnessRefused as error:
            if error.status != refused:
                log.warning("following %s from %d: %s; trying again", instance_id, offset, error)
            refused = error.status
            if error.status not in LOST_STATUSES:
                lost_since = None
            elif lost_since is None:
                lost_since = time.monotonic()
            elif time.monotonic() - lost_since >= LOST_AFTER_S:
                raise ConversationLost(
                    f"the Harness lost the conversation {instance_id!r}: for "
                    f"{LOST_AFTER_S:g} s it answered its stream from offset {offset} with "
                    f"HTTP {error.status} ({error.said}); the Workspace's volume may have "
                    "been replaced"
                ) from error
        else:
            refused, lost_since = None, None
            for event in events:
                yield event
            continue
        await asyncio.sleep(RETRY_S)
        client = await current()


PROGRESS = frozenset(
    {
        EventType.MODEL_REQUESTED,
        EventType.MODEL_STREAMED,
        EventType.MESSAGE_APPENDED,
        EventType.PICK_SENT,
    }
)
"""The stream events that are a Submission's progress (``kubeturn.orchestrator.stalls``)."""


class Spend:
    """What a Submission has used so far, read off its stream (``kubeturn.orchestrator.
    budgets``): the priced usage on each of its model answers, and the estimate of the
    answer being streamed (``model-streamed``), which that answer's own usage replaces."""

    def __init__(self) -> None:
        self.answered: Usage | None = None
        self.streaming: Usage | None = None

    def seen(self, event: StreamEvent) -> None:
        match event.type:
            case EventType.MODEL_REQUESTED:
                self.streaming = None
            case EventType.MODEL_STREAMED:
                self.streaming = _usage(event.data.get("usage"))
            case EventType.MESSAGE_APPENDED:
                message = event.data.get("message") or {}
                if message.get("role") != Role.ASSISTANT:
                    return
                self.streaming = None
                used = _usage(message.get("usage"))
                if used is not None:
                    self.answered = used if self.answered is None else self.answered.plus(used)

    @property
    def total(self) -> Usage | None:
        return total_usage((self.answered, self.streaming))


def _usage(data: Any) -> Usage | None:
    """A usage on the stream; None when there is none, or it is not of the wire (said)."""
    if data is None:
        return None
    try:
        return Usage.model_validate(data)
    except ValidationError:
        log.warning("a usage on a conversation's stream is not of the wire: %r", data)
        return None


async def settlement(
    current: CurrentHarness,
    effect: Admit,
    submission: SubmissionId,
    *,
    progress: Progress | None = None,
) -> Settled:
    """How the Submission settled, read from its conversation's stream (``follow``); one
    whose conversation the Harness lost settled ``failed``, saying so. With ``progress``,
    the Submission's progress events (``PROGRESS``) are read too, and each is told with
    what the Submission used so far (a restart's replay of earlier ones only starts the
    stall clock again, as the restore did, and gives the spend the core already had)."""
    types = {EventType.SUBMISSION_SETTLED, *(PROGRESS if progress is not None else ())}
    spend = Spend()
    try:
        async for event in follow(current, effect.agent, effect.instance_id, types):
            if _submission_of(event) != submission:
                continue
            if event.type is EventType.SUBMISSION_SETTLED:
                return _settled(Settlement.model_validate(event.data))
            if progress is not None:
                spend.seen(event)
                await progress(spend.total)
    except ConversationLost as lost:
        return Settled(submission, Outcome.FAILED, message=str(lost), reason=LOST_REASON)
    raise AssertionError("a conversation's stream ends only by raising")


_ADMITTED = TypeAdapter(AdmitResponse)
_EVENTS = TypeAdapter(list[StreamEvent])
_EXECUTED = TypeAdapter(ExecResponse)
_DELIVERED = TypeAdapter(DeliverResponse)
_WORKTREES = TypeAdapter(WorktreesResponse)
_FORGOTTEN = TypeAdapter(RunForgotten)


def _decoded(shape: TypeAdapter[T], answer: _Answer, what: str) -> T:
    """The answer's body as ``shape``: where pydantic's failures become
    ``HarnessRefused``."""
    try:
        return shape.validate_json(answer.body)
    except ValidationError as error:
        raise _not_of_wire(what, "a body", answer, error) from error


def _not_of_wire(what: str, part: str, answer: _Answer, error: ValidationError) -> HarnessRefused:
    """The refusal of an answer whose ``part`` pydantic did not take as the wire's."""
    return HarnessRefused(
        f"the Harness answered {what} with {part} not of its wire: {error}",
        status=answer.status,
        said=answer.body.decode(errors="replace")[:SAID_LIMIT],
    )


@dataclass(frozen=True)
class HarnessCommitter:
    """The ``Committer`` of a Run whose Harness is ``client``: its ``POST /deliveries``."""

    run: str
    client: HarnessClient

    async def commit(
        self, slot: str, branch: str, message: str, author: tuple[str, str]
    ) -> Committed:
        try:
            done = await self.client.send_deliver(self.run, branch, slot, message, author)
        except HarnessRefused as refused:
            raise DeliveryFailed(one_line(refused.said or str(refused))) from refused
        except HarnessCallFailed as error:
            raise DeliveryFailed(one_line(str(error))) from error
        return Committed(done.commit, done.changed, done.bundle, done.clone)


@dataclass(frozen=True)
class HarnessWorktrees:
    """The ``WorktreePort`` of a Run whose Harness is ``client``: a fan-out child's
    worktrees, by its ``POST /worktrees`` from the Run's (ADR 0113)."""

    run: str
    client: HarnessClient

    async def make(self, effect: MakeWorktrees) -> Made:
        try:
            repos = await self.client.worktrees(
                self.run, effect.branch, list(effect.slots), base=effect.base
            )
        except HarnessRefused as refused:
            return Made(error=one_line(refused.said or str(refused)))
        except HarnessCallFailed as error:
            return Made(error=one_line(str(error)))
        return Made(repos=repos)


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces."""
    return " ".join(text.split())


def _refused(what: str, answer: _Answer) -> HarnessRefused:
    """An error answer: the message keeps the start of its body, ``said`` the Harness's
    own words (its error body's message) when it has them."""
    raw = answer.body.decode(errors="replace")[:SAID_LIMIT]
    try:
        said = ErrorBody.model_validate_json(answer.body).message
    except ValidationError:
        said = raw
    return HarnessRefused(
        f"the Harness refused {what} (HTTP {answer.status}): {raw}",
        status=answer.status,
        said=said,
    )


def _settlements_in(events: list[StreamEvent], answer: _Answer, what: str) -> list[Settled]:
    """The settlements among ``events`` (a Harness that does not know ``types`` sends
    every type); one not of the wire is ``HarnessRefused``."""
    try:
        return [
            _settled(Settlement.model_validate(event.data))
            for event in events
            if event.type is EventType.SUBMISSION_SETTLED
        ]
    except ValidationError as error:
        raise _not_of_wire(what, "a settlement", answer, error) from error


def _next_offset(answer: _Answer, offset: int, what: str) -> int:
    """The stream's offset to read on from, as the answer's header says (``offset``
    without one)."""
    try:
        return int(answer.headers.get("stream-next-offset", offset))
    except ValueError as error:
        raise HarnessRefused(
            f"the Harness answered {what} with a stream-next-offset that is no number",
            status=answer.status,
            said=str(answer.headers.get("stream-next-offset")),
        ) from error


def _submission_of(event: StreamEvent) -> str | None:
    """The Submission a stream event is of (a message carries it inside)."""
    if event.type is EventType.MESSAGE_APPENDED:
        message = event.data.get("message")
        return message.get("submissionId") if isinstance(message, dict) else None
    found = event.data.get("submissionId")
    return found if isinstance(found, str) else None


def _settled(settlement: Settlement) -> Settled:
    return Settled(
        submission=settlement.submissionId,
        outcome=settlement.outcome,
        usage=settlement.usage,
        message=settlement.message or (settlement.error.message if settlement.error else None),
        reason=settlement.error.type.value if settlement.error else None,
    )
