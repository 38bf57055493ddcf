"""``kubeturn logs``: what a local Run's Agents did, read from its workdir (ADR 0105).

One Run of ``examples/task-with-review.yaml`` (a run costs seconds, so one carries every
case), on the scripted model beside it:
- ``logs -f -o json``, started while the Run runs, is still following while the Run
  waits at humanReview, and ends by itself (exit 0) once ``send approve`` ended the Run,
  having printed every entry of the four Turns once, in this exact order of kinds;
- ``logs`` afterwards prints the same Turns as text: a header per Turn, the prompt with
  its Briefing folded, tool calls, picks and receipts, and ``■ ended (cause: pick)`` with
  tokens; ``-o json`` prints what ``-f`` printed;
- ``TURN`` narrows to one Turn, ``AGENT`` to one slot's Turns, ``--since-turn``
  leaves out the earlier ones;
- an unknown Turn or Agent, and an unknown Run, are refused in one line naming what
  there is;
- a recorded Run laid out as a workdir, its logs holding a line of an unknown kind and
  a torn last line, prints as recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from kubeturn_harness import store
from tests.cli.support import EXAMPLES, REPO, Background, kubeturn, one_line_error

RUN = "task-with-review"
GOLDEN = REPO / "tests" / "unit" / "transcripts"
PICKED = ["tool-call", "pick", "receipt", "settlement"]
KINDS = [
    ("t1", ["turn", "prompt", "text", "tool-call", "tool-result", *PICKED]),
    ("t2", ["turn", "prompt", "tool-call", "tool-result", *PICKED]),
    ("t3", ["turn", "prompt", "text", "tool-call", "tool-result", *PICKED]),
    ("t4", ["turn", "prompt", *PICKED]),
]


def _kinds(output: str) -> list[tuple[str, list[str]]]:
    turns: list[tuple[str, list[str]]] = []
    for line in output.splitlines():
        entry = json.loads(line)
        if entry["kind"] == "turn":
            turns.append((entry["turn"], []))
        turns[-1][1].append(entry["kind"])
    return turns


def test_logs_follow_a_run_and_show_its_turns(
    project: Path, background: Callable[..., Background]
) -> None:
    running = background("run", EXAMPLES / f"{RUN}.yaml", cwd=project)
    running.wait_line(rf"^run {RUN}: state implementing, phase Running$")
    following = background("logs", RUN, "-f", "-o", "json", cwd=project)
    running.wait_line(rf"^run {RUN}: state humanReview, phase Running$")
    assert following.process.poll() is None, "logs -f ended while the Run still runs"
    assert kubeturn("send", RUN, "approve", cwd=project).returncode == 0
    assert running.wait()[0] == 0
    code, followed, errors = following.wait()
    assert (code, errors) == (0, "")
    assert _kinds(followed) == KINDS

    shown = kubeturn("logs", RUN, "-o", "json", cwd=project)
    assert shown.stdout.strip() == followed.strip(), shown.stderr

    text = kubeturn("logs", RUN, cwd=project).stdout.splitlines()
    headers = [line for line in text if line.startswith("── ")]
    assert [re.sub(r" · \S+Z$", "", line) for line in headers] == [
        "── t1 · coder · implementing",
        "── t2 · reviewer · reviewing",
        "── t3 · coder · fixing",
        "── t4 · reviewer · reviewing",
    ]
    settled = [line for line in text if "■" in line]
    assert [re.sub(r"\d+/\d+", "N/N", line) for line in settled] == [
        "  ■ ended (cause: pick) · tokens N/N"
    ] * 4
    t4 = text[text.index(headers[3]) :]
    assert t4[1].startswith("  prompt: Review the change in ")
    assert t4[-5:] == [
        "  briefing: 4 lines (use -o json)",
        '  → review_verdict {"verdict": "approve"}',
        "  ⚑ picked review_verdict",
        "    ← turn-complete: Your pick `review_verdict` was delivered, and the workflow "
        "took it. Your turn is over.",
        settled[3],
    ]

    def turns(*args: str) -> list[str]:
        found = kubeturn("logs", RUN, *args, "-o", "json", cwd=project)
        assert found.returncode == 0, found.stderr
        return [name for name, _ in _kinds(found.stdout)]

    assert turns("t3") == ["t3"]
    assert turns("reviewer") == ["t2", "t4"]
    assert turns("coder", "--since-turn", "2") == ["t3"]

    assert one_line_error(kubeturn("logs", RUN, "t9", cwd=project)) == (
        "kubeturn: the run has no Turn and no Agent named 't9'; its Turns: t1, t2, t3, t4; "
        "its Agents: coder, reviewer"
    )
    assert one_line_error(kubeturn("logs", "nosuchrun", cwd=project)).startswith(
        "kubeturn: there is no local run 'nosuchrun' in "
    )


def test_logs_read_a_workdir_as_the_harness_left_it(tmp_path: Path) -> None:
    """A recorded Run laid out as a workdir: a conversation log holding a line of a kind
    this kubeturn does not know (passed by) and a torn last line (a crash mid-write: left
    unread) prints as recorded."""
    recorded = json.loads((GOLDEN / "task-with-review.json").read_text())
    workdir = tmp_path / "work"
    run = workdir / ".kubeturn" / "runs" / RUN
    run.mkdir(parents=True)
    (run / "run.yaml").write_text((EXAMPLES / f"{RUN}.yaml").read_text())
    (run / "snapshot.json").write_text(json.dumps(recorded["status"]))
    for log in recorded["logs"]:
        directory = (
            workdir
            / ".kubeturn"
            / "harness"
            / "conversations"
            / store.conversation_id(log["agent"], log["instanceId"])
        )
        directory.mkdir(parents=True)
        lines = [json.dumps(event) for event in log["events"]]
        lines.insert(
            1, json.dumps({"offset": 1, "type": "from-a-later-kubeturn", "at": "", "data": {}})
        )
        text = "\n".join(lines) + "\n" + '{"offset": 99, "type": "message-app'
        (directory / store.EVENTS_FILE).write_text(text)
    shown = kubeturn("logs", RUN, "--workdir", workdir, cwd=tmp_path)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == (GOLDEN / "task-with-review.txt").read_text()
