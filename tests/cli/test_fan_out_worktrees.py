"""A fan-out whose children work in worktrees of their own (``worktree: per-child``, ADR
0113), run as a user runs it: ``kubeturn run`` with its Harness, against a temporary
repository, with real git.

Case: the Run commits ``BASE.txt`` on its branch, then fans out over 3 packages, 2 at a
time; each child's ``exec`` finds ``BASE.txt`` (its worktree starts from the Run's
branch), writes and commits its own file, and names its branch and worktree in its
output; a later ``exec`` of the Run fetches the 3 branches into the Run's worktree by
those names and lists what each holds. Exactly 3 distinct branches, each with its own
file and no other child's; the Run's worktree holds none of the children's files.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli.support import environment, kubeturn, last_line, status

COMMIT = "git -c user.name=kubeturn -c user.email=kubeturn@example.com commit -qm"
MANIFEST = f"""
apiVersion: kubeturn.dev/v1alpha1
kind: Run
metadata: {{name: fan}}
spec:
  workspace: {{template: {{repos: {{target: {{url: .}}}}}}}}
  input: {{packages: [pkg-a, pkg-b, pkg-c]}}
  agents:
    coder: {{instructions: Not asked here.}}
  machine:
    initial: prepare
    states:
      prepare:
        invoke:
          exec: {{command: "echo base > BASE.txt && git add BASE.txt && {COMMIT} base"}}
          onDone: fix
      fix:
        invoke:
          forEach:
            items: input.packages
            concurrency: 2
            worktree: per-child
            machine:
              initial: work
              states:
                work:
                  invoke:
                    exec:
                      command: >-
                        test -f BASE.txt && echo {{{{ input }}}} > {{{{ input }}}}.txt
                        && git add {{{{ input }}}}.txt && {COMMIT} {{{{ input }}}}
                    onDone:
                      - guard: event.output.exitCode == 0
                        target: done
                      - target: broken
                done:
                  type: final
                  output: "{{'branch': workspace.branch, 'path': workspace.repos.target}}"
                broken: {{type: final, outcome: failed}}
          onDone: {{target: compare, assign: {{context.children: event.output}}}}
          onError: failed
      compare:
        invoke:
          exec:
            command: >-
              for pair in "{{{{ context.children[0].path }}}} {{{{ context.children[0].branch }}}}"
              "{{{{ context.children[1].path }}}} {{{{ context.children[1].branch }}}}"
              "{{{{ context.children[2].path }}}} {{{{ context.children[2].branch }}}}";
              do set -- $pair; git fetch -q "$1" "$2:$2" || exit 1;
              echo "$2 $(git ls-tree --name-only "$2" | tr '\\n' ' ')"; done
          onDone:
            - guard: event.output.exitCode == 0
              target: compared
              assign: {{context.listing: event.output.output}}
            - target: failed
      compared: {{type: final, output: context.listing}}
      failed: {{type: final, outcome: failed}}
"""


def git(repository: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repository), *args],
        env=environment(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_each_child_works_on_its_own_branch_and_the_run_compares_them(project: Path) -> None:
    (project / "fan.yaml").write_text(MANIFEST)
    (project / "fan.script.yaml").write_text("conversations: []\n")  # no Turn is asked for
    git(project, "add", "fan.yaml", "fan.script.yaml")
    git(project, "commit", "-qm", "the manifest")

    result = kubeturn("run", "fan.yaml", cwd=project, timeout=120)

    assert result.returncode == 0, result.stdout + result.stderr
    assert last_line(result.stdout, "run fan: ").startswith("run fan: Succeeded"), result.stdout
    saved = status(project / ".kubeturn-work" / "fan", "fan")
    children = saved["snapshot"]["machine"]["context"]["children"]
    branches = [child["branch"] for child in children]
    assert branches == [f"kubeturn/fan_fix=pkg-{key}" for key in "abc"]
    listing = sorted(saved["output"].splitlines())
    files = "BASE.txt README.md fan.script.yaml fan.yaml"
    assert listing == [f"kubeturn/fan_fix=pkg-{key} {files} pkg-{key}.txt " for key in "abc"], (
        json.dumps(saved["output"])
    )
    run_tree = Path(children[0]["path"]).parent / "kubeturn-fan"
    assert git(run_tree, "rev-parse", "--abbrev-ref", "HEAD") == "kubeturn/fan"
    assert sorted(path.name for path in run_tree.iterdir() if path.suffix == ".txt") == ["BASE.txt"]
    for key, child in zip("abc", children, strict=True):
        tree = Path(child["path"])
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == child["branch"]
        assert git(tree, "log", "-1", "--format=%s") == f"pkg-{key}"
        assert git(tree, "rev-parse", "HEAD^") == git(run_tree, "rev-parse", "kubeturn/fan")
