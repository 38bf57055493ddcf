"""``python -m kubeturn_harness.sandbox``: the toolbox's entry point.

The only place that reads the toolbox's flags and environment; it imports no more
than the toolbox needs (no HTTP, no model SDK), so that it starts quickly and every
session it forks carries only that.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kubeturn_harness.sandbox import confinement, server
from kubeturn_harness.sandbox.worker import ToolboxSettings
from kubeturn_harness.tools import RunAs


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(prog="python -m kubeturn_harness.sandbox")
    parser.add_argument("--socket", type=Path, required=True, help="where to listen")
    parser.add_argument(
        "--client-uid",
        type=int,
        default=env("KUBETURN_TOOLBOX_CLIENT_UID"),
        help="serve connections of this uid: the Harness's (env KUBETURN_TOOLBOX_CLIENT_UID)",
    )
    parser.add_argument(
        "--client-pid", type=int, default=None, help="serve connections of this process only"
    )
    parser.add_argument(
        "--scratch-root",
        type=Path,
        default=Path(env("KUBETURN_TOOLBOX_SCRATCH", "/tmp/kubeturn-scratch")),
        help="where each session gets its HOME and TMPDIR (env KUBETURN_TOOLBOX_SCRATCH)",
    )
    parser.add_argument(
        "--run-as",
        default=None,
        metavar="UID:GID",
        help="the user every session becomes (only when the toolbox runs as root)",
    )
    parser.add_argument(
        "--require-confinement",
        action="store_true",
        default=env("KUBETURN_REQUIRE_CONFINEMENT", "") == "true",
        help="refuse to run tools where the kernel has no Landlock "
        "(env KUBETURN_REQUIRE_CONFINEMENT=true)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.client_uid is None and args.client_pid is None:
        print(
            "kubeturn-toolbox: say who may connect: --client-uid or --client-pid", file=sys.stderr
        )
        return 2
    readable = (
        *confinement.path_readable(os.environ.get("PATH", ""), os.environ.get("HOME")),
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(__file__).resolve().parent.parent,
    )
    run_as = None
    if args.run_as is not None:
        uid, _, gid = args.run_as.partition(":")
        run_as = RunAs(uid=int(uid), gid=int(gid or uid))
    settings = ToolboxSettings(
        scratch_root=args.scratch_root,
        socket=args.socket,
        required=args.require_confinement,
        readable=readable,
        run_as=run_as,
    )
    return server.main(settings, server.Clients(uid=args.client_uid, pid=args.client_pid))


if __name__ == "__main__":
    sys.exit(main())
