"""The operator: kopf controllers for Runs, Workspaces and AgentTurns around the
Orchestrator core. The only package that imports kopf or kubernetes.

- ``operator`` is the process: kopf's settings and handlers, the Orchestrator API, the
  metrics port, one active replica (``leader``); ``hub`` is what its controllers share.
- The controllers: ``runs`` (an actor per Run, its state in ``Run.status``, written by
  ``statuses`` through ``patches``), ``workspaces`` (tokens, providers, volume, the
  sandbox Pod whose state ``sandboxes`` judges), ``agentturns`` (the sweep finalizer) and
  ``turns`` (the Orchestrator's Turn port as AgentTurn objects).
- What they build and say: ``objects`` and ``names`` (the objects and names it makes),
  ``clones``, ``egress`` and ``apiserver`` (a sandbox's init containers and network),
  ``deliveries`` and ``push_program`` (pushing a Run's branch), ``conditions``, ``events``
  and ``metrics``.
- kopf and the API server: ``kube`` (the client facade), ``diffbase`` (what kopf keeps of
  an object), ``generations`` and ``pauses`` (a daemon's waits), ``harnesses`` (finding
  a Workspace's Harness client), ``control`` (the CLI's ``--kube`` commands).
"""
