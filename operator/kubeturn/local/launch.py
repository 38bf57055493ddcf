"""``python -m kubeturn.local.launch PARENT_PID -- COMMAND...``: run COMMAND so that it ends
when its parent does.

``kubeturn run`` starts the Harness and the scripted model through this: on Linux the
command is asked for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``, which an
``exec`` keeps), so a ``kubeturn run`` that is killed, even with SIGKILL, leaves no
Harness behind to race the one ``--resume`` starts on the same data dir. Done here, in
the child before it ``exec``s, rather than in a ``preexec_fn``, which is unsafe in a
process with threads. Elsewhere the command simply runs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m kubeturn.local.launch PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), list(argv[2:])
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        return 1  # the parent died before the request took effect
    return os.execvp(command[0], command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
