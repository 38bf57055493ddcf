"""Scripts of the scripted model for the system tier, and the one the kind e2e run plays
(``tests/e2e/kind.sh``): ``TASK_WITH_REVIEW``, the example task-with-review's Agents.
"""

from __future__ import annotations

import json
from typing import Any


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def script(conversations: dict[str, list[dict[str, Any]]]) -> str:
    """A scripted model's script: first-user-message match → steps."""
    return json.dumps(
        {"conversations": [{"match": m, "steps": s} for m, s in conversations.items()]}
    )


# ----------------------------------------------------------------------------- task-with-review

CODER = "Add a --verbose flag"
FIRST_REVIEW = "The author says: first attempt"
SECOND_REVIEW = "The author says: added tests"
TASK_WITH_REVIEW = script(
    {
        CODER: [
            {"text": "Adding the flag.", "toolCalls": [call("write", path="cli.py", content="")]},
            {"toolCalls": [call("submit", summary="first attempt")]},
            {"text": "Adding tests.", "toolCalls": [call("write", path="test_cli.py", content="")]},
            {"toolCalls": [call("submit", summary="added tests")]},
        ],
        FIRST_REVIEW: [
            {"toolCalls": [call("read", path="cli.py")]},
            {"toolCalls": [call("review_verdict", verdict="reject", notes="add tests")]},
        ],
        SECOND_REVIEW: [{"toolCalls": [call("review_verdict", verdict="approve")]}],
    }
)
