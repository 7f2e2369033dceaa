"""probe and spawn against a real tmux server on a private socket."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loop_tmux_testlib import environ_of, invocations, recording_tmux, tmux_out

from loop_tmux import Presence, SpawnOutcome, Tmux, TmuxUnavailable
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def test_probe_with_no_server_is_absent(tmux: Tmux) -> None:
    assert tmux.probe("loop-nothing") is Presence.ABSENT
    assert tmux.panes() == []
    assert tmux.pane_pids("loop-nothing") == []


def test_probe_socket_in_missing_directory_is_absent(tmp_path: Path) -> None:
    client = Tmux(socket_path=tmp_path / "no" / "such" / "sock", probe_timeout=2)
    assert client.probe("loop-x") is Presence.ABSENT


def test_probe_is_exact_beside_a_longer_name(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-foo-12", ["sleep", "300"], tmp_path).ok
    assert tmux.probe("loop-foo-12") is Presence.LIVE
    assert tmux.probe("loop-foo-1") is Presence.ABSENT
    assert tmux.pane_pids("loop-foo-1") == []
    assert tmux.deliver("loop-foo-1", "hello").session_missing


def test_missing_binary_is_unknown(tmp_path: Path) -> None:
    client = Tmux(binary=str(tmp_path / "no-tmux"), socket_name="loop-test-none")
    assert client.probe("loop-x") is Presence.UNKNOWN
    result = client.spawn("loop-x", ["true", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.FAILED
    assert "no usable answer" in (result.error or "")
    assert client.version() is None
    sent = client.deliver("loop-x", "hello")
    assert (sent.ok, sent.session_missing) == (False, False)
    assert "cannot run" in (sent.error or "")
    with pytest.raises(TmuxUnavailable):
        client.panes()
    assert client.kill("loop-x") is False


def test_one_server_per_client() -> None:
    with pytest.raises(ValueError, match="not both"):
        Tmux(socket_name="a", socket_path="/tmp/b")


def test_unrecognised_tmux_error_is_unknown(tmp_path: Path) -> None:
    script = tmp_path / "tmux"
    script.write_text("#!/bin/sh\necho 'lost server' >&2\nexit 1\n")
    script.chmod(0o755)
    assert Tmux(binary=str(script)).probe("loop-x") is Presence.UNKNOWN


def test_spawn_on_absent_is_live_with_remain_on_exit(tmux: Tmux, tmp_path: Path) -> None:
    result = tmux.spawn("loop-live", ["sleep", "300"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert result.pid
    assert tmux.pane_pids("loop-live") == [result.pid]
    assert tmux.probe("loop-live") is Presence.LIVE
    window_opt = tmux_out(tmux, "show-options", "-w", "-v", "-t", "=loop-live:", "remain-on-exit")
    assert window_opt.strip() == "on"


def test_program_exiting_at_once_leaves_a_dead_session(tmux: Tmux, tmp_path: Path) -> None:
    for i in range(5):
        name = f"loop-quick-{i}"
        assert tmux.spawn(name, ["printf", "said %s", "goodbye"], tmp_path).ok

        def dead(n: str = name) -> bool:
            return tmux.probe(n) is Presence.DEAD

        wait_until(dead, what=f"{name} dead")
    scroll = tmux_out(tmux, "capture-pane", "-p", "-S", "-", "-t", "=loop-quick-0:")
    assert "said goodbye" in scroll
    assert tmux.pane_pids("loop-quick-0") == []


def test_spawn_over_live_kills_nothing(tmux: Tmux, tmp_path: Path) -> None:
    first = tmux.spawn("loop-occupied", ["sleep", "300"], tmp_path)
    second = tmux.spawn("loop-occupied", ["sleep", "301"], tmp_path)
    assert second.outcome is SpawnOutcome.OCCUPIED_LIVE
    assert "live" in (second.error or "")
    assert tmux.pane_pids("loop-occupied") == [first.pid]
    wait_until(lambda: _cmdline(first.pid or 0) == ["sleep", "300"], what="first still runs")


def test_spawn_over_dead_clears_it_first(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-phoenix", ["true", "x"], tmp_path).ok
    wait_until(lambda: tmux.probe("loop-phoenix") is Presence.DEAD, what="dead")
    result = tmux.spawn("loop-phoenix", ["sleep", "300"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert result.cleared
    assert tmux.probe("loop-phoenix") is Presence.LIVE


def test_spawn_in_missing_directory_fails_without_tmux(tmux: Tmux, tmp_path: Path) -> None:
    result = tmux.spawn("loop-nodir", ["sleep", "300"], tmp_path / "missing")
    assert result.outcome is SpawnOutcome.FAILED
    assert "does not exist" in (result.error or "")
    assert tmux.probe("loop-nodir") is Presence.ABSENT


def test_argv_cwd_and_env_arrive_verbatim(tmux: Tmux, tmp_path: Path) -> None:
    odd_dir = tmp_path / "dir #{session_name} x"
    odd_dir.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    argv = [*sleeper, "fix this;", "a\\;", "$(id)", "'q'", "ünï", ";"]
    env = {"LOOP_TEST_ONE": "v;1 $(x)", "LOOP_TEST_TWO": "two"}
    result = tmux.spawn("loop-argv", argv, odd_dir, env)
    assert result.ok, result.error
    pid = result.pid or 0
    # The pane pid is forked by the server and execs a moment later.
    wait_until(lambda: _cmdline(pid) == argv, what="the pane's argv")
    assert os.readlink(f"/proc/{pid}/cwd") == str(odd_dir)
    seen = environ_of(pid)
    assert seen["LOOP_TEST_ONE"] == "v;1 $(x)"
    assert seen["LOOP_TEST_TWO"] == "two"
    assert "TMUX_PANE" in seen  # a tmux pane, not our process's environment copied blindly


def test_single_element_argv_runs_without_a_shell(tmux: Tmux, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    weird = f"touch {marker}"
    result = tmux.spawn("loop-single", [weird], tmp_path)
    assert result.ok
    wait_until(lambda: tmux.probe("loop-single") is Presence.DEAD, what="dead")
    assert not marker.exists()
    ok = tmux.spawn("loop-single-2", [sys.executable], tmp_path)
    assert ok.ok
    assert tmux.probe("loop-single-2") is Presence.LIVE


def test_tmux_refusal_is_failed_with_tmux_text(tmux: Tmux, tmp_path: Path) -> None:
    client = Tmux(socket_name=tmux.socket_name, config_file="/dev/null", width=-5)
    result = client.spawn("loop-badsize", ["sleep", "300"], tmp_path)
    assert result.outcome is SpawnOutcome.FAILED
    assert result.error
    assert "width" in result.error


def test_invalid_names_raise(tmux: Tmux, tmp_path: Path) -> None:
    for call in (
        lambda: tmux.probe("loop-a.b"),
        lambda: tmux.spawn("loop-a:b", ["x", "y"], tmp_path),
        lambda: tmux.deliver("loop #{x}", "t"),
        lambda: tmux.kill("=loop"),
    ):
        with pytest.raises(ValueError, match="invalid tmux session name"):
            call()


def test_kill_is_exact(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-k-12", ["sleep", "300"], tmp_path).ok
    assert tmux.kill("loop-k-1") is True  # nothing by that exact name: already gone
    assert tmux.probe("loop-k-12") is Presence.LIVE
    assert tmux.kill("loop-k-12") is True
    assert tmux.probe("loop-k-12") is Presence.ABSENT


def test_version_is_read_once(tmux: Tmux, tmp_path: Path) -> None:
    wrapper, log = recording_tmux(tmp_path)
    client = Tmux(binary=str(wrapper), socket_name=tmux.socket_name, config_file="/dev/null")
    expected = subprocess.run(["tmux", "-V"], capture_output=True, text=True, check=True).stdout
    assert client.version() == tuple(int(x) for x in expected.split()[1].rstrip("abc").split("."))
    client.version()
    client.spawn("loop-v1", ["sleep", "300"], tmp_path, {"A": "1"})
    client.spawn("loop-v2", ["sleep", "300"], tmp_path, {"A": "1"})
    assert invocations(log).count("-V") == 1


def test_probe_right_after_the_last_session_is_killed_is_absent(tmux: Tmux, tmp_path: Path) -> None:
    """The server exits with its last session; a probe in that window must not be UNKNOWN."""
    for _ in range(15):
        assert tmux.spawn("loop-last", ["sleep", "300"], tmp_path).ok
        assert tmux.kill("loop-last")
        assert tmux.probe("loop-last") is Presence.ABSENT


def test_spawn_clearing_the_only_dead_session_verifies_the_clear(
    tmux: Tmux, tmp_path: Path
) -> None:
    for _ in range(8):
        assert tmux.spawn("loop-only", ["true", "x"], tmp_path).ok
        wait_until(lambda: tmux.probe("loop-only") is Presence.DEAD, what="dead")
        again = tmux.spawn("loop-only", ["true", "y"], tmp_path)
        assert again.outcome is SpawnOutcome.SPAWNED, again.error
        assert again.cleared
        wait_until(lambda: tmux.probe("loop-only") is Presence.DEAD, what="dead again")
        assert tmux.kill("loop-only")


def test_size_and_history_limit_apply_to_new_sessions(tmux: Tmux, tmp_path: Path) -> None:
    client = Tmux(
        socket_name=tmux.socket_name,
        config_file="/dev/null",
        width=132,
        height=40,
        history_limit=50_000,
    )
    assert client.spawn("loop-sized", ["sleep", "300"], tmp_path).ok
    shown = tmux_out(
        tmux, "display-message", "-p", "-t", "=loop-sized:", "#{pane_width} #{history_limit}"
    )
    assert shown.split() == ["132", "50000"]
