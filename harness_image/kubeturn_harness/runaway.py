"""The Runaway watch: a Submission that repeats itself or never stops is ended ``failed``.

Why 4: three identical calls in a row can be a model checking its work; a fourth, with
nothing changed in between, is a loop. Why 256 steps: far above any Turn seen to finish
on its own, and low enough to bound the cost of one that never does. Both are settings.
The same 4 bounds answers in a row that the output limit cut: each costs the whole limit.

What counts (ADR 0074): every call the model asked to run, also one that could not run
by its own fault (unknown tool, malformed or truncated arguments, a refused pick). A
call that an earlier call of the same answer blocked counts not at all: a call after a
pick that ended the Turn, and a later pick of an answer whose first pick ran (stale).
The model wrote them before it read that answer, they cost no request, and counting
them made a Turn its own pick had ended a runaway. A loop of picks still trips: each
answer's first pick counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kubeturn_harness import bodies
from kubeturn_harness.errors import NotJson

DEFAULT_MAX_IDENTICAL = 4
DEFAULT_MAX_STEPS = 256


@dataclass
class RunawayWatch:
    """Counts model requests and consecutive identical tool calls of one Submission."""

    max_identical: int = DEFAULT_MAX_IDENTICAL
    max_steps: int = DEFAULT_MAX_STEPS
    steps: int = 0
    _last: tuple[str, str] | None = field(default=None, repr=False)
    _repeats: int = 0
    _cut_answers: int = 0

    def step(self) -> str | None:
        """Count one model request; a reason when it would exceed the step budget."""
        self.steps += 1
        if self.steps > self.max_steps:
            return f"more than {self.max_steps} model requests in one Submission"
        return None

    def answered(self, *, cut_at_limit: bool) -> str | None:
        """Count one model answer; a reason when ``max_identical`` in a row were cut off
        at the output limit."""
        self._cut_answers = self._cut_answers + 1 if cut_at_limit else 0
        if self._cut_answers >= self.max_identical:
            return f"{self._cut_answers} answers in a row were cut off at the output limit"
        return None

    def call(self, name: str, arguments: str) -> str | None:
        """Count one tool call the model asked to run; a reason when it is a loop.

        Arguments compare as written when they are not JSON: the same broken text again
        is the same call."""
        key = (name, _canonical(arguments))
        self._repeats = self._repeats + 1 if key == self._last else 1
        self._last = key
        if self._repeats >= self.max_identical:
            return f"{self._repeats} identical calls of `{name}` in a row"
        return None


def _canonical(arguments: str) -> str:
    """The arguments as sorted, compact JSON; as written when they are not JSON it reads."""
    try:
        return json.dumps(bodies.parse(arguments), sort_keys=True, separators=(",", ":"))
    except NotJson:
        return arguments
