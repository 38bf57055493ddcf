"""A Run's status shows its running fan-outs' children, within a bound, for kubectl.

Cases:
- a fan-out over five items, two at a time: ``status.children`` lists each child by
  fan-out and item order with its status and its active states (pending ones none),
  ``childProgress`` counts them; a child that ends moves to succeeded and the next
  pending one runs; once the fan-out's state exits, no child is shown;
- a failed child (``failFast: false``) shows why, cut to ``CHILD_TEXT_LIMIT``;
- two fan-outs at once (regions of a parallel state): each one's progress is named;
- a Run whose own Machine is in two regions shows both leaves in ``status.state``;
- restored from its status after each child's Turn, the core continues as the one never
  restored (snapshot and children alike) and runs the fan-out to its end;
- 100 children, each running a Turn: the status as the API server stores it stays small,
  and it fits the models;
- more children than ``CHILDREN_LIMIT``: the first are shown, ``droppedChildren`` counts
  the rest;
- a child Turn's AgentTurn: its state path (``fix[pkg-a].work``) is in its spec, no label
  carries it, and every label value is one the API server takes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from kubeturn.api.status import CHILD_TEXT_LIMIT, CHILDREN_LIMIT, RunPhase, RunStatus
from kubeturn.k8s import objects, patches
from kubeturn.machine.interpreter import Child, ChildStatus
from kubeturn.machine.load import load_run
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator import statuses
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Sweep
from tests.operator.names import is_label_value
from tests.statuses import unfit, without_nulls
from tests.unit.cores import restored_from_status

CHILDREN_BUDGET = 32 * 1024
"""What ``status.children`` of 100 running children may take at most."""
STATUS_BUDGET = 128 * 1024
"""What the whole status of a Run running 100 children's Turns may take at most (its
snapshot holds each live Turn and each child): a quarter of the object bound the other
status tests keep to, a tenth of etcd's."""


def manifest(states: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Run",
        "metadata": {"name": "fan", "namespace": "default"},
        "spec": {
            "workspace": {"template": {"repos": {"target": {"url": "https://e.invalid/r.git"}}}},
            "agents": {"fixer": {"instructions": "You fix one package.", "model": "m/m"}},
            "machine": {"initial": next(iter(states)), "context": context or {}, "states": states},
        },
    }


def fan_out(
    items: str = "context.packages", *, concurrency: int = 2, fail_fast: bool = True
) -> dict[str, Any]:
    """A fan-out state: each child asks the fixer for a Turn, and ends by its pick
    ``fixed`` (succeeded) or ``broken`` (failed)."""
    child = {
        "initial": "work",
        "states": {
            "work": {
                "invoke": {"agent": {"slot": "fixer", "prompt": "Fix {{ input }}."}},
                "on": {
                    "fixed": {"target": "done", "description": "Fixed."},
                    "broken": {"target": "lost", "description": "Beyond repair."},
                },
            },
            "done": {"type": "final", "output": "input"},
            "lost": {"type": "final", "outcome": "failed"},
        },
    }
    return {
        "invoke": {
            "forEach": {
                "items": items,
                "concurrency": concurrency,
                "failFast": fail_fast,
                "machine": child,
            },
            "onDone": "finished",
        }
    }


PACKAGES = ["pkg-a", "pkg-b", "pkg-c", "pkg-d", "pkg-e"]
FINISHED = {"type": "final"}


def counter() -> Callable[[], str]:
    """Fresh ids ``n1``, ``n2``, ..."""
    ids = itertools.count(1)
    return lambda: f"n{next(ids)}"


def started(
    document: dict[str, Any], new_id: Callable[[], str] | None = None
) -> tuple[RunCore, list[Admit]]:
    core = RunCore(load_run(document), workspace=None, new_id=new_id or counter())
    return core, [a for a in core.start(0.0).of(Admit) if isinstance(a, Admit)]


def shown(core: RunCore) -> dict[str, Any]:
    """The Run's status as the API server stores it (nulls dropped)."""
    written = patches.status(statuses.run_status(core.view(), core.snapshot()))["status"]
    kept: dict[str, Any] = without_nulls(json.loads(json.dumps(written)))
    return kept


def children(core: RunCore) -> list[tuple[str, str, str | None]]:
    return [(c["key"], c["status"], c.get("state")) for c in shown(core)["children"]]


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


class TestOneFanOut:
    def test_its_children_by_item_with_their_states_and_progress(self) -> None:
        document = manifest({"fix": fan_out(), "finished": FINISHED}, {"packages": PACKAGES})
        core, admits = started(document)
        status = shown(core)
        assert status["state"] == "fix"
        assert {c["fanOut"] for c in status["children"]} == {"fix"}
        assert children(core) == [
            ("pkg-a", "running", "fix[pkg-a].work"),
            ("pkg-b", "running", "fix[pkg-b].work"),
            ("pkg-c", "pending", None),
            ("pkg-d", "pending", None),
            ("pkg-e", "pending", None),
        ]
        assert (status["childProgress"], status["droppedChildren"]) == ("2 running, 3 pending", 0)

        _, effects = core.pick(admits[1].instance_id, "fixed", {}, 1.0)
        assert [a.state for a in effects.of(Admit) if isinstance(a, Admit)] == ["fix[pkg-c].work"]
        assert children(core) == [
            ("pkg-a", "running", "fix[pkg-a].work"),
            ("pkg-b", "succeeded", None),
            ("pkg-c", "running", "fix[pkg-c].work"),
            ("pkg-d", "pending", None),
            ("pkg-e", "pending", None),
        ]
        assert shown(core)["childProgress"] == "1 succeeded, 2 running, 2 pending"

        core.cancel(2.0)
        status = shown(core)
        assert (status["children"], status["droppedChildren"]) == ([], 0)
        assert "childProgress" not in status

    def test_a_failed_child_says_why_within_its_bound(self) -> None:
        document = manifest(
            {"fix": fan_out(fail_fast=False), "finished": FINISHED}, {"packages": PACKAGES}
        )
        core, admits = started(document)
        core.pick(admits[0].instance_id, "broken", {}, 1.0)
        (failed,) = [c for c in shown(core)["children"] if c["status"] == "failed"]
        assert failed["key"] == "pkg-a"
        assert "state" not in failed
        assert failed["message"]
        assert shown(core)["childProgress"] == "1 failed, 2 running, 2 pending"
        long = Child(
            scope=StatePath("fix[x]"),
            invocation="fix#1",
            key="x",
            index=0,
            item="x",
            context={},
            status=ChildStatus.FAILED,
            message="the model said: " + "no " * 1000,
        )
        (entry,) = statuses.fan_out_children([long], [])["children"]
        assert len(entry.message.encode()) <= CHILD_TEXT_LIMIT
        assert entry.message.startswith("the model said: no no")


class TestTwoAtOnce:
    def test_each_fan_outs_progress_is_named_and_both_leaves_are_the_state(self) -> None:
        region = {"initial": "fix", "states": {"fix": fan_out(), "ok": {"type": "final"}}}
        region["states"]["fix"]["invoke"]["onDone"] = "ok"
        both = {"type": "parallel", "states": {"lint": region, "test": region}, "onDone": "end"}
        document = manifest({"both": both, "end": FINISHED}, {"packages": PACKAGES[:3]})
        core, admits = started(document)
        status = shown(core)
        assert status["state"] == "both.lint.fix, both.test.fix"
        assert status["childProgress"] == (
            "both.lint.fix: 2 running, 1 pending; both.test.fix: 2 running, 1 pending"
        )
        assert [(c["fanOut"], c["key"], c.get("state")) for c in status["children"][:2]] == [
            ("both.lint.fix", "pkg-a", "both.lint.fix[pkg-a].work"),
            ("both.lint.fix", "pkg-b", "both.lint.fix[pkg-b].work"),
        ]
        assert len(admits) == 4


class TestRestoredFromItsStatus:
    def test_at_every_point_of_a_fan_out_it_continues_as_the_one_never_restored(self) -> None:
        document = manifest({"fix": fan_out(), "finished": FINISHED}, {"packages": PACKAGES})
        plain, _ = started(document)
        new_id = counter()
        restarted, _ = started(document, new_id)
        now = 1.0
        while plain.live_turns():
            for core in (plain, restarted):
                turn = core.live_turns()[0]
                core.admitted(turn.id, f"{turn.id}-s", now)
                _, effects = core.pick(turn.instanceId, "fixed", {}, now + 0.5)
                for sweep in effects.of(Sweep):
                    assert isinstance(sweep, Sweep)
                    core.swept(sweep.turn, {}, now + 1)
            restarted = restored_from_status(restarted, new_id=new_id)
            restarted.resume()
            assert restarted.snapshot() == plain.snapshot()
            assert shown(restarted)["children"] == shown(plain)["children"]
            now += 2
        assert plain.phase is restarted.phase is RunPhase.SUCCEEDED
        assert restarted.history == plain.history
        assert [(r.state, r.cause) for r in plain.history] == [
            (f"fix[{p}].work", "pick") for p in PACKAGES
        ]


class TestSize:
    def test_100_running_children_keep_the_status_small(self) -> None:
        keys = [f"package-number-{n:03d}-of-the-monorepo" for n in range(100)]
        document = manifest(
            {"fix": fan_out(concurrency=100), "finished": FINISHED}, {"packages": keys}
        )
        core, admits = started(document)
        assert len(admits) == 100
        status = shown(core)
        assert status["childProgress"] == "100 running"
        said = (
            f"status {size(status)} bytes: children {size(status['children'])}, "
            f"snapshot {size(status['snapshot'])}"
        )
        assert size(status["children"]) < CHILDREN_BUDGET, said
        assert size(status) < STATUS_BUDGET, said
        assert unfit(RunStatus, status) == []

    def test_past_the_limit_the_rest_are_counted(self) -> None:
        many = [
            Child(StatePath(f"fix[k{n}]"), "fix#1", f"k{n}", n, n, {})
            for n in range(CHILDREN_LIMIT + 7)
        ]
        fields = statuses.fan_out_children(many, [])
        assert len(fields["children"]) == CHILDREN_LIMIT
        assert fields["children"][-1].key == f"k{CHILDREN_LIMIT - 1}"
        assert fields["droppedChildren"] == 7
        assert fields["childProgress"] == f"{CHILDREN_LIMIT + 7} pending"


class TestAChildTurnsAgentTurn:
    def test_its_state_is_in_its_spec_and_its_labels_are_valid(self) -> None:
        document = manifest({"fix": fan_out(), "finished": FINISHED}, {"packages": PACKAGES})
        _, admits = started(document)
        run = {**document, "metadata": {**document["metadata"], "uid": "u-1"}}
        body = objects.agent_turn(run, admits[0], workspace="fan-workspace", menu=[])
        assert body["spec"]["statePath"] == "fix[pkg-a].work"
        assert body["spec"]["instanceId"] == "default.fan/root/fix[pkg-a]/fixer/t-n1"
        labels = body["metadata"]["labels"]
        assert not any("[" in value for value in labels.values()), labels
        assert [(key, is_label_value(value)) for key, value in labels.items()] == [
            (key, []) for key in labels
        ]
