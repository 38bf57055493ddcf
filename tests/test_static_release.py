"""What a release publishes, and the one version it publishes under (ADR 0057).

Cases:
- one version: pyproject's, the chart's ``version`` and ``appVersion``, and
  ``kubeturn.__version__`` (the installed distribution's) are equal;
- README.md and the chart's README install the published chart at that version: every
  ``helm install`` of ``oci://ghcr.io/kubeturn/charts/kubeturn`` says ``--version`` and
  it is that version, and README.md has at least one; the images README.md builds
  ("Building your own images") are tagged with it, the tag the chart expects;
- CHANGELOG.md (Keep a Changelog) has an ``Unreleased`` section and, below it, one for
  that version; README.md links to it;
- release.yml runs on a ``v*`` tag and nothing else; it pushes exactly the images the
  chart installs by default (values.yaml ``image.repository`` and
  ``harnessImage.repository``), each from its target of the Dockerfile, for linux/amd64 and
  linux/arm64, tagged with the checked version; it pushes the chart to the OCI
  repository README.md installs from; every job that pushes waits for the version check,
  and the chart waits for the images; no job has a permission beyond ``contents: read``
  and ``packages: write``;
- the version check (.github/scripts/release_version.py) passes the tag ``v<version>``
  and prints the version; it refuses another version, naming each of the three places,
  and a tag without the ``v``;
- every action any workflow uses is at or above the first release that runs on node24
  (GitHub retires node20): a table here, since actionlint knows the runtimes of only
  the most used actions (not azure/setup-helm or helm/kind-action); an action missing
  from the table fails until it is added.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import kubeturn

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "kubeturn"
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
VERSION_SCRIPT = REPO / ".github" / "scripts" / "release_version.py"
CHART_REF = "oci://ghcr.io/kubeturn/charts/kubeturn"
"""Where the release pushes the chart, and where README.md installs it from."""

NODE24_FROM: dict[str, tuple[int, ...]] = {
    "actions/checkout": (5,),
    "actions/setup-python": (6,),
    "docker/setup-qemu-action": (4,),
    "docker/setup-buildx-action": (4,),
    "docker/login-action": (4,),
    "docker/build-push-action": (7,),
    "azure/setup-helm": (5,),
    "helm/kind-action": (1, 13),
}
"""The first release of each action whose ``runs.using`` is node24 (read from each
action's action.yml at its tags)."""

Object = dict[str, Any]


def version() -> str:
    project: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return project


def workflow(path: Path) -> Object:
    document: Object = yaml.safe_load(path.read_text())
    # YAML 1.1 (PyYAML) reads the key `on` as the boolean true.
    if True in document:
        document["on"] = document.pop(True)
    return document


def chart_values() -> Object:
    values: Object = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


# --------------------------------------------------------------------------- one version


def test_one_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    places = {
        "pyproject.toml": version(),
        "Chart.yaml version": chart["version"],
        "Chart.yaml appVersion": chart["appVersion"],
        "kubeturn.__version__ (the installed one: pip install -e .)": kubeturn.__version__,
    }
    assert set(places.values()) == {version()}, places


def _installed_versions(text: str) -> list[str | None]:
    """The ``--version`` of each command that names the published chart (a command runs on
    over lines ending in a backslash); None where a command gives none."""
    found: list[str | None] = []
    for match in re.finditer(re.escape(CHART_REF) + r"(?P<rest>(?:\\\n|[^\n])*)", text):
        flag = re.search(r"--version[ =](?P<version>\S+)", match["rest"])
        found.append(None if flag is None else flag["version"])
    return found


@pytest.mark.parametrize("readme", ["README.md", "charts/kubeturn/README.md", "docs/operations.md"])
def test_readme_installs_this_version(readme: str) -> None:
    found = _installed_versions((REPO / readme).read_text())
    assert found, f"{readme} never installs {CHART_REF}"
    assert set(found) == {version()}, f"{readme}: helm install {CHART_REF} --version {found}"


def test_readme_builds_images_of_this_version() -> None:
    tags = re.findall(
        r"REGISTRY/kubeturn-(?:operator|harness):(\S+)", (REPO / "README.md").read_text()
    )
    assert tags, "README.md builds no image of its own"
    assert set(tags) == {version()}, tags


def test_installed_versions_reads_continued_commands() -> None:
    text = (
        f"helm install k {CHART_REF} --namespace n \\\n  --version 1.2.3 \\\n  --set a=b\n"
        f"helm upgrade k {CHART_REF}\n"
        "--version 9.9.9\n"
    )
    assert _installed_versions(text) == ["1.2.3", None]


def test_changelog_has_this_version() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert headings[:1] == ["Unreleased"], headings
    assert version() in headings, f"CHANGELOG.md has no section ## [{version()}]"
    assert "(CHANGELOG.md)" in (REPO / "README.md").read_text()


# --------------------------------------------------------------------------- release.yml


def test_release_runs_on_version_tags_only() -> None:
    assert workflow(RELEASE)["on"] == {"push": {"tags": ["v*"]}}


def test_release_pushes_the_charts_default_images() -> None:
    values = chart_values()
    images = workflow(RELEASE)["jobs"]["images"]
    built = {entry["image"]: entry["target"] for entry in images["strategy"]["matrix"]["include"]}
    assert built == {
        values["image"]["repository"]: "operator",
        values["harnessImage"]["repository"]: "harness",
    }
    stages = re.findall(r"^FROM \S+ AS (\S+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert set(built.values()) <= set(stages)
    build = next(s for s in images["steps"] if s.get("uses", "").startswith("docker/build-push"))
    assert "file" not in build["with"]  # the repository's Dockerfile
    assert build["with"]["target"] == "${{ matrix.target }}"
    assert build["with"]["context"] == "."
    assert build["with"]["push"] is True
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["tags"] == "${{ matrix.image }}:${{ needs.version.outputs.version }}"
    # Both tags default to the chart's appVersion, which is the version the tag checked.
    assert values["image"]["tag"] == values["harnessImage"]["tag"] == ""


def test_release_pushes_the_chart_readme_installs() -> None:
    release = workflow(RELEASE)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert f"{release['env']['CHART_REPOSITORY']}/{chart['name']}" == CHART_REF
    script = "\n".join(step.get("run", "") for step in release["jobs"]["chart"]["steps"])
    assert "helm package charts/kubeturn --destination dist" in script
    assert 'helm push "dist/kubeturn-$VERSION.tgz" "$CHART_REPOSITORY"' in script


def test_release_checks_the_version_first_and_asks_for_little() -> None:
    release = workflow(RELEASE)
    jobs = release["jobs"]
    check = "\n".join(step.get("run", "") for step in jobs["version"]["steps"])
    assert 'python .github/scripts/release_version.py "$TAG" >>"$GITHUB_OUTPUT"' in check
    assert jobs["version"]["steps"][-1]["env"]["TAG"] == "${{ github.ref_name }}"
    assert jobs["images"]["needs"] == "version"
    assert set(jobs["chart"]["needs"]) == {"version", "images"}
    assert release["permissions"] == {"contents": "read"}
    for name, job in jobs.items():
        granted = job.get("permissions", release["permissions"])
        assert granted.items() <= {"contents": "read", "packages": "write"}.items(), name
    assert "cosign" not in RELEASE.read_text()


def _run_version_script(tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(VERSION_SCRIPT), tag],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_version_script_passes_the_versions_tag() -> None:
    result = _run_version_script(f"v{version()}")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"version={version()}\n", "")


def test_version_script_refuses_another_version() -> None:
    result = _run_version_script("v0.0.0-other")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"::error::the tag v0.0.0-other wants 0.0.0-other, but {place} is {version()}"
        for place in [
            "pyproject.toml project.version",
            "charts/kubeturn/Chart.yaml version",
            "charts/kubeturn/Chart.yaml appVersion",
        ]
    ]


def test_version_script_refuses_a_tag_without_v() -> None:
    result = _run_version_script(version())
    assert (result.returncode, result.stdout) == (1, "")
    assert "is not v<version>" in result.stderr


# --------------------------------------------------------------------------- every workflow


def _uses(document: Object) -> list[str]:
    return [
        step["uses"]
        for job in document["jobs"].values()
        for step in job.get("steps", [])
        if "uses" in step
    ]


@pytest.mark.parametrize("path", sorted(WORKFLOWS.glob("*.yml")), ids=lambda path: path.name)
def test_every_action_runs_on_node24(path: Path) -> None:
    old = []
    for uses in _uses(workflow(path)):
        action, _, ref = uses.partition("@")
        assert action in NODE24_FROM, f"{uses}: add its first node24 release to NODE24_FROM"
        release = tuple(int(part) for part in ref.removeprefix("v").split("."))
        if release < NODE24_FROM[action]:
            old.append(uses)
    assert not old, f"{path.name}: actions on a retired runtime: {old}"
