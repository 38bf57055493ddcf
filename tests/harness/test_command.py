"""``python -m kubeturn_harness serve``'s flags and environment, as a sandbox Pod sets them.

Cases:
- each flag with a number reads its environment twin, and a malformed value is refused
  with exit 2 and one line naming the flag, never a traceback;
- no token hash, or one that is not 64 hex digits, is refused with exit 2 and one line
  naming the variable;
- the memory settings of idle conversations come from their flags or environment;
- the toolbox's socket and the private paths come from their flags or environment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubeturn_harness.__main__ import _parser, settings_from

TOKEN = "ab" * 32


def run_serve(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubeturn_harness", "serve", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "flag"),
    [
        ("KUBETURN_HARNESS_PORT", "--port"),
        ("KUBETURN_TOOL_UID", "--tool-uid"),
        ("KUBETURN_TOOL_PROCESSES", "--tool-processes"),
        ("KUBETURN_SWEEP_WAIT_S", "--sweep-wait"),
        ("KUBETURN_IDLE_EVICTION_S", "--idle-eviction"),
        ("KUBETURN_IDLE_CONVERSATIONS_KEPT", "--idle-conversations-kept"),
    ],
)
def test_a_malformed_number_names_its_flag(variable: str, flag: str) -> None:
    result = run_serve(env={variable: "many", "KUBETURN_HARNESS_TOKEN_SHA256": TOKEN})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"argument {flag}: invalid" in result.stderr
    assert "'many'" in result.stderr


@pytest.mark.parametrize("token", [None, "abc"])
def test_a_missing_or_malformed_token_hash_is_refused(token: str | None) -> None:
    env = {} if token is None else {"KUBETURN_HARNESS_TOKEN_SHA256": token}
    result = run_serve(env=env)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("kubeturn-harness: ")
    assert "KUBETURN_HARNESS_TOKEN_SHA256" in line


def test_the_idle_conversation_settings_come_from_flags_or_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBETURN_HARNESS_TOKEN_SHA256", TOKEN)
    defaults = settings_from(_parser().parse_args(["serve"]))
    assert (defaults.idle_eviction_s, defaults.idle_conversations_kept) == (60.0, 256)

    monkeypatch.setenv("KUBETURN_IDLE_EVICTION_S", "5")
    monkeypatch.setenv("KUBETURN_IDLE_CONVERSATIONS_KEPT", "16")
    from_env = settings_from(_parser().parse_args(["serve"]))
    assert (from_env.idle_eviction_s, from_env.idle_conversations_kept) == (5.0, 16)

    argv = ["serve", "--idle-eviction", "1.5", "--idle-conversations-kept", "2"]
    from_flags = settings_from(_parser().parse_args(argv))
    assert (from_flags.idle_eviction_s, from_flags.idle_conversations_kept) == (1.5, 2)


def test_the_toolbox_and_private_paths_come_from_their_flags_or_environment() -> None:
    env = {"KUBETURN_TOOLBOX_SOCKET": "/run/t.sock", "KUBETURN_PRIVATE": "/a:/b"}
    args = _parser().parse_args(["serve", "--token-sha256", TOKEN])
    assert (args.toolbox, args.private) == (None, [])
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        args = _parser().parse_args(["serve", "--token-sha256", TOKEN, "--private", "/c"])
    settings = settings_from(args)
    assert settings.tools.socket == Path("/run/t.sock")
    assert settings.private == (Path("/a"), Path("/b"), Path("/c"))
