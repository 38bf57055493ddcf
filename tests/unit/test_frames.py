"""Frame resolution (``kubeturn.orchestrator.frames``): a Turn's prompt and cwd, and an
exec's command and cwd, rendered with real CEL templates and checked before admission.

Cases:
- ``agent_frame``: the prompt rendered from context, input, event and workspace; an
  absolute cwd (written, or rendered from a template) is kept, whatever the Workspace;
  a relative cwd is refused naming the Frame, the value and the template (also one a
  template renders relative, and the empty string); no cwd and no Workspace gives
  ``/work``; no cwd and one repo slot gives its worktree; no cwd and several slots is
  refused naming every slot, sorted, and the line to add (the first slot's);
- a template that fails (prompt, cwd) is refused naming its field, with the CEL error
  chained;
- ``exec_frame``: the command rendered; the same cwd rules; a failing command template
  is refused naming ``command``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kubeturn.errors import ExpressionError, FrameRefused
from kubeturn.machine.expressions import CelTemplate
from kubeturn.machine.model import AgentCall, ExecCall
from kubeturn.orchestrator import frames
from kubeturn.orchestrator.frames import Frame, WorkspaceView

WHERE = "spec.machine.states.work.invoke.agent"
EXEC_WHERE = "spec.machine.states.work.invoke.exec"
ONE_SLOT = WorkspaceView({"target": "/work/target/r1"})
TWO_SLOTS = WorkspaceView({"target": "/work/target/r1", "docs": "/work/docs/r1"})


def activation(workspace: WorkspaceView | None = None, **context: Any) -> dict[str, Any]:
    return {
        "context": context,
        "event": {"type": "submit", "summary": "did it"},
        "input": {"task": "add a flag"},
        "workspace": workspace.activation() if workspace else {},
    }


def agent(prompt: str = "Work.", cwd: str | None = None) -> AgentCall:
    return AgentCall(
        slot="coder",
        prompt=CelTemplate(prompt),
        cwd=CelTemplate(cwd) if cwd is not None else None,
    )


def command(text: str, cwd: str | None = None) -> ExecCall:
    return ExecCall(command=CelTemplate(text), cwd=CelTemplate(cwd) if cwd is not None else None)


class TestAgentFrame:
    def test_the_prompt_is_rendered_from_every_variable(self) -> None:
        call = agent(
            "{{ input.task }} in {{ workspace.repos.target }}; "
            "{{ event.summary }}, round {{ context.rounds }}"
        )
        frame = frames.agent_frame(call, activation(ONE_SLOT, rounds=2), ONE_SLOT, WHERE)
        assert frame == Frame("add a flag in /work/target/r1; did it, round 2", "/work/target/r1")

    @pytest.mark.parametrize("workspace", [None, ONE_SLOT, TWO_SLOTS], ids=["none", "one", "two"])
    def test_an_absolute_cwd_is_kept_whatever_the_workspace(
        self, workspace: WorkspaceView | None
    ) -> None:
        frame = frames.agent_frame(agent(cwd="/srv/app"), activation(), workspace, WHERE)
        assert frame.cwd == "/srv/app"

    def test_a_cwd_template_renders_an_absolute_path(self) -> None:
        call = agent(cwd="{{ workspace.repos.docs }}/site")
        frame = frames.agent_frame(call, activation(TWO_SLOTS), TWO_SLOTS, WHERE)
        assert frame.cwd == "/work/docs/r1/site"

    @pytest.mark.parametrize(
        ("cwd", "context", "message"),
        [
            pytest.param(
                "src/app",
                {},
                f"{WHERE}.cwd: the Frame's cwd must be an absolute path, got 'src/app' "
                "(from 'src/app')",
                id="written",
            ),
            pytest.param(
                "{{ context.dir }}",
                {"dir": "tmp"},
                f"{WHERE}.cwd: the Frame's cwd must be an absolute path, got 'tmp' "
                "(from '{{ context.dir }}')",
                id="rendered",
            ),
            pytest.param(
                "",
                {},
                f"{WHERE}.cwd: the Frame's cwd must be an absolute path, got '' (from '')",
                id="empty",
            ),
        ],
    )
    def test_a_relative_cwd_is_refused_naming_the_frame(
        self, cwd: str, context: dict[str, Any], message: str
    ) -> None:
        with pytest.raises(FrameRefused) as refused:
            frames.agent_frame(agent(cwd=cwd), activation(**context), ONE_SLOT, WHERE)
        assert str(refused.value) == message

    def test_no_cwd_and_no_workspace_is_slash_work(self) -> None:
        assert frames.agent_frame(agent(), activation(), None, WHERE).cwd == "/work"
        assert frames.NO_WORKSPACE_CWD == "/work"

    def test_no_cwd_and_one_slot_is_its_worktree(self) -> None:
        assert frames.agent_frame(agent(), activation(), ONE_SLOT, WHERE).cwd == "/work/target/r1"

    def test_no_cwd_and_two_slots_is_refused_naming_both_and_the_line_to_add(self) -> None:
        with pytest.raises(FrameRefused) as refused:
            frames.agent_frame(agent(), activation(), TWO_SLOTS, WHERE)
        assert str(refused.value) == (
            f"{WHERE}: no cwd, and the Workspace has 2 repo slots ('docs', 'target'); say "
            f'which: add cwd: "{{{{ workspace.repos.docs }}}}" to {WHERE}'
        )

    def test_no_cwd_and_three_slots_names_them_sorted(self) -> None:
        three = WorkspaceView({"web": "/w/web", "api": "/w/api", "docs": "/w/docs"})
        with pytest.raises(FrameRefused) as refused:
            frames.agent_frame(agent(), activation(), three, WHERE)
        assert str(refused.value) == (
            f"{WHERE}: no cwd, and the Workspace has 3 repo slots ('api', 'docs', 'web'); say "
            f'which: add cwd: "{{{{ workspace.repos.api }}}}" to {WHERE}'
        )

    @pytest.mark.parametrize(
        ("call", "message"),
        [
            pytest.param(
                agent(prompt="Fix {{ context.notes }}"),
                f"{WHERE}.prompt: CEL expression 'context.notes' failed: no key 'notes'",
                id="prompt",
            ),
            pytest.param(
                agent(cwd="{{ workspace.repos.web }}"),
                f"{WHERE}.cwd: CEL expression 'workspace.repos.web' failed: no key 'web'",
                id="cwd",
            ),
        ],
    )
    def test_a_template_that_fails_is_refused_naming_its_field(
        self, call: AgentCall, message: str
    ) -> None:
        with pytest.raises(FrameRefused) as refused:
            frames.agent_frame(call, activation(ONE_SLOT), ONE_SLOT, WHERE)
        assert str(refused.value) == message
        assert isinstance(refused.value.__cause__, ExpressionError)


class TestExecFrame:
    def test_the_command_is_rendered_and_the_cwd_resolved(self) -> None:
        frame = frames.exec_frame(
            command("make {{ event.summary == 'did it' ? 'test' : 'lint' }}"),
            activation(ONE_SLOT),
            ONE_SLOT,
            EXEC_WHERE,
        )
        assert frame == Frame("make test", "/work/target/r1")

    def test_the_cwd_rules_are_the_agents(self) -> None:
        assert frames.exec_frame(command("make"), activation(), None, EXEC_WHERE).cwd == "/work"
        with pytest.raises(FrameRefused) as refused:
            frames.exec_frame(command("make"), activation(), TWO_SLOTS, EXEC_WHERE)
        assert str(refused.value).startswith(
            f"{EXEC_WHERE}: no cwd, and the Workspace has 2 repo slots ('docs', 'target')"
        )
        with pytest.raises(FrameRefused) as relative:
            frames.exec_frame(command("make", cwd="build"), activation(), None, EXEC_WHERE)
        assert str(relative.value) == (
            f"{EXEC_WHERE}.cwd: the Frame's cwd must be an absolute path, got 'build' "
            "(from 'build')"
        )

    def test_a_command_that_fails_to_render_is_refused_naming_it(self) -> None:
        with pytest.raises(FrameRefused) as refused:
            frames.exec_frame(command("make {{ event.target }}"), activation(), None, EXEC_WHERE)
        assert str(refused.value) == (
            f"{EXEC_WHERE}.command: CEL expression 'event.target' failed: no key 'target'"
        )
