"""The console's source of local Runs: the workdirs under one directory.

``kubeturn ui`` shows every Run whose files are in a workdir under its root (by default
``.kubeturn-work/<run>``; the root may be one workdir itself): each Run as an object
shaped like the API's, its manifest's metadata and spec and its saved status
(``snapshot.json``). Its namespace is the manifest's, or ``default``. Files are read
afresh on each call: a ``kubeturn run`` in another process writes them as it goes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kubeturn.errors import CommandError
from kubeturn.local.transcripts import LocalTranscripts
from kubeturn.local.workdir import STATE, RunFiles, Workdir
from kubeturn.machine.load import DEFAULT_NAMESPACE
from kubeturn.transcripts import TranscriptSource


@dataclass(frozen=True)
class Found:
    workdir: Workdir
    files: RunFiles
    manifest: dict[str, Any]


class LocalConsole:
    def __init__(self, root: Path) -> None:
        self._root = root.expanduser().resolve()
        self._manifests: dict[Path, tuple[tuple[int, int], dict[str, Any] | None]] = {}
        """Each manifest read, by path, with its file's (mtime, size) when read: a page
        polled every 2 s reads every Run's status, not every Run's YAML."""

    async def runs(self, namespace: str | None) -> list[dict[str, Any]]:
        objects = await asyncio.to_thread(lambda: [_object(item) for item in self._scan()])
        return [o for o in objects if namespace is None or o["metadata"]["namespace"] == namespace]

    async def run(self, namespace: str, name: str) -> dict[str, Any] | None:
        item = await asyncio.to_thread(self._find, namespace, name)
        return None if item is None else await asyncio.to_thread(_object, item)

    def transcripts(self, namespace: str, name: str) -> TranscriptSource:
        """The Run's transcripts, as ``kubeturn logs`` reads them."""
        item = self._find(namespace, name)
        workdir = item.workdir if item is not None else Workdir.at(self._root / name)
        return LocalTranscripts(name, workdir.root)

    def _find(self, namespace: str, name: str) -> Found | None:
        for directory in self._workdirs():
            workdir = Workdir.at(directory)
            files = workdir.run(name)
            manifest = self._manifest(files)
            if manifest is not None and _namespace(manifest) == namespace:
                return Found(workdir, files, manifest)
        return None

    def _workdirs(self) -> list[Path]:
        """The root and the directories in it: the places a workdir may be."""
        if not self._root.is_dir():
            return []
        return [self._root, *sorted(p for p in self._root.iterdir() if p.is_dir())]

    def _scan(self) -> list[Found]:
        """Every Run under the root, by workdir then name; one whose manifest cannot be
        read is passed by (it is being written, or it is not a Run's)."""
        found = []
        for directory in self._workdirs():
            runs = directory / STATE / "runs"
            if not runs.is_dir():
                continue
            workdir = Workdir.at(directory)
            for run_dir in sorted(runs.iterdir()):
                files = workdir.run(run_dir.name)
                manifest = self._manifest(files)
                if manifest is not None:
                    found.append(Found(workdir, files, manifest))
        return found

    def _manifest(self, files: RunFiles) -> dict[str, Any] | None:
        """The Run's manifest, read again only when its file changed; None when there is
        none or it is not a YAML object."""
        try:
            stat = files.manifest.stat()
        except OSError:
            return None
        seen = (stat.st_mtime_ns, stat.st_size)
        cached = self._manifests.get(files.manifest)
        if cached is not None and cached[0] == seen:
            return cached[1]
        try:
            document = yaml.load(files.manifest.read_text(encoding="utf-8"), Loader=_LOADER)
        except (OSError, yaml.YAMLError):
            document = None
        manifest = document if isinstance(document, dict) else None
        self._manifests[files.manifest] = (seen, manifest)
        return manifest


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it: seven times faster."""


def _namespace(manifest: dict[str, Any]) -> str:
    metadata = manifest.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return str(namespace or DEFAULT_NAMESPACE)


def _object(item: Found) -> dict[str, Any]:
    """The Run as the API would hold it: its manifest, its status, when it was made."""
    manifest = item.manifest
    try:
        status = item.files.read_status() or {}
        created = item.files.manifest.stat().st_mtime
    except (CommandError, OSError):
        status, created = {}, 0.0
    return {
        "apiVersion": manifest.get("apiVersion"),
        "kind": "Run",
        "metadata": {
            "name": item.files.name,
            "namespace": _namespace(manifest),
            "creationTimestamp": datetime.fromtimestamp(created, UTC).isoformat(),
        },
        "spec": manifest.get("spec") or {},
        "status": status,
    }
