"""``kubeturn graph``: a Run manifest's machine drawn, as a user runs it.

Cases:
- ``-o mermaid`` (the default) and ``-o dot`` print exactly what ``kubeturn.machine.graph``
  draws of the example's machine, unmarked;
- the dot of every example is a graph Graphviz reads, and ``-o svg`` is Graphviz's SVG of
  it (skipped, saying why, where Graphviz is not installed);
- without Graphviz on PATH, ``-o svg`` is one line saying to install it or to print
  mermaid or dot;
- a manifest with a problem prints the problem, naming the file, and draws nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubeturn.machine import graph
from kubeturn.machine.load import load_run_yaml
from tests.cli.support import EXAMPLES, environment, kubeturn, one_line_error

EXAMPLE = EXAMPLES / "task-with-review.yaml"
DOT = shutil.which("dot")


def test_mermaid_and_dot_are_the_machine_drawn() -> None:
    chart = load_run_yaml(EXAMPLE.read_text(), str(EXAMPLE)).chart
    drawn = kubeturn("graph", EXAMPLE.name, cwd=EXAMPLES)
    assert (drawn.returncode, drawn.stdout, drawn.stderr) == (0, graph.mermaid(chart), "")
    as_dot = kubeturn("graph", EXAMPLE.name, "-o", "dot", cwd=EXAMPLES)
    expected = graph.dot(chart, name="task-with-review")
    assert (as_dot.returncode, as_dot.stdout, as_dot.stderr) == (0, expected, "")


@pytest.mark.skipif(
    DOT is None, reason="Graphviz's dot is not installed (apt-get install graphviz)"
)
def test_graphviz_reads_every_example_and_svg_is_its_drawing() -> None:
    assert DOT is not None
    for example in sorted(EXAMPLES.glob("*.yaml")):
        text = example.read_text()
        if ".script." in example.name or "kind: Run\n" not in text:
            continue
        chart = load_run_yaml(text, str(example)).chart
        checked = subprocess.run(
            [DOT, "-Tcanon"], input=graph.dot(chart), capture_output=True, text=True, check=False
        )
        assert (checked.returncode, checked.stderr) == (0, ""), example.name
    svg = kubeturn("graph", EXAMPLE.name, "-o", "svg", cwd=EXAMPLES)
    assert svg.returncode == 0, svg.stderr
    assert svg.stdout.lstrip().startswith("<?xml")
    assert "<title>s3</title>" in svg.stdout
    assert ">humanReview</text>" in svg.stdout


def test_svg_without_graphviz_says_what_to_do(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    result = subprocess.run(
        [sys.executable, "-m", "kubeturn", "graph", EXAMPLE.name, "-o", "svg"],
        cwd=EXAMPLES,
        env={**environment(), "PATH": str(bare)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert one_line_error(result) == (
        "kubeturn: -o svg needs Graphviz's dot on PATH: install Graphviz (e.g. apt-get "
        "install graphviz), or print -o mermaid or -o dot and draw it elsewhere"
    )
    assert result.stdout == ""


def test_a_manifest_with_a_problem_is_not_drawn(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "apiVersion: kubeturn.dev/v1alpha1\nkind: Run\nmetadata: {name: broken}\n"
        "spec:\n  agents: {}\n  machine:\n    initial: a\n    states:\n"
        "      a: {on: {go: nowhere}}\n"
    )
    result = kubeturn("graph", broken, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"{broken}: spec.machine.states.a.on.go")
    assert "nowhere" in result.stderr
    assert os.path.exists(broken)
