"""A Turn's start and its admissions: the Turn an ``agent`` invoke starts, the
conversation it lands on, and what each of its Submissions is admitted with.

``continue: true`` lands every Turn of an Agent slot on one conversation (its epoch's),
and two states cannot continue it at once; otherwise each Turn gets a fresh one
(``ids``). A Turn whose Frame cannot be rendered is refused before its admission. Every
admission carries its idempotency key, ``<turn>.<n>`` for the Turn's n-th Submission, so
one sent again (after a restart, or a lost answer) admits that Submission once; a nudge
is admitted with the words of ``prompts.nudge``. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubeturn.errors import FrameRefused
from kubeturn.machine.interpreter import InvokeEntry
from kubeturn.machine.load import LoadedRun
from kubeturn.machine.model import machine_of
from kubeturn.orchestrator import frames, ids, invokes, prompts
from kubeturn.orchestrator.effects import Admit
from kubeturn.orchestrator.turns import Turn


def start(
    run: LoadedRun,
    entry: InvokeEntry,
    activation: Mapping[str, Any],
    workspace: frames.WorkspaceView | None,
    *,
    turn_id: ids.TurnId,
    epochs: Mapping[str, int],
    new_id: ids.IdSource,
    live: Iterable[Turn],
    now: float,
) -> tuple[Turn, str | None]:
    """The Turn ``entry`` starts, and why it is refused before its admission (its Frame
    cannot be rendered, or its conversation has a live Turn), if it is."""
    state = run.chart.state(entry.state)
    assert state.invoke is not None
    call = state.invoke.agent
    assert call is not None
    slot = run.agents[call.slot]
    where = invokes.path(entry.state) + ".agent"
    machine = machine_of(entry.state)
    epoch = epochs.get(ids.conversation(machine, call.slot), 0)
    if call.continue_:
        iid = ids.structural(run.namespace, run.name, call.slot, epoch, machine)
    else:
        iid = ids.fresh(run.namespace, run.name, call.slot, new_id(), machine)
    refused: str | None = None
    try:
        frame = frames.agent_frame(call, activation, workspace, where)
        if any(t.instanceId == iid for t in live):
            raise FrameRefused(
                f"{where}: the conversation {iid!r} already has a live Turn; two states "
                "cannot continue one Agent's conversation at once"
            )
    except FrameRefused as error:
        frame, refused = frames.Frame(prompt="", cwd=""), str(error)
    turn = Turn.model_validate(
        {
            "id": turn_id,
            "agent": call.slot,
            "state": entry.state,
            "invocation": entry.id,
            "instanceId": iid,
            "continue": call.continue_,
            "epoch": epoch,
            "prompt": frame.prompt,
            "cwd": frame.cwd,
            "startedAt": now,
        }
    )
    if refused is None:
        turn.model = call.model or slot.model
        turn.thinkingLevel = call.thinking_level or (
            str(slot.thinkingLevel) if slot.thinkingLevel else None
        )
    return turn, refused


def admission(
    run: LoadedRun,
    turn: Turn,
    *,
    nudge: bool,
    allowed: Sequence[str],
    number: int | None = None,
) -> Admit:
    """The admission of the Turn's next Submission (or of its ``number``-th); a nudge
    names the picks ``allowed`` now."""
    slot = run.agents[turn.agent]
    return Admit(
        turn=turn.id,
        agent=turn.agent,
        state=turn.state,
        instance_id=turn.instanceId,
        prompt=prompts.nudge(allowed) if nudge else turn.prompt,
        cwd=turn.cwd,
        continue_=turn.continue_ or nudge,
        model=turn.model,
        thinking_level=turn.thinkingLevel,
        instructions=slot.instructions,
        workspace=str(slot.workspace.value),
        key=f"{turn.id}.{number or len(turn.submissions) + 1}",
        notices=tuple(turn.notices) if not nudge else (),
        nudge=nudge,
    )
