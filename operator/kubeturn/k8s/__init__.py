"""The operator: kopf controllers for Runs, Workspaces and AgentTurns around the
Orchestrator core. The only package that imports kopf."""
