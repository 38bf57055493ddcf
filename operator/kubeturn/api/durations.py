"""Durations as manifests write them: Go's ``time.ParseDuration`` syntax.

``500ms``, ``30s``, ``10m``, ``1h``, ``1h30m``, ``1.5h``: Kubernetes users read this
syntax everywhere (probes, kopf, kubectl ``--timeout``), so timers and timeouts use it
too, up to Go's longest (about 292 years). Unlike Go, a sign is refused: no kubeturn
duration can be negative. Pure: no IO.
"""

from __future__ import annotations

import re

UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # Go accepts both the micro sign and the Greek letter mu
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
"""Seconds per unit, as Go names them. Days are not a unit in Go either: write ``24h``."""

MAX_HOURS = 2562047
"""Go's longest duration in whole hours: a ``time.Duration`` counts nanoseconds in an
int64 (2⁶³−1 ns, about 292 years), and ``ParseDuration`` refuses a longer one. So does
kubeturn: a timer further off never fires, and an endless number of digits (``999…9h``)
would be an infinite float."""
MAX_SECONDS = (2**63 - 1) / 1e9

_TERM = re.compile(r"(\d+\.?\d*|\.\d+)([^\d.]*)")
_EXAMPLES = "e.g. 30s, 10m, 1h30m"


def parse_duration(text: str) -> float:
    """The seconds ``text`` stands for; ``ValueError`` saying what to write otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a duration is a number with a unit ({_EXAMPLES}); got {text!r}")
    if text.startswith(("-", "+")):
        raise ValueError(f"a duration cannot carry a sign ({_EXAMPLES}); got {text!r}")
    if any(char.isspace() for char in text):
        raise ValueError(f"{text!r} is not a duration: write it without spaces ({_EXAMPLES})")
    if text == "0":
        return 0.0
    seconds = 0.0
    position = 0
    while position < len(text):
        term = _TERM.match(text, position)
        if term is None:
            raise ValueError(f"{text!r} is not a duration ({_EXAMPLES})")
        number, unit = term.groups()
        if not unit:
            raise ValueError(
                f"missing unit in duration {text!r}: write {number}s, {number}m or {number}h"
            )
        if unit not in UNITS:
            raise ValueError(
                f"unknown unit {unit!r} in duration {text!r}: the units are ns, us, ms, s, m "
                "and h (for days write 24h)"
            )
        seconds += float(number) * UNITS[unit]
        position = term.end()
    if seconds > MAX_SECONDS:
        raise ValueError(
            f"{text!r} is longer than the longest duration, {MAX_HOURS}h (about 292 years)"
        )
    return seconds
