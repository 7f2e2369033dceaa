"""Fleet reads (panes, pane_pids, survivors) and terminate, on a real tmux server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from loop_tmux_testlib import invocations, recording_tmux, running, tmux_out

from loop_tmux import Presence, Tmux
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux
PROGRAMS = Path(__file__).parent / "programs"


def _make_sessions(tmux: Tmux, count: int) -> list[str]:
    """Create ``count`` sessions in ONE tmux invocation (fixture cost, not under test)."""
    names = [f"loop-fleet-{i}" for i in range(count)]
    args: list[str] = ["tmux", "-L", tmux.socket_name or "", "-f", "/dev/null"]
    for i, name in enumerate(names):
        if i:
            args.append(";")
        args += ["new-session", "-d", "-s", name, "sleep", "300"]
    subprocess.run(args, check=True, timeout=60, capture_output=True)
    return names


def _counting_client(tmux: Tmux, tmp_path: Path) -> tuple[Tmux, Path]:
    wrapper, log = recording_tmux(tmp_path)
    return Tmux(binary=str(wrapper), socket_name=tmux.socket_name, config_file="/dev/null"), log


def test_panes_of_200_sessions_cost_one_tmux_process(tmux: Tmux, tmp_path: Path) -> None:
    names = _make_sessions(tmux, 200)
    # The last panes forked may not have exec'd `sleep` yet (they would read "tmux").
    wait_until(lambda: {p.command for p in tmux.panes()} == {"sleep"}, what="all exec'd")
    client, log = _counting_client(tmux, tmp_path)
    panes = client.panes()
    assert len(invocations(log)) == 1
    assert sorted(p.session for p in panes) == sorted(names)
    assert all(not p.dead and p.pid > 0 and p.pane_id.startswith("%") for p in panes)
    assert {p.command for p in panes} == {"sleep"}
    assert len({p.pid for p in panes}) == 200


def test_survivors_waits_once_and_reads_once(tmux: Tmux, tmp_path: Path) -> None:
    names = _make_sessions(tmux, 30)
    assert tmux.spawn("loop-short", ["sh", "-c", "exit 3"], tmp_path).ok
    wait_until(lambda: tmux.probe("loop-short") is Presence.DEAD, what="dead")
    client, log = _counting_client(tmux, tmp_path)
    slept: list[float] = []
    verdict = client.survivors([*names, "loop-short", "loop-nowhere"], 0.25, sleep=slept.append)
    assert slept == [0.25]
    assert len(invocations(log)) == 1
    assert all(verdict[n] for n in names)
    assert verdict["loop-short"] is False
    assert verdict["loop-nowhere"] is False
    assert client.survived("loop-fleet-0", 0.0, sleep=slept.append) is True
    assert slept == [0.25, 0.0]


def test_survived_sees_a_harness_that_dies_within_the_window(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-refuses", ["sh", "-c", "sleep 0.2; exit 1"], tmp_path).ok
    assert tmux.survived("loop-refuses", 1.5) is False
    assert tmux.spawn("loop-stays", ["sleep", "300"], tmp_path).ok
    assert tmux.survived("loop-stays", 0.3) is True


def test_pane_pids_lists_live_panes_only(tmux: Tmux, tmp_path: Path) -> None:
    first = tmux.spawn("loop-pp", ["sleep", "300"], tmp_path)
    subprocess.run(
        ["tmux", "-L", tmux.socket_name or "", "split-window", "-d", "-t", "=loop-pp:", "true"],
        check=True,
        timeout=10,
    )
    wait_until(lambda: "1" in tmux_out(tmux, "list-panes", "-t", "=loop-pp:", "-F", "#{pane_dead}"))
    assert tmux.pane_pids("loop-pp") == [first.pid]
    assert tmux.probe("loop-pp") is Presence.LIVE  # one live pane of two is LIVE
    dead = [p for p in tmux.panes() if p.session == "loop-pp" and p.dead]
    assert len(dead) == 1


def test_terminate_keeps_the_pane_and_its_scrollback(tmux: Tmux, tmp_path: Path) -> None:
    argv = ["sh", "-c", "echo harness-said-this; exec sleep 300"]
    started = tmux.spawn("loop-term", argv, tmp_path)
    wait_until(
        lambda: "harness-said-this" in tmux_out(tmux, "capture-pane", "-p", "-t", "=loop-term:")
    )
    assert tmux.terminate("loop-term", grace=5.0) is True
    assert not running(started.pid or 0)
    assert tmux.probe("loop-term") is Presence.DEAD
    scroll = tmux_out(tmux, "capture-pane", "-p", "-S", "-", "-t", "=loop-term:")
    assert "harness-said-this" in scroll
    assert tmux.terminate("loop-term") is True  # nothing live left: nothing to do


def test_terminate_escalates_to_sigkill_and_reaches_the_group(tmux: Tmux, tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    argv = [sys.executable, str(PROGRAMS / "ignore_term.py"), str(child_file)]
    started = tmux.spawn("loop-stubborn", argv, tmp_path)
    child = int(str(wait_until(lambda: child_file.exists() and child_file.read_text())))
    assert tmux.terminate("loop-stubborn", grace=0.5) is True
    assert not running(started.pid or 0)
    wait_until(lambda: not running(child), what="the harness's child gone with its group")
    assert tmux.probe("loop-stubborn") is Presence.DEAD


def test_terminate_refuses_foreign_names(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("work", ["sleep", "300"], tmp_path).ok
    for name in ("work", "loop-", "loop-a;b", "loop-x\n", "=loop-x"):
        with pytest.raises(ValueError, match="refusing"):
            tmux.terminate(name)
    assert tmux.probe("work") is Presence.LIVE


def test_terminate_absent_session_is_trivially_done(tmux: Tmux) -> None:
    assert tmux.terminate("loop-never-was") is True


def test_global_environment_reads_the_server_table(tmux: Tmux) -> None:
    assert tmux.global_environment() is None  # no server yet: nothing to read, not an error
    _make_sessions(tmux, 1)
    base = ["tmux", "-L", tmux.socket_name or "", "set-environment", "-g"]
    subprocess.run([*base, "LOOP_FROZEN", "old=value"], check=True, timeout=10)
    subprocess.run([*base, "-r", "LOOP_REMOVED"], check=True, timeout=10)
    found = tmux.global_environment()
    assert found is not None
    assert found["LOOP_FROZEN"] == "old=value"
    assert "LOOP_REMOVED" not in found
    assert "-LOOP_REMOVED" not in found


def test_global_environment_without_an_answer_raises(tmp_path: Path) -> None:
    from loop_tmux import TmuxUnavailable

    client = Tmux(binary=str(tmp_path / "no-tmux"), socket_name="loop-test-none")
    with pytest.raises(TmuxUnavailable, match="cannot run"):
        client.global_environment()
