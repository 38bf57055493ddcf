"""The hostile Agent: a scripted model whose every tool call is an attack on the sandbox,
and what each attack must come to. Shared by the in-process layouts (``tests/hostile``)
and the sandbox Pod's layout in the real images (``tests/docker``).

Secrets are seeded with one unique marker (``Secrets``): the Orchestrator token, a
provider's API key and a Workspace ``env`` value in the Harness's environment, and the
bearer token the Orchestrator sends. The Agent's search (``SEARCH``, a bash script it
writes into its worktree and runs) reads every ``/proc/<pid>/environ`` and ``cmdline``
(threads' too), its own environment, every file under the roots it is given and every
answer of the Harness's and the Orchestrator's ports to a request without a token, and
prints a ``HIT`` line for each place that holds the marker. The marker never appears
whole in a command line or a script: it is passed in two halves and joined in memory,
and the pattern file it is written to (in the session's own ``TMPDIR``) is left out of
the search. A canary (a file in the Agent's own worktree) proves that the search sees
what it can read: it must be found.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

AGENT = "intruder"
RUN_A = "run-a"
RUN_B = "run-b"
RUN_C = "run-c"
PROMPT = "hostile: take what you can"
TOOL_PROCESSES = 40
"""The Harness's ``--tool-processes`` in these tests: a session adds at most this many."""
ESCAPES = ("sleep 7771", "sleep 7772", "sleep 7773", "sleep 7774")
"""The argv of the processes the Agent tries to leave behind (setsid, nohup, a double
fork, disown): none may be running once the call has returned."""
BOMB = "sleep 7779"
LONG = "sleep 7780"
"""A command the Harness is killed in the middle of."""
LONG_PROMPT = "a long command"

SEARCH = r"""#!/bin/bash
# Search everything this process can reach for the marker ("$1$2"); count the canary
# ("$3$4"). $5: ports answering HTTP on 127.0.0.1. The rest: filesystem roots.
marker="$1$2"; canary="$3$4"; ports="$5"; shift 5
pattern="$TMPDIR/pattern.$$"; canaries="$TMPDIR/canary.$$"
printf '%s\n' "$marker" > "$pattern"; printf '%s\n' "$canary" > "$canaries"
holds() { grep -qaF -f "$pattern"; }
read_files=0
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline \
         /proc/[0-9]*/task/[0-9]*/environ /proc/[0-9]*/task/[0-9]*/cmdline; do
  if content=$( { tr '\0' '\n' < "$f"; } 2>/dev/null ); then
    read_files=$((read_files + 1))
    printf '%s' "$content" | holds && echo "HIT $f"
  fi
done
echo "PROC-FILES-READ $read_files"
env | holds && echo "HIT env"
found=0
for root in "$@"; do
  while IFS= read -r hit; do
    case "$hit" in "$TMPDIR"/*) continue;; esac
    echo "HIT file $hit"
  done < <(grep -rlaF -f "$pattern" --exclude-dir=proc --exclude-dir=sys "$root" 2>/dev/null)
  n=$(grep -rlaF -f "$canaries" "$root" 2>/dev/null | grep -vc "^$TMPDIR/")
  found=$((found + n))
done
echo "CANARY $found"
for port in $ports; do
  for path in / /healthz /readyz /metrics /openapi.json /repos \
              /agents/intruder/x "/agents/intruder/x?view=history" /agents/x/surface; do
    answer=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && \
      printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3 && timeout 5 cat <&3)
    printf '%s' "$answer" | holds && echo "HIT port $port $path"
    echo "PORT $port $path $(printf '%s' "$answer" | head -1 | tr -d '\r')"
  done
done
rm -f "$pattern" "$canaries"
"""


@dataclass(frozen=True)
class Secrets:
    """Every secret of one test, each holding the same unique marker."""

    tag: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def marker(self) -> str:
        return f"KTSECRET{self.tag}"

    @property
    def halves(self) -> tuple[str, str]:
        return self.marker[:5], self.marker[5:]

    @property
    def canary(self) -> str:
        return f"KTCANARY{self.tag}"

    @property
    def canary_halves(self) -> tuple[str, str]:
        return self.canary[:5], self.canary[5:]

    @property
    def bearer(self) -> str:
        """The token the Orchestrator presents to the Harness (only its hash is there)."""
        return f"bearer-{self.marker}"

    def harness_env(self) -> dict[str, str]:
        """What the Harness's container holds: its tokens, a provider's key, a value a
        Workspace's ``env`` gave it, and a trace collector's headers (ADR 0107)."""
        return {
            "KUBETURN_ORCHESTRATOR_TOKEN": f"orchestrator-{self.marker}",
            "OPENAI_API_KEY": f"sk-{self.marker}",
            "WORKSPACE_SECRET": f"workspace-{self.marker}",
            "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=collector-{self.marker}",
        }


@dataclass(frozen=True)
class Target:
    """What the Agent of Run A is told about its surroundings (it could find all of it)."""

    tree_a: str
    tree_b: str
    clone: str
    work_root: str
    data_dir: str
    ports: Sequence[int]
    roots: Sequence[str]
    """Where its filesystem search starts."""
    outside_pid: int
    """A process outside the Agent's session that it can see, the one most worth
    attacking: the Harness on one machine; in the Pod, where the Harness is in another
    PID namespace, the toolbox."""
    toolbox_socket: str | None = None
    disk_full: bool = False
    """Whether the work tree is a small volume the Agent can fill."""


def bash(command: str) -> dict[str, Any]:
    return {"name": "bash", "arguments": {"command": command}}


def probes(s: Secrets, t: Target) -> list[tuple[str, dict[str, Any]]]:
    """The Agent's tool calls, each named for what it attacks, in the order it makes them."""
    halves = " ".join(s.halves)
    canary = " ".join(s.canary_halves)
    ports = " ".join(str(p) for p in t.ports)
    roots = " ".join(t.roots)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write search", {"name": "write", "arguments": {"path": "search.sh", "content": SEARCH}}),
        ("search", bash(f"bash search.sh {halves} {canary} '{ports}' {roots}")),
        ("read /etc/shadow", {"name": "read", "arguments": {"path": "/etc/shadow"}}),
        (
            "write into /etc",
            {"name": "write", "arguments": {"path": "/etc/kubeturn-hostile", "content": "x"}},
        ),
        ("read run B", {"name": "read", "arguments": {"path": f"{t.tree_b}/README.md"}}),
        (
            "write run B",
            {"name": "write", "arguments": {"path": f"{t.tree_b}/owned", "content": "x"}},
        ),
        (
            "bash run B",
            bash(
                f"cat {t.tree_b}/README.md; ls {t.tree_b}; echo x > {t.tree_b}/owned-too; "
                f"git -C {t.tree_b} log --oneline -1"
            ),
        ),
        ("list the data dir", {"name": "glob", "arguments": {"pattern": "**", "path": t.data_dir}}),
        ("bash the data dir", bash(f"ls -la {t.data_dir}; cat {t.data_dir}/*/*/* | head -c 300")),
        ("plant a hook", bash(_plant(t))),
        (
            "escape the call",
            bash(
                f"setsid {ESCAPES[0]} </dev/null >/dev/null 2>&1 & "
                f"nohup {ESCAPES[1]} >/dev/null 2>&1 & "
                f"( ({ESCAPES[2]} </dev/null >/dev/null 2>&1 &) & ); "
                f"{ESCAPES[3]} </dev/null >/dev/null 2>&1 & disown; sleep 0.5; echo left them"
            ),
        ),
        ("fork bomb", bash(f"/usr/bin/python3 -c {_quote(_BOMB)}")),
        ("limits", bash("echo processes=$(ulimit -u) data=$(ulimit -d) core=$(ulimit -c)")),
        (
            "read a disk",
            bash(
                "for d in /dev/[svx]d[a-z] /dev/nvme[0-9]n[0-9] /dev/loop[0-9] /dev/mem; do "
                '[ -e "$d" ] && { head -c 16 "$d" >/dev/null && echo "read $d"; }; done; echo .'
            ),
        ),
        ("write /tmp", bash("echo x > /tmp/kubeturn-hostile && echo wrote")),
    ]
    environ = f"/proc/{t.outside_pid}/environ"
    oracle = f"/proc/{t.outside_pid}/task/{t.outside_pid}/environ"
    guess = s.harness_env()["KUBETURN_ORCHESTRATOR_TOKEN"][:-1]
    calls += [
        ("read another process's environ", {"name": "read", "arguments": {"path": environ}}),
        (
            "edit oracle on another process's environ",
            {"name": "edit", "arguments": {"path": oracle, "oldText": guess, "newText": "x"}},
        ),
        # Signal 0 asks only whether a signal would be let through: nothing is stopped.
        ("signal another process", bash(f"kill -0 {t.outside_pid}; echo rc=$?")),
    ]
    if t.toolbox_socket is not None:
        calls.append(("open a session for run B", bash(_toolbox_client(t.toolbox_socket, t))))
    if t.disk_full:
        calls += [
            ("fill the volume", bash("head -c 64M /dev/zero > big; echo rc=$?")),
            (
                "write on a full volume",
                {"name": "write", "arguments": {"path": "more.txt", "content": "y" * 200_000}},
            ),
        ]
    return calls


_BOMB = f"""
import subprocess
started = refused = 0
for _ in range({TOOL_PROCESSES * 3}):
    try:
        subprocess.Popen({BOMB.split()!r}, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started += 1
    except OSError:
        refused += 1
print(f"started={{started}} refused={{refused}}")
"""
"""Start three times the session's process limit of sleeps, as fast as forks go; say how
many started and how many the kernel refused."""


def _plant(t: Target) -> str:
    """Hooks and fsmonitor in the clone every Run borrows from, and a file beside it."""
    hook = f"{t.clone}/.git/hooks/post-checkout"
    return "; ".join(
        [
            f"mkdir -p {t.clone}/.git/hooks",
            f"printf '#!/bin/sh\\ntouch {t.work_root}/pwned\\n' > {hook}",
            f"chmod +x {hook}",
            f"git -C {t.clone} config core.fsmonitor 'touch {t.work_root}/pwned-fsmonitor'",
            f"echo x > {t.work_root}/planted",
        ]
    )


def _toolbox_client(socket_path: str, t: Target) -> str:
    """Speak the toolbox's protocol on its socket, as the Harness would, asking for a
    session in Run B's worktree."""
    opening = json.dumps(
        {
            "kind": "tools",
            "workRoot": t.work_root,
            "cwd": t.tree_b,
            "limits": {"bashTimeoutS": 5, "outputLimitBytes": 1000, "processes": 5},
        }
    )
    program = (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({socket_path!r})\n"
        f"    s.sendall({opening!r}.encode() + b'\\n')\n"
        "    print('answer:', s.recv(4096) or b'<closed>')\n"
        "except OSError as e:\n"
        "    print('closed:', e.strerror)\n"
    )
    return f"/usr/bin/python3 -c {_quote(program)}"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def script(s: Secrets, t: Target, *, extra: Mapping[str, str] = {}) -> str:
    """The scripted model's script: the hostile Turn, one tool call per answer, then a
    plain reply; the long command (``LONG_PROMPT``); and a plain reply to each prompt of
    ``extra`` (prompt → reply)."""
    steps: list[dict[str, Any]] = [{"toolCalls": [call]} for _, call in probes(s, t)]
    steps.append({"text": "done"})
    long = [{"toolCalls": [bash(f"{LONG} & {LONG}")]}, {"text": "done"}]
    conversations = [
        {"match": PROMPT, "steps": steps},
        {"match": LONG_PROMPT, "steps": long},
        *({"match": prompt, "steps": [{"text": reply}]} for prompt, reply in extra.items()),
    ]
    return json.dumps({"conversations": conversations})


def results(names: Sequence[str], messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The tool results of a conversation's record, by the name of the probe."""
    texts = [str(m["content"]) for m in messages if m["role"] == "tool"]
    assert len(texts) == len(names), texts
    return dict(zip(names, texts, strict=True))


def hits(search: str) -> list[str]:
    return [line for line in search.splitlines() if line.startswith("HIT")]


def canaries(search: str) -> int:
    found = re.search(r"^CANARY (\d+)$", search, re.MULTILINE)
    assert found is not None, search
    return int(found.group(1))


DENIED = ("Permission denied", "Operation not permitted")


def denied(text: str) -> bool:
    return any(word in text for word in DENIED)
