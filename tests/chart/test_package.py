"""The chart as the release publishes it: ``helm package`` of charts/kubeturn (ADR 0057).

Cases:
- ``helm package`` writes one file, ``kubeturn-<version>.tgz``, the name ``helm push``
  gives the OCI tag from;
- ``helm show chart`` of the package says name ``kubeturn`` and version == appVersion ==
  the one version (pyproject's);
- ``helm lint --strict`` of the package passes;
- the package holds exactly the chart's files (templates, CRDs, values, schema, README):
  nothing left out, nothing picked up;
- rendered from the package, the operator runs ``ghcr.io/kubeturn/operator:<version>``
  and hands sandboxes ``ghcr.io/kubeturn/harness:<version>``: what the release pushed.
"""

from __future__ import annotations

import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import tools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "kubeturn"
HELM_SECONDS = 60.0
"""helm package, show, lint or template take well under a second; a minute means a hang."""


def _version() -> str:
    project: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return project


@pytest.fixture(scope="module")
def helm() -> str:
    binaries = tools.kube_binaries()
    if isinstance(binaries, tools.Unavailable):
        pytest.skip(f"no helm: {binaries.reason}")
    return str(binaries.helm)


def _helm(helm: str, *args: str) -> str:
    result = subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=HELM_SECONDS, check=False
    )
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def package(helm: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    destination = tmp_path_factory.mktemp("package")
    _helm(helm, "package", str(CHART), "--destination", str(destination))
    packaged = sorted(path.name for path in destination.iterdir())
    assert packaged == [f"kubeturn-{_version()}.tgz"]
    return destination / packaged[0]


def test_package_says_the_one_version(helm: str, package: Path) -> None:
    chart = yaml.safe_load(_helm(helm, "show", "chart", str(package)))
    assert (chart["name"], chart["version"], chart["appVersion"]) == (
        "kubeturn",
        _version(),
        _version(),
    )


def test_package_lints(helm: str, package: Path) -> None:
    _helm(helm, "lint", "--strict", str(package))


def test_package_holds_the_charts_files(package: Path) -> None:
    with tarfile.open(package) as archive:
        members = {member.name for member in archive.getmembers() if member.isfile()}
    files = {
        f"kubeturn/{path.relative_to(CHART).as_posix()}"
        for path in CHART.rglob("*")
        if path.is_file()
    }
    assert members == files


def test_package_installs_the_released_images(helm: str, package: Path) -> None:
    objects: list[dict[str, Any]] = [
        doc for doc in yaml.safe_load_all(_helm(helm, "template", "kt", str(package))) if doc
    ]
    deployment = next(obj for obj in objects if obj["kind"] == "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {entry["name"]: entry.get("value") for entry in container["env"]}
    assert (container["image"], env["KUBETURN_HARNESS_IMAGE"]) == (
        f"ghcr.io/kubeturn/operator:{_version()}",
        f"ghcr.io/kubeturn/harness:{_version()}",
    )
