"""What ``kubeturn send`` and ``kubeturn status`` say of a local Run: the truth (ADR 0067,
0068).

One Run, start to end (a run costs seconds, so one carries every case):
- ``status`` says what the Run waits for (each accepted event, its state and
  description; ``-o wide`` adds its schema: ``test_cluster.py``); ``send`` refuses,
  exit 1 in one line and sending nothing, an event no active state accepts (naming the
  events accepted now) and data that misfits the event's schema (naming the field);
  ``-o json`` and ``-o yaml`` give the same status, with RFC 3339 times;
- a Run no ``kubeturn run`` drives (stopped by SIGTERM) is not shown ``Running``:
  ``status`` says it is stopped and how to continue it, ``-o json`` says
  ``driven: false``; a signal sent meanwhile is queued and said to be; resumed, it is
  delivered: its guard's CEL fails (a missing key) and the Run fails, the message naming
  the state, the expression, its path and the key.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.cli.support import EXAMPLES, MACHINES, Background, kubeturn, one_line_error

GATE = MACHINES / "gate.yaml"
MODEL = f"scripted:{EXAMPLES / 'hello.script.yaml'}"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def waiting(background: Callable[..., Background], project: Path) -> Background:
    running = background("run", GATE, "--model", MODEL, cwd=project)
    running.wait_line(r"^run gate: state waiting, phase Running$")
    return running


def test_send_and_status_tell_the_truth(
    project: Path, background: Callable[..., Background]
) -> None:
    running = waiting(background, project)
    shown = kubeturn("status", "gate", cwd=project)
    assert shown.stdout.splitlines() == [
        "run: gate",
        "phase: Running",
        "state: waiting",
        "turns: 0",
        "waiting for: approve, reject, check",
        "  approve (waiting): The work is good; ship it.",
        "  reject (waiting): Turn it down.",
        "  check (waiting)",
    ], shown.stderr
    refused = kubeturn("send", "gate", "merge", cwd=project)
    assert one_line_error(refused) == (
        "kubeturn: not sent to run gate: no active state accepts merge; the Run accepts now: "
        "approve (waiting), reject (waiting), check (waiting)"
    )
    misfit = kubeturn("send", "gate", "approve", "--data", '{"reason": "ok"}', cwd=project)
    assert one_line_error(misfit) == (
        "kubeturn: not sent to run gate: the data of approve does not fit its schema: "
        "reason: 'ok' is too short"
    )

    # Stopped, no kubeturn run drives it: it is not shown Running.
    running.signal(signal.SIGTERM)
    code, _, _ = running.wait()
    assert code == 143
    stopped = kubeturn("status", "gate", cwd=project)
    assert stopped.stdout.splitlines()[:3] == [
        "run: gate",
        "phase: Stopped (saved Running; no `kubeturn run` drives it: `kubeturn run --resume "
        "gate` continues it)",
        "state: waiting",
    ], stopped.stderr
    as_json = json.loads(kubeturn("status", "gate", "-o", "json", cwd=project).stdout)
    as_yaml = yaml.safe_load(kubeturn("status", "gate", "-o", "yaml", cwd=project).stdout)
    assert as_json == as_yaml
    assert (as_json["phase"], as_json["driven"]) == ("Running", False)
    assert RFC3339.match(as_json["savedAt"]), as_json["savedAt"]

    # Queued meanwhile, delivered on resume: its guard's CEL fails, and says where.
    queued = kubeturn("send", "gate", "check", "--id", "c-1", cwd=project)
    assert queued.stdout == (
        "queued check for run gate (signal c-1); no kubeturn run drives it now: "
        "`kubeturn run --resume gate` delivers it\n"
    )
    resumed = kubeturn("run", "--resume", "gate", cwd=project)
    assert (resumed.returncode, resumed.stderr) == (1, ""), resumed.stdout
    assert resumed.stdout.splitlines()[-2] == (
        "message: the Machine faulted in state 'waiting': CEL expression 'event.level > 1' "
        "failed: no key 'level' (spec.machine.states.waiting.on.check.guard); no state "
        "handles error.expression"
    )
    ended = json.loads(kubeturn("status", "gate", "-o", "json", cwd=project).stdout)
    assert (ended["phase"], ended["processedSignals"], ended["acceptedEvents"]) == (
        "Failed",
        [{"id": "c-1", "result": "handled"}],
        [],
    )
