"""The kubeturn Harness: the server inside every sandbox pod that runs Agent Turns.

It admits Submissions, runs each one's model tool loop with Working tools rooted at the
Frame's ``cwd`` and Menu tools whose calls are picks delivered to the Orchestrator, and
settles every Submission exactly once. It never judges how a Turn ended: the sweep's
body does (docs/turn-semantics.md §2). It imports neither kopf nor kubernetes nor ``kubeturn``.

- The server: ``__main__`` and ``settings`` start it; ``app`` and ``openapi`` are its HTTP
  surface, read through ``bodies`` and shaped by ``wire`` (``malformed``: requests too
  broken to parse); ``service`` holds its
  conversations (``conversations``), their logs (``store``, read by ``history``) and
  which stay in memory (``eviction``).
- A Submission's run: ``tool_loop`` asks a model (the port in ``models``; adapters
  ``openai_models`` and ``anthropic_models`` with ``anthropic_prompt``, clients from
  ``clients``, providers from ``providers``, retried by ``retries``), runs Working tools
  (``tools``, in the ``sandbox`` toolbox) and delivers picks (``orchestrator``, the
  Orchestrator API's client), watched by ``runaway``.
- What a model reads: ``projection`` (which recorded messages a prompt carries),
  ``briefing``, ``receipts``; how a sweep settles: ``settlements``.
- ``errors`` (the error tree), ``metrics``, ``clock``; ``scripted`` is the scripted model.
"""
