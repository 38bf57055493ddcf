"""The operator SIGKILLed at random moments while Runs progress (``kill_loops``).

Cases:
- 12 kills (seeded), at moments from kopf's start to well into serving, while 4 Runs of
  3 Turns each progress, the scripted model retrying any pick it is told may be lost:
  every Run Succeeded; every Turn recorded ``ended`` (none failed by the downtime: its
  pick, and then its sweep, waited for the next operator); each Turn's conversation
  admitted one Submission, settled once; one ``TurnSettled`` Event per AgentTurn and
  one ``TurnRecorded`` per Turn, none missing; no AgentTurn left (no finalizer held); no
  Run version on a watch showing a final phase without its Turns' records.

About 35 s on 2 cores (45 s when busy: a new operator process starts 12 times);
``bench/kill_loop.py`` runs 50 kills and prints the figures.
"""

from __future__ import annotations

from pathlib import Path

from tests.operator import emulator
from tests.operator.installation import Installation
from tests.operator.kill_loops import kill_loop
from tests.operator.kubelet import Kubelet

KILLS = 12
RUNS = 4
TURNS = 3
SEED = 11


async def test_runs_survive_an_operator_killed_twelve_times(
    k8s: emulator.KubernetesApi, installation: Installation, kubelet: Kubelet, tmp_path: Path
) -> None:
    figures = await kill_loop(
        k8s,
        installation,
        kubelet,
        tmp_path,
        kills=KILLS,
        runs=RUNS,
        turns=TURNS,
        seed=SEED,
        log=tmp_path / "operator.log",
    )
    assert figures.kills == KILLS
    assert figures.not_succeeded == []
    assert figures.succeeded == RUNS
    assert figures.turns == RUNS * TURNS
    assert figures.failed_turns == []
    assert figures.other_turns == []
    assert figures.admitted_twice == []
    assert figures.settled_not_once == []
    assert figures.duplicate_events == []
    assert figures.missing_events == []
    assert figures.agentturns_left == []
    assert figures.final_without_turns == []
