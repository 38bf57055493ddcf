"""The scripted model: an OpenAI-compatible chat-completions server that answers from a script.

It is the project's only fake. Tests and offline demos point the Harness at it instead
of a real provider, because a real model is not deterministic. The script format is
documented in ``docs/scripted-model.md``; run it with
``python -m kubeturn_harness.scripted --script FILE``. It never imports the operator.
"""

from kubeturn_harness.scripted.journal import Journal, RequestRecord
from kubeturn_harness.scripted.script import (
    Conversation,
    ProviderError,
    Script,
    Step,
    ToolCall,
    load_script,
    parse_script,
)
from kubeturn_harness.scripted.selection import EXHAUSTED_TEXT
from kubeturn_harness.scripted.server import JOURNAL, make_app, serve

__all__ = [
    "EXHAUSTED_TEXT",
    "JOURNAL",
    "Conversation",
    "Journal",
    "ProviderError",
    "RequestRecord",
    "Script",
    "Step",
    "ToolCall",
    "load_script",
    "make_app",
    "parse_script",
    "serve",
]
