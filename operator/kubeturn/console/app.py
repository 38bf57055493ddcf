"""The read-only web console: Runs, a Run's machine and Turns, a Turn's live transcript.

``console_app`` is an aiohttp application whose routes are relative to its root, and
whose pages link relatively, so it serves the same at ``http://127.0.0.1:PORT/`` (``kubeturn
ui``) and mounted under a prefix (the operator, behind the API server). It holds no auth:
whoever mounts it decides who reaches it. Pages are rendered on the server (Jinja2) and
kept live by htmx polling each page's live part (its URL with ``?part=1``); a part that
has not changed since the page holds it is answered ``204`` and left alone (ADR 0108).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import textwrap
import time
from collections.abc import Mapping
from importlib import resources
from typing import Any, Protocol
from urllib.parse import quote

import jinja2
import markupsafe
from aiohttp import web

from kubeturn.console import views
from kubeturn.errors import NotFound
from kubeturn.transcripts import Entry, EntryKind, Query, TranscriptSource, text

PART = "part"
"""The query parameter asking for a page's live part alone: the part is the page's URL, so
whoever authorises the page (the API server, by its path) authorises its part."""
POLL = "every 2s"
"""How often a live page asks for its live part."""
NDJSON = "application/x-ndjson"
LEFT_CHECK_S = 1.0
"""How often a transcript being streamed checks that its reader is still there."""
ASSETS = {
    "htmx.min.js": "text/javascript",
    "mermaid.min.js": "text/javascript",
    "console.js": "text/javascript",
    "console.css": "text/css",
}
"""The package's static files the console serves, and their content types."""

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
"""Every page's and part's headers: scripts only from the console's own assets (mermaid
styles its SVG inline), never framed, never cached (a Run's page shows what it is now)."""

SOURCE_KEY: web.AppKey[ConsoleSource] = web.AppKey("source")
TITLE_KEY: web.AppKey[str] = web.AppKey("title")
TEMPLATES_KEY: web.AppKey[jinja2.Environment] = web.AppKey("templates")
CHARTS_KEY: web.AppKey[views.Charts] = web.AppKey("charts")


class ConsoleSource(Protocol):
    """Where the console reads Runs: a local workdir's, or a cluster's."""

    async def runs(self, namespace: str | None) -> list[dict[str, Any]]: ...

    async def run(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def transcripts(self, namespace: str, name: str) -> TranscriptSource: ...


def console_app(source: ConsoleSource, *, title: str = "kubeturn") -> web.Application:
    app = web.Application()
    app[SOURCE_KEY] = source
    app[TITLE_KEY] = title
    app[TEMPLATES_KEY] = jinja2.Environment(
        loader=jinja2.PackageLoader("kubeturn.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    app[CHARTS_KEY] = views.Charts()
    run_path = "/namespaces/{ns}/runs/{run}"
    app.router.add_get("/", _root)
    app.router.add_get("/runs", _runs)
    app.router.add_get("/namespaces/{ns}/runs", _runs)
    app.router.add_get(run_path, _run)
    app.router.add_get(run_path + "/transcript", _transcript)
    app.router.add_get(run_path + "/turns/{turn}", _turn)
    app.router.add_get("/assets/{file}", _asset)
    return app


async def _root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("runs")


# --------------------------------------------------------------------------- Runs list


async def _runs(request: web.Request) -> web.StreamResponse:
    namespace = request.match_info.get("ns")
    root = "../../" if namespace else "./"
    context = await _runs_context(request, namespace, root)
    return _answer(request, "runs.html", "_runs.html", root=root, **context)


async def _runs_context(request: web.Request, namespace: str | None, root: str) -> dict[str, Any]:
    runs = await request.app[SOURCE_KEY].runs(namespace)
    now = time.time()
    rows = sorted(
        (views.run_row(run, now) for run in runs), key=lambda row: (row.namespace, row.name)
    )
    here = f"namespaces/{quote(namespace, safe='')}/runs" if namespace else "runs"
    return {
        "namespace": namespace,
        "rows": rows,
        "fragment": f"{root}{here}?{PART}=1",
        "live": True,
    }


# --------------------------------------------------------------------------- a Run


async def _run(request: web.Request) -> web.StreamResponse:
    run, namespace, name = await _found(request)
    root = "../../../"
    context = _run_context(run, namespace, name, root, request.app[CHARTS_KEY])
    return _answer(request, "run.html", "_run.html", root=root, **context)


def _run_context(
    run: Mapping[str, Any], namespace: str, name: str, root: str, charts: views.Charts
) -> dict[str, Any]:
    status = views.status_of(run)
    here = f"{root}namespaces/{quote(namespace, safe='')}/runs/{quote(name, safe='')}"
    return {
        "namespace": namespace,
        "name": name,
        "phase": views.phase_of(run),
        "state": status.get("state") or "",
        "message": status.get("message"),
        "output": views.output_text(run),
        "usage": views.run_usage(run),
        "diagram": views.diagram(run, charts),
        "dropped_moves": int(status.get("droppedTrail") or 0),
        "children": views.children(run),
        "dropped_children": int(status.get("droppedChildren") or 0),
        "turns": views.turn_rows(run, time.time()),
        "dropped": int(status.get("droppedTurns") or 0),
        "accepted": views.accepted(run),
        "processed": views.processed(run),
        "here": here,
        "fragment": f"{here}?{PART}=1",
        "live": not views.finished(run),
    }


# --------------------------------------------------------------------------- a Turn


async def _turn(request: web.Request) -> web.StreamResponse:
    context = await _turn_context(request)
    return _answer(request, "turn.html", "_turn.html", **context)


async def _turn_context(request: web.Request) -> dict[str, Any]:
    run, namespace, name = await _found(request)
    turn_name = request.match_info["turn"]
    turn = views.turn_of(run, turn_name, time.time())
    source = request.app[SOURCE_KEY].transcripts(namespace, name)
    entries = [entry async for entry in source.entries(Query(turn=turn_name))]
    if turn is None and not entries:
        raise web.HTTPNotFound(text=f"the Run {namespace}/{name} has no Turn {turn_name!r}")
    root = "../../../../../"
    here = f"{root}namespaces/{quote(namespace, safe='')}/runs/{quote(name, safe='')}"
    return {
        "root": root,
        "namespace": namespace,
        "name": name,
        "turn_name": turn_name,
        "turn": turn,
        "entries": [_shown(entry) for entry in entries],
        "run_link": here,
        "fragment": f"{here}/turns/{quote(turn_name, safe='')}?{PART}=1",
        "live": turn is None or turn.live,
    }


SUMMARISED = frozenset(
    {EntryKind.TOOL_CALL, EntryKind.PICK, EntryKind.RECEIPT, EntryKind.SETTLEMENT}
)
"""Entries the Turn page shows as ``kubeturn logs`` prints them (a call with its
arguments, a settlement with its cause and tokens); the others' words are shown whole."""


def _shown(entry: Entry) -> dict[str, Any]:
    """An entry as the Turn page lists it: its words, and its data as JSON when it has any."""
    words = entry.text
    if entry.kind in SUMMARISED:
        words = textwrap.dedent("\n".join(text.lines(entry)))
    return {
        "kind": entry.kind.value,
        "at": entry.at,
        "name": entry.name,
        "text": words,
        "data": json.dumps(entry.data, indent=2, sort_keys=True) if entry.data else "",
    }


# --------------------------------------------------------------------------- transcript


async def _transcript(request: web.Request) -> web.StreamResponse:
    """The Run's transcript as NDJSON, one ``Entry`` a line, written as it is read (with
    ``follow=1``, until the Run is finished, or gone: deleted while followed, it ends
    there, as ``kubectl logs -f`` does for a Pod deleted)."""
    _, namespace, name = await _found(request)
    query = _query(request.query)
    source = request.app[SOURCE_KEY].transcripts(namespace, name)
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    await response.prepare(request)
    entries = source.entries(query)

    async def pump() -> None:
        try:
            async for entry in entries:
                await response.write(entry.model_dump_json().encode() + b"\n")
        except NotFound:
            return  # the Run went while it was read: its transcript ends with it
        finally:
            close = getattr(entries, "aclose", None)
            if close is not None:
                await close()

    pumping = asyncio.ensure_future(pump())
    try:
        while not pumping.done():
            # A followed transcript may wait long for its next entry: a reader that left
            # meanwhile is noticed here, not at the next write.
            await asyncio.wait({pumping}, timeout=LEFT_CHECK_S)
            transport = request.transport
            if transport is None or transport.is_closing():
                break
    finally:
        if not pumping.done():
            pumping.cancel()
            await asyncio.wait({pumping})
    if pumping.cancelled() or isinstance(pumping.exception(), ConnectionResetError):
        return response  # the reader left: no one to write to
    pumping.result()
    await response.write_eof()
    return response


def _query(params: Mapping[str, str]) -> Query:
    since = params.get("sinceTurn") or None
    if since is not None and not since.isdigit():
        raise web.HTTPBadRequest(text=f"sinceTurn must be a Turn number, not {since!r}")
    return Query(
        turn=params.get("turn") or None,
        agent=params.get("agent") or None,
        since_turn=int(since) if since is not None else None,
        follow=params.get("follow", "") in ("1", "true"),
    )


# --------------------------------------------------------------------------- shared


async def _asset(request: web.Request) -> web.StreamResponse:
    file = request.match_info["file"]
    content_type = ASSETS.get(file)
    if content_type is None:
        raise web.HTTPNotFound(text=f"no asset {file!r}")
    body = resources.files("kubeturn.console").joinpath("static", file).read_bytes()
    return web.Response(
        body=body,
        content_type=content_type,
        charset="utf-8",
        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"},
    )


async def _found(request: web.Request) -> tuple[dict[str, Any], str, str]:
    namespace, name = request.match_info["ns"], request.match_info["run"]
    run = await request.app[SOURCE_KEY].run(namespace, name)
    if run is None:
        raise web.HTTPNotFound(text=f"no Run {namespace}/{name}")
    return run, namespace, name


def _answer(request: web.Request, template: str, part: str, **context: Any) -> web.Response:
    """The page, or with ``?part=1`` its live part alone."""
    if request.query.get(PART):
        return _fragment(request, part, **context)
    return _page(request, template, part, **context)


def _page(request: web.Request, template: str, part: str, **context: Any) -> web.Response:
    """A page whose live part is ``part`` (``_live`` wraps it)."""
    templates = request.app[TEMPLATES_KEY]
    live, _ = _live(templates, part, context)
    text = templates.get_template(template).render(
        title=request.app[TITLE_KEY], live_part=markupsafe.Markup(live), **context
    )
    return web.Response(text=text, content_type="text/html", headers=HEADERS)


def _fragment(request: web.Request, part: str, **context: Any) -> web.Response:
    """A page's live part again; ``204`` (htmx leaves the part alone) when it is the
    version the page holds (``v``)."""
    live, version = _live(request.app[TEMPLATES_KEY], part, context)
    if request.query.get("v") == version:
        return web.Response(status=204, headers=HEADERS)
    return web.Response(text=live, content_type="text/html", headers=HEADERS)


def _live(templates: jinja2.Environment, part: str, context: Mapping[str, Any]) -> tuple[str, str]:
    """``part`` rendered inside the element that polls for it while the page is live,
    and its version: a hash of what it shows."""
    inner = templates.get_template(part).render(**context)
    version = hashlib.sha256(inner.encode()).hexdigest()[:16]
    wrapper = templates.get_template("_live.html").render(
        inner=markupsafe.Markup(inner),
        version=version,
        fragment=context["fragment"],
        live=context["live"],
        poll=POLL,
    )
    return wrapper, version
