"""Which Step of a Script answers a chat request. Pure: no IO, no clock.

The first Conversation whose ``match`` is a substring of the request's first user
message answers it, with the Step whose index is the number of assistant messages in the
request. So a continued conversation moves through later Steps, a fresh one starts at
Step 0, and a retry of the same request gets the same Step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubeturn_harness.scripted import bodies
from kubeturn_harness.scripted.script import Conversation, Script, Step

EXHAUSTED_TEXT = "(the script has no more steps)"
"""What a non-repeating Conversation says once its Steps have run out."""

_EXHAUSTED = Step.model_validate({"text": EXHAUSTED_TEXT})


@dataclass(frozen=True)
class Selection:
    """The Conversation and Step chosen for one request."""

    conversation: Conversation
    index: int
    """The Step index the request asks for: its number of assistant messages."""
    step: Step
    """The Step that answers: the indexed one, the last one repeated, or the exhausted one."""


def first_user_text(messages: Sequence[bodies.Message]) -> str:
    """The text of the first ``user`` message, or ``""`` when there is none."""
    return next((message.text() for message in messages if message.role == "user"), "")


def select(script: Script, messages: Sequence[bodies.Message]) -> Selection | None:
    """Choose the Step answering ``messages``, or ``None`` when no Conversation matches."""
    text = first_user_text(messages)
    conversation = next((c for c in script.conversations if c.match in text), None)
    if conversation is None:
        return None
    index = sum(1 for message in messages if message.role == "assistant")
    if index < len(conversation.steps):
        step = conversation.steps[index]
    elif conversation.repeat:
        step = conversation.steps[-1]
    else:
        step = _EXHAUSTED
    return Selection(conversation=conversation, index=index, step=step)
