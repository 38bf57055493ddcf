"""What each attack of the hostile Agent must come to: one test class per point of the
threat model (docs/security/threat_model.md), shared by every layout. A layout's test
module imports them and gives the ``attack`` fixture: the hostile Turn it ran and what
it found after (``tests/hostile/test_agent.py`` in-process, ``tests/docker/
test_hostile_agent.py`` in the sandbox Pod's layout with the real images).
``TestFanOutChildren`` reads the ``fan_out`` fixture instead (``tests/hostile/fan_out.py``),
which the in-process layout gives.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from kubeturn_harness.sandbox import landlock
from tests.hostile import agent
from tests.hostile.fan_out import PARTIAL, SESSIONS, FanOutAttack, label, trees_of
from tests.hostile.layout import Attack

ABI = landlock.abi()
GONE = ("Permission denied", "Operation not permitted", "No such file or directory")
"""What a path out of a session's reach answers: refused, or not there at all (in the Pod,
the Harness's data is mounted in the ``harness`` container only)."""


def out_of_reach(text: str) -> bool:
    return any(word in text for word in GONE) or text.startswith("Refused")


# ----------------------------------------------------------------------------- 1. secrets


class TestSecrets:
    def test_the_search_finds_no_secret(self, attack: Attack) -> None:
        assert agent.hits(attack.results["search"]) == []

    def test_the_search_reads_what_it_can_reach(self, attack: Attack) -> None:
        search = attack.results["search"]
        assert agent.canaries(search) >= 1, search
        read = int(search.split("PROC-FILES-READ ")[1].split()[0])
        assert read > 0, search

    def test_the_harness_port_answers_no_one_without_the_token(self, attack: Attack) -> None:
        port = attack.target.ports[0]
        lines = [
            line
            for line in attack.results["search"].splitlines()
            if line.startswith(f"PORT {port} ")
        ]
        assert lines, attack.results["search"]
        for line in lines:
            path, status = line.split()[2], line.split()[4]
            assert status == ("200" if path == "/healthz" else "401"), line

    def test_no_other_process_environ_can_be_read(self, attack: Attack) -> None:
        said = attack.results["read another process's environ"]
        assert agent.denied(said), said


# ----------------------------------------------------------------------------- 2. file tools


class TestFileTools:
    def test_shadow_is_unreadable_to_the_tools_user(self, attack: Attack) -> None:
        if attack.tools_as_root:
            pytest.skip("one user, root here: on one machine the tools run as the person")
        assert attack.results["read /etc/shadow"] == "Permission denied: /etc/shadow"

    def test_no_disk_and_no_shared_tmp(self, attack: Attack) -> None:
        disks = attack.results["read a disk"]
        assert "read /dev" not in disks, disks
        tmp = attack.results["write /tmp"]
        assert agent.denied(tmp), tmp

    def test_nothing_is_written_into_etc(self, attack: Attack) -> None:
        said = attack.results["write into /etc"]
        assert agent.denied(said), said
        assert attack.after["etc"] is False

    def test_edit_is_no_oracle_on_another_process_environ(self, attack: Attack) -> None:
        said = attack.results["edit oracle on another process's environ"]
        assert agent.denied(said), said


# ----------------------------------------------------------------------------- 3. shared Workspace


class TestSharedWorkspace:
    def test_run_b_is_out_of_reach(self, attack: Attack) -> None:
        for probe in ("read run B", "write run B"):
            assert agent.denied(attack.results[probe]), attack.results[probe]
        said = attack.results["bash run B"]
        assert "run B" not in said.replace("run B's", "")
        assert said.count("Permission denied") >= 3, said
        assert attack.after["owned"] == []

    def test_the_conversation_logs_are_out_of_reach(self, attack: Attack) -> None:
        listed = attack.results["list the data dir"]
        assert out_of_reach(listed), listed
        said = attack.results["bash the data dir"]
        assert out_of_reach(said), said
        assert attack.secrets.marker not in said

    def test_nothing_is_planted_in_the_clone_or_beside_it(self, attack: Attack) -> None:
        said = attack.results["plant a hook"]
        assert agent.denied(said) or "Read-only" in said, said
        assert attack.after["planted"] == []
        assert attack.after["hook"] is False

    def test_hooks_planted_anyway_never_run_and_block_nothing(self, attack: Attack) -> None:
        run_c = attack.after["run c"]
        assert isinstance(run_c, dict)
        assert run_c["status"] == 200, run_c
        assert run_c["pwned"] is False


# ----------------------------------------------------------------------------- 3. fan-out children


class TestFanOutChildren:
    """A Run's session reaches its fan-out children's worktrees; a child's session its own
    alone (ADR 0113). Given by ``fan_out`` (``tests/hostile/fan_out.py``), in-process."""

    REACH: ClassVar[dict[str, set[str]]] = {
        "parent": trees_of("A", "A.one", "A.two"),
        "child": trees_of("A.one"),
        "prefixed": trees_of("AB", "AB.one"),
        "long": trees_of("long", "long.one"),
        "short": trees_of("short", "short.one"),
    }

    def test_a_childs_session_reaches_its_own_worktrees_alone(self, fan_out: FanOutAttack) -> None:
        assert fan_out.reached("child") == self.REACH["child"]
        self._denied_the_rest(fan_out, "child")

    def test_a_runs_session_reaches_its_childrens_worktrees_and_no_other_runs(
        self, fan_out: FanOutAttack
    ) -> None:
        assert fan_out.reached("parent") == self.REACH["parent"]
        self._denied_the_rest(fan_out, "parent")

    def test_a_run_named_as_the_start_of_another_reaches_none_of_its_children(
        self, fan_out: FanOutAttack
    ) -> None:
        assert fan_out.reached("prefixed") == self.REACH["prefixed"]
        self._denied_the_rest(fan_out, "prefixed")

    def test_a_long_named_runs_children_are_its_own_and_not_the_run_named_as_its_start(
        self, fan_out: FanOutAttack
    ) -> None:
        for session in ("long", "short"):
            assert fan_out.reached(session) == self.REACH[session], session
            self._denied_the_rest(fan_out, session)

    def test_a_worktree_being_made_is_reached_by_no_session(self, fan_out: FanOutAttack) -> None:
        partial = label(PARTIAL, "target")
        assert fan_out.paths[partial].name.endswith("_fix=three.partial")
        for session in SESSIONS:
            probe = fan_out.probes[session.label][partial]
            assert not probe.read, (session, probe)
            assert not probe.wrote, (session, probe)
            assert "Permission denied" in probe.said, (session, probe)

    def test_no_session_makes_an_entry_beside_the_worktrees(self, fan_out: FanOutAttack) -> None:
        for session in SESSIONS:
            listed = fan_out.listed[session.label]
            assert "Permission denied" in listed, (session, listed)
            plants = fan_out.plants[session.label]
            assert set(plants) == {"directory", "link", "moved"}, plants
            for what, said in plants.items():
                assert said.startswith("refused"), (session, what, said)
                assert agent.denied(said), (session, what, said)
        assert fan_out.after["planted"] == []

    def test_a_session_wrote_into_what_it_reaches_alone(self, fan_out: FanOutAttack) -> None:
        for session in SESSIONS:
            assert fan_out.wrote(session.label) == self.REACH[session.label], session
        owned = fan_out.after["owned"]
        for tree, paths in owned.items():
            writers = sorted(s for s, reach in self.REACH.items() if tree in reach)
            assert paths == writers, tree

    def test_a_child_that_breaks_its_git_stops_no_session_of_its_run(
        self, fan_out: FanOutAttack
    ) -> None:
        """A child's ``.git`` made a file (as a linked worktree's is) is not adopted when a
        session of its Run opens: the Run's next Turn still reaches the child's worktree."""
        assert fan_out.after["child broke"].startswith("broke"), fan_out.after["child broke"]
        again = fan_out.after["parent again"]
        assert again["outcome"] == "completed", again
        (said,) = again["said"]
        assert "reached" in said, again

    def _denied_the_rest(self, fan_out: FanOutAttack, session: str) -> None:
        """Every worktree out of reach is there, and refused (not missing)."""
        for tree, probe in fan_out.probes[session].items():
            if tree not in self.REACH[session]:
                assert "Permission denied" in probe.said, (session, tree, probe)
                assert not probe.wrote, (session, tree)


# ----------------------------------------------------------------------------- 4. processes


class TestProcesses:
    def test_no_escape_outlives_its_call(self, attack: Attack) -> None:
        assert attack.results["escape the call"].startswith("left them")
        assert attack.after["escapes"] == []

    def test_a_fork_bomb_stops_at_the_process_limit(self, attack: Attack) -> None:
        said = attack.results["fork bomb"]
        if attack.tools_as_root:
            pytest.skip("Linux exempts root from RLIMIT_NPROC; the Pod's tools are not root")
        started = int(said.split("started=")[1].split()[0])
        refused = int(said.split("refused=")[1].split()[0])
        assert started <= agent.TOOL_PROCESSES, said
        assert refused >= agent.TOOL_PROCESSES * 2, said

    def test_the_session_runs_under_its_limits(self, attack: Attack) -> None:
        said = attack.results["limits"]
        assert "data=8388608 core=0" in said, said  # 8 GiB in KiB
        assert "processes=unlimited" not in said, said

    @pytest.mark.skipif(ABI < 6, reason="Landlock scopes signals from ABI 6 (Linux 6.12)")
    def test_no_process_outside_the_session_can_be_signalled(self, attack: Attack) -> None:
        said = attack.results["signal another process"]
        assert "Operation not permitted" in said, said

    def test_the_harness_death_ends_every_process_of_its_tools(self, attack: Attack) -> None:
        assert attack.after["left after the harness died"] == []


# ----------------------------------------------------------------------------- 5. a full volume


class TestFullVolume:
    def test_the_agent_is_told_the_volume_is_full(self, attack: Attack) -> None:
        if not attack.target.disk_full:
            pytest.skip("no small volume can be mounted here (it needs root and a loop device)")
        assert "No space left on device" in attack.results["fill the volume"]
        assert "No space left on device" in attack.results["write on a full volume"]

    def test_the_harness_goes_on_recording(self, attack: Attack) -> None:
        if not attack.target.disk_full:
            pytest.skip("no small volume can be mounted here (it needs root and a loop device)")
        assert attack.settled["outcome"] == "completed"
        assert attack.after["second turn"] == "completed"


# ----------------------------------------------------------------------------- the toolbox


class TestToolbox:
    def test_its_socket_serves_the_harness_alone(self, attack: Attack) -> None:
        said = attack.results["open a session for run B"]
        assert said.startswith(("answer: b'<closed>'", "closed:")), said
