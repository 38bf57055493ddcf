"""Requests too malformed for aiohttp to parse are the caller's fault: logged at debug.

aiohttp answers a request it cannot parse (bytes that are not UTF-8 in the request line,
a broken header) with a 400 itself, before any middleware runs, and logs the parse error
with its traceback at ERROR on ``aiohttp.server``: anyone who can reach the port could
flood the log without a token. ``MalformedRequests`` drops those records from that logger
and says the same in one line at debug; every other record passes. Both HTTP APIs (the
Harness's and the Orchestrator's) install it.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

SERVER_LOGGER = "aiohttp.server"
log = logging.getLogger(__name__)


class MalformedRequests(logging.Filter):
    """Drops aiohttp's record of a request it could not parse (a 4xx it answered)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError) and 400 <= (error.code or 0) < 500:
            log.debug("answered %d to a malformed request: %s", error.code, error.message)
            return False
        return True


def install() -> None:
    """Filter ``aiohttp.server``'s records (once per process)."""
    server = logging.getLogger(SERVER_LOGGER)
    if not any(isinstance(f, MalformedRequests) for f in server.filters):
        server.addFilter(MalformedRequests())
