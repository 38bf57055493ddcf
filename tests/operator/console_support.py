"""The console served the way a cluster reaches it (ADR 0110): the chart's serving
certificate and APIService in the emulator, the console's Service mapped to a port of
127.0.0.1 for the operator to serve on, and users of the Run's namespace whose RBAC a
scenario chooses. Shared by the tier's console scenarios and by bench/console_cluster.py.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import sys
from pathlib import Path
from typing import Any

from tests.cli.support import environment
from tests.operator import emulator
from tests.operator import installation as installation_
from tests.operator.operator_support import NAMESPACE, free_port

Body = dict[str, Any]
GROUP_VERSION = "console.kubeturn.dev/v1alpha1"
PREFIX = f"/apis/{GROUP_VERSION}"
SERVICE = f"{installation_.RELEASE}-console"
CONSOLE_VIEW = f"{installation_.RELEASE}-{installation_.RELEASE_NAMESPACE}-console-view"


def rendered(objects: list[Body], kind: str) -> Body:
    (found,) = [body for body in objects if body.get("kind") == kind]
    return found


@dataclasses.dataclass(frozen=True)
class ConsolePlace:
    """Where the operator serves the console: its settings' changes and the CA of its
    serving certificate (the APIService's caBundle)."""

    port: int
    certificate: Path
    key: Path
    ca: bytes

    @property
    def settings(self) -> dict[str, Any]:
        """The operator settings that serve the console here."""
        return {
            "console_port": self.port,
            "console_certificate": str(self.certificate),
            "console_key": str(self.key),
        }


def place_console(
    k8s: emulator.KubernetesApi, objects: list[Body], operator_namespace: str, directory: Path
) -> ConsolePlace:
    """Store the chart's APIService (rendered in ``objects``), write its serving
    certificate and key under ``directory``, and map the console's Service to a free
    port: the API server proxies ``console.kubeturn.dev`` there."""
    secret, apiservice = rendered(objects, "Secret"), rendered(objects, "APIService")
    directory.mkdir(parents=True, exist_ok=True)
    files = {}
    for key in ("tls.crt", "tls.key"):
        files[key] = directory / key
        files[key].write_bytes(base64.b64decode(secret["data"][key]))
    k8s.create_object("apiregistration.k8s.io/v1/apiservices", apiservice)
    port = free_port()
    k8s.aggregator.endpoints[(operator_namespace, SERVICE)] = port
    return ConsolePlace(
        port, files["tls.crt"], files["tls.key"], base64.b64decode(apiservice["spec"]["caBundle"])
    )


def user(
    k8s: emulator.KubernetesApi,
    name: str,
    *,
    console: bool,
    runs: bool,
    namespace: str = NAMESPACE,
) -> str:
    """A ServiceAccount in ``namespace``, bound to the chart's console ClusterRole and to
    ``get``/``list`` of ``runs.kubeturn.dev`` as asked: its token."""
    k8s.create_object("v1/serviceaccounts", {"metadata": {"name": name, "namespace": namespace}})
    group = "rbac.authorization.k8s.io"
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    meta = {"name": name, "namespace": namespace}
    roles = []
    if runs:
        rules = [{"apiGroups": ["kubeturn.dev"], "resources": ["runs"], "verbs": ["get", "list"]}]
        k8s.create_object(f"{group}/v1/roles", {"metadata": meta, "rules": rules})
        roles.append(("Role", name))
    if console:
        roles.append(("ClusterRole", CONSOLE_VIEW))
    for kind, role in roles:
        binding = {
            "metadata": {**meta, "name": f"{name}-{kind.lower()}"},
            "roleRef": {"apiGroup": group, "kind": kind, "name": role},
            "subjects": subjects,
        }
        k8s.create_object(f"{group}/v1/rolebindings", binding)
    return k8s.issue_token(namespace, name)


async def kube_logs(config: Path, *args: str) -> asyncio.subprocess.Process:
    """``kubeturn logs ... --kube`` started as a user runs it, with the kubeconfig
    ``config``, its output piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubeturn",
        "logs",
        *args,
        "--kube",
        "--kubeconfig",
        str(config),
        env=environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
