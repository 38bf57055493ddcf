"""The Working tools' surface: what is offered, how arguments are checked, and the
environment and identity of their subprocesses.

Cases:
- access filtering: write offers read, write, edit, bash, grep, glob; read offers
  read, grep, glob; none offers nothing;
- each spec's OpenAI shape; schemas derived from the argument models, with no titles,
  no $defs and no null defaults; descriptions state the limits;
- parse_arguments: valid arguments come back; bad JSON (nested 200,000 deep, or with
  ``NaN``, among them: never ``RecursionError``), a non-object, a missing field,
  a wrong type (including "5" for an integer), an unknown argument and a value out of
  range raise ToolArgumentError naming the argument; a spec that is not a Working tool
  is a ValueError;
- run_tool: an unknown tool name and invalid arguments are failed results, not
  exceptions; an OSError becomes a plain message;
- ToolContext refuses a relative cwd;
- scrubbed_environment keeps only the allowlist (PATH defaulted, TERM=dumb, HOME set,
  git identity kept) and drops tokens, API keys and KUBETURN_* variables;
- tool_identity gives RunAs as root and None when not root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kubeturn_harness.tools import (
    RunAs,
    ToolArgumentError,
    ToolContext,
    ToolResult,
    ToolSpec,
    parse_arguments,
    run_tool,
    scrubbed_environment,
    tool_identity,
    working_tools,
)
from kubeturn_harness.wire import WorkspaceAccess


def _spec(name: str) -> ToolSpec:
    return next(spec for spec in working_tools(WorkspaceAccess.WRITE) if spec.name == name)


def _keywords(schema: dict[str, Any]) -> set[str]:
    """Every keyword a JSON Schema uses, property names left out."""
    keywords = set(schema)
    for prop in schema.get("properties", {}).values():
        keywords |= _keywords(prop)
    return keywords


class TestAccess:
    @pytest.mark.parametrize(
        ("access", "names"),
        [
            (WorkspaceAccess.WRITE, ["read", "write", "edit", "bash", "grep", "glob"]),
            (WorkspaceAccess.READ, ["read", "grep", "glob"]),
            (WorkspaceAccess.NONE, []),
        ],
    )
    def test_the_access_decides_the_tools(self, access: WorkspaceAccess, names: list[str]) -> None:
        assert [spec.name for spec in working_tools(access)] == names


class TestSpecs:
    def test_openai_shape(self) -> None:
        spec = _spec("edit")
        entry = spec.openai()
        assert entry == {
            "type": "function",
            "function": {
                "name": "edit",
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        entry["function"]["parameters"]["properties"].clear()
        assert spec.parameters["properties"], "openai() must hand out a copy"

    def test_schemas_are_plain(self) -> None:
        for spec in working_tools(WorkspaceAccess.WRITE):
            keys = _keywords(spec.parameters)
            assert "title" not in keys, spec.name
            assert "$defs" not in keys, spec.name
            assert "anyOf" not in keys, spec.name
            assert spec.parameters["type"] == "object"
            assert spec.parameters["additionalProperties"] is False
            for prop in spec.parameters["properties"].values():
                assert prop.get("default", "") is not None, spec.name

    @pytest.mark.parametrize(
        ("name", "required", "optional"),
        [
            ("read", ["path"], ["offset", "limit"]),
            ("write", ["path", "content"], []),
            ("edit", ["path", "oldText", "newText"], []),
            ("bash", ["command"], ["timeoutSeconds"]),
            ("grep", ["pattern"], ["path", "glob", "ignoreCase"]),
            ("glob", ["pattern"], ["path"]),
        ],
    )
    def test_arguments(self, name: str, required: list[str], optional: list[str]) -> None:
        parameters = _spec(name).parameters
        assert parameters["required"] == required
        assert list(parameters["properties"]) == required + optional

    @pytest.mark.parametrize(
        ("name", "limit"), [("read", "2000"), ("grep", "200"), ("glob", "500")]
    )
    def test_descriptions_state_limits(self, name: str, limit: str) -> None:
        assert limit in _spec(name).description


class TestParseArguments:
    def test_valid_arguments_come_back(self) -> None:
        text = json.dumps({"path": "a.txt", "offset": 3})
        assert parse_arguments(_spec("read"), text) == {"path": "a.txt", "offset": 3}

    def test_optional_null_is_accepted(self) -> None:
        text = json.dumps({"command": "true", "timeoutSeconds": None})
        assert parse_arguments(_spec("bash"), text)["timeoutSeconds"] is None

    @pytest.mark.parametrize(
        ("name", "text", "says"),
        [
            ("read", "{path: 'a'}", "not valid JSON"),
            ("read", "", "not valid JSON"),
            ("read", "[" * 200_000 + "]" * 200_000, "nests deeper than 64 levels"),
            ("read", '{"path": "a", "offset": NaN}', "offset is not a finite number"),
            ("read", '["a.txt"]', "must be a JSON object, got an array"),
            ("read", '"a.txt"', "must be a JSON object, got a string"),
            ("read", "{}", "`path` is required"),
            ("edit", '{"path": "a", "oldText": "x"}', "`newText` is required"),
            ("read", '{"path": 5}', "`path` is invalid"),
            ("read", '{"path": "a", "offset": "5"}', "`offset` is invalid"),
            ("read", '{"path": "a", "offset": 0}', "`offset` is invalid"),
            ("grep", '{"pattern": "x", "ignoreCase": 1}', "`ignoreCase` is invalid"),
            ("bash", '{"command": "ls", "timeoutSeconds": "9"}', "`timeoutSeconds` is invalid"),
            ("bash", '{"command": "ls", "timeoutSeconds": -1}', "`timeoutSeconds` is invalid"),
            ("write", '{"path": "a", "content": "", "mode": 1}', "`mode` is not an argument"),
            ("edit", '{"path": "a", "oldText": "", "newText": "b"}', "`oldText` is invalid"),
        ],
    )
    def test_what_does_not_fit_is_refused(self, name: str, text: str, says: str) -> None:
        with pytest.raises(ToolArgumentError, match=says) as raised:
            parse_arguments(_spec(name), text)
        assert name in str(raised.value)

    def test_the_message_lists_the_arguments(self) -> None:
        with pytest.raises(ToolArgumentError, match="are: path, oldText, newText"):
            parse_arguments(_spec("edit"), "{}")

    def test_a_spec_that_is_no_working_tool(self) -> None:
        menu = ToolSpec(name="approve", description="", parameters={"type": "object"})
        with pytest.raises(ValueError, match="'approve' is not a Working tool"):
            parse_arguments(menu, "{}")


class TestRunTool:
    @pytest.fixture
    def ctx(self, tmp_path: Path) -> ToolContext:
        return ToolContext(cwd=tmp_path, env=scrubbed_environment(os.environ, home=str(tmp_path)))

    async def test_unknown_tool(self, ctx: ToolContext) -> None:
        result = await run_tool("delete", {"path": "x"}, ctx)
        assert result.is_error
        assert "no Working tool named 'delete'" in result.text
        assert "read, write, edit, bash, grep, glob" in result.text

    async def test_invalid_arguments_are_a_failed_result(self, ctx: ToolContext) -> None:
        result = await run_tool("read", {"path": 3}, ctx)
        assert result.is_error
        assert "`path` is invalid" in result.text

    async def test_os_errors_are_plain_messages(self, ctx: ToolContext, tmp_path: Path) -> None:
        result = await run_tool("read", {"path": "missing.txt"}, ctx)
        assert result == ToolResult(
            f"No such file or directory: {tmp_path / 'missing.txt'}", is_error=True
        )


def test_context_needs_an_absolute_cwd() -> None:
    with pytest.raises(ValueError, match="must be absolute"):
        ToolContext(cwd=Path("work"), env={})


class TestEnvironment:
    def test_allowlist(self) -> None:
        base = {
            "PATH": "/opt/bin:/usr/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "LC_CTYPE": "C.UTF-8",
            "TZ": "UTC",
            "TERM": "xterm-256color",
            "HOME": "/root",
            "GIT_AUTHOR_NAME": "Agent",
            "GIT_AUTHOR_EMAIL": "agent@example.com",
            "GIT_COMMITTER_NAME": "Agent",
            "GIT_COMMITTER_EMAIL": "agent@example.com",
            "GIT_DIR": "/elsewhere",
            "KUBETURN_ORCHESTRATOR_TOKEN": "t0ken",
            "OPENAI_API_KEY": "sk-secret",
            "SOME_SECRET": "hush",
            "PYTHONPATH": "/harness",
        }
        assert scrubbed_environment(base, home="/work/.home") == {
            "PATH": "/opt/bin:/usr/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "LC_CTYPE": "C.UTF-8",
            "TZ": "UTC",
            "TERM": "dumb",
            "HOME": "/work/.home",
            "GIT_AUTHOR_NAME": "Agent",
            "GIT_AUTHOR_EMAIL": "agent@example.com",
            "GIT_COMMITTER_NAME": "Agent",
            "GIT_COMMITTER_EMAIL": "agent@example.com",
        }

    def test_path_has_a_default(self) -> None:
        assert scrubbed_environment({"SECRET": "x"}, home="/h") == {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "TERM": "dumb",
            "HOME": "/h",
        }


class TestIdentity:
    def test_root_switches_user(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        assert tool_identity(65534, 65534) == RunAs(uid=65534, gid=65534)

    def test_an_unprivileged_process_cannot(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        assert tool_identity(65534, 65534) is None
