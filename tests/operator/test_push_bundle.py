"""How the push Pod's program (``kubeturn.k8s.push_program``) copies a delivered bundle
off the work volume, on a real filesystem.

Cases:
- the program copies the bundle only through plain directories, and only a regular file:
  a path that climbs or is absolute, a link on the way or at the end, a FIFO (without
  hanging) are refused.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubeturn.k8s import push_program


def refused(root: Path, relative: str) -> str:
    with pytest.raises(push_program.Refused) as caught:
        push_program._copy_beneath(str(root), relative, str(root.parent / "copy"))
    assert caught.value.cause == "bundle"
    assert not (root.parent / "copy").exists()
    return str(caught.value)


def test_the_bundle_is_copied_through_plain_directories_only(tmp_path: Path) -> None:
    root = tmp_path / "work"
    (root / "d").mkdir(parents=True)
    (root / "d" / "b.bundle").write_bytes(b"bundle")
    push_program._copy_beneath(str(root), "d/b.bundle", str(tmp_path / "copied"))
    assert (tmp_path / "copied").read_bytes() == b"bundle"

    (tmp_path / "secret").write_text("token")
    (root / "link.bundle").symlink_to(tmp_path / "secret")
    (root / "linked").symlink_to(root / "d")
    os.mkfifo(root / "fifo.bundle")
    link = "is, or is reached through, a symbolic link"
    assert refused(root, "link.bundle") == f"the delivered bundle 'link.bundle' {link}"
    assert refused(root, "linked/b.bundle") == f"the delivered bundle 'linked/b.bundle' {link}"
    assert (
        refused(root, "fifo.bundle") == "the delivered bundle 'fifo.bundle' is not a regular file"
    )
    assert refused(root, "d") == "the delivered bundle 'd' is not a regular file"
    for climbing in ("../secret", "/etc/passwd", "d//b.bundle", "./d/b.bundle"):
        assert refused(root, climbing).endswith("is not a plain path beneath the work root")
    assert refused(root, "none.bundle") == (
        "the delivered bundle 'none.bundle' cannot be opened: No such file or directory"
    )
