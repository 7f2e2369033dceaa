"""kill_server: a fixture's way to end its own private server and leave no socket file."""

from __future__ import annotations

import os
import signal
import socket as sockets
import uuid
from pathlib import Path

import pytest
from loop_tmux_testlib import invocations, recording_tmux, running, tmux_out

from loop_tmux import Presence, Tmux
from loop_tmux.testing import wait_until

pytestmark = pytest.mark.tmux


def _socket_file(name: str) -> Path:
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / name


def _leftover_socket(path: Path) -> None:
    """A socket file nothing listens on: what tmux 3.3a leaves after kill-server."""
    with sockets.socket(sockets.AF_UNIX) as listener:
        listener.bind(str(path))


def test_kills_its_own_server_only_and_removes_the_socket(
    tmux: Tmux, socket_name: str, tmp_path: Path
) -> None:
    bystander = Tmux(socket_name=f"{socket_name}-b", config_file="/dev/null")
    try:
        assert tmux.spawn("loop-mine", ["sleep", "300"], tmp_path).ok
        assert bystander.spawn("loop-other", ["sleep", "300"], tmp_path).ok
        (pid,) = tmux.pane_pids("loop-mine")
        assert _socket_file(socket_name).is_socket()

        assert tmux.kill_server() is True
        assert not _socket_file(socket_name).exists()
        assert tmux.probe("loop-mine") is Presence.ABSENT
        wait_until(lambda: not running(pid), what="the pane program gone")
        assert bystander.probe("loop-other") is Presence.LIVE
    finally:
        bystander.kill_server()
    assert not _socket_file(f"{socket_name}-b").exists()


def test_removes_a_leftover_socket_with_no_server(socket_name: str) -> None:
    path = _socket_file(socket_name)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    _leftover_socket(path)
    client = Tmux(socket_name=socket_name, config_file="/dev/null")
    assert client.probe("loop-x") is Presence.ABSENT  # nothing listens there
    assert client.kill_server() is True
    assert not path.exists()
    assert client.kill_server() is True  # nothing left: still done


def test_socket_path_server_is_killed_and_its_file_removed(tmp_path: Path) -> None:
    path = tmp_path / f"s-{uuid.uuid4().hex[:6]}"
    client = Tmux(socket_path=path, config_file="/dev/null")
    try:
        assert client.spawn("loop-s", ["sleep", "300"], tmp_path).ok
        assert path.is_socket()
    finally:
        assert client.kill_server() is True
    assert not path.exists()


def test_a_file_that_is_not_a_socket_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "not-a-socket"
    path.write_text("keep me\n")
    assert Tmux(socket_path=path, config_file="/dev/null").kill_server() is True
    assert path.read_text() == "keep me\n"


def test_the_default_server_is_refused_without_running_tmux(tmp_path: Path) -> None:
    wrapper, log = recording_tmux(tmp_path)
    with pytest.raises(ValueError, match="refusing to kill the default tmux server"):
        Tmux(binary=str(wrapper)).kill_server()
    assert invocations(log) == []


def test_a_stopped_server_is_not_reported_killed(tmux: Tmux, tmp_path: Path) -> None:
    assert tmux.spawn("loop-frozen", ["sleep", "300"], tmp_path).ok
    server = int(tmux_out(tmux, "display-message", "-p", "#{pid}").strip())
    quick = Tmux(socket_name=tmux.socket_name, config_file="/dev/null", probe_timeout=0.4)
    os.kill(server, signal.SIGSTOP)
    try:
        assert quick.kill_server(timeout=0.4) is False
        assert _socket_file(tmux.socket_name or "").is_socket()  # not removed under it
    finally:
        os.kill(server, signal.SIGCONT)
    # The kill-server it was sent may still run on resume; either way this ends it.
    assert tmux.kill_server() is True
    wait_until(lambda: not running(server), what="the server process gone")
    assert not _socket_file(tmux.socket_name or "").exists()


def test_the_fake_answers_kill_server(tmp_path: Path) -> None:
    from loop_tmux.fake import FakeState, install_fake_tmux

    shim = install_fake_tmux(tmp_path / "bin", tmp_path / "state.json")
    state = FakeState(tmp_path / "state.json")
    state.add_session("loop-a")
    client = Tmux(binary=str(shim), socket_path=tmp_path / "fake-socket")
    assert client.kill_server() is True
    assert state.sessions() == {}
    assert state.commands()[-2:] == ["kill-server", "list-sessions"]
