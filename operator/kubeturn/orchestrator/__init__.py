"""The Orchestrator core: a Run's Machine driven by events, the Turns its states ask for,
their sweeps with causes, and the answers to Agents' picks.

``core`` decides and returns effects; ``actor`` applies them through ports; ``api`` is
the HTTP surface Harnesses call. Nothing here imports kopf or kubernetes.
"""
