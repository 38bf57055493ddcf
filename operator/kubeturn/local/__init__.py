"""The local runner: a Run on one machine, through the same core as on a cluster.

``runner`` composes it (clones, a Harness subprocess, the Orchestrator API in this
process, a file snapshot); ``workdir`` holds its files; ``repos`` clones the repo slots;
``children`` starts and stops the child processes (through ``launch``); ``turns`` is the
Harness port with the tool-call counts the live table shows; ``view`` renders the table,
the summary and the history; ``control`` is ``kubeturn send|cancel|turns|status`` for a
local Run. Never imports kopf or kubernetes: ``kubeturn run`` needs no cluster.
"""
