"""``kubeturn run --max-live-turns`` (ADR 0116), run as a user runs it: the fan-out example
(3 children, 2 at a time) with its scripted model, capped at 1 live Turn.

Case: the Run succeeds with its 3 Turns, each admitted only after the one before it was
recorded (no two live at once, though the fan-out would run two), in the order they
started; the terminal says, for each of the 2 Turns that waited, that it waits and why.
A cap that is no number is refused naming the flag.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from tests.cli.support import kubeturn, last_line, status

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_fan_out_capped_at_one_live_turn_runs_its_turns_one_at_a_time(project: Path) -> None:
    for name in ("fan-out.yaml", "fan-out.script.yaml"):
        shutil.copy(EXAMPLES / name, project / name)

    result = kubeturn("run", "fan-out.yaml", "--max-live-turns", "1", cwd=project, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert last_line(result.stdout, "run fan-out: ").startswith("run fan-out: Succeeded")
    turns = status(project / ".kubeturn-work" / "fan-out", "fan-out")["turns"]
    assert [t["name"] for t in turns] == ["t1", "t2", "t3"]
    for before, after in itertools.pairwise(turns):
        assert after["submissions"][0]["admittedAt"] >= before["settledAt"], (before, after)
    waits = [line for line in result.stdout.splitlines() if " waits for a live Turn" in line]
    assert [line.split(" (")[0] for line in waits] == ["kubeturn: Turn t2", "kubeturn: Turn t3"]
    assert waits[0].endswith(
        "waits for a live Turn to end: Workspace local has 1 live of at most 1 "
        "(--max-live-turns); earlier Turns go first"
    )


def test_a_cap_that_is_no_number_is_refused(project: Path) -> None:
    result = kubeturn("run", "x.yaml", "--max-live-turns", "0", cwd=project)
    assert result.returncode == 2
    assert "--max-live-turns: '0' is not a number of Turns (1 or more)" in result.stderr
