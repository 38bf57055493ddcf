"""The Briefing: the Harness's turn block that follows the prompt.

The prompt stays the state's words alone (docs/turn-semantics.md §4); what the
Harness knows of the seat (where the tools are rooted, which picks are allowed,
notices) goes in a block of its own after it. Pure; no IO.
"""

from __future__ import annotations

from collections.abc import Sequence

from kubeturn_harness.wire import Notice


def briefing(
    *, cwd: str | None, allowed: Sequence[str], has_menu: bool, notices: Sequence[Notice]
) -> str:
    """The turn block. ``cwd`` is None for an Agent with no Working tools."""
    lines = ["<turn>"]
    if cwd is not None:
        lines.append(f"Working directory: {cwd} (relative paths in your tools resolve here).")
    if has_menu:
        if allowed:
            names = ", ".join(f"`{name}`" for name in allowed)
            lines.append(
                f"Picks allowed now: {names}. A pick is a call of that tool: it tells the "
                "workflow what you decided. Call one pick once, then stop."
            )
        else:
            lines.append("No pick is allowed right now.")
    lines.extend(f"Notice ({notice.kind}): {notice.text}" for notice in notices)
    lines.append("</turn>")
    return "\n".join(lines)
