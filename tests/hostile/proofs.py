"""What each attack of the hostile Agent must come to: one test class per point of the
threat model (docs/security/threat_model.md), shared by every layout. A layout's test
module imports them and gives the ``attack`` fixture: the hostile Turn it ran and what
it found after (``tests/hostile/test_agent.py`` in-process, ``tests/docker/
test_hostile_agent.py`` in the sandbox Pod's layout with the real images).
"""

from __future__ import annotations

import pytest

from kubeturn_harness.sandbox import landlock
from tests.hostile import agent
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
