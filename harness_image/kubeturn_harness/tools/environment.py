"""The environment and identity of the Working tools' subprocesses.

The Agent can run any code through ``bash``, so its environment is built from an
allowlist, never by removing known secrets: a variable nobody thought of (a token, an
API key, ``KUBETURN_*``) stays out. Nothing here starts a process or reads a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kubeturn_harness.tools import context

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
"""``PATH`` when the Harness's own environment has none."""

_PASSED_THROUGH = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
)
"""Variables copied when present: the command search path, the locale and time zone
(so tools print text as the image intends), and the git identity commits are made with."""


def scrubbed_environment(base: Mapping[str, str], *, home: str) -> dict[str, str]:
    """The environment for the tools' subprocesses: the allowlist of ``base``, plus
    ``TERM=dumb`` (no colour codes or pagers in output) and ``HOME=home``."""
    environment = {name: base[name] for name in _PASSED_THROUGH if name in base}
    environment.setdefault("PATH", DEFAULT_PATH)
    environment["TERM"] = "dumb"
    environment["HOME"] = home
    return environment


def tool_identity(uid: int, gid: int) -> context.RunAs | None:
    """``RunAs(uid, gid)`` when this process is root and so its toolbox's sessions can
    switch user; else ``None`` (an unprivileged Harness's tools run as itself)."""
    if os.geteuid() == 0:
        return context.RunAs(uid=uid, gid=gid)
    return None
