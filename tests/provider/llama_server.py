"""llama.cpp's HTTP server (the ``xllamacpp`` wheel) serving one model file on 127.0.0.1,
as a process of its own, so a hung server is killed rather than hanging the tests.

``xllamacpp.Server`` runs llama.cpp's own server (``tools/server``): it listens on HTTP
itself, with every route of ``llama-server`` (``/health``, ``/v1/chat/completions``,
``/v1/messages``, ``/tokenize``, ...); no wrapper is needed. Run as
``python -m tests.provider.llama_server MODEL``, it prints one line,
``llama.cpp listening on http://127.0.0.1:PORT``, and serves until it is terminated or
its standard input closes (so it dies with the test process that started it).

What the server is told, and why:
- ``port 0``: the kernel picks a free port; the line above says which;
- temperature 0 (greedy) and a fixed seed: an answer is a function of the request;
- ``n_predict`` 256: an answer that never ends (a model that should not exist) is cut
  with ``finish_reason: length`` rather than filling the context;
- one slot, one thread for each of prompt and generation: CI has two cores, and the
  tier's requests are sequential;
- no warm-up run, no fitting of parameters to memory: both cost start-up time a tiny
  model does not need.
"""

from __future__ import annotations

import sys

CONTEXT = 8192
"""Tokens per request: the Harness's system prompt and tool definitions take ~2000."""
MAX_ANSWER = 256
SEED = 1
LISTENING = "llama.cpp listening on "


def main(model: str) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = model
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.n_ctx = CONTEXT
    params.n_parallel = 1
    params.n_predict = MAX_ANSWER
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.sampling.temp = 0.0
    params.sampling.seed = SEED
    params.warmup = False
    params.fit_params = False
    params.verbosity = 1
    server = xllamacpp.Server(params)
    print(LISTENING + server.listening_address, flush=True)
    sys.stdin.read()  # until the parent closes it, or dies


if __name__ == "__main__":
    main(sys.argv[1])
