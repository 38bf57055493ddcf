"""Per-child worktrees (ADR 0113): a fan-out child with ``worktree: per-child`` asks for
worktrees of its own as it starts, its invokes wait for them and then run in them, a
failure to make them is its invokes' error, and all of it survives a restore."""

from __future__ import annotations

from kubeturn.api.status import RunPhase
from kubeturn.k8s import names
from kubeturn.machine.load import load_run_yaml
from kubeturn.machine.model import StatePath
from kubeturn.orchestrator import worktrees
from kubeturn.orchestrator.core import RunCore
from kubeturn.orchestrator.effects import Admit, Effects, MakeWorktrees, StartExec
from kubeturn.orchestrator.frames import WorkspaceView
from kubeturn.orchestrator.invokes import ExecResult
from kubeturn.orchestrator.worktrees import Made
from tests.unit.cores import MACHINES, kinds, new_core, only, restored, restored_from_status

RUN = WorkspaceView({"app": "/w/app/kubeturn-fan"}, "kubeturn/fan")
MAKE_A = MakeWorktrees("fix[a]", "kubeturn/fan_fix=a", "kubeturn/fan", ("app",))
MAKE_B = MakeWorktrees("fix[b]", "kubeturn/fan_fix=b", "kubeturn/fan", ("app",))
MAKE_C = MakeWorktrees("fix[c]", "kubeturn/fan_fix=c", "kubeturn/fan", ("app",))


def made(child: str) -> Made:
    return Made({"app": f"/w/app/kubeturn-fan_fix={child}"})


def started() -> RunCore:
    core = new_core("fan_out_worktrees", workspace=RUN)
    assert core.start(0.0).items == [MAKE_A, MAKE_B]
    return core


def finish_child(core: RunCore, child: str, now: float) -> Effects:
    """Child ``child``'s Agent picks ``fixed`` and its check passes: what that decided."""
    turn = next(t for t in core.live_turns() if t.state == f"fix[{child}].work")
    core.admitted(turn.id, f"s-{child}", now)
    _, effects = core.pick(turn.instanceId, "fixed", {}, now)
    start = only(effects, StartExec)
    return core.exec_done(start.invocation, ExecResult(0, "ok"), now)


class TestWaiting:
    def test_a_childs_invokes_wait_for_its_worktrees_then_run_in_them(self) -> None:
        core = started()
        assert core.live_turns() == []
        admit = only(core.worktrees_made("fix[a]", made("a"), 1.0), Admit)
        assert admit.state == "fix[a].work"
        assert admit.cwd == "/w/app/kubeturn-fan_fix=a"
        assert admit.prompt == "Fix a in /w/app/kubeturn-fan_fix=a"
        assert [t.state for t in core.live_turns()] == ["fix[a].work"]

    def test_a_report_again_or_of_a_child_never_asked_for_changes_nothing(self) -> None:
        core = started()
        core.worktrees_made("fix[a]", made("a"), 1.0)
        assert core.worktrees_made("fix[a]", made("a"), 2.0).items == []
        assert core.worktrees_made("fix[c]", made("c"), 2.0).items == []
        assert core.worktrees_made("elsewhere", made("a"), 2.0).items == []

    def test_the_next_child_asks_as_it_starts_and_later_states_run_at_once(self) -> None:
        core = started()
        core.worktrees_made("fix[a]", made("a"), 1.0)
        turn = core.live_turns()[0]
        core.admitted(turn.id, "s1", 1.5)
        _, effects = core.pick(turn.instanceId, "fixed", {}, 2.0)
        start = only(effects, StartExec)
        assert (start.command, start.cwd) == ("make test-a", "/w/app/kubeturn-fan_fix=a")
        assert core.exec_done(start.invocation, ExecResult(0, "ok"), 3.0).items == [MAKE_C]

    def test_the_children_name_their_branches_in_their_output(self) -> None:
        core = started()
        core.worktrees_made("fix[a]", made("a"), 1.0)
        core.worktrees_made("fix[b]", made("b"), 1.0)
        assert finish_child(core, "a", 2.0).of(MakeWorktrees) == [MAKE_C]
        finish_child(core, "b", 2.0)
        core.worktrees_made("fix[c]", made("c"), 3.0)
        finish_child(core, "c", 4.0)
        assert core.config is not None
        assert [r["branch"] for r in core.config.context["results"]] == [
            "kubeturn/fan_fix=a",
            "kubeturn/fan_fix=b",
            "kubeturn/fan_fix=c",
        ]
        (start,) = core.execs.values()
        # The parent works in the Run's worktree, its children's gone from the core.
        assert (start.command, start.cwd) == ("git merge kubeturn/fan_fix=a", RUN.repos["app"])
        assert core.child_worktrees == {}


class TestFailure:
    def test_worktrees_not_made_are_the_childs_invoke_error(self) -> None:
        core = started()
        effects = core.worktrees_made("fix[a]", Made(error="git could not make it"), 1.0)
        # The child's Agent never got a Turn; the child fails, failFast fails the
        # fan-out, whose onError ends the Run: child b's worktrees are never waited for.
        assert effects.of(Admit) == []
        assert core.phase is RunPhase.FAILED
        assert core.state == "failed"
        assert core.history == []


class TestRestore:
    def test_a_restore_asks_again_for_what_was_being_made(self) -> None:
        core = started()
        for again in (restored(core, workspace=RUN), restored_from_status(core, workspace=RUN)):
            assert again.resume().items == [MAKE_A, MAKE_B]
            admit = only(again.worktrees_made("fix[b]", made("b"), 1.0), Admit)
            assert admit.cwd == "/w/app/kubeturn-fan_fix=b"

    def test_worktrees_made_stay_made_across_a_restore(self) -> None:
        core = started()
        core.worktrees_made("fix[a]", made("a"), 1.0)
        again = restored(core, workspace=RUN)
        assert kinds(again.resume()) == ["Admit", "MakeWorktrees"]
        turn = again.live_turns()[0]
        again.admitted(turn.id, "s1", 1.5)
        _, effects = again.pick(turn.instanceId, "fixed", {}, 2.0)
        assert only(effects, StartExec).cwd == "/w/app/kubeturn-fan_fix=a"


class TestWithoutPerChild:
    def test_a_shared_fan_out_asks_nothing_and_runs_in_the_runs_worktree(self) -> None:
        text = (MACHINES / "fan_out_worktrees.yaml").read_text()
        shared = load_run_yaml(text.replace("shared: false", "shared: true"), "shared")
        core = RunCore(shared, workspace=RUN, new_id=lambda: "n")
        effects = core.start(0.0)
        assert effects.of(MakeWorktrees) == []
        assert [(s.command, s.cwd) for s in effects.of(StartExec)] == [
            (f"make test-{key}", RUN.repos["app"]) for key in ("a", "b", "c")
        ]

    def test_without_a_workspace_children_start_at_once(self) -> None:
        core = new_core("fan_out_worktrees")
        effects = core.start(0.0)
        assert effects.of(MakeWorktrees) == []
        # Started at once: their prompts name a repo the Run has none of.
        assert [r.state for r in core.history][:2] == ["fix[a].work", "fix[b].work"]
        assert "workspace" in (core.history[0].message or "")


class TestBranch:
    def test_a_childs_branch_is_the_runs_and_its_root(self) -> None:
        assert worktrees.child_branch("kubeturn/r", StatePath("fix[pkg-a]")) == (
            "kubeturn/r_fix=pkg-a"
        )
        assert worktrees.child_branch("kubeturn/r", StatePath("fix[a].sub[b_1]")) == (
            "kubeturn/r_fix=a.sub=b_1"
        )

    def test_a_long_one_is_cut_with_a_digest_and_stays_unique(self) -> None:
        run = "kubeturn/" + "r" * 191
        one = worktrees.child_branch(run, StatePath("fix[" + "a" * 60 + "]"))
        two = worktrees.child_branch(run, StatePath("fix[" + "a" * 59 + "b]"))
        assert len(one) == len(two) == worktrees.BRANCH_MAX
        assert one != two
        assert one.startswith(run + worktrees.SEPARATOR)

    def test_the_runs_branch_is_kept_whole_however_long(self) -> None:
        """The sandbox reaches a Run's children by its whole branch and ``_``: a Run whose
        branch begins a long one's must not read as its owner."""
        run = names.branch("long-" + "l" * 235)
        assert len(run) == names.BRANCH_MAX
        child = worktrees.child_branch(run, StatePath("fix[" + "k" * 80 + "]"))
        assert child.startswith(run + worktrees.SEPARATOR)
        assert len(child) == worktrees.BRANCH_MAX

    def test_one_git_would_refuse_is_cut(self) -> None:
        branch = worktrees.child_branch("kubeturn/r", StatePath("fix[x].lock"))
        assert not branch.endswith(".lock")


class TestGone:
    def test_worktrees_made_after_the_child_is_gone_start_nothing(self) -> None:
        core = started()
        core.cancel(1.0)
        assert core.child_worktrees == {}
        assert core.worktrees_made("fix[a]", made("a"), 2.0).items == []
        assert core.live_turns() == []
        assert restored(core, workspace=RUN).resume().items == []


NESTED = """
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {name: fan}
spec:
  workspace: {template: {repos: {app: {url: .}}}}
  agents:
    coder: {instructions: Code.}
  machine:
    initial: fix
    context: {packages: [a]}
    states:
      fix:
        invoke:
          forEach:
            items: context.packages
            worktree: per-child
            machine:
              initial: split
              context: {parts: [x]}
              states:
                split:
                  invoke:
                    forEach:
                      items: context.parts
                      worktree: %s
                      machine:
                        initial: work
                        states:
                          work:
                            invoke:
                              exec: {command: "make {{ input }}"}
                              onDone: done
                          done: {type: final, output: workspace.branch}
                    onDone: {target: shipping, assign: {context.inner: event.output}}
                shipping:
                  invoke:
                    deliver: {slot: app, message: m}
                    onDone: shipped
                    onError: {target: refused, assign: {context.why: event.message}}
                shipped: {type: final}
                refused: {type: final, output: "{'why': context.why, 'inner': context.inner}"}
          onDone: {target: done, assign: {context.out: event.output}}
      done: {type: final, output: context.out}
"""


class TestNested:
    def test_a_per_child_fan_out_inside_a_child_starts_from_that_childs_branch(self) -> None:
        core = RunCore(load_run_yaml(NESTED % "per-child"), workspace=RUN, new_id=lambda: "n")
        assert core.start(0.0).items == [MAKE_A]
        inner = MakeWorktrees(
            "fix[a].split[x]", "kubeturn/fan_fix=a.split=x", "kubeturn/fan_fix=a", ("app",)
        )
        assert core.worktrees_made("fix[a]", made("a"), 1.0).items == [inner]
        start = only(
            core.worktrees_made("fix[a].split[x]", Made({"app": "/w/app/inner"}), 2.0), StartExec
        )
        assert (start.command, start.cwd) == ("make x", "/w/app/inner")
        core.exec_done(start.invocation, ExecResult(0, "ok"), 3.0)
        # The inner child saw its own branch; a child with worktrees of its own cannot
        # deliver: its refusal says why.
        assert core.phase is RunPhase.SUCCEEDED
        assert core.config is not None
        (out,) = core.config.output
        assert out["inner"] == ["kubeturn/fan_fix=a.split=x"]
        assert "a fan-out child with worktrees of its own cannot deliver" in out["why"]

    def test_a_shared_fan_out_inside_a_child_works_in_that_childs_worktrees(self) -> None:
        core = RunCore(load_run_yaml(NESTED % "shared"), workspace=RUN, new_id=lambda: "n")
        core.start(0.0)
        start = only(core.worktrees_made("fix[a]", made("a"), 1.0), StartExec)
        assert start.cwd == "/w/app/kubeturn-fan_fix=a"
        assert core.config is not None
        assert core.config.children[-1].scope == "fix[a].split[x]"
        core.exec_done(start.invocation, ExecResult(0, "ok"), 2.0)
        assert [out["inner"] for out in core.config.output] == [["kubeturn/fan_fix=a"]]

    def test_the_base_not_made_is_the_inner_childs_error_too(self) -> None:
        core = RunCore(load_run_yaml(NESTED % "per-child"), workspace=RUN, new_id=lambda: "n")
        core.start(0.0)
        assert core.worktrees_made("fix[a]", Made(error="no"), 1.0).of(MakeWorktrees) == []
        assert core.phase is RunPhase.FAILED
