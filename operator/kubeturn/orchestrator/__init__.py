"""The Orchestrator core: a Run's Machine driven by events, the Turns its states ask for,
their sweeps with causes, and the answers to Agents' picks.

From the top of its layers (an import contract keeps them, ADR 0104) down:

- the HTTP shells: ``api`` (the surface Harnesses call) and ``harness_client`` (the
  Orchestrator's client of each Harness);
- what drives a core: ``actor`` applies its effects through ports, one task per Run;
  ``delivery`` pushes its work; ``statuses`` projects its status and reads back the
  snapshot it resumes from; ``openapi`` documents the API;
- ``core``, the Run's decisions: every input returns effects, nothing is done here;
- its parts, all pure: ``admissions`` (a Turn's start and its admissions), ``picks`` (the
  answers to picks), ``invokes`` (``exec`` and ``deliver``), ``history`` (a Turn's one
  record), ``snapshots`` (the snapshot's versions), ``effects``, ``prompts`` (the words the
  model reads from the Orchestrator), ``signals``, ``frames`` (a Turn's prompt and cwd),
  ``bodies`` (the API's reader of JSON), ``turns`` (the ledger) and ``ids``.

Nothing here imports kopf or kubernetes.
"""
