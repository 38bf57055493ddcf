"""Linux Landlock through its three system calls: what the running kernel offers, and
restricting the calling process to a set of file hierarchies.

Landlock lets an unprivileged process take rights away from itself and from everything
it starts: after ``restrict``, the process opens, executes, creates and removes files
only beneath the hierarchies a rule grants, and (from ABI 6) signals and connects to
abstract Unix sockets only within its own domain. A restricted process also cannot
ptrace, or read the ``/proc/<pid>/environ`` and ``mem`` of, a process outside its
domain, so a sibling or parent's secrets stay out of reach even under the same uid.
The rules are kept across ``fork`` and ``execve`` and can never be lifted.

The system call numbers are the generic ones (444-446), the same on every
architecture that has Landlock. Rights that the running kernel's ABI does not know
are left out, never requested. Nothing here decides which paths to grant
(``confinement`` does).
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntFlag
from pathlib import Path

from kubeturn_harness.errors import LandlockError

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38


class Access(IntFlag):
    """File-system rights (``LANDLOCK_ACCESS_FS_*``)."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13
    """ABI 2: link or rename a file into another directory. Under ABI 1 such a move is
    always refused while any right is handled."""
    TRUNCATE = 1 << 14
    """ABI 3."""


class Scope(IntFlag):
    """What a domain keeps to itself (``LANDLOCK_SCOPE_*``, ABI 6)."""

    ABSTRACT_UNIX_SOCKET = 1 << 0
    SIGNAL = 1 << 1


READ = Access.EXECUTE | Access.READ_FILE | Access.READ_DIR
"""Read, list and execute: system directories, the clones."""
WRITE = (
    READ
    | Access.WRITE_FILE
    | Access.REMOVE_DIR
    | Access.REMOVE_FILE
    | Access.MAKE_DIR
    | Access.MAKE_REG
    | Access.MAKE_SOCK
    | Access.MAKE_FIFO
    | Access.MAKE_SYM
    | Access.REFER
    | Access.TRUNCATE
)
"""Everything a build needs beneath a worktree; never device nodes (``MAKE_CHAR``,
``MAKE_BLOCK``), which need a capability the sandbox lacks anyway."""
DEVICES = Access.READ_FILE | Access.WRITE_FILE | Access.READ_DIR | Access.TRUNCATE
"""A device a session uses (``/dev/null``, ``/dev/pts``): open it; make nothing."""
FILE_RIGHTS = Access.EXECUTE | Access.WRITE_FILE | Access.READ_FILE | Access.TRUNCATE
"""The rights a rule on a single file (not a directory) may carry."""

_ABI_ACCESS = {
    1: Access((1 << 13) - 1),
    2: Access((1 << 14) - 1),
    3: Access((1 << 15) - 1),
}
"""Rights each ABI knows (later ABIs add no file right this module grants)."""


def handled(abi: int) -> Access:
    """Every file right ABI ``abi`` knows: handled rights not granted are refused."""
    return _ABI_ACCESS[min(abi, 3)] if abi >= 1 else Access(0)


def scopes(abi: int) -> Scope:
    """The scopes ABI ``abi`` knows (none before 6)."""
    return Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL if abi >= 6 else Scope(0)


@dataclass(frozen=True)
class Rule:
    """Rights beneath one path."""

    path: Path
    access: Access


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The Landlock ABI the running kernel offers; 0 when it has none (not Linux, too
    old, Landlock not in the kernel's ``lsm=`` list, or refused by a seccomp filter)."""
    if sys.platform != "linux":
        return 0
    version = _libc().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    return max(int(version), 0)


def restrict(rules: Sequence[Rule], *, abi_version: int) -> None:
    """Restrict this process (and all it starts) to ``rules``, with every right and
    scope of ``abi_version`` handled. Sets ``no_new_privs`` first, as Landlock requires
    of an unprivileged process. A path that is gone, or that this user cannot reach, is
    skipped. Raises
    ``LandlockError`` if the kernel refuses; the process is then unrestricted."""
    libc = _libc()
    access = handled(abi_version)
    attr = _RulesetAttr(int(access), 0, int(scopes(abi_version)))
    size = ctypes.sizeof(attr) if abi_version >= 6 else ctypes.sizeof(ctypes.c_uint64)
    ruleset = libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise _error("create a Landlock ruleset")
    try:
        for rule in rules:
            _add(libc, ruleset, rule, access)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _error("set no_new_privs")
        if libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise _error("restrict this process with Landlock")
    finally:
        os.close(ruleset)


def _add(libc: ctypes.CDLL, ruleset: int, rule: Rule, access: Access) -> None:
    try:
        fd = os.open(rule.path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # gone, or out of this user's reach: nothing to grant
    try:
        allowed = rule.access & access
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            allowed &= FILE_RIGHTS
        if not allowed:
            return
        beneath = _PathBeneathAttr(int(allowed), fd)
        if libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(beneath), 0) != 0:
            raise _error(f"grant {rule.path}")
    finally:
        os.close(fd)


def _error(what: str) -> LandlockError:
    number = ctypes.get_errno()
    return LandlockError(number, f"could not {what}: {os.strerror(number)}")
