"""The sandbox Pod's clone init containers: each clones one repo slot onto the Workspace's
volume, once, with that slot's credentials alone.

A slot's ``secretRef`` Secret is mounted into its own clone container and nowhere else:
the Harness's container, where the Agents' tools run, never holds clone credentials, and
the clone it leaves holds none either (ADR 0033). git reads the mounted files itself,
through a credential helper (https) or ``GIT_SSH_COMMAND`` (ssh): no secret is on a
command line, in an environment variable or in the clone's ``.git/config``. A ``ref`` of
7 to 64 hex digits is a commit, checked out detached.

A clone container runs again, as a user that can read the key, over a volume the Agents
have written: it trusts nothing there. ssh reads no configuration file (``-F
/dev/null``), and no identity or known host but the Secret's; git reads no system or
global configuration (``HOME`` is off the volume besides), runs no hook and no
fsmonitor, speaks only the URL's protocol, starts in ``/`` and runs only in the directory
it has just made; the credential helper answers only the URL's own protocol, host and
port. Pure: builds containers, volumes and shell text; runs nothing.
"""

from __future__ import annotations

import re
import shlex
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from kubeturn.api.workspace import Repo
from kubeturn.k8s import names

REPOS = "/work/.repos"
"""Where the clones live, one directory per slot, under the work root the Pod mounts at
``/work`` (the Harness's ``clones.REPOS_DIR``)."""
CREDENTIALS_PATH = "/var/run/secrets/kubeturn/repo"
"""Where a clone container finds its slot's Secret: one file per key."""
SECRET_MODE = 0o400
"""The Secret's files: owner-read only. The kubelet gives them the Pod's ``fsGroup`` and
adds group read, so the clone container's user (in that group) reads them; no one else."""
SAFE_GIT = (
    ("HOME", "/tmp"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CEILING_DIRECTORIES", REPOS),
    ("GIT_TERMINAL_PROMPT", "0"),
)
"""The environment every clone script sets before git runs, whatever it was given: no
system or global configuration (a ``$HOME`` on the volume would hold an Agent's
``.gitconfig`` and ``.config/git/config``), ``HOME`` in the container's own ``/tmp``
besides; no repository above a clone's own directory is ever discovered (a ``.git``
planted in ``/work`` or ``/work/.repos``); no terminal prompt, so git fails at once
rather than ask."""
SAFE_GIT_OPTIONS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
"""On every git command: no hook and no fsmonitor command runs, whatever a repository's
configuration or template says."""
HTTPS_KEYS = ("username", "password")
SSH_KEYS = ("ssh-privatekey",)
"""The Secret's keys an https URL needs, and an ssh URL ('known_hosts' is optional)."""
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


def protocol(url: str) -> str:
    """The protocol git names ``url``'s transport by (``protocol.<name>.allow``), and
    which its credential requests carry: the scheme, ``ssh`` for its aliases and the
    scp-like form, ``file`` for a path."""
    scheme, found, _ = url.partition("://")
    if not found:
        return "ssh" if _SCP_LIKE.match(url) else "file"
    scheme = scheme.lower()
    return "ssh" if scheme in ("git+ssh", "ssh+git") else scheme


def transport(url: str) -> Transport:
    name = protocol(url)
    if name in ("http", "https"):
        return Transport.HTTPS
    return Transport.SSH if name == "ssh" else Transport.OTHER


def is_commit(ref: str) -> bool:
    return COMMIT_REF.match(ref) is not None


def name(slot: str) -> str:
    """The name of a slot's clone container, and of its credentials' volume: a DNS label.
    A slot the label cannot spell as it is (``_``, ``.``, capitals, a trailing ``-``,
    over 57 characters) gets a digest of its name too, so ``a_b`` and ``a-b`` never share
    a container (``names.dns_label``)."""
    return names.dns_label("clone-", slot)


def ssh_command(*, key: bool, known_hosts: bool) -> str:
    """``GIT_SSH_COMMAND``: no configuration file (``-F /dev/null``: not the passwd home's
    ``~/.ssh/config``, which may be on the volume, nor the system's), never a prompt, and
    with ``key`` the Secret's key as the only identity (without, none at all).

    With the Secret's ``known_hosts`` the host must be in it. Without, the host's key is
    accepted on first use: each clone container starts with no known hosts, so it trusts
    whatever answers at that address when it clones (ADR 0033). Either way no known
    hosts file of the home is read or written.
    """
    options = ["-F", "/dev/null", "-o", "BatchMode=yes"]
    if key:
        options += ["-i", f"{CREDENTIALS_PATH}/ssh-privatekey", "-o", "IdentitiesOnly=yes"]
    else:
        options += ["-o", "IdentityFile=none"]
    if known_hosts:
        options += ["-o", "StrictHostKeyChecking=yes"]
        options += ["-o", f"UserKnownHostsFile={CREDENTIALS_PATH}/known_hosts"]
    else:
        options += ["-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile=/dev/null"]
    return shlex.join(["ssh", *options])


_CREDENTIAL_HELPER = (
    # git asks 'get', and says 'store' or 'erase' after; only 'get' is answered, and only
    # for the clone URL's own protocol and host (with its port, as git writes it): not for
    # where a redirect leads, be it another host, port or plain http. printf is a
    # builtin: the secret goes from the file to git through pipes, never an argument.
    '!f() { test "$1" = get || return 0; protocol=; host=; '
    'while IFS= read -r line; do case "$line" in '
    'protocol=*) protocol="${line#protocol=}";; host=*) host="${line#host=}";; esac; done; '
    'test "$protocol" = "$REPO_PROTOCOL" && test "$host" = "$REPO_HOST" || return 0; '
    f'printf "username=%s\\npassword=%s\\n" "$(cat {CREDENTIALS_PATH}/username)" '
    f'"$(cat {CREDENTIALS_PATH}/password)"; }}; f'
)


def volume(slot: str, repo: Repo) -> Object | None:
    """The slot's Secret as a volume, or None when it has no ``secretRef``."""
    if repo.secretRef is None:
        return None
    return secret_volume(slot, repo.secretRef.name)


def secret_volume(slot: str, secret: str, *, optional: bool = False) -> Object:
    """The slot's Secret ``secret`` as a volume of its own, owner-read only; ``optional``:
    a missing Secret mounts as an empty directory (the container then says which key it
    lacks) instead of keeping its Pod from starting."""
    source: Object = {"secretName": secret, "defaultMode": SECRET_MODE}
    if optional:
        source["optional"] = True
    return {"name": name(slot), "secret": source}


def secret_mount(slot: str) -> Object:
    """Where a container that uses the slot's credentials mounts them, read-only."""
    return {"name": name(slot), "mountPath": CREDENTIALS_PATH, "readOnly": True}


def credential_env(url: str, secret: str) -> list[Object]:
    """The environment a container using the slot's Secret gives git: the Secret's name
    (for messages) and, for https, what the credential helper answers for: the scheme,
    and the host with the port as the URL writes it (the URL holds no user: the API
    refuses one)."""
    env = [{"name": "REPO_SECRET", "value": secret}]
    if transport(url) is Transport.HTTPS:
        env.append({"name": "REPO_PROTOCOL", "value": protocol(url)})
        env.append({"name": "REPO_HOST", "value": urlsplit(url).netloc})
    return env


def needed_keys(url: str) -> tuple[str, ...]:
    """The Secret's keys a ``secretRef`` on ``url`` must have: none for a URL that is
    neither https nor ssh (which takes no ``secretRef``)."""
    kind = transport(url)
    if kind is Transport.HTTPS:
        return HTTPS_KEYS
    return SSH_KEYS if kind is Transport.SSH else ()


def git_options(url: str, *, credentials: bool) -> list[str]:
    """The ``-c`` options of every git command that reaches ``url``: no hook, no
    fsmonitor; only the URL's protocol (a redirect to another, https to http, is
    refused); with ``credentials`` over https, no credential helper but ours, which
    answers from the mounted Secret for the URL's own protocol, host and port alone."""
    options = [*SAFE_GIT_OPTIONS, "-c", "protocol.allow=never"]
    options += ["-c", f"protocol.{protocol(url)}.allow=always"]
    if credentials and transport(url) is Transport.HTTPS:
        options += ["-c", "credential.helper=", "-c", f"credential.helper={_CREDENTIAL_HELPER}"]
    return options


def container(
    slot: str, repo: Repo, *, image: str, work: Object, security: Object, resources: Object
) -> Object:
    """The init container that clones ``slot``; ``work`` mounts the clones' directory."""
    env = [{"name": "REPO_URL", "value": repo.url}, {"name": "REPO_REF", "value": repo.ref}]
    mounts = [work]
    if repo.secretRef is not None:
        env += credential_env(repo.url, repo.secretRef.name)
        mounts.append(secret_mount(slot))
    return {
        "name": name(slot),
        "image": image,
        "command": ["sh", "-c", script(slot, repo)],
        "env": env,
        # Not the image's WORKDIR (/work, the Agents' volume): nothing is looked up there.
        "workingDir": "/",
        "volumeMounts": mounts,
        "resources": resources,
        "securityContext": security,
        # A clone that fails says why in its log's last line: the Pod's status carries
        # it (lastState.terminated.message), and so the Workspace's Ready message.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def script(slot: str, repo: Repo) -> str:
    """Clone once, into a directory of its own then renamed: a restarted Pod finds the
    clone on its volume and keeps it, and never takes for one a clone that failed (its
    directory is removed) or was cut short (removed on the next try).

    Whatever the environment it is given, it sets ``SAFE_GIT`` and starts in ``/``; git
    runs twice at most: ``clone`` there, into the directory it makes, and ``checkout``
    with that clone named as its repository and work tree (nothing is discovered)."""
    target, partial = f"{REPOS}/{slot}", f"{REPOS}/.partial-{slot}"
    lines = [
        "set -eu",
        "cd /",
        "export " + " ".join(f"{key}={shlex.quote(value)}" for key, value in SAFE_GIT),
        f"fail() {{ echo \"kubeturn: cannot clone repo slot '{slot}': $*\" >&2;"
        f' rm -rf "{partial}"; exit 1; }}',
        f'if [ -d "{target}/.git" ]; then exit 0; fi',
        f'rm -rf "{partial}"',
    ]
    kind = transport(repo.url)
    if kind is Transport.SSH:
        lines += _ssh(slot, key=repo.secretRef is not None)
    elif repo.secretRef is not None:
        if kind is not Transport.HTTPS:
            return _text([*lines, 'fail "a secretRef takes an https or ssh URL, not $REPO_URL"'])
        lines += _needs(*needed_keys(repo.url), why="an https URL")
    git = shlex.join(["git", *git_options(repo.url, credentials=repo.secretRef is not None)])
    checkout = "--no-checkout" if is_commit(repo.ref) else '--branch "$REPO_REF"'
    lines.append(
        f'{git} clone --quiet {checkout} -- "$REPO_URL" "{partial}"'
        ' || fail "git could not clone $REPO_URL at $REPO_REF (its words are above)"'
    )
    if is_commit(repo.ref):
        here = shlex.join(["git", *SAFE_GIT_OPTIONS])
        lines.append(
            f'{here} --git-dir="{partial}/.git" --work-tree="{partial}"'
            ' checkout --quiet --detach "$REPO_REF^{commit}"'
            ' || fail "$REPO_REF is not a commit on a branch or tag of $REPO_URL"'
        )
    lines += [
        f'if [ -e "{target}" ]; then rmdir "{target}" || fail "{target} is in the way"; fi',
        f'mv "{partial}" "{target}"',
    ]
    return _text(lines)


def _ssh(slot: str, *, key: bool) -> list[str]:
    """Lines exporting ``GIT_SSH_COMMAND``: with the Secret's key (checked first) and its
    ``known_hosts`` if it has one, else trusting the host key on first use, and saying so."""
    first_use = "the host key is trusted on first use"
    lines = _needs(*SSH_KEYS, why="an ssh URL") if key else []
    lines.append('command -v ssh >/dev/null || fail "the image has no ssh client"')
    if key:
        lines += [
            f'if [ -s "{CREDENTIALS_PATH}/known_hosts" ]; then',
            f"  GIT_SSH_COMMAND={shlex.quote(ssh_command(key=True, known_hosts=True))}",
            "else",
            f"  echo \"kubeturn: the Secret '$REPO_SECRET' has no key 'known_hosts': {first_use}\""
            " >&2",
            f"  GIT_SSH_COMMAND={shlex.quote(ssh_command(key=True, known_hosts=False))}",
            "fi",
        ]
    else:
        lines += [
            f"echo \"kubeturn: repo slot '{slot}' has no secretRef: {first_use}\" >&2",
            f"GIT_SSH_COMMAND={shlex.quote(ssh_command(key=False, known_hosts=False))}",
        ]
    return [*lines, "export GIT_SSH_COMMAND"]


def _text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _needs(*keys: str, why: str) -> list[str]:
    """Lines failing the clone, naming the Secret and the key, when a key is missing."""
    return [
        f'[ -s "{CREDENTIALS_PATH}/{key}" ] || fail "the Secret \'$REPO_SECRET\' has no key'
        f" '{key}' (or it is empty); {why} needs {' and '.join(repr(k) for k in keys)}\""
        for key in keys
    ]
