"""The Machine: a statechart model, its loader, and a pure interpreter.

No IO, no clock, no kopf: time comes in as an argument, expressions go through an
``Evaluator`` (CEL in production), and every step returns what it did with its causes.
"""
