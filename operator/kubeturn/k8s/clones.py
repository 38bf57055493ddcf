"""The sandbox Pod's clone init containers: each clones one repo slot onto the Workspace's
volume, once, with that slot's credentials alone.

A slot's ``secretRef`` Secret is mounted into its own clone container and nowhere else:
the Harness's container, where the Agents' tools run, never holds clone credentials, and
the clone it leaves holds none either (ADR 0033). git reads the mounted files itself,
through a credential helper (https) or ``GIT_SSH_COMMAND`` (ssh): no secret is on a
command line, in an environment variable or in the clone's ``.git/config``. A ``ref`` of
7 to 64 hex digits is a commit, checked out detached. Pure: builds containers, volumes
and shell text; runs nothing.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from kubeturn.api.workspace import Repo

REPOS = "/work/.repos"
"""Where the clones live, one directory per slot, under the work root the Pod mounts at
``/work`` (the Harness's ``clones.REPOS_DIR``)."""
CREDENTIALS_PATH = "/var/run/secrets/kubeturn/repo"
"""Where a clone container finds its slot's Secret: one file per key."""
SECRET_MODE = 0o400
"""The Secret's files: owner-read only. The kubelet gives them the Pod's ``fsGroup`` and
adds group read, so the clone container's user (in that group) reads them; no one else."""
COMMIT_REF = re.compile(r"^[0-9a-fA-F]{7,64}$")
"""A ``ref`` read as a commit id: 7 hex digits (git's shortest abbreviation) up to 64 (a
full SHA-256 id). A branch or tag named like that cannot be cloned by name."""
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?[^/:]+:")
"""git's scp-like ssh address, ``[user@]host:path``: a colon before any slash."""

Object = dict[str, Any]


class Transport(Enum):
    """How a clone URL reaches its repository, which says what credentials it takes."""

    HTTPS = "https"
    """``http://`` or ``https://``: 'username' and 'password' (a token)."""
    SSH = "ssh"
    """``ssh://`` or ``[user@]host:path``: 'ssh-privatekey', and 'known_hosts' if given."""
    OTHER = "other"
    """Anything else (``file://``, ``git://``, a path): no credentials apply."""


def transport(url: str) -> Transport:
    scheme, found, _ = url.partition("://")
    if not found:
        return Transport.SSH if _SCP_LIKE.match(url) else Transport.OTHER
    if scheme.lower() in ("http", "https"):
        return Transport.HTTPS
    if scheme.lower() in ("ssh", "git+ssh", "ssh+git"):
        return Transport.SSH
    return Transport.OTHER


def is_commit(ref: str) -> bool:
    return COMMIT_REF.match(ref) is not None


def name(slot: str) -> str:
    """The name of a slot's clone container, and of its credentials' volume: a DNS label.
    A slot the label cannot spell as it is (``_``, ``.``, capitals, over 57 characters)
    gets a digest of its name too, so ``a_b`` and ``a-b`` never share a container."""
    label = f"clone-{slot}".lower().replace("_", "-").replace(".", "-")
    if label == f"clone-{slot}" and len(label) <= 63:
        return label
    digest = hashlib.sha256(slot.encode()).hexdigest()[:8]
    return f"{label[:54].rstrip('-')}-{digest}"


def ssh_command(*, known_hosts: bool) -> str:
    """``GIT_SSH_COMMAND``: the Secret's key and no other identity, never a prompt.

    With the Secret's ``known_hosts`` the host must be in it. Without, the host's key is
    accepted on first use: each clone container starts with no known hosts, so it trusts
    whatever answers at that address when it clones (ADR 0033).
    """
    options = ["-i", f"{CREDENTIALS_PATH}/ssh-privatekey", "-o", "IdentitiesOnly=yes"]
    options += ["-o", "BatchMode=yes"]
    if known_hosts:
        options += ["-o", "StrictHostKeyChecking=yes"]
        options += ["-o", f"UserKnownHostsFile={CREDENTIALS_PATH}/known_hosts"]
    else:
        options += ["-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile=/dev/null"]
    return shlex.join(["ssh", *options])


_CREDENTIAL_HELPER = (
    # git asks 'get', and says 'store' or 'erase' after; only 'get' is answered, and only
    # for the clone URL's own host (not one a redirect leads to). printf is a builtin:
    # the secret goes from the file to git through pipes, never through an argument.
    '!f() { test "$1" = get || return 0; host=; '
    'while IFS= read -r line; do case "$line" in host=*) host="${line#host=}";; esac; done; '
    'test "$host" = "$REPO_HOST" || return 0; '
    f'printf "username=%s\\npassword=%s\\n" "$(cat {CREDENTIALS_PATH}/username)" '
    f'"$(cat {CREDENTIALS_PATH}/password)"; }}; f'
)


def volume(slot: str, repo: Repo) -> Object | None:
    """The slot's Secret as a volume, or None when it has no ``secretRef``."""
    if repo.secretRef is None:
        return None
    secret = {"secretName": repo.secretRef.name, "defaultMode": SECRET_MODE}
    return {"name": name(slot), "secret": secret}


def container(slot: str, repo: Repo, *, image: str, work: Object, security: Object) -> Object:
    """The init container that clones ``slot``; ``work`` mounts the clones' directory."""
    env = [
        {"name": "REPO_URL", "value": repo.url},
        {"name": "REPO_REF", "value": repo.ref},
        {"name": "HOME", "value": "/tmp"},
        # No terminal: git fails at once rather than ask for what it lacks.
        {"name": "GIT_TERMINAL_PROMPT", "value": "0"},
    ]
    mounts = [work]
    if repo.secretRef is not None:
        env.append({"name": "REPO_SECRET", "value": repo.secretRef.name})
        if transport(repo.url) is Transport.HTTPS:
            host = urlsplit(repo.url).netloc.rpartition("@")[2]
            env.append({"name": "REPO_HOST", "value": host})
        mounts.append({"name": name(slot), "mountPath": CREDENTIALS_PATH, "readOnly": True})
    return {
        "name": name(slot),
        "image": image,
        "command": ["sh", "-c", script(slot, repo)],
        "env": env,
        "volumeMounts": mounts,
        "securityContext": security,
        # A clone that fails says why in its log's last line: the Pod's status carries
        # it (lastState.terminated.message), and so the Workspace's Ready message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def script(slot: str, repo: Repo) -> str:
    """Clone once, into a directory of its own then renamed: a restarted Pod finds the
    clone on its volume and keeps it, and never takes for one a clone that failed (its
    directory is removed) or was cut short (removed on the next try)."""
    target, partial = f"{REPOS}/{slot}", f"{REPOS}/.partial-{slot}"
    lines = [
        "set -eu",
        f"fail() {{ echo \"kubeturn: cannot clone repo slot '{slot}': $*\" >&2;"
        f' rm -rf "{partial}"; exit 1; }}',
        f'if [ -d "{target}/.git" ]; then exit 0; fi',
        f'rm -rf "{partial}"',
    ]
    git = "git"
    if repo.secretRef is not None:
        kind = transport(repo.url)
        if kind is Transport.HTTPS:
            lines += _needs("username", "password", why="an https URL")
            git = shlex.join(["git", "-c", "credential.helper=", "-c"])
            git += " " + shlex.quote(f"credential.helper={_CREDENTIAL_HELPER}")
        elif kind is Transport.SSH:
            lines += _needs("ssh-privatekey", why="an ssh URL")
            lines += [
                'command -v ssh >/dev/null || fail "the image has no ssh client"',
                f'if [ -s "{CREDENTIALS_PATH}/known_hosts" ]; then',
                f"  GIT_SSH_COMMAND={shlex.quote(ssh_command(known_hosts=True))}",
                "else",
                "  echo \"kubeturn: the Secret '$REPO_SECRET' has no key 'known_hosts':"
                ' the host key is trusted on first use" >&2',
                f"  GIT_SSH_COMMAND={shlex.quote(ssh_command(known_hosts=False))}",
                "fi",
                "export GIT_SSH_COMMAND",
            ]
        else:
            return _text([*lines, 'fail "a secretRef takes an https or ssh URL, not $REPO_URL"'])
    checkout = "--no-checkout" if is_commit(repo.ref) else '--branch "$REPO_REF"'
    lines.append(
        f'{git} clone --quiet {checkout} -- "$REPO_URL" "{partial}"'
        ' || fail "git could not clone $REPO_URL at $REPO_REF (its words are above)"'
    )
    if is_commit(repo.ref):
        lines.append(
            f'git -C "{partial}" checkout --quiet --detach "$REPO_REF^{{commit}}"'
            ' || fail "$REPO_REF is not a commit on a branch or tag of $REPO_URL"'
        )
    lines += [
        f'if [ -e "{target}" ]; then rmdir "{target}" || fail "{target} is in the way"; fi',
        f'mv "{partial}" "{target}"',
    ]
    return _text(lines)


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _needs(*keys: str, why: str) -> list[str]:
    """Lines failing the clone, naming the Secret and the key, when a key is missing."""
    return [
        f'[ -s "{CREDENTIALS_PATH}/{key}" ] || fail "the Secret \'$REPO_SECRET\' has no key'
        f" '{key}' (or it is empty); {why} needs {' and '.join(repr(k) for k in keys)}\""
        for key in keys
    ]
