"""Benchmark of the web console's cost: ``kubeturn ui`` serving 50 live Runs.

It runs ``examples/task-with-review.yaml`` on the scripted model until it waits at
``humanReview`` (four Turns, a trail of four moves), copies that Run's files into
``--runs`` workdirs (each a Run of its own name, ``Running``), and starts ``kubeturn ui``
over them as a process of its own on 127.0.0.1. Then it measures that process (CPU from
``/proc``, user + system; RSS from ``/proc/<pid>/status``):

1. the Runs list page, ``--views`` times: CPU per view;
2. every Run's page once, then ``--views`` more in turn: CPU per view (the first view of
   a Run compiles its machine; later ones reuse it);
3. a Run page's live part asked with the version it holds (what an open page does every
   2 s while nothing changed: answered ``204``), ``--views`` times: CPU per poll;
4. all the Runs' pages open at once, each polling every 2 s, for ``--seconds``: the
   share of one core the console takes;
5. its RSS after all this.

Run: ``python bench/console.py [--runs 50] [--views 200] [--seconds 20] [--json]``.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cli.support import EXAMPLES, Background, git_repo, wait_status  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
NAME = "task-with-review"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    found = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(found.group(1)) / 1024 if found else 0.0


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def unchanged(page: str) -> str:
    """The URL an open ``page`` polls while nothing changed: its part, with its version."""
    _, text = get(page)
    version = re.search(r'data-version="([0-9a-f]+)"', text)
    assert version is not None, page
    return f"{page}?part=1&v={version.group(1)}"


def live_runs(project: Path, count: int) -> Path:
    """``count`` workdirs, each a copy of one Run waiting at humanReview."""
    for name in (f"{NAME}.yaml", f"{NAME}.script.yaml"):
        shutil.copy(EXAMPLES / name, project / name)
    running = Background.start(
        "run", f"{NAME}.yaml", "--model", f"scripted:{NAME}.script.yaml", cwd=project
    )
    source = project / ".kubeturn-work" / NAME
    try:
        wait_status(source, NAME, lambda s: s.get("turnCount") == 4, "the Run to wait")
        files = source / ".kubeturn" / "runs" / NAME
        manifest = (files / "run.yaml").read_text()
        snapshot = (files / "snapshot.json").read_text()
    finally:
        running.signal(signal.SIGKILL)
        running.stop()
    root = project / "many"
    for n in range(count):
        name = f"run-{n:03d}"
        target = root / name / ".kubeturn" / "runs" / name
        target.mkdir(parents=True)
        (target / "run.yaml").write_text(manifest.replace(f"name: {NAME}", f"name: {name}", 1))
        (target / "snapshot.json").write_text(snapshot)
    return root


def measure(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    served = Background.start("ui", "--port", "0", "--workdir", root, cwd=root)
    try:
        line = served.wait_line(r"at http://127\.0\.0\.1:\d+/runs")
        found = re.search(r"(http://\S+)/runs", line)
        assert found is not None
        base, pid = found.group(1), served.process.pid
        rss_start = rss_mib(pid)
        names = [f"run-{n:03d}" for n in range(args.runs)]

        def per_view(urls: list[str]) -> float:
            before = cpu_seconds(pid)
            for url in urls:
                status, _ = get(url)
                assert status in (200, 204), (url, status)
            return (cpu_seconds(pid) - before) / len(urls) * 1000

        list_ms = per_view([f"{base}/runs"] * args.views)
        pages = [f"{base}/namespaces/default/runs/{name}" for name in names]
        first_ms = per_view(pages)
        run_ms = per_view([pages[i % len(pages)] for i in range(args.views)])
        polls = [unchanged(page) for page in pages]
        poll_ms = per_view([polls[0]] * args.views)
        before, started = cpu_seconds(pid), time.monotonic()
        asked = 0
        while time.monotonic() - started < args.seconds:
            tick = time.monotonic()
            for url in polls:
                get(url)
                asked += 1
            time.sleep(max(0.0, 2.0 - (time.monotonic() - tick)))
        elapsed = time.monotonic() - started
        share = (cpu_seconds(pid) - before) / elapsed * 100
        return {
            "runs": args.runs,
            "load": os.getloadavg()[0],
            "runs_list_cpu_ms": round(list_ms, 2),
            "run_page_first_cpu_ms": round(first_ms, 2),
            "run_page_cpu_ms": round(run_ms, 2),
            "unchanged_poll_cpu_ms": round(poll_ms, 2),
            "open_pages_core_percent": round(share, 1),
            "open_pages_polls": asked,
            "rss_start_mib": round(rss_start, 1),
            "rss_end_mib": round(rss_mib(pid), 1),
        }
    finally:
        served.signal(signal.SIGINT)
        served.wait()
        served.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--views", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubeturn-console-bench-") as temp:
        project = git_repo(Path(temp) / "project")
        figures = measure(live_runs(project, args.runs), args)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:28} {value}")


if __name__ == "__main__":
    main()
