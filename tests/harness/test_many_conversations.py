"""A Harness serves many more live conversations than it has file descriptors.

Cases:
- 300 conversations admitted at once, all live together (the model answers each after
  300 ms, 24 at a time), on a Harness process whose RLIMIT_NOFILE is 100 (set in the child before it
  starts) and whose model requests in flight are at most 24: every admission is taken
  and every Submission settles ``completed``; the most descriptors it held stayed under
  the limit. A conversation holds no file between its log's appends, and its model
  request waits for one of the provider's slots, so descriptors grow with neither.
  ``bench/harness_fds.py`` measures 1,000 under the default 1024.
"""

from __future__ import annotations

from pathlib import Path

from bench.harness_fds import measure

CONVERSATIONS = 300
NOFILE = 100
"""Far fewer descriptors than conversations: one held by each would run out."""


async def test_conversations_far_beyond_the_descriptor_limit_all_settle(tmp_path: Path) -> None:
    figures = await measure(
        CONVERSATIONS,
        nofile=NOFILE,
        root=tmp_path,
        delay_ms=300,
        harness_args=["--model-calls=24"],
    )
    assert figures["refused"] == 0, figures
    assert figures["outcomes"] == {"completed": CONVERSATIONS}, figures
    assert figures["peak"] < NOFILE, figures
