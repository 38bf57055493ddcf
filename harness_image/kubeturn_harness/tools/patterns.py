"""Glob patterns as regular expressions over ``/``-separated relative paths.

The dialect is ripgrep's (gitignore-style) subset that models use: ``*`` and ``?``
stay within one directory, ``**`` as a whole segment crosses directories (``a/**/b``
matches ``a/b`` too), ``[...]`` and ``[!...]`` classes, ``{a,b}`` alternatives, and
``\\`` escapes. Which part of a path a pattern is matched against is the caller's
choice. Pure: nothing here touches the file system.
"""

from __future__ import annotations

import re


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regular expression matching the whole of a relative path ``pattern`` matches."""
    return re.compile(rf"(?s:{_translate(pattern)})\Z")


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/"):
            end = i + 2
            if end == n:
                out.append(".*")
                i = end
                continue
            if pattern[end] == "/":
                out.append("(?:.*/)?")
                i = end + 1
                continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := _class_end(pattern, i)) > 0:
            out.append(_class(pattern[i + 1 : close]))
            i = close
        elif char == "{" and (close := pattern.find("}", i)) > 0:
            alternatives = pattern[i + 1 : close].split(",")
            out.append("(?:" + "|".join(_translate(alt) for alt in alternatives) + ")")
            i = close
        elif char == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """The index of the ``]`` closing the class opened at ``start``, or -1."""
    j = start + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a ']' first in a class is a member, not the end
    return pattern.find("]", j)


def _class(body: str) -> str:
    negated = body[:1] in ("!", "^")
    if negated:
        body = body[1:]
    members = "".join("\\" + c if c in "\\[]^&~|" else c for c in body)
    return "[" + ("^" if negated else "") + members + "]"
