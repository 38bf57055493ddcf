"""The Orchestrator API that Harnesses call: surfaces, picks, and delivery answers.

Each Workspace's Harness holds its own token, and a Workspace has one token at a time:
the one its Secret holds now (``Registry``). A token may address only Instance IDs of
Turns admitted to its Workspace (403 otherwise), and nothing at all without one (401).
``GET …/surface`` answers 404 when no live Turn has that Instance ID: a Turn that is
over is never prompted. Delivery ids make a repeated poll safe, and a pick's
``Idempotency-Key`` a repeated pick: a repeat of a key is answered as its first send
was. A body is read by ``bodies`` alone: one it cannot read is a 4xx JSON error naming
the field or the body, whatever its depth or size.

While this process cannot say whether a Turn is live, because it is starting (its Runs
not restored yet: ``kubeturn.k8s.operator.resume_gate``) or stopping (its Run actors
closed, ``Registry.stopping``), it answers 503 with ``Retry-After``, never 404: a 404
tells the Harness that the Turn is over, and a stopping operator must not end a live
Turn (ADR 0047).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import Counter
from pydantic import BaseModel

from kubeturn.errors import ActorClosed, WireError
from kubeturn.orchestrator import bodies, openapi
from kubeturn.orchestrator.actor import RunActor
from kubeturn.orchestrator.ids import InstanceId
from kubeturn.orchestrator.picks import Gone, Invalid
from kubeturn_harness import malformed
from kubeturn_harness.wire import (
    PICK_KEY_HEADER,
    PICK_KEY_MAX,
    DeliveryId,
    ErrorBody,
    Receipt,
    Refusal,
    Status,
    Surface,
    bearer_token,
)

log = logging.getLogger(__name__)

PICKS = Counter("kubeturn_picks", "Picks the Orchestrator API answered, by result.", ["result"])

LONG_POLL_S = 25.0
"""How long a delivery poll parks: under the 30 s idle cut of common proxies."""


class Actors(MutableMapping[str, RunActor]):
    """Run key (``namespace/name``) → its actor, with an index of the Instance IDs their
    Turns hold (live, or still being swept), kept up to date by each actor's core as its
    Turns are made and recorded, and as actors come and go. ``owner`` answers what a walk
    over every actor and Turn would, at the cost of one lookup: the Orchestrator API asks
    it on every request, and a process holds every Run it drove, finished ones included.
    """

    def __init__(self) -> None:
        self._actors: dict[str, RunActor] = {}
        self._owners: dict[InstanceId, set[str]] = {}
        """Instance ID → the keys of the actors whose Turns hold it (one, but for a Run
        made again under its name while its old actor is held)."""
        self._rank: dict[str, int] = {}
        """Key → its place in the mapping's order: the walk found the first."""
        self._ranked = 0

    def __getitem__(self, key: str) -> RunActor:
        return self._actors[key]

    def __setitem__(self, key: str, actor: RunActor) -> None:
        if key in self._actors:
            self._release(key)
        else:
            self._rank[key] = self._ranked
            self._ranked += 1
        self._actors[key] = actor
        actor.core.on_instance = lambda instance_id, held: self._note(key, instance_id, held)
        for instance_id in actor.core.instance_ids():
            self._note(key, instance_id, True)

    def __delitem__(self, key: str) -> None:
        self._release(key)
        del self._actors[key]
        del self._rank[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._actors)

    def __len__(self) -> int:
        return len(self._actors)

    def _release(self, key: str) -> None:
        """The actor at ``key`` leaves the index, and tells it no more."""
        actor = self._actors[key]
        actor.core.on_instance = None
        for instance_id in list(actor.core.instance_ids()):
            self._note(key, instance_id, False)

    def _note(self, key: str, instance_id: InstanceId, held: bool) -> None:
        keys = self._owners.setdefault(instance_id, set())
        if held:
            keys.add(key)
        else:
            keys.discard(key)
        if not keys:
            del self._owners[instance_id]

    def owner(self, instance_id: InstanceId) -> tuple[str, RunActor] | None:
        keys = self._owners.get(instance_id)
        if not keys:
            return None
        key = min(keys, key=self._rank.__getitem__)
        return key, self._actors[key]


@dataclass
class Registry:
    """The Run actors this process holds, and the one token each Workspace has now."""

    actors: Actors = field(default_factory=Actors)
    """Run key (``namespace/name``) → actor."""
    workspaces: dict[str, str] = field(default_factory=dict)
    """Run key → the Workspace its Turns run in."""
    stopping: bool = False
    """This process is stopping: its Run actors are closing or closed. A Turn it cannot
    find may be live in one of them, so the API answers 503, never 404."""
    tokens: dict[str, str] = field(default_factory=dict)
    """Workspace (``namespace/name``) → the SHA-256 of its token now. Keyed by the
    Workspace, not by the token, so a Workspace holds exactly one: a token set anew (its
    Secret made anew, or the Workspace made again under its name) replaces the one before,
    which is refused from the next request on."""

    def set_token(self, workspace: str, token: str) -> None:
        """``token`` is the Workspace's from now on; the one it had is revoked."""
        self.tokens[workspace] = hashlib.sha256(token.encode()).hexdigest()

    def forget_token(self, workspace: str) -> None:
        """The Workspace has no token (it was deleted): its last one is revoked."""
        self.tokens.pop(workspace, None)

    def workspace_of(self, token: str) -> str | None:
        """The Workspace whose token this is now; None for a token no Workspace has, or
        one that is not ASCII (every Workspace token is; aiohttp hands header bytes that
        are not UTF-8 over as lone surrogates, which cannot be encoded)."""
        if not token.isascii():
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        for workspace, known in list(self.tokens.items()):
            if hmac.compare_digest(known, digest):
                return workspace
        return None

    def owner(self, instance_id: InstanceId) -> tuple[str, RunActor] | None:
        """The Run holding a Turn at this Instance ID (live, or still being swept)."""
        return self.actors.owner(instance_id)


REGISTRY = web.AppKey("registry", Registry)
POLL_S = web.AppKey("long_poll_s", float)
WORKSPACE = web.RequestKey("workspace", str)
"""The Workspace whose token authenticated the request."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, kind: str, message: str, field_: str | None = None) -> web.Response:
    body = ErrorBody(error=kind, field=field_, message=message)
    return web.json_response(body.model_dump(exclude_none=True), status=status)


def _model(body: BaseModel, status: int = 200) -> web.Response:
    return web.json_response(text=body.model_dump_json(exclude_none=True), status=status)


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path in OPEN_PATHS:
        return await handler(request)
    token = bearer_token(request.headers.get("Authorization"))
    workspace = request.app[REGISTRY].workspace_of(token) if token is not None else None
    if workspace is None:
        log.debug("refused %s %s: no valid Workspace token", request.method, request.path)
        response = _error(401, "unauthorized", "a valid Workspace token is required")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response
    request[WORKSPACE] = workspace
    return await handler(request)


async def _json_body(request: web.Request) -> Any:
    """The request's body as ``bodies.parse`` reads it (the API's one reader of bodies);
    ``WireError`` for a body it refuses, or one too large to read (413)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as large:
        limit = request.client_max_size
        raise WireError(f"the body is larger than {limit} bytes", status=413) from large
    return bodies.parse(raw)


def unavailable(message: str) -> web.Response:
    """503 with ``Retry-After``: the caller should send the same request again."""
    response = _error(503, "unavailable", message)
    response.headers["Retry-After"] = "1"
    return response


def _actor(request: web.Request) -> RunActor | web.Response:
    registry = request.app[REGISTRY]
    instance_id = InstanceId(request.match_info["iid"])
    found = registry.owner(instance_id)
    if found is None:
        if registry.stopping:
            return unavailable("the Orchestrator is stopping")
        return _error(404, "not-found", f"no live surface for agent {instance_id!r}")
    key, actor = found
    if registry.workspaces.get(key) != request[WORKSPACE]:
        return _error(403, "forbidden", f"this token may not address {instance_id!r}")
    if actor.closed:
        return unavailable("the Orchestrator is stopping, or restarting this Run")
    return actor


async def surface(request: web.Request) -> web.Response:
    actor = _actor(request)
    if isinstance(actor, web.Response):
        return actor
    found: Surface | None = actor.core.surface(InstanceId(request.match_info["iid"]))
    if found is None:
        return _error(404, "not-found", "no live surface: the Turn is over")
    return _model(found)


async def pick(request: web.Request) -> web.Response:
    actor = _actor(request)
    if isinstance(actor, web.Response):
        return actor
    try:
        body = await _json_body(request)
    except WireError as refused:
        return _error(refused.status, "invalid", refused.message, refused.field)
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        return _error(400, "invalid", "the pick's body needs a string 'type'", "type")
    key = request.headers.get(PICK_KEY_HEADER)
    if key is not None and not 0 < len(key) <= PICK_KEY_MAX:
        said = f"the {PICK_KEY_HEADER} header must be 1 to {PICK_KEY_MAX} characters"
        return _error(400, "invalid", said, PICK_KEY_HEADER)
    event = body.pop("type")
    try:
        answer = await actor.pick(InstanceId(request.match_info["iid"]), event, body, key=key)
    except ActorClosed:
        return unavailable("the Orchestrator is stopping, or restarting this Run")
    PICKS.labels(result=type(answer).__name__.lower()).inc()
    if isinstance(answer, Receipt):
        return _model(answer)
    if isinstance(answer, Refusal):
        return _model(answer, 409)
    if isinstance(answer, Invalid):
        return _error(422, "invalid", answer.message, "payload")
    return _error(404, "not-found", "no live surface: the Turn is over")


async def delivery(request: web.Request) -> web.StreamResponse:
    actor = _actor(request)
    if isinstance(actor, web.Response):
        return actor
    try:
        delivery_id = DeliveryId(request.match_info["delivery"])
        answer = await actor.delivery(delivery_id, request.app[POLL_S])
    except ActorClosed:
        return unavailable("the Orchestrator is stopping, or restarting this Run")
    if answer is None:
        return web.Response(status=204)
    if isinstance(answer, Gone):
        return _error(404, "not-found", "no such delivery")
    return _model(answer)


async def healthz(_: web.Request) -> web.Response:
    return web.json_response(Status(status="ok").model_dump())


async def openapi_json(_: web.Request) -> web.Response:
    return web.json_response(text=json.dumps(openapi.document()))


HANDLERS: dict[str, Handler] = {
    "surface": surface,
    "pick": pick,
    "delivery": delivery,
    "healthz": healthz,
    "openapi_json": openapi_json,
}
"""Each operation of ``openapi.OPERATIONS`` by name: the routes the app serves are the
ones its document lists."""
OPEN_PATHS = frozenset(op.path for op in openapi.OPERATIONS if op.open)


def make_app(registry: Registry, *, long_poll_s: float = LONG_POLL_S) -> web.Application:
    malformed.install()
    app = web.Application(middlewares=[authenticate])
    app[REGISTRY] = registry
    app[POLL_S] = long_poll_s
    for operation in openapi.OPERATIONS:
        app.router.add_route(operation.method, operation.path, HANDLERS[operation.name])
    return app
