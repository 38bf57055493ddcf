"""The Harness wire: auth, routes, error bodies and stream reads.

Cases:
- every route but ``/healthz`` needs the bearer token; 401 comes before routing, so an
  unauthenticated request to a route that does not exist is 401 (404 with the token);
  a wrong token or scheme is 401; ``/healthz`` is open;
- ``/readyz`` answers 200 once ready; ``/metrics`` serves Prometheus text with the
  settlement counter; ``/openapi.json`` is an OpenAPI 3.1 document with ``AdmitRequest``;
- an unknown conversation is a 404 JSON body; an unparsable admit body is 400;
- an Instance ID with ``/`` in it, percent-encoded as one path segment, is one
  conversation, end to end (the Orchestrator's surface is read at the same id);
- stream reads: ``?offset=0`` answers every event with ``stream-next-offset`` and
  ``stream-up-to-date``; a later offset answers only later events; a bad offset is 400
  naming ``offset``, also beside ``view=history``, and a ``view`` or ``live`` of another
  value is 400 naming it, as is a ``types`` naming no event type; ``live=long-poll`` at
  the end parks and answers when an event arrives, and answers 204 when none comes within
  ``long_poll_s``; ``types`` answers only events of those types, the next offset past
  every event looked at, and a long-poll for them parks past other events until one
  comes;
- ``POST /exec`` runs a command as the tools run (exit code, output, the tool uid), times
  out saying so, and refuses a relative cwd naming it; a NUL in its command or cwd, or in
  an admission's cwd, is 400 naming the field (the toolbox refuses one that reaches it,
  and serves on);
- an admission's idempotency ``key`` admits once: the same key answers the same
  Submission;
- ``POST /worktrees`` makes a Run's worktree of each slot's clone, idempotently, and
  refuses a slot with no clone, naming it;
- ``GET /repos`` answers each slot's clone with the commit it has checked out (a
  worktree of it is no clone), and nothing when there is no clone; ``/openapi.json``
  documents both routes;
- bodies it cannot read, on each route that takes one (admit, exec, worktrees): arrays
  or objects nested 200,000 deep, ``NaN``, ``Infinity``, ``-Infinity``, a number beyond a
  double (400, naming the field or the body) and a body over 1 MiB (413), each a JSON
  error body, with nothing admitted and no model asked; the sweep takes any of them and
  settles the running Submission ``aborted`` (a body that names nothing); the routes that
  take no body (stream, repos, readyz, forgetting a Run) answer as without one.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubeturn_harness.errors import WireError
from kubeturn_harness.sandbox.client import Toolbox
from kubeturn_harness.sandbox.protocol import Limits
from tests.harness.support import AGENT, StartWorld, World, agent_url, menu_surface, script

IID = "iid-1"
PROMPT = "Review the change"
TEXT_ONLY = script(PROMPT, {"text": "One."}, {"text": "Two."})
EVENTS = [
    "submission-admitted",
    "submission-started",
    "message-appended",
    "model-requested",
    "message-appended",
    "submission-settled",
]
"""The log of one text-only Submission with no Orchestrator."""

LIMITS = Limits(bashTimeoutS=10, outputLimitBytes=4096, processes=64)

GUARDED = [
    ("GET", f"/agents/{AGENT}/{IID}"),
    ("GET", f"/agents/{AGENT}/{IID}?view=history"),
    ("POST", f"/agents/{AGENT}/{IID}"),
    ("POST", f"/agents/{AGENT}/{IID}/abort"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("POST", "/worktrees"),
    ("GET", "/repos"),
    ("DELETE", "/runs/default.review-1?branch=kubeturn%2Freview-1"),
]


async def call(
    w: World, method: str, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any
) -> tuple[int, dict[str, str], bytes]:
    async with w.harness.session.request(
        method, w.harness.url + path, headers=headers or {}, **kwargs
    ) as response:
        return response.status, dict(response.headers), await response.read()


async def admitted(w: World, iid: str = IID) -> bool:
    """Whether the Harness holds a conversation at ``iid``."""
    path = agent_url("", AGENT, iid)
    status, _, _ = await call(w, "GET", path, headers=w.harness.headers())
    assert status in (200, 404)
    return status == 200


async def settled_once(w: World) -> str:
    sid = await w.harness.admit(IID, PROMPT)
    assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
    return sid


class TestWireAuth:
    @pytest.mark.parametrize(("method", "path"), GUARDED, ids=[f"{m} {p}" for m, p in GUARDED])
    async def test_every_route_but_healthz_needs_the_bearer(
        self, world: StartWorld, method: str, path: str
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT) if method == "POST" else None
        status, headers, raw = await call(w, method, path, json=body)
        assert status == 401
        assert headers["WWW-Authenticate"] == "Bearer"
        assert headers["Content-Type"].startswith("application/json")
        assert b'"unauthorized"' in raw
        assert not await admitted(w)
        assert await w.model.requests() == []

    async def test_401_comes_before_404(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        assert (await call(w, "GET", "/no/such/route"))[0] == 401
        assert (await call(w, "GET", "/no/such/route", headers=w.harness.headers()))[0] == 404

    async def test_a_wrong_token_is_refused(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        for headers in (
            w.harness.headers("not-the-token"),
            {"Authorization": f"Basic {w.harness.headers()['Authorization'].split()[1]}"},
            {"Authorization": "Bearer"},
        ):
            assert (await call(w, "GET", "/readyz", headers=headers))[0] == 401

    async def test_healthz_is_open(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, _, raw = await call(w, "GET", "/healthz")
        assert (status, raw) == (200, b'{"status": "ok"}')


class TestWireRoutes:
    async def test_readyz_answers_ready(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, _, raw = await call(w, "GET", "/readyz", headers=w.harness.headers())
        assert (status, raw) == (200, b'{"status": "ready"}')

    async def test_metrics_serve_prometheus_text_with_settlements(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await settled_once(w)
        status, headers, raw = await call(w, "GET", "/metrics", headers=w.harness.headers())
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain")
        text = raw.decode()
        assert "kubeturn_harness_submissions_settled" in text
        assert 'kubeturn_harness_submissions_settled_total{error="",outcome="completed"} 1.0' in (
            text.splitlines()
        )

    async def test_openapi_is_a_3_1_document_with_the_admit_request(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        async with w.harness.session.get(
            w.harness.url + "/openapi.json", headers=w.harness.headers()
        ) as response:
            assert response.status == 200
            document = await response.json()
        assert document["openapi"].startswith("3.1")
        admit = document["components"]["schemas"]["AdmitRequest"]
        assert "prompt" in admit["properties"]
        assert "prompt" in admit["required"]

    async def test_an_unknown_conversation_is_a_404_json_body(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        for query in ("?offset=0", "?view=history"):
            async with w.harness.session.get(
                agent_url(w.harness.url, AGENT, "never-admitted") + query,
                headers=w.harness.headers(),
            ) as response:
                assert response.status == 404
                assert response.content_type == "application/json"
                body = await response.json()
            assert body["error"] == "not-found"
            assert "'never-admitted'" in body["message"]

    @pytest.mark.parametrize("raw", [b"{not json", b"", b"[1, 2]"], ids=["broken", "empty", "list"])
    async def test_an_unparsable_admit_body_is_400(self, world: StartWorld, raw: bytes) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, headers, body = await call(
            w, "POST", f"/agents/{AGENT}/{IID}", headers=w.harness.headers(), data=raw
        )
        assert status == 400
        assert headers["Content-Type"].startswith("application/json")
        assert b'"invalid"' in body
        assert not await admitted(w)

    async def test_an_instance_id_with_slashes_is_one_conversation(self, world: StartWorld) -> None:
        iid = "default.review-1/review/reviewer"
        w = await world(TEXT_ONLY)
        w.orchestrator.surfaces[iid] = menu_surface(iid, "review_verdict")
        sid = await w.harness.admit(iid, PROMPT)
        assert (await w.harness.settlement(iid, sid))["outcome"] == "completed"
        history = await w.harness.history(iid)
        assert history["instanceId"] == iid
        assert w.orchestrator.surface_reads == [iid]
        assert (await w.harness.abort(iid)) == {"aborted": False}
        assert not await admitted(w, "default.review-1")


class TestWireStream:
    async def test_offset_0_reads_every_event_with_stream_headers(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        sid = await settled_once(w)
        status, headers, events = await w.harness.stream(IID, 0)
        assert status == 200
        assert [e["type"] for e in events] == EVENTS
        assert [e["offset"] for e in events] == list(range(len(EVENTS)))
        assert events[-1]["data"]["submissionId"] == sid
        assert headers == {"stream-next-offset": str(len(EVENTS)), "stream-up-to-date": "true"}

    async def test_a_later_offset_reads_only_later_events(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await settled_once(w)
        _, _, every = await w.harness.stream(IID, 0)
        status, headers, events = await w.harness.stream(IID, 4)
        assert status == 200
        assert events == every[4:]
        assert headers == {"stream-next-offset": str(len(EVENTS)), "stream-up-to-date": "true"}

    @pytest.mark.parametrize("offset", ["-1", "x", "1.5"])
    async def test_a_bad_offset_is_400_naming_offset(self, world: StartWorld, offset: str) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await settled_once(w)
        status, _, body = await w.harness.stream(IID, offset)
        assert status == 400
        assert body["field"] == "offset"

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            ("?view=history&offset=null", "offset"),
            ("?view=history&offset=-1", "offset"),
            ("?view=everything", "view"),
            ("?offset=0&live=stream", "live"),
            ("?offset=0&types=submission-settled,nope", "types"),
        ],
    )
    async def test_every_query_parameter_is_read_whichever_the_view(
        self, world: StartWorld, query: str, field: str
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await settled_once(w)
        path = agent_url("", AGENT, IID) + query
        status, _, raw = await call(w, "GET", path, headers=w.harness.headers())
        assert (status, json.loads(raw)["field"]) == (400, field)

    async def test_a_long_poll_at_the_end_answers_when_an_event_arrives(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False, long_poll_s=10)
        await settled_once(w)
        end = len(EVENTS)
        poll = asyncio.create_task(w.harness.stream(IID, end, live="long-poll"))
        done, _ = await asyncio.wait({poll}, timeout=0.2)
        assert not done, "the long-poll answered with nothing new to say"
        sid = await w.harness.admit(IID, PROMPT, **{"continue": True})
        status, headers, events = await poll
        assert status == 200
        assert events[0] == {
            "offset": end,
            "type": "submission-admitted",
            "at": events[0]["at"],
            "data": events[0]["data"],
        }
        assert events[0]["data"]["submissionId"] == sid
        assert int(headers["stream-next-offset"]) == end + len(events)
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"

    async def test_types_answers_only_those_events(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        sid = await settled_once(w)
        status, headers, events = await w.harness.stream(IID, 0, types="submission-settled")
        assert status == 200
        assert [(e["offset"], e["type"]) for e in events] == [
            (len(EVENTS) - 1, "submission-settled")
        ]
        assert events[0]["data"]["submissionId"] == sid
        assert headers == {"stream-next-offset": str(len(EVENTS)), "stream-up-to-date": "true"}
        _, _, two = await w.harness.stream(IID, 0, types="submission-settled,submission-admitted")
        assert [e["type"] for e in two] == ["submission-admitted", "submission-settled"]

    async def test_a_long_poll_for_types_parks_past_other_events(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False, long_poll_s=10)
        await settled_once(w)
        end = len(EVENTS)
        poll = asyncio.create_task(
            w.harness.stream(IID, end, live="long-poll", types="submission-settled")
        )
        sid = await w.harness.admit(IID, PROMPT, **{"continue": True})
        assert (await w.harness.settlement(IID, sid))["outcome"] == "completed"
        status, headers, events = await poll
        assert status == 200
        (settled,) = events
        assert (settled["type"], settled["data"]["submissionId"]) == ("submission-settled", sid)
        assert settled["offset"] > end, "the events before it were looked at, not sent"
        assert int(headers["stream-next-offset"]) == settled["offset"] + 1

    async def test_a_long_poll_answers_204_when_nothing_comes(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False, long_poll_s=0.3)
        await settled_once(w)
        started = time.monotonic()
        status, headers, body = await w.harness.stream(IID, len(EVENTS), live="long-poll")
        assert time.monotonic() - started >= 0.25
        assert (status, body) == (204, None)
        assert headers == {"stream-next-offset": str(len(EVENTS)), "stream-up-to-date": "true"}


class TestWireExecAndKeys:
    """``POST /exec`` runs a command as the tools run; an admission key admits once."""

    async def test_exec_runs_a_command_and_answers_its_exit_code_and_output(
        self, world: StartWorld
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = {"command": "echo hello; id -u; exit 3", "cwd": str(w.harness.workdir)}
        async with w.harness.session.post(
            f"{w.harness.url}/exec", json=body, headers=w.harness.headers()
        ) as response:
            assert response.status == 200
            answer = await response.json()
        assert answer == {
            "exitCode": 3,
            "output": "hello\n65534",
            "droppedBytes": 0,
            "timedOut": False,
        }

    async def test_exec_times_out_and_says_so(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = {"command": "sleep 5", "cwd": str(w.harness.workdir), "timeoutSeconds": 0.2}
        async with w.harness.session.post(
            f"{w.harness.url}/exec", json=body, headers=w.harness.headers()
        ) as response:
            answer = await response.json()
        assert answer["timedOut"] is True
        assert answer["exitCode"] is None

    async def test_exec_refuses_a_relative_cwd_naming_it(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        async with w.harness.session.post(
            f"{w.harness.url}/exec",
            json={"command": "true", "cwd": "work"},
            headers=w.harness.headers(),
        ) as response:
            assert response.status == 400
            assert (await response.json())["field"] == "cwd"

    @pytest.mark.parametrize(
        ("path", "body", "field"),
        [
            ("/exec", {"command": "echo a\u0000b"}, "command"),
            ("/exec", {"command": "true", "cwd": "/work\u0000x"}, "cwd"),
            (f"/agents/{AGENT}/{IID}", {"cwd": "/work\u0000x"}, "cwd"),
        ],
        ids=["exec-command", "exec-cwd", "admit-cwd"],
    )
    async def test_a_nul_in_a_command_or_a_cwd_is_400_naming_it(
        self, world: StartWorld, path: str, body: dict[str, Any], field: str
    ) -> None:
        # Before, the toolbox's session died on it and the Harness answered 503.
        w = await world(TEXT_ONLY, orchestrated=False)
        if path != "/exec":
            body = w.harness.body(PROMPT, **body)
        status, _, raw = await call(w, "POST", path, json=body, headers=w.harness.headers())
        answer = json.loads(raw)
        assert (status, answer["field"]) == (400, field)
        assert "NUL" in answer["message"]
        assert not await admitted(w)

    async def test_the_toolbox_refuses_a_nul_in_a_command_and_lives_on(
        self, toolbox_socket: Path
    ) -> None:
        toolbox = Toolbox(toolbox_socket, work_root=Path("/"), limits=LIMITS)
        with pytest.raises(WireError) as refused:
            await toolbox.exec(Path("/"), "echo a\0b", 5)
        assert (refused.value.status, refused.value.field) == (400, "command")
        done = await toolbox.exec(Path("/"), "echo alive", 5)
        assert (done.exitCode, done.output) == (0, "alive")

    async def test_an_admission_key_admits_once(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        body = w.harness.body(PROMPT, key="t1.1")
        first = await w.harness.admit_raw("iid-1", body)
        again = await w.harness.admit_raw("iid-1", body)
        assert first == again
        history = await w.harness.history("iid-1")
        assert len(history["submissions"]) == 1


def make_repo(clone: Path) -> str:
    """A git repository with one commit, owned by the tools' user (as a pod's volume is);
    answers the commit."""
    clone.mkdir(parents=True)
    git = ["git", "-c", "user.name=kubeturn", "-c", "user.email=k@example.invalid"]
    subprocess.run([*git, "init", "-q", str(clone)], check=True)
    subprocess.run(
        [*git, "-C", str(clone), "commit", "-q", "--allow-empty", "-m", "one"], check=True
    )
    head = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    )
    subprocess.run(["chown", "-R", "65534:65534", str(clone.parents[1])], check=True)
    return head.stdout.strip()


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A work root the tools' user can reach (pytest's own temp dirs are private to root)."""
    root = Path(tempfile.mkdtemp(prefix="kubeturn-work-"))
    root.chmod(0o777)
    yield root
    shutil.rmtree(root)


class TestWireWorktrees:
    """``POST /worktrees`` makes a Run's worktree of each repo slot's clone, once."""

    async def test_worktrees_are_made_from_the_clones_and_made_once(
        self, world: StartWorld, shared_root: Path
    ) -> None:
        root = shared_root
        await asyncio.to_thread(make_repo, root / ".repos" / "target")
        w = await world(TEXT_ONLY, orchestrated=False, work_root=root)
        body = {"run": "review-1", "branch": "kubeturn/review-1", "slots": ["target"]}
        answers = []
        for _ in range(2):
            async with w.harness.session.post(
                f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
            ) as response:
                assert response.status == 200, await response.text()
                answers.append(await response.json())
        path = root / "target" / "kubeturn-review-1"
        expected = {"worktrees": {"target": {"path": str(path), "branch": "kubeturn/review-1"}}}
        assert answers == [expected, expected]
        assert (path / ".git").exists()

    async def test_a_slot_with_no_clone_is_refused_naming_it(
        self, world: StartWorld, shared_root: Path
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False, work_root=shared_root)
        body = {"run": "review-1", "branch": "b", "slots": ["target"]}
        async with w.harness.session.post(
            f"{w.harness.url}/worktrees", json=body, headers=w.harness.headers()
        ) as response:
            assert response.status == 409
            answer = await response.json()
        assert answer["field"] == "slots"
        assert "'target'" in answer["message"]


class TestWireRepos:
    """``GET /repos`` reports the Workspace's clones."""

    async def test_each_clone_is_reported_with_its_commit(
        self, world: StartWorld, shared_root: Path
    ) -> None:
        root = shared_root
        commit = await asyncio.to_thread(make_repo, root / ".repos" / "target")
        w = await world(TEXT_ONLY, orchestrated=False, work_root=root)
        body = {"run": "review-1", "branch": "kubeturn/review-1", "slots": ["target"]}
        status, _, _ = await call(w, "POST", "/worktrees", json=body, headers=w.harness.headers())
        assert status == 200
        async with w.harness.session.get(
            f"{w.harness.url}/repos", headers=w.harness.headers()
        ) as response:
            assert response.status == 200
            answer = await response.json()
        clone = str(root / ".repos" / "target")
        assert answer == {"repos": {"target": {"path": clone, "commit": commit}}}

    async def test_no_clone_is_an_empty_listing(self, world: StartWorld, shared_root: Path) -> None:
        w = await world(TEXT_ONLY, orchestrated=False, work_root=shared_root)
        status, _, raw = await call(w, "GET", "/repos", headers=w.harness.headers())
        assert (status, raw) == (200, b'{"repos": {}}')

    async def test_openapi_documents_repos_and_worktrees(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        status, _, raw = await call(w, "GET", "/openapi.json", headers=w.harness.headers())
        assert status == 200
        document = json.loads(raw)
        repos = document["paths"]["/repos"]["get"]["responses"]["200"]
        assert repos["content"]["application/json"]["schema"]["$ref"].endswith("/ReposResponse")
        assert "commit" in document["components"]["schemas"]["Clone"]["properties"]
        worktrees = document["paths"]["/worktrees"]["post"]["requestBody"]
        assert worktrees["content"]["application/json"]["schema"]["$ref"].endswith(
            "/WorktreesRequest"
        )


# ----------------------------------------------------------------------------- bodies

DEEP = 200_000
NOT_FINITE = "is not a finite number: JSON has no NaN or Infinity, and a number must fit a double"
TOO_DEEP = {"error": "invalid", "message": "the body nests deeper than 64 levels"}
UNREADABLE = [
    pytest.param(b"[" * DEEP + b"]" * DEEP, 400, TOO_DEEP, id="arrays-200000-deep"),
    pytest.param(b'{"":' * DEEP + b"1" + b"}" * DEEP, 400, TOO_DEEP, id="objects-200000-deep"),
    *(
        pytest.param(
            b'{"prompt": "x", "n": [' + number + b"]}",
            400,
            {"error": "invalid", "field": "n.0", "message": f"n.0 {NOT_FINITE}"},
            id=number.decode(),
        )
        for number in (b"NaN", b"Infinity", b"-Infinity", b"1e999")
    ),
    pytest.param(
        b'{"prompt": "' + b"x" * 2**20 + b'"}',
        413,
        {"error": "invalid", "message": f"the body is larger than {2**20} bytes"},
        id="over-1MiB",
    ),
]
"""Bodies the Harness cannot read: (raw, status, error body)."""
BODY_ROUTES = [f"/agents/{AGENT}/{IID}", "/exec", "/worktrees"]


class TestWireBodies:
    @pytest.mark.parametrize("path", BODY_ROUTES)
    @pytest.mark.parametrize(("raw", "status", "said"), UNREADABLE)
    async def test_a_body_it_cannot_read_is_a_4xx_naming_why(
        self, world: StartWorld, path: str, raw: bytes, status: int, said: dict[str, str]
    ) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        answer = await call(w, "POST", path, headers=w.harness.headers(), data=io.BytesIO(raw))
        assert answer[0] == status
        assert answer[1]["Content-Type"].startswith("application/json")
        assert json.loads(answer[2]) == said
        assert not await admitted(w)
        assert await w.model.requests() == []

    @pytest.mark.parametrize(("raw", "status", "said"), UNREADABLE)
    async def test_a_sweep_with_any_of_them_settles_the_running_submission(
        self, world: StartWorld, raw: bytes, status: int, said: dict[str, str]
    ) -> None:
        w = await world(script(PROMPT, {"text": "Working", "hold": True}), orchestrated=False)
        sid = await w.harness.admit(IID, PROMPT)
        await w.model.wait_requests(1, held=True)
        async with w.harness.session.post(
            agent_url(w.harness.url, AGENT, IID, "abort"),
            data=io.BytesIO(raw),
            headers=w.harness.headers(),
        ) as response:
            assert (response.status, await response.json()) == (200, {"aborted": True})
        assert (await w.harness.settlement(IID, sid))["outcome"] == "aborted"

    async def test_routes_that_take_no_body_answer_as_without_one(self, world: StartWorld) -> None:
        w = await world(TEXT_ONLY, orchestrated=False)
        await settled_once(w)
        routes = [
            ("GET", f"/agents/{AGENT}/{IID}?offset=0"),
            ("GET", "/repos"),
            ("GET", "/readyz"),
            ("DELETE", "/runs/default.review-1?branch=kubeturn%2Freview-1"),
        ]
        headers = w.harness.headers()
        plain = [await call(w, method, path, headers=headers) for method, path in routes]
        assert [status for status, _, _ in plain] == [200, 200, 200, 200]
        for raw in (b"[" * DEEP + b"]" * DEEP, b'{"n": NaN}'):
            for (method, path), (status, _, body) in zip(routes, plain, strict=True):
                again = await call(w, method, path, headers=headers, data=raw)
                assert (again[0], again[2]) == (status, body)
