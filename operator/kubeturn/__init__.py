"""kubeturn: a Kubernetes operator that runs coding-agent workflows.

The Orchestrator core (``machine``, ``orchestrator``) is plain Python; ``k8s`` and
``local`` are the shells that run it on a cluster or on one machine.
"""

from importlib.metadata import version

__version__ = version("kubeturn")
"""The installed distribution's version: pyproject's, which the chart's version and
appVersion and the released images' tags equal
(docs/decisions/0057-one-version-released-from-a-tag.md)."""
