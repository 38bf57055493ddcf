"""Hostile Agents of fan-out children and of their Runs (ADR 0113), in-process: whether a
session reaches exactly the worktrees its Frame's Run or child may.

A session in a Run's worktree reaches that Run's worktrees and its fan-out children's
(``<slot>/<run's directory>_<child>``); a child's session reaches only its own. The
Workspace here has two repo slots and, in each, the worktrees of:

- Run ``run-a`` and its children ``fix[one]`` and ``fix[two]``, and one of its children
  being made (``….partial``, as the Harness leaves it until it renames it into place);
- Run ``run-a-b`` (whose name begins with the other's) and its child ``fix[one]``;
- Run ``run-b`` and its child ``fix[one]``;
- a Run whose name is too long for its branch (``kubeturn.k8s.names.branch`` cuts it and
  adds a digest) and its child, and a Run named as the long one's first 127 characters,
  whose branch is the first 136 of the long one's, and its child.

Each worktree holds a canary of its own (``canary.txt``). The Runs' and children's
worktrees are made by the Harness, as the operator asks (a child's from its Run's, on
``kubeturn.orchestrator.worktrees.child_branch``); the one being made is planted as the
Harness's git would leave it. Five hostile Agents, each in its own Turn with write
access (the parent Run's, one child's, ``run-a-b``'s, the long Run's, the short Run's),
run one ``bash`` call: for every worktree it reads the canary (``grep -r``), tries to
write a file into it, and then tries to make entries beside the worktrees (a directory
named as another Run's child, a link, a directory moved out of its own worktree), which
would pose as a child to another Run's sessions. The child's Agent then makes its
worktree's ``.git`` a file, as a linked worktree's is, and a later Turn of its Run reads
the child's canary: the Harness adopts linked worktrees as a session opens, and
adopting the child's would fail that session.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeturn.k8s.names import branch
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator.worktrees import child_branch
from tests.hostile import agent
from tests.hostile.layout import Scene, make_clone

SLOTS = ("target", "docs")
LONG = "long-" + "l" * 235
"""A Run's name of 240 characters: its branch is cut to 200 and ends in a digest."""
SHORT = LONG[:127]
"""A Run whose branch (``kubeturn/`` and 127 characters) begins the long one's."""
RUNS = {"A": "run-a", "AB": "run-a-b", "B": "run-b", "long": LONG, "short": SHORT}
"""Label → Run name; each Run fans out ``fix[one]``, ``run-a`` also ``fix[two]``."""
CHILDREN = {"A": ("one", "two"), "AB": ("one",), "B": ("one",), "long": ("one",), "short": ("one",)}
PARTIAL = "A.three.partial"
"""The worktree of ``run-a``'s child ``fix[three]`` while it is being made."""


@dataclass(frozen=True)
class Session:
    """One hostile Agent: whose Turn it is, and the worktree its Frame names."""

    label: str
    run: str
    tree: str
    """The label of its cwd's worktree (in the slot ``target``)."""

    @property
    def prompt(self) -> str:
        return f"reach out as {self.label}"


SESSIONS = (
    Session("parent", RUNS["A"], "A"),
    Session("child", RUNS["A"], "A.one"),
    Session("prefixed", RUNS["AB"], "AB"),
    Session("long", LONG, "long"),
    Session("short", SHORT, "short"),
)


BREAK = "mv .git .git-was && printf 'gitdir: /nowhere\\n' > .git && echo broke"
"""The child's Agent's second call: its worktree's ``.git`` becomes a file, as a linked
worktree's is (the Harness adopts those as a session opens in them, ADR 0082)."""
AGAIN = Session("later", RUNS["A"], "A")
"""A later Turn of the Run, once its child broke its ``.git``: it reads the child's canary."""


def label(tree: str, slot: str) -> str:
    return f"{tree}@{slot}"


def trees_of(*owners: str) -> set[str]:
    """The labels of the worktrees of ``owners`` (Runs' and children's labels), every slot."""
    return {label(owner, slot) for owner in owners for slot in SLOTS}


@dataclass(frozen=True)
class Probe:
    """What one session found of one worktree."""

    read: bool
    wrote: bool
    said: str
    """The error reading its canary answered (empty when it read it)."""


@dataclass
class FanOutAttack:
    """What each hostile session of the fan-out reached, and what was found after."""

    variant: str
    paths: dict[str, Path]
    """Worktree label → its path."""
    probes: dict[str, dict[str, Probe]]
    """Session → worktree label → what it found."""
    plants: dict[str, dict[str, str]]
    """Session → entry it tried to make beside the worktrees → what it was answered."""
    listed: dict[str, str]
    """Session → what listing the slot's directory answered."""
    after: dict[str, Any] = field(default_factory=dict)

    def reached(self, session: str) -> set[str]:
        return {tree for tree, probe in self.probes[session].items() if probe.read}

    def wrote(self, session: str) -> set[str]:
        return {tree for tree, probe in self.probes[session].items() if probe.wrote}


PROBE = r"""
me="$1"; shift
while [ $# -gt 0 ]; do
  label="$1"; tree="$2"; canary="$3$4"; shift 4
  if grep -rqaF -e "$canary" "$tree" 2>/dev/null; then read=yes; else read=no; fi
  said=$(cat "$tree/canary.txt" 2>&1 >/dev/null | head -1)
  if { echo x > "$tree/owned-by-$me"; } 2>/dev/null; then wrote=yes; else wrote=no; fi
  echo "TREE $label read=$read wrote=$wrote said=$said"
done
"""
"""One session's probe of every worktree: ``me``, then label, path and the canary's two
halves of each (never whole on a command line)."""

PLANT = r"""
me="$1"; slot="$2"; victim="$3"
echo "LIST $(ls "$slot" 2>&1 | head -1)"
plant() {
  if out=$( { eval "$2"; } 2>&1 ); then echo "PLANT $1 made $out"
  else echo "PLANT $1 refused $out"; fi
}
plant directory "mkdir '$slot/$victim'_evil-$me"
plant link "ln -s '$PWD' '$slot/$victim'_link-$me"
plant moved "mkdir -p out-$me && mv out-$me '$slot/$victim'_moved-$me"
"""
"""Entries a session tries to make beside the worktrees, each named as a child of
``victim`` (another Run's directory), after listing the slot's directory."""


def script(scene: Scene, paths: dict[str, Path], canaries: dict[str, str]) -> str:
    """The scripted model: each session's prompt answered by one ``bash`` call, then done."""
    conversations = []
    for session in SESSIONS:
        specs = []
        for tree, path in paths.items():
            half = len(canaries[tree]) // 2
            specs += [tree, str(path), canaries[tree][:half], canaries[tree][half:]]
        victim = paths[label("B" if session.run == RUNS["A"] else "A", "target")].name
        command = " ".join(
            [
                f"bash -c {_quote(PROBE)} probe {session.label}",
                *(_quote(spec) for spec in specs),
                f"; bash -c {_quote(PLANT)} plant {session.label}",
                _quote(str(scene.work_root / "target")),
                _quote(victim),
            ]
        )
        steps = [{"toolCalls": [agent.bash(command)]}]
        if session.label == "child":
            steps.append({"toolCalls": [agent.bash(BREAK)]})
        conversations.append({"match": session.prompt, "steps": [*steps, {"text": "done"}]})
    canary = paths[label("A.one", "target")] / "canary.txt"
    read = agent.bash(f"cat {_quote(str(canary))} && echo reached")
    conversations.append(
        {"match": AGAIN.prompt, "steps": [{"toolCalls": [read]}, {"text": "done"}]}
    )
    return json.dumps({"conversations": conversations})


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def parse(said: str) -> tuple[dict[str, Probe], dict[str, str], str]:
    """A session's bash answer: its probes by worktree, its plants, its listing."""
    probes: dict[str, Probe] = {}
    plants: dict[str, str] = {}
    listed = ""
    for line in said.splitlines():
        if line.startswith("TREE "):
            _, tree, read, wrote, rest = line.split(" ", 4)
            probes[tree] = Probe(
                read == "read=yes", wrote == "wrote=yes", rest.removeprefix("said=")
            )
        elif line.startswith("PLANT "):
            _, what, rest = line.split(" ", 2)
            plants[what] = rest
        elif line.startswith("LIST "):
            listed = line.removeprefix("LIST ")
    return probes, plants, listed


async def attack(variant: str, tmp: Path, work_root: Path) -> FanOutAttack:
    """Make the Workspace's worktrees, run the five hostile sessions, look at what is left."""
    scene = Scene(variant, tmp, work_root, disk_full=False)
    for slot in SLOTS:
        make_clone(work_root / ".repos" / slot, scene.tool_uid)
    try:
        await scene.start()
        paths = await _make_worktrees(scene)
        canaries = {tree: f"KTCANARY{secrets.token_hex(8)}" for tree in paths}
        for tree, path in paths.items():
            (path / "canary.txt").write_text(canaries[tree] + "\n")
            os.chown(path / "canary.txt", scene.tool_uid, scene.tool_uid)
        await scene.answer(script(scene, paths, canaries))
        probes, plants, listed = {}, {}, {}
        for session in SESSIONS:
            cwd = paths[label(session.tree, "target")]
            sid = await scene.turn(session.run, session.prompt, cwd, name=session.label)
            settled = await scene.settled(session.run, sid, name=session.label)
            assert settled["outcome"] == "completed", settled
            history = await scene.history(session.run, name=session.label)
            calls = ["probe", "break"] if session.label == "child" else ["probe"]
            results = agent.results(calls, history["messages"])
            said = results["probe"]
            if session.label == "child":
                broke = results["break"]
            probes[session.label], plants[session.label], listed[session.label] = parse(said)
            assert set(probes[session.label]) == set(paths), said  # every worktree probed
        sid = await scene.turn(
            AGAIN.run, AGAIN.prompt, paths[label("A", "target")], name=AGAIN.label
        )
        again = await scene.settled(AGAIN.run, sid, name=AGAIN.label)
        history = await scene.history(AGAIN.run, name=AGAIN.label)
        again_said = [str(m["content"]) for m in history["messages"] if m["role"] == "tool"]
        slot_entries = {p.name for slot in SLOTS for p in (work_root / slot).iterdir()}
        after = {
            "owned": {
                tree: sorted(p.name.removeprefix("owned-by-") for p in path.glob("owned-by-*"))
                for tree, path in paths.items()
            },
            "planted": sorted(
                name
                for name in slot_entries
                if "_evil-" in name or "_link-" in name or "_moved-" in name
            ),
        }
        after["child broke"] = broke
        after["parent again"] = {"outcome": again["outcome"], "said": again_said}
        return FanOutAttack(variant, paths, probes, plants, listed, after)
    finally:
        await scene.stop()


async def _make_worktrees(scene: Scene) -> dict[str, Path]:
    """Every Run's worktrees and its children's, as the operator asks the Harness for them;
    and the worktree of a child being made. Label → path."""
    paths: dict[str, Path] = {}
    for owner, run in RUNS.items():
        run_branch = branch(run)
        paths.update(await _worktrees(scene, owner, run, run_branch, None))
        for key in CHILDREN[owner]:
            child = child_branch(run_branch, StatePath(f"fix[{key}]"))
            paths.update(await _worktrees(scene, f"{owner}.{key}", run, child, run_branch))
    made = paths[label("A.one", "target")]
    partial = made.with_name(made.name.replace("fix=one", "fix=three") + ".partial")
    await asyncio.to_thread(shutil.copytree, made, partial, symlinks=True)
    await asyncio.to_thread(_own, partial, scene.tool_uid)
    paths[label(PARTIAL, "target")] = partial
    return paths


async def _worktrees(
    scene: Scene, owner: str, run: str, on: str, base: str | None
) -> dict[str, Path]:
    body: dict[str, Any] = {"run": run, "branch": on, "slots": list(SLOTS)}
    if base is not None:
        body["base"] = base
    status, answer = await scene.post("/worktrees", body)
    assert status == 200, answer
    return {label(owner, slot): Path(answer["worktrees"][slot]["path"]) for slot in SLOTS}


def _own(path: Path, uid: int) -> None:
    for root, directories, files in os.walk(path):
        for name in [*directories, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.lchown(path, uid, uid)
