"""The search tools ``grep`` (ripgrep and the pure-Python fallback) and ``glob``, and
the glob dialect they share.

Cases:
- grep, run once with ripgrep and once with the fallback, expecting the very same
  result text: ``file:line:text`` in path order, hidden files searched, .git (directory
  and worktree file), binary files, symbolic links and a denied directory skipped;
  names with ':' and lines with CRLF or bad UTF-8; ignoreCase; globs by name, anchored,
  with '**', braces and '!' exclusion; a sub-directory or a single file as path,
  relative or absolute; "No matches." (not an error); the 200-match cap and the output
  byte limit with their note; long lines cut; a timeout gives a failed, partial result;
- grep errors: an invalid regex, a missing path, a binary file as path, a denied path;
- glob: '*' stays in the root, '**' crosses directories, directories end in '/', a
  trailing '/' lists directories only, '?', classes and braces; .git and denied paths
  skipped, symbolic links listed but not followed; path relative to cwd; the 500-path cap
  and the byte limit; no match is not an error; an absolute pattern, a file as path and
  a denied path are errors; a timeout gives a failed result;
- compile_glob on its own: a table of patterns and paths.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kubeturn_harness.tools import ToolContext, ToolResult, run_tool, scrubbed_environment
from kubeturn_harness.tools.patterns import compile_glob


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A small tree with every kind of entry the searches treat specially."""
    work = tmp_path / "work"
    files = {
        ".git/config": b"needle in git\n",
        ".hidden/h.txt": b"needle hidden\n",
        "a.txt": b"needle one\nnothing\nNEEDLE upper\n",
        "a-b.txt": b"needle dash\n",
        "a/z.txt": b"needle in a\n",
        "bin.dat": b"\0needle\n",
        "data/token": b"needle secret\n",
        "notes.md": b"needle md\n",
        "src/b.py": b"def needle():\n    return 1\n",
        "src/sub/c.py": b"x = 1\nneedle = 2\n",
        "src/sub/.git": b"gitdir: needle\n",
        "x:y.txt": b"needle\r\nlatin \xe9 needle\n",
    }
    for name, content in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(content)
    (work / "link.py").symlink_to(work / "src/b.py")
    (work / "linkdir").symlink_to(work / "src")
    return work


@pytest.fixture
def ctx(work: Path) -> ToolContext:
    return ToolContext(
        cwd=work, env=scrubbed_environment(os.environ, home=str(work)), denied=(work / "data",)
    )


@pytest.fixture(params=["ripgrep", "python"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a grep test with ripgrep, then with the fallback (``rg`` hidden from it)."""
    if request.param == "ripgrep" and shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not installed; `apt-get install ripgrep` to test it")
    if request.param == "python":
        monkeypatch.setattr(shutil, "which", lambda name: None)
    return str(request.param)


EVERY_NEEDLE = [
    ".hidden/h.txt:1:needle hidden",
    "a/z.txt:1:needle in a",
    "a-b.txt:1:needle dash",
    "a.txt:1:needle one",
    "notes.md:1:needle md",
    "src/b.py:1:def needle():",
    "src/sub/c.py:2:needle = 2",
    "x:y.txt:1:needle",
    "x:y.txt:2:latin \ufffd needle",
]


@pytest.mark.usefixtures("engine")
class TestGrep:
    async def test_the_tree(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "needle"}, ctx)
        assert result == ToolResult("\n".join(EVERY_NEEDLE))

    async def test_ignore_case(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "needle upper", "ignoreCase": True}, ctx)
        assert result == ToolResult("a.txt:3:NEEDLE upper")

    @pytest.mark.parametrize(
        ("glob", "files"),
        [
            ("*.py", ["src/b.py", "src/sub/c.py"]),
            ("src/**/*.py", ["src/b.py", "src/sub/c.py"]),
            ("/src/*.py", ["src/b.py"]),
            ("*.{md,txt}", [".hidden/h.txt", "a/z.txt", "a-b.txt", "a.txt", "notes.md", "x:y.txt"]),
            ("!src", [".hidden/h.txt", "a/z.txt", "a-b.txt", "a.txt", "notes.md", "x:y.txt"]),
            ("!*.txt", ["notes.md", "src/b.py", "src/sub/c.py"]),
            ("a?b.txt", ["a-b.txt"]),
        ],
    )
    async def test_globs(self, ctx: ToolContext, glob: str, files: list[str]) -> None:
        result = await run_tool("grep", {"pattern": "needle", "glob": glob}, ctx)
        assert sorted({line.split(":")[0] for line in result.text.splitlines()}) == sorted(
            file.split(":")[0] for file in files
        )

    async def test_an_anchored_glob_that_matches_nothing(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "needle", "glob": "sub/*.py"}, ctx)
        assert result == ToolResult("No matches.")

    async def test_no_match_is_no_error(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "haystack"}, ctx)
        assert result == ToolResult("No matches.")

    @pytest.mark.parametrize("path", ["src", "{work}/src", "linkdir"])
    async def test_a_directory(self, ctx: ToolContext, work: Path, path: str) -> None:
        arguments = {"pattern": "needle", "path": path.replace("{work}", str(work))}
        result = await run_tool("grep", arguments, ctx)
        assert result == ToolResult("b.py:1:def needle():\nsub/c.py:2:needle = 2")

    async def test_a_file(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "needle", "path": "src/sub/c.py"}, ctx)
        assert result == ToolResult("c.py:2:needle = 2")

    async def test_the_match_cap(self, ctx: ToolContext, work: Path) -> None:
        (work / "many").mkdir()
        (work / "many/m.txt").write_text("needle\n" * 250)
        result = await run_tool("grep", {"pattern": "needle", "path": "many"}, ctx)
        lines = result.text.splitlines()
        assert lines[:200] == [f"m.txt:{n}:needle" for n in range(1, 201)]
        assert lines[200:] == [
            "[Showing the first 200 matches; there are more. "
            "Narrow the pattern, path or glob to see the rest.]"
        ]
        assert not result.is_error

    async def test_the_output_limit(self, work: Path) -> None:
        ctx = ToolContext(cwd=work, env=dict(os.environ), output_limit_bytes=80)
        result = await run_tool("grep", {"pattern": "needle", "path": "a"}, ctx)
        assert result == ToolResult("z.txt:1:needle in a")
        result = await run_tool("grep", {"pattern": "needle", "glob": "*.txt"}, ctx)
        assert result.text.splitlines() == [
            ".hidden/h.txt:1:needle hidden",
            "a/z.txt:1:needle in a",
            "a-b.txt:1:needle dash",
            "[Showing the first 3 matches; there are more. "
            "Narrow the pattern, path or glob to see the rest.]",
        ]

    async def test_long_lines_are_cut(self, ctx: ToolContext, work: Path) -> None:
        (work / "min").mkdir()
        (work / "min/app.js").write_text("needle" + "x" * 20_000 + "\n")
        result = await run_tool("grep", {"pattern": "needle", "path": "min"}, ctx)
        assert result == ToolResult(
            "app.js:1:needle" + "x" * 1994 + " [… line cut at 2000 characters]"
        )

    async def test_timeout(self, work: Path) -> None:
        ctx = ToolContext(cwd=work, env=dict(os.environ), bash_timeout_s=0)
        result = await run_tool("grep", {"pattern": "needle"}, ctx)
        assert result.is_error
        assert "[The search timed out after 0 s; the matches are partial.]" in result.text

    async def test_invalid_regex(self, ctx: ToolContext) -> None:
        result = await run_tool("grep", {"pattern": "(unclosed"}, ctx)
        assert result.is_error
        assert "unclosed" in result.text.lower() or "unterminated" in result.text.lower()

    async def test_missing_path(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("grep", {"pattern": "needle", "path": "nope"}, ctx)
        assert result == ToolResult(f"No such file or directory: {work / 'nope'}", True)

    async def test_binary_file(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("grep", {"pattern": "needle", "path": "bin.dat"}, ctx)
        assert result == ToolResult(
            f"{work / 'bin.dat'} is a binary file; grep searches text.", is_error=True
        )

    @pytest.mark.parametrize("path", ["data", "data/token"])
    async def test_denied(self, ctx: ToolContext, work: Path, path: str) -> None:
        result = await run_tool("grep", {"pattern": "needle", "path": path}, ctx)
        assert result.is_error
        assert result.text.startswith(f"Refused: {work / path} is inside {work / 'data'}")


class TestGlob:
    @pytest.mark.parametrize(
        ("pattern", "paths"),
        [
            ("**/*.py", ["link.py", "src/b.py", "src/sub/c.py"]),
            ("*.py", ["link.py"]),
            (
                "*",
                [
                    ".hidden/",
                    "a-b.txt",
                    "a.txt",
                    "a/",
                    "bin.dat",
                    "link.py",
                    "linkdir",
                    "notes.md",
                    "src/",
                    "x:y.txt",
                ],
            ),
            ("**/", [".hidden/", "a/", "src/", "src/sub/"]),
            ("src/*/", ["src/sub/"]),
            ("**/sub/**", ["src/sub/c.py"]),
            ("./src/*.py", ["src/b.py"]),
            ("a?b.txt", ["a-b.txt"]),
            ("[ab].txt", ["a.txt"]),
            ("*.{md,txt}", ["a-b.txt", "a.txt", "notes.md", "x:y.txt"]),
        ],
    )
    async def test_patterns(self, ctx: ToolContext, pattern: str, paths: list[str]) -> None:
        result = await run_tool("glob", {"pattern": pattern}, ctx)
        assert result == ToolResult("\n".join(paths))

    async def test_under_a_path(self, ctx: ToolContext) -> None:
        result = await run_tool("glob", {"pattern": "**", "path": "src"}, ctx)
        assert result == ToolResult("b.py\nsub/\nsub/c.py")

    async def test_no_match_is_no_error(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("glob", {"pattern": "**/*.rs"}, ctx)
        assert result == ToolResult(f"No paths under {work} match '**/*.rs'.")

    async def test_the_path_cap(self, ctx: ToolContext, work: Path) -> None:
        (work / "many").mkdir()
        for n in range(510):
            (work / f"many/f{n:03}.txt").touch()
        result = await run_tool("glob", {"pattern": "*", "path": "many"}, ctx)
        lines = result.text.splitlines()
        assert lines[:500] == [f"f{n:03}.txt" for n in range(500)]
        assert lines[500:] == [
            "[Showing the first 500 of 510 paths; narrow the pattern or path to see the rest.]"
        ]

    async def test_the_output_limit(self, work: Path) -> None:
        ctx = ToolContext(cwd=work, env={}, output_limit_bytes=20)
        result = await run_tool("glob", {"pattern": "**/*.py"}, ctx)
        assert result == ToolResult(
            "link.py\nsrc/b.py\n"
            "[Showing the first 2 of 3 paths; narrow the pattern or path to see the rest.]"
        )

    async def test_timeout(self, work: Path) -> None:
        ctx = ToolContext(cwd=work, env={}, bash_timeout_s=0)
        result = await run_tool("glob", {"pattern": "**"}, ctx)
        assert result == ToolResult(
            "[The search timed out after 0 s; the paths are partial.]", is_error=True
        )

    async def test_an_absolute_pattern(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("glob", {"pattern": f"{work}/*.py"}, ctx)
        assert result.is_error
        assert "put the directory in path" in result.text

    async def test_a_file_is_not_a_directory(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("glob", {"pattern": "*", "path": "a.txt"}, ctx)
        assert result == ToolResult(
            f"{work / 'a.txt'} is not a directory; glob searches under a directory.", True
        )

    async def test_denied(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("glob", {"pattern": "*", "path": "data"}, ctx)
        assert result.is_error
        assert result.text.startswith(f"Refused: {work / 'data'}")


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**", "src/x/y", True),
        ("src/**", "src", False),
        ("**", "any/thing", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[a-c]x", "bx", True),
        ("[!a-c]x", "bx", False),
        ("[!a-c]x", "dx", True),
        ("[]]x", "]x", True),
        ("*.{ts,tsx}", "app.tsx", True),
        ("*.{ts,tsx}", "app.js", False),
        ("\\*.py", "*.py", True),
        ("\\*.py", "a.py", False),
        ("a+b(c).txt", "a+b(c).txt", True),
        ("[unclosed", "[unclosed", True),
        ("{unclosed", "{unclosed", True),
        ("a**b", "axxb", True),
        ("a**b", "ax/xb", False),
    ],
)
def test_compile_glob(pattern: str, path: str, matches: bool) -> None:
    assert (compile_glob(pattern).match(path) is not None) is matches
