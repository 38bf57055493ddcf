"""A private git server for the tests: git's smart HTTP on 127.0.0.1, behind basic auth.

aiohttp checks each request's ``Authorization`` and hands an authorized one to ``git
http-backend``, git's own CGI program, for the bare repositories under one directory;
any other gets 401 and a ``WWW-Authenticate`` challenge, as a forge answers. Real git on
both ends: a clone asks without credentials, is refused, asks its credential helper and
asks again. While it serves an authorized request the server looks at every process's
command line and environment for the password (:attr:`GitServer.exposed`): a clone
running then must not hold it in either. A server can stand for a moved one, redirecting
every request elsewhere (:attr:`GitServer.moved_to`), and can serve https with a
certificate made for 127.0.0.1 (:func:`certificate`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

IDENTITY = ("-c", "user.name=kubeturn tests", "-c", "user.email=tests@kubeturn.invalid")


@dataclasses.dataclass
class GitServer:
    """The repositories under ``root``, at ``<url>/<name>.git``, for one user (with no
    ``username``: for anyone, as a public repository is)."""

    root: Path
    username: str
    password: str
    url: str = ""
    refused: int = 0
    """Requests answered 401: without credentials, or with wrong ones."""
    served: int = 0
    """Requests with the right credentials, handed to git."""
    exposed: list[str] = dataclasses.field(default_factory=list)
    """Processes seen holding the password in their command line or environment."""
    moved_to: str | None = None
    """When set, every request is redirected (302) to this base URL, as a moved forge's."""
    redirected: int = 0
    """Requests answered with that redirect."""
    pushes: int = 0
    """Pushes served (authorized ``git-receive-pack`` requests)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if self.moved_to is not None:
            self.redirected += 1
            raise web.HTTPFound(self.moved_to + request.path_qs)
        expected = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        public = not self.username
        if not public and request.headers.get("Authorization") != f"Basic {expected}":
            self.refused += 1
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        self.served += 1
        self.pushes += request.method == "POST" and request.path.endswith("/git-receive-pack")
        self.exposed += await asyncio.to_thread(_holding, self.password.encode())
        # aiohttp has undone any chunking and gzip of the body: git gets it plain.
        body = await request.read()
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.username,
            "REMOTE_ADDR": request.remote or "127.0.0.1",
            "HTTP_GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        }
        backend = await asyncio.create_subprocess_exec(
            "git",
            "http-backend",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await backend.communicate(body)
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers[key] = value.strip()
        return web.Response(status=status, headers=headers, body=payload)

    def bare(self, name: str, *commits: str) -> list[str]:
        """Serve a new bare repository ``<name>.git`` (:func:`bare`); its commits' ids."""
        return bare(self.root / f"{name}.git", *commits)


def bare(path: Path, *commits: str, branch: str = "main") -> list[str]:
    """Make the bare repository ``path`` with one commit per message on ``branch``; answer
    their ids, oldest first."""
    source = path.with_suffix(".source")
    git("init", "--quiet", f"--initial-branch={branch}", str(source))
    ids = []
    for number, message in enumerate(commits):
        (source / "README.md").write_text(f"# {path.stem} {number}\n")
        git("add", "README.md", cwd=source)
        git("commit", "--quiet", "-m", message, cwd=source)
        ids.append(git("rev-parse", "HEAD", cwd=source))
    git("clone", "--quiet", "--bare", str(source), str(path))
    return ids


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git as the tests' user; its output, stripped."""
    done = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def _holding(secret: bytes) -> list[str]:
    """The processes whose command line or environment holds ``secret``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for part in ("cmdline", "environ"):
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                if secret in Path(f"/proc/{pid}/{part}").read_bytes():
                    found.append(f"{pid} ({part})")
    return found


def certificate(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 with a new self-signed certificate (openssl), and the
    certificate's file, which a client trusts through ``GIT_SSL_CAINFO``."""
    key, cert = directory / "tls.key", directory / "tls.crt"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec", "-nodes", "-days", "1"),
            *("-pkeyopt", "ec_paramgen_curve:prime256v1", "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, cert


@contextlib.asynccontextmanager
async def serving(
    root: Path, username: str, password: str, *, tls: ssl.SSLContext | None = None
) -> AsyncIterator[GitServer]:
    """A :class:`GitServer` on a free port of 127.0.0.1 until the block ends; https with
    ``tls``."""
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    server = GitServer(root, username, password)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    scheme = "http" if tls is None else "https"
    server.url = f"{scheme}://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield server
    finally:
        await runner.cleanup()
