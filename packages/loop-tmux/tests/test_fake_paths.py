"""Collision and failure paths a real tmux cannot be forced into, on the modelled fake."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from loop_tmux import Presence, SpawnOutcome, Tmux, TmuxCapabilityWarning, TmuxUnavailable
from loop_tmux.fake import FakeState, install_fake_tmux

Fake = tuple[Tmux, FakeState]


def test_fake_models_which_sessions_exist(fake: Fake) -> None:
    tmux, state = fake
    assert tmux.probe("loop-a") is Presence.ABSENT  # no server at all
    state.add_session("loop-a")
    state.add_session("loop-b", dead=True)
    assert tmux.probe("loop-a") is Presence.LIVE
    assert tmux.probe("loop-b") is Presence.DEAD
    assert tmux.probe("loop-c") is Presence.ABSENT  # not "live for every name"
    assert tmux.probe("loop-") is Presence.ABSENT  # exact, although a prefix of both
    assert sorted(p.session for p in tmux.panes()) == ["loop-a", "loop-b"]


def test_fake_resolves_inexact_targets_by_prefix_like_tmux(fake: Fake, tmp_path: Path) -> None:
    _, state = fake
    state.add_session("loop-foo-12")
    shim = tmp_path / "bin" / "tmux"
    done = subprocess.run([str(shim), "has-session", "-t", "loop-foo-1"], capture_output=True)
    assert done.returncode == 0  # the hazard exact targets avoid
    exact = subprocess.run(
        [str(shim), "has-session", "-t", "=loop-foo-1"], capture_output=True, text=True
    )
    assert (exact.returncode, exact.stderr) == (1, "can't find session: loop-foo-1\n")


def test_ac3_live_occupant_is_left_alone(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    before = state.sessions()["loop-a"]
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_LIVE
    assert state.sessions()["loop-a"] == before
    assert "kill-session" not in state.commands()
    assert "new-session" not in state.commands()


def test_ac4_dead_occupant_is_cleared_and_verified(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert result.cleared
    assert state.commands() == [
        "list-panes",
        "kill-session",
        "list-panes",
        "new-session",
        "set-option",
    ]
    assert state.sessions()["loop-a"]["argv"] == ["prog", "x"]


def test_ac4_clear_that_does_not_take_is_unclearable(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    state.set_fault("kill_noop", ["loop-a"])  # kill-session exits 0, session stays
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE
    assert "could not be cleared" in (result.error or "")
    assert "new-session" not in state.commands()


def test_ac4_clear_whose_check_gets_no_answer_is_unclearable(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    state.set_fault("kill_noop", ["loop-a"])
    tmux.probe("loop-a")
    state.set_fault("fail", {"kill-session": "server exited unexpectedly"})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE
    assert "server exited unexpectedly" in (result.error or "")
    assert "new-session" not in state.commands()


def test_ac5_duplicate_with_live_racer_is_occupied_live(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("duplicate", {"loop-a": {"times": 1, "occupant": "live"}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_LIVE
    assert state.sessions()["loop-a"]["argv"] == ["racer"]  # the racer, untouched
    assert "kill-session" not in state.commands()


def test_ac5_duplicate_with_dead_leftover_clears_and_retries_once(
    fake: Fake, tmp_path: Path
) -> None:
    tmux, state = fake
    state.set_fault("duplicate", {"loop-a": {"times": 1, "occupant": "dead"}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert result.cleared
    assert state.commands().count("new-session") == 2
    assert state.sessions()["loop-a"]["argv"] == ["prog", "x"]


def test_ac5_never_loops_on_repeated_duplicates(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("duplicate", {"loop-a": {"times": 50, "occupant": "dead"}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE
    assert state.commands().count("new-session") == 2  # the first try and ONE retry


def test_ac5_duplicate_then_no_answer_is_unclearable(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("duplicate", {"loop-a": {"times": 1, "occupant": "dead"}})
    denied = "error connecting to /tmp/tmux-0/fake (Permission denied)"
    state.set_fault("fail", {"list-panes": {"text": denied, "after": 1}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.OCCUPIED_UNCLEARABLE
    assert "Permission denied" in (result.error or "")
    assert state.commands() == ["list-panes", "new-session", "set-option", "list-panes"]
    assert state.sessions()["loop-a"]["argv"] == ["racer"]  # nothing killed


def test_unanswered_preflight_does_nothing(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    state.set_fault("fail", {"list-panes": "error connecting to /x (Permission denied)"})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.FAILED
    assert "nothing killed" in (result.error or "")
    assert state.commands() == ["list-panes"]


def test_exiting_server_answer_is_asked_again(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    state.set_fault("fail", {"list-panes": "server exited unexpectedly"})
    assert tmux.probe("loop-a") is Presence.UNKNOWN
    assert state.commands() == ["list-panes"] * 2  # one probe: at most two tmux processes


def _listen_for(path: Path, seconds: float) -> threading.Thread:
    """A unix socket at `path` that accepts connections for `seconds`, then closes: what
    a tmux server does while it exits after its last session went."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    server.settimeout(0.01)

    def serve() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                server.accept()[0].close()
            except TimeoutError:
                continue
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("exit_takes", [0.3, 0.8])
def test_second_ask_waits_for_the_exiting_server_to_close_its_socket(
    fake: Fake, tmp_path: Path, exit_takes: float
) -> None:
    """A loaded machine can take longer than any fixed pause to finish a server's exit;
    the re-ask waits for the socket to stop accepting, so the probe gets the clean
    answer and still costs two tmux processes."""
    tmux, state = fake
    sock = tmp_path / "s"
    client = Tmux(binary=tmux.binary, socket_path=str(sock), probe_timeout=1.5)
    state.add_session("loop-a", dead=True)
    state.set_fault("fail", {"list-panes": {"text": "server exited unexpectedly", "times": 1}})
    exiting = _listen_for(sock, exit_takes)
    started = time.monotonic()
    assert client.probe("loop-a") is Presence.DEAD  # the second answer, not UNKNOWN
    assert time.monotonic() - started >= exit_takes  # it waited for the close
    assert state.commands() == ["list-panes"] * 2
    exiting.join()


def test_a_server_that_keeps_accepting_bounds_the_wait(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    sock = tmp_path / "s"
    client = Tmux(binary=tmux.binary, socket_path=str(sock))
    state.set_fault("fail", {"list-panes": "server exited unexpectedly"})
    listening = _listen_for(sock, 8)
    started = time.monotonic()
    # 1.5 s: two fake tmux processes (~80 ms each idle) must fit in it on a loaded box.
    assert client.probe("loop-a", timeout=1.5) is Presence.UNKNOWN
    assert 1.5 <= time.monotonic() - started < 8  # waited its own timeout, not forever
    assert state.commands() == ["list-panes"] * 2
    assert listening.is_alive()


def test_ac5_duplicate_without_occupant_retries_once(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("duplicate", {"loop-a": {"times": 1, "occupant": None}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert not result.cleared


def test_other_new_session_failure_carries_tmux_text(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    text = "create window failed: fork failed: Resource temporarily unavailable"
    state.set_fault("fail", {"new-session": text})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.FAILED
    assert result.error == text


def test_hanging_probe_is_unknown_and_spawn_kills_nothing(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    state.set_fault("hang", ["list-panes"])
    started = time.monotonic()
    assert tmux.probe("loop-a", timeout=0.5) is Presence.UNKNOWN
    assert time.monotonic() - started < 5
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.FAILED
    assert "kill-session" not in state.commands()
    assert state.sessions()["loop-a"]["panes"][0]["dead"] is True
    with pytest.raises(TmuxUnavailable):
        tmux.panes(timeout=0.5)


def test_hanging_server_makes_delivery_transient(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    state.set_fault("hang", ["*"])
    result = tmux.deliver("loop-a", "hello", timeout=0.5)
    assert (result.ok, result.session_missing) == (False, False)
    state.clear_faults()
    assert tmux.deliver("loop-a", "hello").ok
    assert state.typed("loop-a") == [["paste-bracketed", "hello"], ["paste", "\r"]]


def test_delivery_to_dead_pane_never_pastes(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a", dead=True)
    state.add_session("loop-keep")
    result = tmux.deliver("loop-a", "hello")
    assert (result.ok, result.session_missing) == (False, True)
    # The fake models tmux 3.3a's crash on a paste into a dead pane: it did not happen.
    assert sorted(state.sessions()) == ["loop-a", "loop-keep"]
    assert state.read()["buffers"] == {}
    assert state.typed("loop-a") == []


def test_delivery_leaves_copy_mode_first(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    with state.edit() as raw:
        raw["sessions"]["loop-a"]["panes"][0]["in_mode"] = True
    assert tmux.deliver("loop-a", "hello").ok
    assert state.sessions()["loop-a"]["panes"][0]["in_mode"] is False
    assert state.typed("loop-a") == [["paste-bracketed", "hello"], ["paste", "\r"]]


def test_old_tmux_spawns_without_env_and_warns_once(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("version", "tmux 3.1c")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = tmux.spawn("loop-a", ["prog", "x"], tmp_path, {"LOOP_A": "s3cret"})
        second = tmux.spawn("loop-b", ["prog", "x"], tmp_path, {"LOOP_A": "s3cret"})
    assert first.ok
    assert second.ok
    assert len(seen) == 1
    assert seen[0].category is TmuxCapabilityWarning
    assert "new-session -e (needs 3.2)" in str(seen[0].message)
    assert "s3cret" not in str(seen[0].message)
    assert all("-e" not in argv for argv in state.log())
    # respawn-pane -e exists since 3.0, so 3.1 passes env there.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tmux.respawn("loop-a", ["prog", "y"], tmp_path, {"LOOP_A": "v2"}).ok
    assert state.sessions()["loop-a"]["env"] == {"LOOP_A": "v2"}


def test_very_old_tmux_respawns_without_env(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    state.set_fault("version", "tmux 2.9a")
    state.add_session("loop-a")
    with pytest.warns(TmuxCapabilityWarning, match="respawn-pane -e"):
        assert tmux.respawn("loop-a", ["prog", "y"], tmp_path, {"LOOP_A": "v"}).ok


def test_install_fake_tmux_writes_a_runnable_shim(tmp_path: Path) -> None:
    shim = install_fake_tmux(tmp_path / "b", tmp_path / "s.json")
    done = subprocess.run([str(shim), "-V"], capture_output=True, text=True, check=True)
    assert done.stdout == "tmux 3.3a\n"
    assert json.loads((tmp_path / "s.json").read_text())["sessions"] == {}
    module = subprocess.run(
        [sys.executable, "-m", "loop_tmux.fake", "ls"], capture_output=True, text=True
    )
    assert module.returncode == 2
    assert "LOOP_TMUX_FAKE_STATE" in module.stderr


def test_new_session_meeting_an_exiting_server_is_retried_once(fake: Fake, tmp_path: Path) -> None:
    tmux, state = fake
    gone = "server exited unexpectedly"
    state.set_fault("fail", {"new-session": {"text": gone, "times": 1}})
    result = tmux.spawn("loop-a", ["prog", "x"], tmp_path)
    assert result.outcome is SpawnOutcome.SPAWNED
    assert state.commands().count("new-session") == 2
    state.set_fault("fail", {"new-session": gone})
    again = tmux.spawn("loop-b", ["prog", "x"], tmp_path)
    assert again.outcome is SpawnOutcome.FAILED
    assert again.error == gone
    assert state.commands().count("new-session") == 4  # one retry, never a loop


def test_hanging_has_session_makes_delivery_transient_not_missing(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    state.set_fault("hang", ["has-session"])
    result = tmux.deliver("loop-a", "hello", timeout=0.5)
    assert (result.ok, result.session_missing) == (False, False)
    assert "did not answer" in (result.error or "")
    assert state.typed("loop-a") == []
    assert tmux.probe("loop-a") is Presence.LIVE  # the probe's own command still answers


def test_survivors_takes_names_by_keyword_as_documented(fake: Fake) -> None:
    tmux, state = fake
    state.add_session("loop-a")
    state.add_session("loop-b", dead=True)
    slept: list[float] = []
    verdict = tmux.survivors(names=["loop-a", "loop-b"], delay=0.5, sleep=slept.append)
    assert verdict == {"loop-a": True, "loop-b": False}
    assert slept == [0.5]
