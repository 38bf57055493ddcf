"""The console application over real HTTP on 127.0.0.1, with Runs held in memory.

Cases:
- the route contract: ``/`` redirects to ``runs``; the Runs list of every namespace and
  of one; a Run's page; a Turn's page; the transcript as NDJSON with its query passed
  through exactly (``turn``, ``agent``, ``sinceTurn``, ``follow``); the package's assets;
- every link, script and fragment URL a page holds is relative (none starts with ``/``),
  so the same pages work mounted under a prefix: the whole app served under
  ``/apis/console.kubeturn.dev/v1alpha1`` answers there with the same pages;
- a page's live part is its own URL with ``?part=1`` (what authorises the page
  authorises it); asked with the version the page holds it is ``204``; a changed one is
  the new part; a finished Run's part polls no more;
- the transcript is written as it is read: a followed entry reaches the reader before
  the next is made, and a reader that leaves mid-stream closes the source's iterator; a
  Run gone while followed ends the stream there, whole, with no error logged;
- a Run or a Turn that does not exist is ``404`` naming it; ``sinceTurn`` that is not a
  number is ``400`` naming it; an asset not in the package is ``404``;
- a Run's tokens and cost show in the Runs list and its page's summary, and a Turn's
  beside its tokens in the Turns table and on the Turn's page;
- text from a Run is escaped (a message with markup shows as text); every page carries a
  content security policy allowing only the console's own scripts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubeturn.console.app import console_app
from kubeturn.errors import NotFound
from kubeturn.transcripts import Entry, EntryKind, Query, TranscriptSource
from tests.cli.support import EXAMPLES

MANIFEST = (EXAMPLES / "task-with-review.yaml").read_text()
PREFIX = "/apis/console.kubeturn.dev/v1alpha1"


def run_object(name: str, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
    import yaml

    document = yaml.safe_load(MANIFEST)
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": document["spec"],
        "status": status,
    }


WAITING = {
    "phase": "Running",
    "state": "humanReview",
    "turnCount": 1,
    "turns": [
        {
            "name": "t1",
            "agent": "coder",
            "state": "implementing",
            "instanceId": "i1",
            "outcome": "ended",
            "cause": "pick",
            "startedAt": 10.0,
            "settledAt": 75.0,
            "tokens": {"promptTokens": 1200, "completionTokens": 300, "cost": "0.0048"},
        }
    ],
    "usage": {
        "tokens": 1500,
        "cost": "0.0048",
        "total": {"promptTokens": 1200, "completionTokens": 300, "cost": "0.0048"},
        "agents": {
            "coder": {"promptTokens": 1200, "completionTokens": 300, "cost": "0.0048"},
        },
    },
    "trail": [{"from": "implementing", "event": "submit", "to": "reviewing", "at": 75.0}],
    "acceptedEvents": [{"event": "approve", "state": "humanReview"}],
    "message": "<b>not bold</b>",
}


@dataclass
class Memory:
    """Runs and transcripts in memory; it records every transcript query asked."""

    objects: list[dict[str, Any]]
    entries: list[Entry] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)

    async def runs(self, namespace: str | None) -> list[dict[str, Any]]:
        return [o for o in self.objects if namespace in (None, o["metadata"]["namespace"])]

    async def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next(
            (
                o
                for o in self.objects
                if (o["metadata"]["namespace"], o["metadata"]["name"]) == (namespace, name)
            ),
            None,
        )

    def transcripts(self, namespace: str, name: str) -> TranscriptSource:
        return Transcript(self)


@dataclass
class Transcript:
    memory: Memory

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        self.memory.queries.append(query)
        for entry in self.memory.entries:
            if query.turn in (None, entry.turn):
                yield entry


def entry(kind: EntryKind, text: str = "", **data: Any) -> Entry:
    return Entry(
        turn="t1",
        number=1,
        state="implementing",
        agent="coder",
        kind=kind,
        at="2026-01-01T00:00:10Z",
        text=text,
        data=data,
    )


@pytest.fixture
def memory() -> Memory:
    return Memory(
        [
            run_object("review", "team-a", WAITING),
            run_object("other", "team-b", {"phase": "Succeeded", "state": "done"}),
        ],
        [entry(EntryKind.PROMPT, "Add a flag"), entry(EntryKind.TEXT, "Done.", tokens=3)],
    )


@pytest.fixture
async def base(memory: Memory) -> AsyncIterator[str]:
    """The console served at the root and, in a second app, under the aggregated prefix."""
    outer = web.Application()
    outer.add_subapp(PREFIX, console_app(memory, title="kubeturn test"))
    runners = [web.AppRunner(console_app(memory)), web.AppRunner(outer)]
    sites = []
    for runner in runners:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        sites.append(runner.addresses[0][1])
    yield f"http://127.0.0.1:{sites[0]}|http://127.0.0.1:{sites[1]}{PREFIX}"
    for runner in runners:
        await runner.cleanup()


async def get(url: str, **params: str) -> tuple[int, str, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params=params, allow_redirects=False) as response,
    ):
        return response.status, await response.text(), dict(response.headers)


def urls_in(page: str) -> list[str]:
    return re.findall(r'(?:href|src|hx-get)="([^"]*)"', page)


PAGES = [
    "/runs",
    "/namespaces/team-a/runs",
    "/namespaces/team-a/runs/review",
    "/namespaces/team-a/runs/review/turns/t1",
]


async def test_every_page_answers_at_the_root_and_under_a_prefix_with_relative_links(
    base: str,
) -> None:
    for root in base.split("|"):
        for path in PAGES:
            status, page, headers = await get(root + path)
            assert status == 200, (root + path, page)
            assert headers["Content-Type"].startswith("text/html")
            assert headers["Content-Security-Policy"].startswith("default-src 'self'; ")
            found = urls_in(page)
            assert found, path
            assert [u for u in found if u.startswith("/") or "://" in u] == [], path
        status, _, headers = await get(root + "/")
        assert (status, headers["Location"]) == (302, "runs")


async def test_the_runs_list_shows_every_namespace_or_one(base: str) -> None:
    root = base.split("|")[0]
    _, every, _ = await get(root + "/runs")
    assert re.findall(r'data-run="([^"]+)"', every) == ["team-a/review", "team-b/other"]
    assert "<td>1200 in / 300 out</td>\n<td>$0.0048</td>" in every
    _, one, _ = await get(root + "/namespaces/team-b/runs")
    assert re.findall(r'data-run="([^"]+)"', one) == ["team-b/other"]
    assert 'href="../../namespaces/team-b/runs/other"' in one


async def test_the_run_page_shows_its_machine_turns_and_what_it_accepts(base: str) -> None:
    root = base.split("|")[0]
    _, page, _ = await get(root + "/namespaces/team-a/runs/review")
    assert "class s3 active" in page
    assert "class s0,s1 visited" in page
    assert "s0 --&gt; s1 : submit ✓" in page
    assert "<td><code>approve</code></td><td>humanReview</td>" in page
    assert '<tr data-turn="t1">' in page
    assert "<td>1200 in / 300 out</td><td>$0.0048</td><td>1m5s</td>" in page
    # The Run's usage in its summary; one Agent slot's is the whole, not listed again.
    assert '<dd id="tokens">1200 in / 300 out</dd>' in page
    assert '<dd id="cost">$0.0048</dd>' in page
    assert "usage-agents" not in page
    assert "&lt;b&gt;not bold&lt;/b&gt;" in page
    assert 'href="../../../namespaces/team-a/runs/review/turns/t1"' in page


async def test_a_live_part_unchanged_is_204_and_a_finished_run_polls_no_more(
    base: str, memory: Memory
) -> None:
    root = base.split("|")[0]
    _, page, _ = await get(root + "/namespaces/team-a/runs/review")
    version = re.search(r'data-version="([0-9a-f]+)"', page)
    assert version is not None
    assert 'hx-get="../../../namespaces/team-a/runs/review?part=1"' in page
    part = root + "/namespaces/team-a/runs/review"
    assert (await get(part, part="1", v=version.group(1)))[0] == 204
    memory.objects[0]["status"] = {**WAITING, "phase": "Succeeded", "state": "done"}
    status, changed, _ = await get(part, part="1", v=version.group(1))
    assert status == 200
    assert "hx-trigger" not in changed
    assert "class s4 active" in changed
    _, finished, _ = await get(root + "/namespaces/team-b/runs/other")
    assert "hx-trigger" not in finished


async def test_the_turn_page_lists_its_transcript(base: str) -> None:
    root = base.split("|")[0]
    _, page, _ = await get(root + "/namespaces/team-a/runs/review/turns/t1")
    assert re.findall(r'class="entry entry-([a-z-]+)"', page) == ["prompt", "text"]
    assert '<ol class="transcript" data-entries="2">' in page
    assert "&#34;tokens&#34;: 3" in page
    assert "<dt>Tokens</dt><dd>1200 in / 300 out</dd>\n<dt>Cost</dt><dd>$0.0048</dd>" in page


async def test_the_transcript_is_ndjson_of_the_query_asked(base: str, memory: Memory) -> None:
    root = base.split("|")[1]
    url = root + "/namespaces/team-a/runs/review/transcript"
    status, body, headers = await get(url, turn="t1", agent="coder", sinceTurn="2", follow="1")
    assert status == 200
    assert headers["Content-Type"] == "application/x-ndjson"
    assert [json.loads(line)["kind"] for line in body.splitlines()] == ["prompt", "text"]
    assert Entry.model_validate_json(body.splitlines()[1]) == memory.entries[1]
    assert memory.queries[-1] == Query(turn="t1", agent="coder", since_turn=2, follow=True)
    await get(url)
    assert memory.queries[-1] == Query()


async def test_what_is_not_there_is_named(base: str) -> None:
    root = base.split("|")[0]
    assert (await get(root + "/namespaces/team-a/runs/gone"))[:2] == (404, "no Run team-a/gone")
    status, text, _ = await get(root + "/namespaces/team-a/runs/review/turns/t9")
    assert (status, text) == (404, "the Run team-a/review has no Turn 't9'")
    status, text, _ = await get(root + "/namespaces/team-a/runs/review/transcript", sinceTurn="two")
    assert (status, text) == (400, "sinceTurn must be a Turn number, not 'two'")
    assert (await get(root + "/assets/secret.py"))[:2] == (404, "no asset 'secret.py'")
    status, script, headers = await get(root + "/assets/htmx.min.js")
    assert (status, headers["Content-Type"]) == (200, "text/javascript; charset=utf-8")
    assert "htmx" in script


@dataclass
class Following:
    """A followed transcript: one entry, then the next only once ``more`` is set."""

    more: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        try:
            yield entry(EntryKind.PROMPT, "first")
            await self.more.wait()
            yield entry(EntryKind.TEXT, "second")
        finally:
            self.closed.set()


async def test_a_followed_transcript_is_written_as_it_is_read(memory: Memory) -> None:
    following = Following()
    memory.transcripts = lambda namespace, name: following  # type: ignore[method-assign]
    runner = web.AppRunner(console_app(memory))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/namespaces/team-a/runs/review/transcript"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url, params={"follow": "1"}) as response:
                first = await response.content.readline()
                assert json.loads(first)["text"] == "first"
                following.more.set()
                rest = await response.content.read()
            assert [json.loads(line)["text"] for line in rest.splitlines()] == ["second"]
            following.more.clear()
            following.closed.clear()
            async with session.get(url, params={"follow": "1"}) as response:
                await response.content.readline()
            await asyncio.wait_for(following.closed.wait(), 10)
    finally:
        await runner.cleanup()


@dataclass
class Gone:
    """A followed transcript whose Run is deleted after its first entry."""

    async def entries(self, query: Query) -> AsyncIterator[Entry]:
        yield entry(EntryKind.PROMPT, "first")
        raise NotFound("the Run is gone")


async def test_a_followed_transcript_ends_when_its_run_is_gone(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    memory.transcripts = lambda namespace, name: Gone()  # type: ignore[method-assign]
    runner = web.AppRunner(console_app(memory))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/namespaces/team-a/runs/review/transcript"
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, params={"follow": "1"}) as response,
        ):
            body = await response.read()  # a stream cut short raises here
    finally:
        await runner.cleanup()
    assert [json.loads(line)["text"] for line in body.splitlines()] == ["first"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
