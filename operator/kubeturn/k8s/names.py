"""The names and label values the operator derives from the names users give.

A Run or Workspace may be named anything the API server admits as an object name: up
to 253 characters, with dots; a slot anything ``SLOT_NAME`` admits: up to 63 characters,
capitals, ``_`` and ``.``, ending in any of them. The objects made for them must be
valid in their own right, and these functions make sure they are (docs/decisions/0044):

- :func:`object_name` — a child object's name, ``<name><suffix>``: a DNS-1123
  subdomain of at most 253 characters, or :data:`POD_NAME_MAX` for a Pod;
- :func:`label_value` — a label value: at most 63 characters, starting and ending with a
  letter or digit;
- :func:`dns_label` — a container's or volume's name: a DNS-1123 label (lower case, at
  most 63 characters);
- :func:`branch` — a Run's git branch: a valid ref name, short enough for the Harness
  (``WorktreesRequest.branch``, at most 200 characters) and for the worktree's
  directory name.

Each keeps a name that is valid as it is (so the objects of a Run or Workspace made
before keep their names), and otherwise keeps a readable prefix and adds a short digest
of the whole name, so two names that differ give different results. Pure: no IO.
"""

from __future__ import annotations

import hashlib
import re

from kubeturn.api.common import OBJECT_NAME_MAX

POD_NAME_MAX = 154
"""The longest Pod name a kubelet can run in any namespace: it keeps the Pod's logs in a
directory named ``<namespace>_<pod>_<uid>``, which must fit in a file name's 255 bytes
with a namespace of 63 characters and a uid of 36; a longer name is admitted by the API
server and then never starts."""
LABEL_VALUE_MAX = 63
DNS_LABEL_MAX = 63
DIGEST_LENGTH = 8
"""Hex digits of the digest a shortened name carries: 32 bits, so that names sharing
a long prefix, or written as one spells the other (``a_b``, ``a-b``), differ."""
BRANCH_MAX = 200
"""A Run's branch, as the Harness's ``WorktreesRequest`` admits it; its worktree's
directory is the branch with ``/`` as ``-``, well inside a file name's 255 bytes."""
BRANCH_PREFIX = "kubeturn/"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_IN_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]")
_NOT_IN_DNS_LABEL = re.compile(r"[^-a-z0-9]")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]


def object_name(name: str, suffix: str, limit: int = OBJECT_NAME_MAX) -> str:
    """``<name><suffix>`` (``suffix`` starts with ``-`` or ``.`` and ends with a letter or
    digit); past ``limit`` characters, ``name`` is cut and marked with its digest."""
    whole = f"{name}{suffix}"
    if len(whole) <= limit:
        return whole
    room = limit - len(suffix) - DIGEST_LENGTH - 1
    return f"{name[:room].rstrip('-.')}-{digest(name)}{suffix}"


def label_value(text: str) -> str:
    """``text`` as a label value; one that cannot be (too long, ending in ``_``, ``.``
    or ``-``, or holding other characters) keeps what it can and adds its digest."""
    if _LABEL_VALUE.match(text) and len(text) <= LABEL_VALUE_MAX:
        return text
    room = LABEL_VALUE_MAX - DIGEST_LENGTH - 1
    kept = _NOT_IN_LABEL_VALUE.sub("-", text)[:room].strip("-_.")
    return f"{kept}-{digest(text)}" if kept else digest(text)


def dns_label(prefix: str, text: str) -> str:
    """``<prefix><text>`` as a DNS-1123 label (``prefix`` is one, ending in ``-``); a
    ``text`` it cannot spell as it is (capitals, ``_``, ``.``, a trailing ``-``, too long)
    is spelled in lower case and ``-`` and gets its digest, so ``a_b`` and ``a-b`` differ."""
    whole = f"{prefix}{text}"
    if _DNS_LABEL.match(whole) and len(whole) <= DNS_LABEL_MAX:
        return whole
    spelled = _NOT_IN_DNS_LABEL.sub("-", whole.lower())
    return f"{spelled[: DNS_LABEL_MAX - DIGEST_LENGTH - 1].rstrip('-')}-{digest(text)}"


def branch(run: str) -> str:
    """The git branch of a Run's worktrees: ``kubeturn/<run>``; a name too long for it,
    or ending in ``.lock`` (which git refuses in a ref), is cut and gets its digest."""
    whole = f"{BRANCH_PREFIX}{run}"
    if len(whole) <= BRANCH_MAX and not whole.endswith(".lock"):
        return whole
    room = BRANCH_MAX - len(BRANCH_PREFIX) - DIGEST_LENGTH - 1
    return f"{BRANCH_PREFIX}{run[:room].rstrip('-.')}-{digest(run)}"
