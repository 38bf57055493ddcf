"""The file tools ``read``, ``write`` and ``edit``, and the path rules all tools share.

Cases:
- read: numbered lines; offset and limit, with the note saying where to read on; the
  output byte limit cuts with the same note; a long line is cut with a marker; CRLF is
  not shown; an empty file; an offset past the end; a directory (suggesting glob); a
  binary file; a missing file;
- write: creates parent directories, overwrites, counts UTF-8 bytes; a directory as
  path is an error;
- edit: one exact occurrence is replaced (short confirmation with the line); none →
  "oldText not found in <path>"; several → the count and "add surrounding context";
  a CRLF hint; a file that is not UTF-8; a missing file;
- paths: relative paths resolve against cwd, absolute ones are taken as given;
  denied paths are refused for read, write and edit, also through a symbolic link and
  through ``..``; a NUL in a path is refused;
- only regular files: a FIFO (read, write, edit) and a device are refused at once,
  naming what the path is, instead of holding the call for ever.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubeturn_harness.tools import ToolContext, ToolResult, run_tool, scrubbed_environment


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """The Harness's data dir: denied to the tools."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "token").write_text("s3cret\n")
    return tmp_path / "data"


@pytest.fixture
def ctx(work: Path, data: Path) -> ToolContext:
    return ToolContext(cwd=work, env=scrubbed_environment({}, home=str(work)), denied=(data,))


class TestRead:
    async def test_numbered_lines(self, ctx: ToolContext, work: Path) -> None:
        (work / "a.txt").write_text("one\ntwo\nthree\n")
        result = await run_tool("read", {"path": "a.txt"}, ctx)
        assert result == ToolResult("     1\tone\n     2\ttwo\n     3\tthree")

    async def test_offset_and_limit(self, ctx: ToolContext, work: Path) -> None:
        (work / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
        result = await run_tool("read", {"path": "a.txt", "offset": 3, "limit": 2}, ctx)
        assert result == ToolResult(
            "     3\tline 3\n     4\tline 4\n"
            "[Lines 3-4 shown; the file goes on. Read on with offset=5.]"
        )

    async def test_limit_reaching_the_end_says_nothing_more(
        self, ctx: ToolContext, work: Path
    ) -> None:
        (work / "a.txt").write_text("a\nb")
        result = await run_tool("read", {"path": "a.txt", "offset": 2, "limit": 1}, ctx)
        assert result == ToolResult("     2\tb")

    async def test_output_limit(self, work: Path, data: Path) -> None:
        ctx = ToolContext(cwd=work, env={}, denied=(data,), output_limit_bytes=100)
        (work / "a.txt").write_text("x" * 30 + "\n" + "y" * 30 + "\n" + "z" * 30 + "\n")
        result = await run_tool("read", {"path": "a.txt"}, ctx)
        assert result.text.splitlines() == [
            "     1\t" + "x" * 30,
            "     2\t" + "y" * 30,
            "[Lines 1-2 shown; the file goes on. Read on with offset=3.]",
        ]

    async def test_long_lines_are_cut(self, ctx: ToolContext, work: Path) -> None:
        (work / "min.js").write_text("a" * 5000 + "\nshort\n" + "é" * 10_000)
        result = await run_tool("read", {"path": "min.js"}, ctx)
        first, second, third = result.text.splitlines()
        assert first == "     1\t" + "a" * 2000 + " [… line cut at 2000 characters]"
        assert second == "     2\tshort"
        assert third == "     3\t" + "é" * 2000 + " [… line cut at 2000 characters]"

    async def test_crlf(self, ctx: ToolContext, work: Path) -> None:
        (work / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
        result = await run_tool("read", {"path": "dos.txt"}, ctx)
        assert result.text == "     1\tone\n     2\ttwo"

    async def test_empty_file(self, ctx: ToolContext, work: Path) -> None:
        (work / "empty").touch()
        result = await run_tool("read", {"path": "empty"}, ctx)
        assert result == ToolResult(f"{work / 'empty'} is empty.")

    async def test_offset_past_the_end(self, ctx: ToolContext, work: Path) -> None:
        (work / "a.txt").write_text("a\nb\n")
        result = await run_tool("read", {"path": "a.txt", "offset": 5}, ctx)
        assert result == ToolResult(
            f"offset 5 is past the end of {work / 'a.txt'}, which has 2 lines.", is_error=True
        )

    async def test_directory(self, ctx: ToolContext, work: Path) -> None:
        (work / "src").mkdir()
        result = await run_tool("read", {"path": "src"}, ctx)
        assert result.is_error
        assert "is a directory; list it with glob" in result.text

    @pytest.mark.parametrize("content", [b"\x7fELF\0\0\x01", b"text\n" * 1900 + b"\0"])
    async def test_binary(self, ctx: ToolContext, work: Path, content: bytes) -> None:
        (work / "a.out").write_bytes(content)
        result = await run_tool("read", {"path": "a.out"}, ctx)
        assert result == ToolResult(
            f"{work / 'a.out'} is a binary file (it contains NUL bytes); not shown.",
            is_error=True,
        )

    async def test_missing(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("read", {"path": "nope.txt"}, ctx)
        assert result == ToolResult(f"No such file or directory: {work / 'nope.txt'}", True)


class TestWrite:
    async def test_creates_parents(self, ctx: ToolContext, work: Path) -> None:
        result = await run_tool("write", {"path": "a/b/c.txt", "content": "héllo\n"}, ctx)
        assert result == ToolResult(f"Wrote 7 bytes to {work / 'a/b/c.txt'}.")
        assert (work / "a/b/c.txt").read_text() == "héllo\n"

    async def test_overwrites(self, ctx: ToolContext, work: Path) -> None:
        (work / "a.txt").write_text("a long old content\n")
        await run_tool("write", {"path": "a.txt", "content": "new"}, ctx)
        assert (work / "a.txt").read_text() == "new"

    async def test_a_directory_is_not_a_file(self, ctx: ToolContext, work: Path) -> None:
        (work / "src").mkdir()
        result = await run_tool("write", {"path": "src", "content": "x"}, ctx)
        assert result == ToolResult(f"Is a directory: {work / 'src'}", is_error=True)


class TestEdit:
    async def test_replaces_the_one_occurrence(self, ctx: ToolContext, work: Path) -> None:
        (work / "m.py").write_text("import os\n\ndef f():\n    return 1\n")
        arguments = {"path": "m.py", "oldText": "return 1", "newText": "return 2"}
        result = await run_tool("edit", arguments, ctx)
        assert result == ToolResult(f"Edited {work / 'm.py'}: replaced 1 occurrence at line 4.")
        assert (work / "m.py").read_text() == "import os\n\ndef f():\n    return 2\n"

    async def test_not_found(self, ctx: ToolContext, work: Path) -> None:
        (work / "m.py").write_text("x = 1\n")
        arguments = {"path": "m.py", "oldText": "y = 1", "newText": "y = 2"}
        result = await run_tool("edit", arguments, ctx)
        assert result == ToolResult(f"oldText not found in {work / 'm.py'}.", is_error=True)
        assert (work / "m.py").read_text() == "x = 1\n"

    async def test_several_matches(self, ctx: ToolContext, work: Path) -> None:
        (work / "m.py").write_text("x = 1\nx = 1\nx = 1\n")
        arguments = {"path": "m.py", "oldText": "x = 1", "newText": "x = 2"}
        result = await run_tool("edit", arguments, ctx)
        assert result.is_error
        assert "occurs 3 times" in result.text
        assert "add surrounding context" in result.text
        assert (work / "m.py").read_text() == "x = 1\nx = 1\nx = 1\n"

    async def test_crlf_hint(self, ctx: ToolContext, work: Path) -> None:
        (work / "dos.txt").write_bytes(b"a\r\nb\r\n")
        arguments = {"path": "dos.txt", "oldText": "a\nb", "newText": "c"}
        result = await run_tool("edit", arguments, ctx)
        assert result.is_error
        assert "CRLF line endings" in result.text

    async def test_not_utf8(self, ctx: ToolContext, work: Path) -> None:
        (work / "latin1.txt").write_bytes(b"caf\xe9\n")
        arguments = {"path": "latin1.txt", "oldText": "caf", "newText": "bar"}
        result = await run_tool("edit", arguments, ctx)
        assert result.is_error
        assert "is not UTF-8 text" in result.text

    async def test_missing(self, ctx: ToolContext, work: Path) -> None:
        arguments = {"path": "nope.py", "oldText": "a", "newText": "b"}
        result = await run_tool("edit", arguments, ctx)
        assert result == ToolResult(f"No such file or directory: {work / 'nope.py'}", True)


class TestOnlyRegularFiles:
    """A FIFO no process writes (or reads) would hold a file tool's call for ever, and
    these calls have no time limit: each answers at once, naming what the path is."""

    @pytest.mark.parametrize(
        ("tool", "arguments"),
        [
            ("read", {}),
            ("write", {"content": "x"}),
            ("edit", {"oldText": "a", "newText": "b"}),
        ],
    )
    async def test_a_fifo_is_refused_at_once(
        self, ctx: ToolContext, work: Path, tool: str, arguments: dict[str, str]
    ) -> None:
        os.mkfifo(work / "pipe")
        result = await run_tool(tool, {"path": "pipe", **arguments}, ctx)
        assert result.is_error
        assert result.text.startswith(
            f"{work / 'pipe'} is a FIFO (a named pipe), not a regular file; read, write "
            "and edit open regular files only"
        )

    async def test_a_device_is_refused(self, ctx: ToolContext) -> None:
        result = await run_tool("read", {"path": "/dev/null"}, ctx)
        assert result.is_error
        assert result.text.startswith("/dev/null is a device, not a regular file")


class TestPaths:
    async def test_relative_and_absolute(
        self, ctx: ToolContext, work: Path, tmp_path: Path
    ) -> None:
        (work / "in.txt").write_text("inside\n")
        (tmp_path / "out.txt").write_text("outside\n")
        inside = await run_tool("read", {"path": "in.txt"}, ctx)
        outside = await run_tool("read", {"path": str(tmp_path / "out.txt")}, ctx)
        up = await run_tool("read", {"path": "../out.txt"}, ctx)
        assert inside.text == "     1\tinside"
        assert outside.text == up.text == "     1\toutside"

    @pytest.mark.parametrize(
        ("name", "arguments"),
        [
            ("read", {"path": "{data}/token"}),
            ("read", {"path": "../data/token"}),
            ("read", {"path": "link/token"}),
            ("write", {"path": "{data}/new", "content": "x"}),
            ("write", {"path": "link/new", "content": "x"}),
            ("edit", {"path": "{data}/token", "oldText": "s3cret", "newText": "mine"}),
            ("read", {"path": "{data}"}),
        ],
    )
    async def test_denied(
        self, ctx: ToolContext, work: Path, data: Path, name: str, arguments: dict[str, str]
    ) -> None:
        (work / "link").symlink_to(data)
        arguments = {key: value.replace("{data}", str(data)) for key, value in arguments.items()}
        result = await run_tool(name, arguments, ctx)
        assert result.is_error
        assert f"Refused: {data}" in result.text
        assert f"inside {data}, which the Working tools may not read, write or list" in result.text
        assert os.listdir(data) == ["token"]
        assert (data / "token").read_text() == "s3cret\n"

    async def test_nul(self, ctx: ToolContext) -> None:
        result = await run_tool("read", {"path": "a\0b"}, ctx)
        assert result.is_error
        assert "contains a NUL character" in result.text
