"""``kubeturn ui`` as a user runs it (the browser tier drives its pages).

Cases:
- it listens on 127.0.0.1 on a free port with ``--port 0``, prints its URL, serves the
  Runs list there (none yet in an empty directory) and redirects its root to it; Ctrl-C
  stops it, exit 130 as every interrupted command;
- a port already taken is one line saying so, exit 1.
"""

from __future__ import annotations

import re
import signal
import socket
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.cli.support import Background, kubeturn, one_line_error


def test_it_serves_on_loopback_and_prints_its_url(
    tmp_path: Path, background: Callable[..., Background]
) -> None:
    served = background("ui", "--port", "0", "--workdir", tmp_path, cwd=tmp_path)
    line = served.wait_line(r"kubeturn ui: serving the Runs under ")
    found = re.fullmatch(
        rf"kubeturn ui: serving the Runs under {re.escape(str(tmp_path))} at "
        r"(http://127\.0\.0\.1:\d+)/runs \(Ctrl-C stops it\)",
        line,
    )
    assert found, line
    with urllib.request.urlopen(found.group(1) + "/", timeout=10) as response:
        assert response.url == found.group(1) + "/runs"
        assert '<p class="empty">No Runs.</p>' in response.read().decode()
    served.signal(signal.SIGINT)
    code, _, stderr = served.wait()
    assert (code, stderr) == (130, "")


def test_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = kubeturn("ui", "--port", str(port), "--workdir", tmp_path, cwd=tmp_path)
    assert one_line_error(result).startswith(f"kubeturn: cannot listen on 127.0.0.1:{port}: ")
