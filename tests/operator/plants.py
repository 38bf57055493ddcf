"""What an Agent leaves on the Workspace's volume to make the next clone container leak its
key: the tests play that Agent, then re-make the Pod (run the clone container again).

An Agent runs anything as the Workspace's user, writing anywhere under ``/work``; a
clone container runs later, over the same volume, as a user that can read the slot's
key. Each plant makes a clone container that reads it copy the key to a *loot* file on
the volume (``.loot-<plant>``), where the Agent reads it:

- ``ssh-config``: ``~/.ssh/config`` of a passwd home on the volume, with a ``Match exec``
  line that runs a command (ssh reads the passwd home's config, never ``$HOME``'s);
- ``gitconfig``: ``~/.gitconfig`` of a ``$HOME`` on the volume, rewriting ``ssh://`` URLs
  to git's ``ext::`` transport (a command), which it allows;
- ``xdg-config``: ``~/.config/git/config`` there too, with a hooks directory whose
  ``post-checkout`` hook, and an fsmonitor command, copy the key, and an ssh command
  that does (``GIT_SSH_COMMAND`` overrides it: it leaks only where that is unset);
- ``git-dirs``: repositories at ``/work`` and ``/work/.repos`` with all of the above in
  their ``.git/config``, for a git that would discover one.

:func:`plant` writes them as the clone container will see them (``seen_at`` is where it
mounts the volume); :func:`loot` and :func:`holding` say what leaked.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

PLANTS = ("ssh-config", "gitconfig", "xdg-config", "git-dirs")
WORKSPACE_UID = 10002
"""The Workspace's user in the Harness image: the Agents' tools and the clone containers."""

NAIVE_CLONE = (
    "GIT_SSH_COMMAND='ssh -i /var/run/secrets/kubeturn/repo/ssh-privatekey"
    " -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
    ' -o UserKnownHostsFile=/dev/null\' git clone --quiet "$REPO_URL" /work/.repos/naive'
)
"""A clone as kubeturn's clone containers ran it before they trusted nothing on the
volume: ssh and git read the homes' configuration. Run with ``HOME`` on the volume, it
shows that each plant below leaks the key (:data:`LEAKS`), so that a test finding no
loot after the real clone container has found a plant that works."""

LEAKS = {
    "ssh-config": ".loot-ssh-config",
    "gitconfig": ".loot-gitconfig",
    "xdg-config": ".loot-hook",
}
"""The loot file :data:`NAIVE_CLONE` leaves, by plant. ``git-dirs`` leaves none: no clone
discovers a repository above its own, so it is planted only to show none is."""


def plant(volume: Path, *, seen_at: str, key: str, plants: tuple[str, ...] = PLANTS) -> None:
    """Write ``plants`` into ``volume``, which the clone container mounts at ``seen_at`` and
    where it finds the slot's key at ``key``; give it all to the Workspace's user."""
    if "ssh-config" in plants:
        _write(volume / ".ssh" / "config", f'Match exec "{_copy(key, seen_at, "ssh-config")}"\n')
    if "gitconfig" in plants:
        _write(volume / ".gitconfig", _ext_config(key, seen_at, "gitconfig"))
    hooks = volume / ".hooks"
    if "xdg-config" in plants or "git-dirs" in plants:
        for name, loot_name in (("post-checkout", "hook"), ("fsmonitor", "fsmonitor")):
            _write(hooks / name, f"#!/bin/sh\n{_copy(key, seen_at, loot_name)}\n", mode=0o755)
    hooked = (
        f"[core]\n\thooksPath = {seen_at}/.hooks\n\tfsmonitor = {seen_at}/.hooks/fsmonitor\n"
        f'\tsshCommand = "{_copy(key, seen_at, "ssh-command")}"\n'
    )
    if "xdg-config" in plants:
        _write(volume / ".config" / "git" / "config", hooked)
    if "git-dirs" in plants:
        for directory in (volume, volume / ".repos"):
            directory.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "--quiet", str(directory)], check=True)
            config = directory / ".git" / "config"
            config.write_text(config.read_text() + hooked + _ext_config(key, seen_at, "discovered"))
    subprocess.run(["chown", "-R", f"{WORKSPACE_UID}:{WORKSPACE_UID}", str(volume)], check=True)


def loot(volume: Path) -> list[Path]:
    """Every loot file on the volume."""
    return sorted(volume.rglob(".loot-*"))


def holding(volume: Path, secret: str) -> list[Path]:
    """Every file on the volume that :func:`holds` ``secret``."""
    return [
        path
        for path in sorted(volume.rglob("*"))
        if path.is_file() and not path.is_symlink() and holds(path.read_bytes(), secret)
    ]


def holds(data: bytes | str, secret: str) -> bool:
    """Whether ``data`` holds ``secret`` (a key), or any line of its body."""
    raw = data.encode() if isinstance(data, str) else data
    body = [line for line in secret.splitlines() if not line.startswith("-----")]
    return secret.encode() in raw or any(line.encode() in raw for line in body if line)


def _copy(key: str, seen_at: str, name: str) -> str:
    """The shell command that leaks: ``false`` after, so ssh's ``Match`` does not match."""
    return f"cat {key} > {seen_at}/.loot-{name}; false"


def _ext_config(key: str, seen_at: str, name: str) -> str:
    """git configuration sending every ``ssh://`` clone to a command: ``ext::`` splits its
    command at ``% `` (a space), and the rest of the URL lands in ``$0``."""
    command = _copy(key, seen_at, name).replace(" ", "% ")
    return f'[protocol "ext"]\n\tallow = always\n[url "ext::sh -c {command}% "]\n\tinsteadOf = ssh://\n'


def _write(path: Path, text: str, *, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
