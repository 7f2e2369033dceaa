"""The reporter's scenario, for real: a tmux server too busy (SIGSTOPped) to answer."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from loop_tmux_testlib import Recorder, tmux_out

from loop_tmux import Presence, SpawnOutcome, Tmux, TmuxUnavailable
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux


def test_stopped_server_is_unknown_never_absent(
    tmux: Tmux, recorder: Callable[[str], Recorder], tmp_path: Path
) -> None:
    rec = recorder("loop-busy")
    (harness,) = tmux.pane_pids("loop-busy")
    assert tmux.spawn("loop-done", ["true", "x"], tmp_path).ok
    wait_until(lambda: tmux.probe("loop-done") is Presence.DEAD, what="dead")
    server = int(tmux_out(tmux, "display-message", "-p", "#{pid}").strip())
    quick = Tmux(
        socket_name=tmux.socket_name, config_file="/dev/null", probe_timeout=0.4, timeout=0.6
    )
    os.kill(server, signal.SIGSTOP)
    try:
        assert quick.probe("loop-busy") is Presence.UNKNOWN
        assert quick.probe("loop-other") is Presence.UNKNOWN
        sent = quick.deliver("loop-busy", "during the stop")
        assert sent.ok is False
        assert sent.session_missing is False  # transient: never a respawn (AC2)
        assert sent.error
        assert "did not answer" in sent.error
        over = quick.spawn("loop-busy", ["sleep", "300"], tmp_path)
        assert over.outcome is SpawnOutcome.FAILED
        assert "nothing killed" in (over.error or "")
        fresh = quick.spawn("loop-new", ["sleep", "300"], tmp_path)
        assert fresh.outcome is SpawnOutcome.FAILED
        over_dead = quick.spawn("loop-done", ["sleep", "300"], tmp_path)
        assert over_dead.outcome is SpawnOutcome.FAILED
        assert quick.deliver("loop-done", "x").session_missing is False
        with pytest.raises(TmuxUnavailable):
            quick.panes()
        with pytest.raises(TmuxUnavailable):
            quick.pane_pids("loop-busy")
        with pytest.raises(TmuxUnavailable):
            quick.survived("loop-busy", 0.0)
        assert quick.terminate("loop-busy", grace=0.1) is False
    finally:
        os.kill(server, signal.SIGCONT)

    # Everything proceeds: the same harness, nothing killed, nothing spawned.
    assert tmux.probe("loop-busy") is Presence.LIVE
    assert tmux.pane_pids("loop-busy") == [harness]
    assert tmux.probe("loop-new") is Presence.ABSENT
    assert tmux.probe("loop-done") is Presence.DEAD  # not cleared while unanswered
    assert sorted(p.session for p in tmux.panes()) == ["loop-busy", "loop-done"]
    assert tmux.deliver("loop-busy", "after the stop").ok
    expected = b"\x1b[200~after the stop\x1b[201~\r"
    # The text sent during the stop is never pasted late: only the retry arrives.
    assert rec.wait_bytes(len(expected)) == expected


def test_a_timed_out_action_may_still_run_when_the_server_resumes(
    tmux: Tmux, tmp_path: Path
) -> None:
    """Why callers must treat a timed-out spawn/respawn as "may have happened"."""
    assert tmux.spawn("loop-late", ["sleep", "300"], tmp_path).ok
    (before,) = tmux.pane_pids("loop-late")
    server = int(tmux_out(tmux, "display-message", "-p", "#{pid}").strip())
    # Long enough for the tmux client to start and queue its command on a loaded box.
    quick = Tmux(socket_name=tmux.socket_name, config_file="/dev/null", timeout=1.5)
    os.kill(server, signal.SIGSTOP)
    try:
        result = quick.respawn("loop-late", ["sleep", "301"], tmp_path)
        assert result.ok is False
        assert result.session_missing is False
        assert "may still" in (result.error or "")
    finally:
        os.kill(server, signal.SIGCONT)
    after = wait_until(
        lambda: tmux.pane_pids("loop-late") != [before] and tmux.pane_pids("loop-late")
    )
    assert after != [before]


def test_kill_clients_ends_a_waiting_paste_so_the_thaw_never_carries_it_out(
    tmux: Tmux, recorder: Callable[[str], Recorder]
) -> None:
    """A daemon stopping during a stall ends its waiting clients (`kill_clients`): their
    pastes are not carried out when the server runs again. A client left alive is (the
    control: that is the duplicate a stopped daemon would otherwise leave behind)."""
    import threading
    import time

    from loop_tmux import kill_clients

    rec = recorder("loop-thaw")
    server = int(tmux_out(tmux, "display-message", "-p", "#{pid}").strip())
    patient = Tmux(socket_name=tmux.socket_name, config_file="/dev/null", timeout=60)
    answers: dict[str, object] = {}

    def send(text: str) -> None:
        answers[text] = patient.deliver("loop-thaw", text)

    os.kill(server, signal.SIGSTOP)
    try:
        killed = threading.Thread(target=send, args=("killed while waiting",))
        killed.start()
        time.sleep(1.0)  # the client has queued its command with the stopped server
        assert kill_clients() >= 1
        kept = threading.Thread(target=send, args=("left waiting",))
        kept.start()
        time.sleep(1.0)
    finally:
        os.kill(server, signal.SIGCONT)
    killed.join(30)
    kept.join(30)
    assert not killed.is_alive()
    assert not kept.is_alive()
    assert answers["killed while waiting"].ok is False  # type: ignore[attr-defined]
    expected = b"\x1b[200~left waiting\x1b[201~\r"
    assert rec.wait_bytes(len(expected)) == expected
    time.sleep(0.5)
    assert b"killed while waiting" not in rec.data()
