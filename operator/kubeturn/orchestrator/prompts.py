"""The words the model reads from the Orchestrator: a nudge's prompt, and the notice a
continued conversation gets of how its last pick went.

Tests assert these texts exactly: a change here is a change of what every model is told.
Pure: no IO, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kubeturn_harness.wire import Notice, Receipt


def nudge(allowed: Sequence[str]) -> str:
    """The prompt of a nudge: the Agent stopped while the workflow waits for its pick."""
    picks = ", ".join(f"`{name}`" for name in allowed)
    return (
        "Your turn is not over: the workflow is waiting for one of your picks "
        f"({picks}). Finish what the task needs, then call one of them, once."
    )


def pick_answer(receipt: Receipt) -> Notice | None:
    """What a continued conversation hears in its next Turn of its last pick: that it was
    stopped, or its answer; None when there is nothing to tell."""
    if receipt.stopped:
        text = (
            f"Your pick `{receipt.event}` did not finish: the workflow left the state that "
            "asked for your last turn while it ran, and that stopped it."
        )
    elif receipt.answer is not None:
        text = f"Your pick `{receipt.event}` was answered: {_render(receipt.answer)}"
    else:
        return None
    return Notice(kind="pick-answer", text=text)


def _render(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)
