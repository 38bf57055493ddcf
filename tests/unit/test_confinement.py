"""What one session of the Agent's tools may touch (``kubeturn_harness.sandbox.confinement``),
as a plan, before any Landlock call.

Cases:
- ``reach``: a cwd inside a Run's worktree reaches that Run's worktree of every slot that
  has one (not another Run's), and its fan-out children's (ADR 0113); a child's reaches
  its own alone; a cwd anywhere else reaches itself alone;
- ``plan`` with write access: the reach read-write, the scratch read-write, the clones
  read only, ``/dev`` listable and only the named devices open, the system's directories
  read only; never the work root itself, ``/tmp`` or ``/home``;
- with read access: the reach read only;
- a private path is never granted, even beneath a granted one: the grant is cut into its
  other children, down to the private path's parent; a grant inside a private path goes;
  a work root under a system directory is cut out of it;
- ``path_readable``: each PATH directory, and the installation around a ``bin`` or
  ``shims`` directory, but never a home or ``/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kubeturn_harness.sandbox import confinement, landlock
from kubeturn_harness.sandbox.confinement import Grant

WORK = Path("/work")
TREES = {WORK / "app" / "kubeturn-a", WORK / "docs" / "kubeturn-a", WORK / "app" / "kubeturn-b"}
SCRATCH = Path("/tmp/kubeturn/session-1")


def exists(path: Path) -> bool:
    return path in TREES


def listing(tree: dict[str, list[str]]) -> confinement.Listing:
    def entries(path: Path) -> Iterable[Path]:
        return [path / name for name in tree.get(str(path), [])]

    return entries


def plan(cwd: Path, *, writable: bool = True, **extra: object) -> confinement.Plan:
    arguments: dict[str, object] = {
        "cwd": cwd,
        "work_root": WORK,
        "slots": ["app", "docs"],
        "writable": writable,
        "scratch": SCRATCH,
        "private": [Path("/var/lib/kubeturn/data")],
        "readable": [],
        "exists": exists,
        "listing": listing({"/var": ["/var/lib", "/var/tmp"], "/var/lib": ["kubeturn", "dpkg"]}),
    }
    arguments.update(extra)
    return confinement.plan(**arguments)  # type: ignore[arg-type]


def access(found: confinement.Plan, path: str) -> landlock.Access | None:
    granted = [g.access for g in found.grants if g.path == Path(path)]
    assert len(granted) <= 1, granted
    return granted[0] if granted else None


class TestReach:
    def test_a_runs_worktree_reaches_that_runs_worktree_of_every_slot(self) -> None:
        reached = confinement.reach(
            WORK / "app" / "kubeturn-a" / "src", WORK, ["app", "docs"], exists
        )
        assert reached == (WORK / "app" / "kubeturn-a", WORK / "docs" / "kubeturn-a")

    def test_a_runs_worktree_reaches_its_childrens_and_a_childs_only_its_own(self) -> None:
        children = {WORK / "app" / "kubeturn-a_fix.x", WORK / "app" / "kubeturn-a_fix.y"}
        made = {*TREES, *children, WORK / "app", WORK / "docs"}
        tree = {
            "/work/app": [
                "kubeturn-a",
                "kubeturn-a_fix.x",
                "kubeturn-a_fix.y",
                "kubeturn-a_fix.z.partial",
                "kubeturn-ab",
                "kubeturn-b",
            ],
            "/work/docs": ["kubeturn-a"],
        }
        found = confinement.reach(
            WORK / "app" / "kubeturn-a", WORK, ["app", "docs"], made.__contains__, listing(tree)
        )
        assert found == (
            WORK / "app" / "kubeturn-a",
            WORK / "docs" / "kubeturn-a",
            *sorted(children),
        )
        child = WORK / "app" / "kubeturn-a_fix.x"
        assert confinement.reach(
            child / "src", WORK, ["app", "docs"], made.__contains__, listing(tree)
        ) == (child,)

    def test_a_worktree_is_made_only_on_a_branch_that_says_whose_it_is(self) -> None:
        """``reach`` reads a Run's children from names: a Run's branch holds no ``_``; a
        child's begins with its Run's whole branch and ``_``, a nested child's too."""
        assert confinement.misnamed("kubeturn/a", None) is None
        assert confinement.misnamed("kubeturn/a_fix.x", "kubeturn/a") is None
        assert confinement.misnamed("kubeturn/a_fix.x.sub.y", "kubeturn/a_fix.x") is None
        for branch, base in [
            ("kubeturn/a_fix.x", None),
            ("kubeturn/ab_fix.x", "kubeturn/a"),
            ("kubeturn/a-b_fix.x", "kubeturn/a"),
            ("kubeturn/a_", "kubeturn/a"),
            ("kubeturn/b_fix.x", "kubeturn/a_fix.y"),
        ]:
            assert confinement.misnamed(branch, base) is not None, (branch, base)

    def test_any_other_cwd_reaches_itself(self) -> None:
        for cwd in (Path("/srv/project"), WORK, WORK / ".repos" / "app", WORK / "app"):
            assert confinement.reach(cwd, WORK, ["app", "docs"], exists) == (cwd,)


class TestPlan:
    def test_write_access(self) -> None:
        found = plan(WORK / "app" / "kubeturn-a")
        assert found.reach == (WORK / "app" / "kubeturn-a", WORK / "docs" / "kubeturn-a")
        assert access(found, "/work/app/kubeturn-a") == landlock.WRITE
        assert access(found, "/work/docs/kubeturn-a") == landlock.WRITE
        assert access(found, "/work/app/kubeturn-b") is None
        assert access(found, str(SCRATCH)) == landlock.WRITE
        assert access(found, "/work/.repos") == landlock.READ
        assert access(found, "/dev") == landlock.Access.READ_DIR
        assert access(found, "/dev/null") == landlock.DEVICES
        assert access(found, "/dev/sda") is None
        assert access(found, "/usr") == access(found, "/etc") == landlock.READ
        for never in ("/work", "/tmp", "/home", "/root", "/run", "/"):
            assert access(found, never) is None, never

    def test_read_access(self) -> None:
        found = plan(WORK / "app" / "kubeturn-a", writable=False)
        assert access(found, "/work/app/kubeturn-a") == landlock.READ
        assert not found.writable

    def test_a_runs_childrens_worktrees_get_the_runs_access(self) -> None:
        child = WORK / "app" / "kubeturn-a_fix.x"
        tree = {"/work/app": ["kubeturn-a", "kubeturn-a_fix.x"], "/work/docs": ["kubeturn-a"]}
        for writable, granted in ((True, landlock.WRITE), (False, landlock.READ)):
            found = plan(
                WORK / "app" / "kubeturn-a",
                writable=writable,
                exists={*TREES, child, WORK / "app", WORK / "docs"}.__contains__,
                listing=listing(tree),
            )
            assert child in found.reach
            assert access(found, str(child)) == granted

    def test_a_private_path_is_cut_out_of_a_grant(self) -> None:
        found = plan(Path("/srv/x"))
        assert access(found, "/var") is None
        assert access(found, "/var/tmp") == landlock.READ
        assert access(found, "/var/lib/dpkg") == landlock.READ
        assert access(found, "/var/lib/kubeturn") is None

    def test_a_grant_inside_a_private_path_goes(self) -> None:
        found = plan(Path("/var/lib/kubeturn/data/x"))
        assert found.reach == (Path("/var/lib/kubeturn/data/x"),)
        assert [g for g in found.grants if g.path.is_relative_to("/var/lib/kubeturn")] == []

    def test_a_work_root_under_a_system_directory_is_cut_out_of_it(self) -> None:
        tree = {"/srv": ["/srv/work", "/srv/www"]}
        found = plan(
            Path("/srv/work/app/kubeturn-a"), work_root=Path("/srv/work"), listing=listing(tree)
        )
        assert access(found, "/srv") is None
        assert access(found, "/srv/www") == landlock.READ
        assert access(found, "/srv/work") is None

    def test_the_clones_are_never_writable_even_from_the_work_root(self) -> None:
        tree = {"/work": ["/work/.repos", "/work/app", "/work/notes.md"]}
        found = plan(WORK, listing=listing(tree))
        assert access(found, "/work/.repos") == landlock.READ
        assert access(found, "/work/app") == landlock.WRITE
        assert access(found, "/work/notes.md") == landlock.WRITE


def test_cut_leaves_a_grant_that_holds_no_private_path() -> None:
    grant = Grant(Path("/usr"), landlock.READ)
    assert confinement.cut(grant, [Path("/var/lib/kubeturn")], listing({})) == [grant]


def test_path_readable() -> None:
    path = "/root/.pyenv/shims:/usr/local/bin:/home/ann/bin:/opt/tool/bin:relative:/bin"
    assert confinement.path_readable(path, "/root") == [
        Path("/root/.pyenv/shims"),
        Path("/root/.pyenv"),
        Path("/usr/local/bin"),
        Path("/usr/local"),
        Path("/home/ann/bin"),
        Path("/opt/tool/bin"),
        Path("/opt/tool"),
        Path("/bin"),
    ]
