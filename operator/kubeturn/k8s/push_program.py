"""The program a delivery Pod runs: push one slot's delivered branch from a repository of
its own, and say how it went in one JSON line.

It runs in the Harness image's Python (``python -I -c <this file's text> <settings>``,
``kubeturn.k8s.deliveries``), so it imports the standard library alone and nothing of
kubeturn; its settings come as one JSON argument (:class:`Settings`'s keys). It trusts
nothing on the work volume, which the Agents wrote and which is mounted read-only:

- the bundle is opened beneath the work root one directory at a time, never through a
  symbolic link (``O_NOFOLLOW``: a link an Agent planted, at the bundle or on its way,
  pointing at the mounted Secret, is refused, and nothing is read through it), must be a
  regular file, and is copied into the Pod's own scratch directory before git reads it;
- the repository git runs in is a new bare one in that scratch directory; its objects
  come from the bundle and, through ``objects/info/alternates``, from the slot's clone:
  no configuration, hook or attribute of the volume is ever read, and git reads no
  system or global configuration (the environment the operator gives, ``SAFE_GIT``);
- the pushed commit is the one the operator names, and only if the bundle's branch is
  at it; it is pushed without force, so a remote branch that moved is left as it is.

The result (:func:`result_line`) goes to the container's termination message; it never
holds the credential (git's words in it are scrubbed of the Secret's values besides).
Exit status 0 when pushed, 1 when not.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from typing import Any, TypedDict

MESSAGE_MAX = 1000
"""Characters of an error kept in the result: the termination message holds 4 KiB."""


class Settings(TypedDict):
    slot: str
    url: str
    shown_url: str
    """The URL as messages quote it: without any user."""
    secret: str | None
    credentials: str
    """Where the Secret's keys are mounted."""
    needs: list[str]
    """The keys the URL needs (none without a Secret)."""
    work_root: str
    bundle: str
    """The bundle, relative to ``work_root``."""
    clone: str
    """The slot's clone, relative to ``work_root``."""
    branch: str
    commit: str
    scratch: str
    """An empty directory of the Pod's own."""
    result: str
    """The container's termination message file."""
    env: dict[str, str]
    fetch_options: list[str]
    push_options: list[str]
    ssh: dict[str, str] | None
    """``GIT_SSH_COMMAND`` with the Secret's ``known_hosts`` ('known_hosts') and without
    ('first_use'), for an ssh URL."""


class Refused(Exception):
    """Not pushed: ``cause`` names why (a word the operator reads), the message says it."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


def result_line(pushed: bool, cause: str | None = None, error: str | None = None) -> str:
    body: dict[str, Any] = {"pushed": pushed}
    if cause is not None:
        body |= {"cause": cause, "error": (error or "")[:MESSAGE_MAX]}
    return json.dumps(body, sort_keys=True)


def main(argv: list[str]) -> int:
    settings: Settings = json.loads(argv[1])
    secrets = _secret_values(settings)
    try:
        said = push(settings, secrets)
        line = result_line(True)
    except Refused as refused:
        said = f"cannot push repo slot '{settings['slot']}' to {settings['shown_url']}: {refused}"
        line = result_line(False, refused.cause, _scrub(str(refused), secrets))
    print(f"kubeturn: {_scrub(said, secrets)}", file=sys.stderr)
    with open(settings["result"], "w") as result:
        result.write(line + "\n")
    return 0 if json.loads(line)["pushed"] else 1


def push(settings: Settings, secrets: list[str]) -> str:
    """Push the bundle's branch at the commit; what was done, or ``Refused``."""
    os.chdir("/")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= settings["env"] | {"GIT_CEILING_DIRECTORIES": settings["scratch"]}
    _check_secret(settings)
    if settings["ssh"] is not None:
        known_hosts = os.path.join(settings["credentials"], "known_hosts")
        trusted = settings["secret"] is not None and _non_empty(known_hosts)
        env["GIT_SSH_COMMAND"] = settings["ssh"]["known_hosts" if trusted else "first_use"]
        if not trusted:
            print("kubeturn: the host key is trusted on first use", file=sys.stderr)
    bundle = os.path.join(settings["scratch"], "delivered.bundle")
    _copy_beneath(settings["work_root"], settings["bundle"], bundle)
    repository = os.path.join(settings["scratch"], "push.git")
    git = _Git(repository, env, secrets)
    git.run([], "init", "--quiet", "--bare", repository)
    objects = os.path.join(settings["work_root"], settings["clone"], ".git", "objects")
    with open(os.path.join(repository, "objects", "info", "alternates"), "w") as alternates:
        alternates.write(objects + "\n")
    branch, commit = settings["branch"], settings["commit"]
    fetched = git.run(
        settings["fetch_options"],
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        bundle,
        f"refs/heads/{branch}:refs/kubeturn/delivered",
    )
    if fetched.returncode != 0:
        raise Refused("bundle", f"the delivered bundle cannot be read: {_last(fetched.stderr)}")
    found = git.run([], "rev-parse", "--verify", "--quiet", "refs/kubeturn/delivered^{commit}")
    if found.stdout.strip() != commit:
        raise Refused(
            "bundle",
            f"the bundle's branch '{branch}' is at {found.stdout.strip() or 'no commit'},"
            f" not the delivered commit {commit}",
        )
    pushed = git.run(
        settings["push_options"],
        "push",
        "--porcelain",
        "--no-verify",
        "--",
        settings["url"],
        f"{commit}:refs/heads/{branch}",
    )
    if pushed.returncode != 0:
        raise judge(pushed.stdout, pushed.stderr, settings)
    return f"pushed {commit} to the branch '{branch}' of {settings['shown_url']}"


CREDENTIALS_REFUSED = (
    "Authentication failed",
    "could not read Username",
    "could not read Password",
    "returned error: 401",
    "returned error: 403",
    "Permission denied (publickey",
)
UNREACHABLE = (
    "Could not resolve host",
    "Failed to connect",
    "Connection refused",
    "Connection timed out",
    "Could not read from remote repository",
    "unable to access",
    "not found",
    "does not appear to be a git repository",
    "Host key verification failed",
)


def judge(stdout: str, stderr: str, settings: Settings) -> Refused:
    """Why a push failed, from git's porcelain output (a refused ref) or its words."""
    for line in stdout.splitlines():
        flag, _, rest = line.partition("\t")
        if flag != "!":
            continue
        summary = rest.partition("\t")[2]
        if "non-fast-forward" in summary or "fetch first" in summary:
            return Refused(
                "non-fast-forward",
                f"not a fast-forward: the remote branch '{settings['branch']}' has commits"
                f" the delivered {settings['commit'][:12]} does not build on (nothing is forced)",
            )
        return Refused("rejected", f"the remote refused the branch: {summary}")
    said = _last(stderr)
    if any(words in stderr for words in CREDENTIALS_REFUSED):
        secret = settings["secret"]
        whose = f"the Secret '{secret}'" if secret else "no secretRef"
        return Refused("credentials", f"credentials refused ({whose}): {said}")
    if any(words in stderr for words in UNREACHABLE):
        return Refused("unreachable", f"unreachable: {said}")
    return Refused("git", f"git push failed: {said}")


class _Git:
    """git in the scratch repository, its words relayed to the log (scrubbed)."""

    def __init__(self, repository: str, env: dict[str, str], secrets: list[str]) -> None:
        self.repository, self.env, self.secrets = repository, env, secrets

    def run(self, options: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["git", *options, f"--git-dir={self.repository}", *args],
            env=self.env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.stderr:
            print(_scrub(done.stderr.rstrip(), self.secrets), file=sys.stderr)
        return done


def _check_secret(settings: Settings) -> None:
    """Each key the URL needs is in the Secret's volume, not empty: a Secret that is
    missing mounts as an empty directory (``optional``), so it is said the same way."""
    for key in settings["needs"]:
        if not _non_empty(os.path.join(settings["credentials"], key)):
            needs = " and ".join(repr(k) for k in settings["needs"])
            raise Refused(
                "secret",
                f"the Secret '{settings['secret']}' is missing or has no key '{key}'"
                f" (or it is empty); the URL needs {needs}",
            )


def _non_empty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _copy_beneath(root: str, relative: str, target: str) -> None:
    """Copy the regular file ``root/relative`` to ``target``, opening each directory on
    the way and the file itself without following a symbolic link."""
    shown = f"the delivered bundle '{relative}'"
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise Refused("bundle", f"{shown} is not a plain path beneath the work root")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory = inner
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        source = os.open(parts[-1], flags, dir_fd=directory)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused("bundle", f"{shown} is, or is reached through, a symbolic link") from None
        raise Refused("bundle", f"{shown} cannot be opened: {error.strerror}") from None
    finally:
        os.close(directory)
    try:
        if not stat.S_ISREG(os.fstat(source).st_mode):
            raise Refused("bundle", f"{shown} is not a regular file")
        with open(source, "rb", closefd=False) as reading, open(target, "wb") as writing:
            while chunk := reading.read(1 << 20):
                writing.write(chunk)
    finally:
        os.close(source)


def _secret_values(settings: Settings) -> list[str]:
    """The Secret's values this Pod could leak in words: kept out of every message."""
    values = []
    for key in ("username", "password"):
        try:
            with open(os.path.join(settings["credentials"], key)) as value:
                values.append(value.read().strip())
        except OSError:
            continue
    return [value for value in values if len(value) >= 4]


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _last(words: str) -> str:
    """git's last line that says something (not a hint)."""
    lines = [line.strip() for line in words.splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith("hint:")]
    return (kept or lines or ["(git said nothing)"])[-1]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
