"""The prose a model reads for each pick: receipts, answers, refusals and blocked calls.

A model reads a tool result's text, so every pick's fate is rendered as plain sentences
(docs/turn-semantics.md §3). A receipt that leaves the Turn open always ends with ``TURN_NOT_OVER``;
one that ends it says the Turn is over and gives no order, because the model reads it
only in a later Turn of a continued conversation. Pure functions; no IO.
"""

from __future__ import annotations

import json
from typing import Any

from kubeturn_harness.wire import Receipt, Refusal

TURN_NOT_OVER = "Your turn is not over."
AFTER_TURN_END = "This call did not run: a pick before it in your answer ended your turn."
NO_REPLY = "No reply came back for it."
CUT_AT_LIMIT_NOTE = (
    "Your last reply was cut off at the output limit. Go on from where it stopped, more briefly."
)
"""The note after an answer with no call that the output limit cut: the Turn goes on."""
SHOWN_AS_PLACEHOLDER = "Your call is shown with {} as its arguments from now on."


def malformed(name: str, problem: str, *, pick: bool) -> str:
    """A call whose arguments are not one JSON object: it did not run, and from now on
    the prompt shows it with the placeholder. ``problem`` says why, as a clause."""
    if pick:
        return (
            f"Your pick `{name}` was not sent: {problem}. {SHOWN_AS_PLACEHOLDER} "
            f"Pick again with complete JSON. {TURN_NOT_OVER}"
        )
    return (
        f"This call of `{name}` did not run: {problem}. {SHOWN_AS_PLACEHOLDER} "
        "Call it again with complete JSON."
    )


def cut_at_limit(name: str, *, pick: bool, placeholder: bool) -> str:
    """The last call of an answer the output limit cut: its arguments may be incomplete,
    so it never runs, even when they parse."""
    why = "your answer was cut off at the output limit while you wrote it"
    shown = f" {SHOWN_AS_PLACEHOLDER}" if placeholder else ""
    if pick:
        return (
            f"Your pick `{name}` was not sent: {why}.{shown} Pick again, more briefly. "
            f"{TURN_NOT_OVER}"
        )
    return (
        f"This call of `{name}` did not run: {why}.{shown} Call it again, more briefly "
        "(a large file can be written in parts)."
    )


def stale_pick(first_pick: str) -> str:
    """A later pick of a model answer whose first pick already ran."""
    return f"This pick did not run: you sent it before you read the answer to `{first_pick}`."


def turn_over(pick: str) -> str:
    """The Orchestrator answered 404: no live Turn takes this pick."""
    return (
        f"Your pick `{pick}` was not delivered: the state that asked for this turn "
        "is no longer waiting for it. Your turn is over."
    )


def undeliverable(pick: str, reason: str) -> str:
    """The pick's POST failed in transport or answered 5xx; it is never retried, so its
    fate is unknown."""
    return (
        f"Your pick `{pick}` may not have been delivered ({reason}). It was not sent again. "
        f"{TURN_NOT_OVER}"
    )


def cut_before_answer(pick: str) -> str:
    """An outstanding pick whose Turn was stopped before its answer came."""
    return (
        f"Your pick `{pick}` was delivered, and the workflow took it; the turn was stopped "
        "before its answer came."
    )


def rejected(pick: str, message: str) -> str:
    """The Orchestrator refused the pick's payload (4xx other than 404/409)."""
    return f"Your pick `{pick}` was not delivered: {message} {TURN_NOT_OVER}"


def refusal(pick: str, body: Refusal) -> str:
    """A 409: nothing was delivered."""
    if body.refused == "outstanding":
        waiting = f"your pick `{body.outstanding}`" if body.outstanding else "an earlier pick"
        text = (
            f"Your pick `{pick}` was refused, and nothing was delivered: {waiting} is still "
            "being worked on. No pick is allowed until it is answered."
        )
    else:
        why = body.message or body.refused
        text = f"Your pick `{pick}` was refused, and nothing was delivered: {why}."
        text += " " + _allowed(body.allowed)
    return f"{text} {TURN_NOT_OVER}"


def receipt(pick: str, body: Receipt, *, polled: bool) -> str:
    """A delivered pick's receipt, or the answer a poll brought back for it.

    ``polled`` marks the answer of an outstanding pick: there, no reply is worth saying.
    """
    parts = [f"Your pick `{pick}` was delivered, and the workflow took it."]
    if body.stopped:
        parts.append(
            "The workflow left the state that asked for this turn while it ran your pick, "
            "and that stopped the pick's work before it finished: your turn is over."
        )
        if body.answer is not None:
            parts.append(_sentence(f"Before that, the last reply was: {_render(body.answer)}"))
        return " ".join(parts)
    if body.straightBack:
        parts.append("It moved the workflow, which came straight back: nothing ran.")
    elif body.answer is not None:
        parts.append(_sentence(f"The answer: {_render(body.answer)}"))
    elif polled:
        parts.append(NO_REPLY)
    if body.turnComplete:
        parts.append("Your turn is over.")
        return " ".join(parts)
    if body.allowed is not None:
        parts.append(_allowed(body.allowed))
    parts.append(TURN_NOT_OVER)
    return " ".join(parts)


def _allowed(allowed: list[str]) -> str:
    if not allowed:
        return "No pick is allowed right now."
    return "You may pick next: " + ", ".join(f"`{name}`" for name in allowed) + "."


def _sentence(text: str) -> str:
    """End with a full stop, so what follows reads as its own sentence."""
    stripped = text.rstrip()
    return stripped if stripped.endswith((".", "!", "?")) else stripped + "."


def _render(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    return json.dumps(answer, ensure_ascii=False, sort_keys=True)
