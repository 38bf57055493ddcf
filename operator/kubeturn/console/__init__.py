"""The read-only web console of Runs (ADR 0108)."""
