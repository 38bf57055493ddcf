"""What a process of the toolbox may do to others and to itself: its user, its
capabilities, whether it can be traced.

A session is an Agent's: it never runs as root with root's powers. When the toolbox runs
as root (a Harness run as root on one machine) a session becomes ``run_as``; when that is
root too (the local runner of a person working as root), it keeps uid 0 but drops every
capability, for good: its bounding set is emptied, so no ``execve`` gives one back.
Nothing here reads files or starts processes.
"""

from __future__ import annotations

import ctypes
import os
import sys

from kubeturn_harness.tools import RunAs

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
CAP_LAST = 63
"""Past the highest capability any kernel defines (40 in 6.x); dropping an unknown one is
refused with EINVAL, which is ignored."""
_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, value: int) -> None:
    """``prctl(option, value)``; ``OSError`` when the kernel refuses. A no-op off Linux."""
    if sys.platform != "linux":
        return
    if _libc().prctl(option, value, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"prctl({option}) failed: {os.strerror(number)}")


def undumpable() -> None:
    """Processes of the same uid cannot ptrace this one or read its ``/proc`` files."""
    prctl(PR_SET_DUMPABLE, 0)


def become(run_as: RunAs | None) -> None:
    """Become ``run_as`` (no supplementary group) if given; then, as root, drop every
    capability (``drop_capabilities``)."""
    if run_as is not None:
        os.setgroups([])
        os.setgid(run_as.gid)
        os.setuid(run_as.uid)
    if os.geteuid() == 0:
        drop_capabilities()


def drop_capabilities() -> None:
    """Empty the bounding set, then the effective, permitted and inheritable sets."""
    libc = _libc()
    for capability in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"could not drop capabilities: {os.strerror(number)}")
