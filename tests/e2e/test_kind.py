"""The e2e tier: kubeturn on a real Kubernetes cluster (kind), driven by ``kind.sh``.

Cases:

- ``examples/task-with-review.yaml`` on kind: both images built from this tree and
  loaded into a fresh cluster, the chart installed, the scripted model and a git server
  running as pods; the Run reaches ``humanReview``, takes ``approve`` appended to
  ``spec.signals``, and Succeeds with four Turns, each settled ``ended`` by its own pick,
  and no AgentTurn left. ``kind.sh`` makes every assertion and prints diagnostics when
  one fails; this test asserts its exit status.

Only cluster physics is asserted here (pods, Services, finalizers, images, RBAC and
NetworkPolicies of a real API server); the Run's logic is the system tier's.

Skips, saying why, where ``kind``, a Docker engine that answers ``docker info``, kubectl
or helm is missing: it never starts dockerd and never installs anything. kubectl and helm
come from PATH (or $KUBECTL / $HELM), else from the PyPI wheel ``tests/tools.py`` reads.
``KUBETURN_E2E=0`` turns the tier off where kind exists but another job runs it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tools

KIND_SH = Path(__file__).with_name("kind.sh")

RUN_TIMEOUT_S = 40 * 60
"""The whole of kind.sh: two image builds (~3-6 min, pip downloads included), a cluster
(~1 min), the chart and the Run (~2-4 min), on a 2-core runner; 40 min is the most it
may take before it is stopped (its own waits give up sooner)."""

CLEANUP_S = 180
"""After SIGTERM, how long kind.sh may take to print diagnostics and delete the cluster."""

DOCKER_INFO_S = 20
"""``docker info`` answers in well under a second; a hung socket counts as no engine."""


def _docker_answers(docker: str) -> str | None:
    """Why the engine ``docker`` talks to cannot be used, or None when it answers."""
    try:
        result = subprocess.run(
            [docker, "info"], capture_output=True, text=True, timeout=DOCKER_INFO_S, check=False
        )
    except subprocess.TimeoutExpired:
        return f"`docker info` did not answer within {DOCKER_INFO_S} s"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        return f"`docker info` fails ({last})"
    return None


def _tool(name: str, variable: str, fallback: Path | None) -> str | None:
    """The command for ``name``: ``$VARIABLE``, else from PATH, else ``fallback``."""
    return os.environ.get(variable) or shutil.which(name) or (fallback and str(fallback))


def _environment() -> dict[str, str]:
    """kind.sh's environment; skips the test, saying why, when something is missing."""
    if os.environ.get("KUBETURN_E2E") == "0":
        pytest.skip("KUBETURN_E2E=0: the e2e tier is turned off here")
    kind = _tool("kind", "KIND", None)
    if kind is None:
        pytest.skip("kind is not installed (https://kind.sigs.k8s.io/); the e2e tier needs it")
    docker = _tool("docker", "DOCKER", None)
    if docker is None:
        pytest.skip("no docker CLI; the e2e tier builds images and runs kind with Docker")
    engine = _docker_answers(docker)
    if engine is not None:
        pytest.skip(f"no working Docker engine: {engine}; the e2e tier does not start one")
    binaries = tools.kube_binaries()
    wheel = binaries if isinstance(binaries, tools.Binaries) else None
    kubectl = _tool("kubectl", "KUBECTL", wheel and wheel.kubectl)
    helm = _tool("helm", "HELM", wheel and wheel.helm)
    if kubectl is None or helm is None:
        missing = " and ".join(n for n, p in (("kubectl", kubectl), ("helm", helm)) if p is None)
        why = binaries.reason if isinstance(binaries, tools.Unavailable) else ""
        pytest.skip(f"{missing} not found on PATH; {why}")
    return {
        **os.environ,
        "KIND": kind,
        "DOCKER": docker,
        "KUBECTL": kubectl,
        "HELM": helm,
        "PYTHON": sys.executable,
    }


@pytest.mark.timeout(RUN_TIMEOUT_S + CLEANUP_S + 60)
def test_task_with_review_succeeds_on_kind() -> None:
    env = _environment()
    # Its own session, so that a timeout stops kind.sh and everything it started (and
    # nothing else) by the process group's id; its trap then deletes the cluster.
    process = subprocess.Popen(["bash", str(KIND_SH)], env=env, start_new_session=True)
    try:
        status = process.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop(process)
        pytest.fail(f"kind.sh did not finish within {RUN_TIMEOUT_S} s; it was stopped")
    assert status == 0, f"kind.sh exited {status}; its output above says which step failed"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM kind.sh's process group, give its trap CLEANUP_S, then SIGKILL the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=CLEANUP_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
