"""The Harness's HTTP surface (aiohttp): routes, bearer auth, and error bodies.

Auth is a middleware that runs before any handler, so an unauthenticated request gets
401 whether or not its route exists. Every refusal is a JSON ``ErrorBody`` naming the
field at fault; an unexpected error is logged and answered 500 without a traceback. Every
body is read by ``bodies`` (the Harness's one reader of JSON): one it cannot read, of
whatever depth or size, is a 4xx naming the field or the body; only the sweep takes any
body, as it must (docs/turn-semantics.md §3).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from kubeturn_harness import bodies, malformed, openapi
from kubeturn_harness.errors import NotJson, WireError
from kubeturn_harness.service import Harness
from kubeturn_harness.settlements import Sweep
from kubeturn_harness.wire import (
    MAX_INSTANCE_ID,
    SLOT_NAME,
    AbortResponse,
    AdmitRequest,
    AdmitResponse,
    DeliverRequest,
    ErrorBody,
    EventType,
    ExecRequest,
    ForgetRunRequest,
    Status,
    WorktreesRequest,
    bearer_token,
)

log = logging.getLogger(__name__)

HARNESS = web.AppKey("harness", Harness)
TOKEN_SHA256 = web.AppKey("token_sha256", str)

OPEN_PATHS = frozenset(op.path for op in openapi.OPERATIONS if op.open)
NAME = re.compile(SLOT_NAME)
PAGE = 1000
"""Events per stream read: a client behind reads on from ``stream-next-offset``."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Body = TypeVar("Body", bound=BaseModel)


def error(
    status: int, message: str, *, field: str | None = None, kind: str = "invalid"
) -> web.Response:
    body = ErrorBody(error=kind, field=field, message=message)
    return web.json_response(body.model_dump(exclude_none=True), status=status)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS:
        return await handler(request)
    expected = request.app[TOKEN_SHA256]
    token = bearer_token(request.headers.get("Authorization"))
    presented = hashlib.sha256(token.encode()).hexdigest() if token is not None else ""
    if not expected or not hmac.compare_digest(presented, expected):
        log.debug("refused %s %s: no valid bearer token", request.method, request.path)
        response = error(401, "a valid bearer token is required", kind="unauthorized")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    return await handler(request)


@web.middleware
async def answer_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except WireError as refused:
        return error(refused.status, refused.message, field=refused.field)
    except web.HTTPException as http:
        if http.status >= 400 and http.content_type != "application/json":
            return error(
                http.status, http.reason, kind="not-found" if http.status == 404 else "http"
            )
        raise
    except Exception:
        log.exception("unexpected error answering %s %s", request.method, request.path)
        return error(500, "the Harness failed to answer; see its log", kind="internal")


async def _read(request: web.Request) -> bytes:
    """The request's body; a WireError (413) for one larger than the app reads."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as large:
        limit = request.client_max_size
        raise WireError(f"the body is larger than {limit} bytes", status=413) from large


async def _body(request: web.Request, model: type[Body]) -> Body:
    """The request's JSON body as ``model``; a WireError naming the first bad field, or
    the body."""
    try:
        return model.model_validate(bodies.parse(await _read(request)))
    except NotJson as unread:
        raise WireError(unread.message, field=unread.field) from unread
    except ValidationError as invalid:
        raise _wire_error(invalid) from invalid


def _wire_error(invalid: ValidationError) -> WireError:
    """The first problem of a body, naming its field (or the body)."""
    first = invalid.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    return WireError(f"{field or 'the body'}: {message}", field=field)


def _agent(request: web.Request) -> tuple[str, str]:
    name, instance_id = request.match_info["name"], request.match_info["id"]
    if not NAME.match(name):
        raise WireError(f"agent name {name!r} must match {NAME.pattern}", field="name")
    if not instance_id or len(instance_id) > MAX_INSTANCE_ID:
        raise WireError(f"instance id must be 1 to {MAX_INSTANCE_ID} characters", field="id")
    return name, instance_id


async def admit(request: web.Request) -> web.Response:
    name, instance_id = _agent(request)
    body = await _body(request, AdmitRequest)
    sid, offset = request.app[HARNESS].admit(name, instance_id, body)
    stream = f"{request.path}?offset={offset}"
    return web.json_response(
        AdmitResponse(submissionId=sid, offset=offset, streamUrl=stream).model_dump()
    )


async def read(request: web.Request) -> web.Response:
    """The stream from an offset, or the history view. Every query parameter is read
    (and a bad one refused) whichever the view. With ``types``, only events of those
    types are sent (a long-poll waits for one), and the next offset is past every event
    looked at: a follower waiting for one kind of event reads none of the others."""
    name, instance_id = _agent(request)
    view, live = _choice(request, "view", "history"), _choice(request, "live", "long-poll")
    types = _types(request)
    try:
        offset = int(request.query.get("offset", "0"))
        if offset < 0:
            raise ValueError
    except ValueError as bad:
        raise WireError("offset must be a non-negative integer", field="offset") from bad
    conversation = request.app[HARNESS].conversation(name, instance_id)
    if conversation is None:
        return error(
            404, f"no conversation for agent {name!r} at {instance_id!r}", kind="not-found"
        )
    if view:
        return web.json_response(text=conversation.history().model_dump_json())
    log_ = conversation.log
    if offset > log_.next_offset:
        raise WireError(
            f"offset {offset} is past the end of the stream ({log_.next_offset})", field="offset"
        )
    if live:
        settings = request.app[HARNESS].settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.long_poll_s
        while True:
            if not await log_.wait_beyond(offset, max(0.0, deadline - loop.time())):
                return web.Response(
                    status=204,
                    headers={
                        "stream-next-offset": str(log_.next_offset),
                        "stream-up-to-date": "true",
                    },
                )
            if types is None:
                break
            ahead = log_.read(offset, log_.next_offset - offset)
            if any(event.type in types for event in ahead):
                break
            offset += len(ahead)
    events = log_.read(offset, PAGE)
    next_offset = offset + len(events)
    if types is not None:
        events = [event for event in events if event.type in types]
    body = "[" + ",".join(event.model_dump_json() for event in events) + "]"
    headers = {"stream-next-offset": str(next_offset)}
    if next_offset >= log_.next_offset:
        headers["stream-up-to-date"] = "true"
    return web.json_response(text=body, headers=headers)


def _types(request: web.Request) -> frozenset[EventType] | None:
    """The event types ``types`` names (comma-separated); None when it is absent."""
    value = request.query.get("types")
    if value is None:
        return None
    try:
        return frozenset(EventType(item) for item in value.split(","))
    except ValueError as bad:
        known = ", ".join(item.value for item in EventType)
        raise WireError(f"types may name only event types ({known})", field="types") from bad


def _choice(request: web.Request, name: str, only: str) -> bool:
    """Whether the query names ``only`` as ``name``; a WireError for any other value."""
    value = request.query.get(name)
    if value is not None and value != only:
        raise WireError(f"{name} may only be {only!r}", field=name)
    return value is not None


async def abort(request: web.Request) -> web.Response:
    """The sweep: any body, also one that cannot be read, settles what runs (a body that
    names nothing settles it ``aborted``), so a sweep is never refused for its body."""
    name, instance_id = _agent(request)
    try:
        raw = await _read(request)
    except WireError:
        raw = b""
    swept = await request.app[HARNESS].sweep(name, instance_id, Sweep.parse(raw))
    return web.json_response(AbortResponse(aborted=swept).model_dump())


async def run_exec(request: web.Request) -> web.Response:
    result = await request.app[HARNESS].exec(await _body(request, ExecRequest))
    return web.json_response(result.model_dump())


async def deliver(request: web.Request) -> web.Response:
    delivered = await request.app[HARNESS].deliver(await _body(request, DeliverRequest))
    return web.json_response(delivered.model_dump())


async def worktrees(request: web.Request) -> web.Response:
    made = await request.app[HARNESS].worktrees(await _body(request, WorktreesRequest))
    return web.json_response(made.model_dump())


async def forget_run(request: web.Request) -> web.Response:
    try:
        params = ForgetRunRequest.model_validate(
            {"run": request.match_info["run"], "branch": request.query.get("branch")}
        )
    except ValidationError as invalid:
        raise _wire_error(invalid) from invalid
    forgotten = await request.app[HARNESS].forget_run(params)
    return web.json_response(forgotten.model_dump())


async def repos(request: web.Request) -> web.Response:
    listing = await request.app[HARNESS].repos()
    return web.json_response(listing.model_dump())


async def healthz(_: web.Request) -> web.Response:
    return web.json_response(Status(status="ok").model_dump())


async def readyz(request: web.Request) -> web.Response:
    harness = request.app[HARNESS]
    try:
        harness.store.check_writable()
    except OSError as failure:
        return error(503, f"the data dir is not writable: {failure}", kind="not-ready")
    if not harness.ready:
        return error(503, "still rebuilding recorded conversations", kind="not-ready")
    return web.json_response(Status(status="ready").model_dump())


async def metrics(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[HARNESS].metrics.registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def openapi_json(_: web.Request) -> web.Response:
    return web.json_response(text=json.dumps(openapi.document()))


HANDLERS: dict[str, Handler] = {
    "admit": admit,
    "read": read,
    "abort": abort,
    "run_exec": run_exec,
    "deliver": deliver,
    "worktrees": worktrees,
    "forget_run": forget_run,
    "repos": repos,
    "healthz": healthz,
    "readyz": readyz,
    "metrics": metrics,
    "openapi_json": openapi_json,
}
"""Each operation of ``openapi.OPERATIONS`` by name: the routes the app serves are the
ones its document lists."""


def make_runner(harness: Harness) -> web.AppRunner:
    """The runner to serve ``make_app`` with: a client that goes away cancels its
    handler, so an ``exec`` whose caller stopped waiting kills its command."""
    return web.AppRunner(make_app(harness), handler_cancellation=True, access_log=None)


def make_app(harness: Harness) -> web.Application:
    """The aiohttp application; the caller owns ``harness``'s start and close."""
    malformed.install()
    app = web.Application(middlewares=[answer_errors, authenticate])
    app[HARNESS] = harness
    app[TOKEN_SHA256] = (harness.settings.token_sha256 or "").lower()
    for operation in openapi.OPERATIONS:
        app.router.add_route(operation.method, operation.path, HANDLERS[operation.name])
    return app
