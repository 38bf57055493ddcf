"""How sandboxes' Harnesses export their spans (the chart's ``tracing``, ADR 0107): the
OTLP endpoint, the sampler, and the Secret holding the exporter's headers. Shapes only;
no IO. The operator's own exporter reads the standard ``OTEL_*`` variables the chart
sets on its container.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kubeturn.api.common import Spec

HARNESS_SERVICE = "kubeturn-harness"
"""The service a sandbox's spans are of."""


class HeadersSecret(Spec):
    """A Secret in each Workspace's namespace whose key holds ``OTEL_EXPORTER_OTLP_HEADERS``
    (``key1=value1,key2=value2``): a collector's credential. Optional in the Pod: a
    namespace without it exports without headers."""

    name: str = Field(min_length=1, max_length=253)
    key: str = Field(default="headers", min_length=1, max_length=253)


class SandboxTracing(Spec):
    """Tracing of every sandbox's Harness: on when ``endpoint`` is set."""

    endpoint: str = Field(
        default="",
        pattern=r"^(|https?://\S+)$",
        description="The collector's OTLP/HTTP base URL (``/v1/traces`` is added); empty: off.",
    )
    sampler: str | None = Field(default=None, description="``OTEL_TRACES_SAMPLER``.")
    samplerArg: str | None = Field(default=None, description="``OTEL_TRACES_SAMPLER_ARG``.")
    headersSecret: HeadersSecret | None = None

    def env(self, *, namespace: str, workspace: str) -> list[dict[str, Any]]:
        """The Harness container's ``OTEL_*`` variables; none when tracing is off."""
        if not self.endpoint:
            return []
        env: list[dict[str, Any]] = [
            {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": self.endpoint},
            {"name": "OTEL_SERVICE_NAME", "value": HARNESS_SERVICE},
            {
                "name": "OTEL_RESOURCE_ATTRIBUTES",
                "value": f"k8s.namespace.name={namespace},kubeturn.workspace={workspace}",
            },
        ]
        if self.sampler:
            env.append({"name": "OTEL_TRACES_SAMPLER", "value": self.sampler})
        if self.samplerArg:
            env.append({"name": "OTEL_TRACES_SAMPLER_ARG", "value": self.samplerArg})
        if self.headersSecret is not None:
            secret = self.headersSecret
            reference = {"name": secret.name, "key": secret.key, "optional": True}
            env.append(
                {"name": "OTEL_EXPORTER_OTLP_HEADERS", "valueFrom": {"secretKeyRef": reference}}
            )
        return env
