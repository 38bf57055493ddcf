"""The kubeturn Harness: the server inside every sandbox pod that runs Agent Turns.

It admits Submissions, runs each one's model tool loop with Working tools rooted at the
Frame's ``cwd`` and Menu tools whose calls are picks delivered to the Orchestrator, and
settles every Submission exactly once. It never judges how a Turn ended: the sweep's
body does (docs/turn-semantics.md §2). It imports neither kopf nor kubernetes nor ``kubeturn``.
"""
