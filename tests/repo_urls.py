"""Repo URLs with and without credentials, and the Workspace that names one, for the
tests of ADR 0033 (a repo slot's ``url`` carries no credentials) in every tier.
"""

from __future__ import annotations

from typing import Any

SECRET = "ghp-s3cr3t"

REFUSED = [
    f"https://bot:{SECRET}@git.example.invalid/team/a.git",
    f"https://{SECRET}@git.example.invalid/team/a.git",
    f"https://:{SECRET}@git.example.invalid/team/a.git",
    f"HTTP://bot:{SECRET}@git.example.invalid:8080/team/a.git",
    f"http://{SECRET}@127.0.0.1:8080/a.git",
    f"ssh://git:{SECRET}@git.example.invalid/team/a.git",
    f"ssh://:{SECRET}@git.example.invalid/team/a.git",
    f"git+ssh://git:{SECRET}@git.example.invalid/team/a.git",
    f"ssh://git@x:{SECRET}@git.example.invalid/team/a.git",
    f"git://anon:{SECRET}@git.example.invalid/team/a.git",
    f"ftp://{SECRET}@git.example.invalid/team/a.git",
]
ACCEPTED = [
    "https://git.example.invalid/team/a.git",
    "http://127.0.0.1:8080/a.git",
    "https://git.example.invalid/team/a@b.git",
    "https://git.example.invalid/a.git?ref=x@y",
    "ssh://git@git.example.invalid/team/a.git",
    "SSH://git@git.example.invalid:2222/team/a.git",
    "ssh://git@git.example.invalid",
    "git+ssh://git@git.example.invalid/team/a.git",
    "ssh://git.example.invalid/team/a.git",
    "git@github.com:org/repo.git",
    "github.com:org/repo.git",
    "file:///srv/a.git",
    "/srv/a.git",
    ".",
]


def workspace_document(url: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeturn.dev/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "shared"},
        "spec": {"repos": {"target": {"url": url, "secretRef": {"name": "creds"}}}},
    }
