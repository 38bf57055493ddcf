"""kubeturn: a Kubernetes operator that runs coding-agent workflows.

The Orchestrator core (``machine``, ``orchestrator``) is plain Python; ``k8s`` and
``local`` are the shells that run it on a cluster or on one machine.
"""
