"""The scripted model's HTTP server: OpenAI chat completions plus test control routes.

Routes:

- ``POST /v1/chat/completions``: answer from the Script, whole or as a stream.
- ``GET /v1/models``: one model, ``scripted``; any model name is accepted anyway.
- ``GET /_requests`` / ``DELETE /_requests``: read or clear the request record.
- ``POST /_release``: release held responses, all or one Conversation's.
- ``GET /_health``: 200 once listening.

The runner cancels a handler when its client disconnects (``handler_cancellation``), so
the record shows the moment a held response was cut. Stopping the runner cancels every
response still being answered, so a held one never delays shutdown.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from kubeturn_harness.scripted import bodies, completions, journal, script, selection
from kubeturn_harness.scripted.script import Script

_log = logging.getLogger(__name__)

SCRIPT = web.AppKey("script", Script)
JOURNAL = web.AppKey("journal", journal.Journal)
"""The app's request record; in-process users may read it instead of ``/_requests``."""
_ANSWERING: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("answering")
"""Handler tasks still answering a chat request, cancelled when the app shuts down."""

QUOTED_CHARS = 200
"""How much of an unmatched first user message a 400 quotes: enough to recognise it."""

_STREAM_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def make_app(script: Script) -> web.Application:
    """An application answering from ``script``, with a fresh, empty request record."""
    app = web.Application()
    app[SCRIPT] = script
    app[JOURNAL] = journal.Journal()
    app[_ANSWERING] = set()
    app.on_shutdown.append(_cancel_answering)
    app.add_routes(
        [
            web.post("/v1/chat/completions", _chat),
            web.get("/v1/models", _models),
            web.get("/_requests", _requests),
            web.delete("/_requests", _clear),
            web.post("/_release", _release),
            web.get("/_health", _health),
        ]
    )
    return app


async def serve(
    script: Script, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Start answering from ``script``; return the runner and the base URL ending in ``/v1``.

    ``port`` 0 binds a free port; the URL names the bound one. The caller owns the
    runner: ``await runner.cleanup()`` stops the server.
    """
    runner = web.AppRunner(make_app(script), handler_cancellation=True)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}/v1"


async def _chat(request: web.Request) -> web.StreamResponse:
    raw = await request.read()
    try:
        body: Any = json.loads(raw)
    except ValueError:
        body = None
    task = asyncio.current_task()
    assert task is not None, "aiohttp runs every handler in a task"
    answering = request.app[_ANSWERING]
    answering.add(task)
    try:
        with request.app[JOURNAL].receiving(body) as record:
            return await _answer(request, record, body)
    finally:
        answering.discard(task)


async def _answer(
    request: web.Request, record: journal.RequestRecord, body: Any
) -> web.StreamResponse:
    try:
        chat = bodies.ChatRequest.model_validate(body)
    except ValidationError as error:
        return _error(400, f"not a chat-completions request: {bodies.describe(error)}")
    if problem := bodies.unsendable_arguments(chat.messages):
        # As a real server does: llama.cpp refuses such a history with a 500, OpenAI a 400.
        return _error(400, problem)
    chosen = selection.select(request.app[SCRIPT], chat.messages)
    if chosen is None:
        quoted = selection.first_user_text(chat.messages)[:QUOTED_CHARS]
        _log.warning("request %d: no conversation matches %r", record.index, quoted)
        return _error(400, f"no conversation matches the first user message: {quoted!r}")
    record.conversation = chosen.conversation.match
    record.step = chosen.index
    _log.info("request %d: %r step %d", record.index, record.conversation, record.step)
    step = chosen.step
    if step.delay_ms:
        await asyncio.sleep(step.delay_ms / 1000)
    if step.error is not None:
        return _error(step.error.status, step.error.message)
    if step.cut is not None and not chat.stream:
        record.cut = True
        if step.cut.error is not None:
            return _error(step.cut.error.status, step.cut.error.message)
        _drop(request)
        return web.Response()
    answer = completions.reply(
        step,
        index=chosen.index,
        reply_id=f"chatcmpl-scripted-{record.index}",
        model=chat.model,
        messages=body["messages"],
        created=int(record.received_at),
    )
    if not chat.stream:
        if step.hold:
            await request.app[JOURNAL].hold(record)
        return web.json_response(completions.completion(answer))
    include_usage = chat.stream_options is not None and chat.stream_options.include_usage
    return await _stream(
        request, record, answer, hold=step.hold, include_usage=include_usage, cut=step.cut
    )


async def _stream(
    request: web.Request,
    record: journal.RequestRecord,
    answer: completions.Reply,
    *,
    hold: bool,
    include_usage: bool,
    cut: script.Cut | None,
) -> web.StreamResponse:
    response = web.StreamResponse(headers=_STREAM_HEADERS)
    opening = completions.opening_chunks(answer)
    closing = completions.closing_chunks(answer, include_usage=include_usage)
    left = len(opening) + len(closing) if cut is None else cut.after_chunks
    try:
        await response.prepare(request)
        for phase, chunks in enumerate((opening, closing)):
            if phase == 1 and hold:
                await request.app[JOURNAL].hold(record)
            for chunk in chunks:
                if left == 0:
                    return await _cut(request, response, record, cut)
                left -= 1
                await response.write(completions.event(chunk))
        if cut is not None:
            return await _cut(request, response, record, cut)
        await response.write(completions.DONE)
        await response.write_eof()
    except ConnectionResetError:
        # The client went away between two writes, before the runner cancelled us.
        record.disconnected = True
    return response


async def _cut(
    request: web.Request,
    response: web.StreamResponse,
    record: journal.RequestRecord,
    cut: script.Cut | None,
) -> web.StreamResponse:
    """Break the stream off as the step's ``cut`` says: an error event, or a dropped
    connection (no end chunk, so the client reads an incomplete body)."""
    assert cut is not None, "only a step with a cut breaks off"
    record.cut = True
    if cut.error is not None:
        body = bodies.error_body(cut.error.message, cut.error.status)
        await response.write(completions.event(body))
        await response.write_eof()
    else:
        _drop(request)
    return response


def _drop(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()


async def _models(request: web.Request) -> web.Response:
    model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "kubeturn"}
    return web.json_response({"object": "list", "data": [model]})


async def _requests(request: web.Request) -> web.Response:
    return web.json_response([record.to_json() for record in request.app[JOURNAL].records()])


async def _clear(request: web.Request) -> web.Response:
    request.app[JOURNAL].clear()
    return web.json_response({"cleared": True})


async def _release(request: web.Request) -> web.Response:
    raw = await request.read()
    try:
        release = bodies.ReleaseRequest.model_validate_json(raw or b"{}")
    except ValidationError as error:
        return _error(400, f"not a release request: {bodies.describe(error)}")
    return web.json_response({"released": request.app[JOURNAL].release(release.match)})


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _cancel_answering(app: web.Application) -> None:
    for task in app[_ANSWERING]:
        task.cancel()


def _error(status: int, message: str) -> web.Response:
    return web.json_response(bodies.error_body(message, status), status=status)
